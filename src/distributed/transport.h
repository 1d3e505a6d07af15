#pragma once
// The transport under the process group: what moves a collective's bytes between the ranks.
// One implementation is linked, chosen by CMake: mpi.cpp when Open MPI is found (MPI_COMM_WORLD
// of the processes mpirun started), no_mpi.cpp otherwise (never joined: a world of one). The
// process group (process_group.cpp) keeps the world's state, counts and names collectives, and
// answers a world of one itself; a transport sees only a joined world of two or more ranks.
#include <cstdint>
#include <optional>
#include <string>

#include "distributed/process_group.h"

namespace lt::distributed::detail {

struct Membership {
  int rank = 0;
  int size = 1;
};

// Whether this build has a transport that can join a world.
bool transport_built();
// Joins the world the launcher started, if one did; nullopt: this process is alone. Called once.
std::optional<Membership> transport_join();
// Leaves the world (after the device's queued collectives have finished). Called once, only
// after a successful join.
void transport_leave();
// Ends every rank of the joined world with `exit_code`.
void transport_abort(int exit_code);
void transport_barrier();
// Runs `collective` with the other ranks. `sequence` counts the collectives this rank has run,
// and `what` names this one in messages ("all_reduce(sum) #3 of f32[4]"). The ranks first
// compare what each is about to run; a difference throws lt::Error naming every rank's.
void transport_run(const Collective& collective, int64_t sequence, const std::string& what);

}  // namespace lt::distributed::detail
