// The transport of a build without MPI: it never joins, so every process is a world of one and
// the process group answers every collective itself.
#include "distributed/transport.h"
#include "lazytensor/error.h"

namespace lt::distributed::detail {

namespace {

[[noreturn]] void never_joined(const char* what) {
  throw Error(std::string("lt::distributed: ") + what +
              " reached a transport in a build without MPI, which never joins a world");
}

}  // namespace

bool transport_built() {
  return false;
}

std::optional<Membership> transport_join() {
  return std::nullopt;
}

void transport_leave() {
  never_joined("finalize()");
}

void transport_abort(int) {
  never_joined("abort()");
}

void transport_barrier() {
  never_joined("barrier()");
}

void transport_run(const Collective&, int64_t, const std::string& what) {
  never_joined(what.c_str());
}

}  // namespace lt::distributed::detail
