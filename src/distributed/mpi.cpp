// The MPI transport (Open MPI's, or any MPI with MPI_THREAD_MULTIPLE): MPI_COMM_WORLD of the
// processes mpirun started, with a watchdog that ends the job when a collective outlasts
// LT_DISTRIBUTED_TIMEOUT.
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/transport.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"

namespace lt::distributed::detail {

namespace {

Membership g_member;  // this rank and the world's size, once joined

// mpirun (Open MPI's, or a PMI launcher's) sets these for the processes it starts.
bool started_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

double timeout_seconds() {
  const char* text = std::getenv("LT_DISTRIBUTED_TIMEOUT");
  if (text == nullptr) return 300;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0)) {
    throw Error(std::string("lt::distributed: LT_DISTRIBUTED_TIMEOUT must be a positive number "
                            "of seconds, got '") +
                text + "'");
  }
  return seconds;
}

// The watchdog: a collective is a blocking MPI call on the device stream (MPI's own algorithms
// at full speed; its non-blocking calls progress only while polled), and a thread of its own
// ends the job when one has run past the timeout (another rank died, or stopped issuing
// collectives, and MPI cannot cancel a collective), as PyTorch's NCCL watchdog does.
class Watchdog {
 public:
  Watchdog() : limit_(timeout_seconds()), thread_([this] { watch(); }) {}
  ~Watchdog() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  void begin(const std::string& what) {
    const std::lock_guard<std::mutex> lock(mu_);
    what_ = what;
    since_ = std::chrono::steady_clock::now();
    busy_ = true;
  }
  void end() {
    const std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      if (!busy_) continue;
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
      if (waited <= limit_) continue;
      std::fprintf(stderr,
                   "lazytensor: rank %d of %d: %s did not complete within %g s (a rank died, or "
                   "stopped issuing collectives); ending the job (LT_DISTRIBUTED_TIMEOUT)\n",
                   g_member.rank, g_member.size, what_.c_str(), limit_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  const double limit_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false, busy_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;
};

Watchdog* g_watchdog = nullptr;

// Runs one blocking MPI call under the watchdog. MPI takes calls from several threads at once
// (MPI_THREAD_MULTIPLE): the device stream's collectives, the main thread's barrier(), and the
// watchdog's MPI_Abort while a call blocks.
void call(const std::function<void()>& mpi_call, const std::string& what) {
  g_watchdog->begin(what);
  mpi_call();
  g_watchdog->end();
}

// The types reductions take (the trace refuses the others; gathers move bytes).
MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    default:  // f32, and bf16 and f16 reduced in f32
      return MPI_FLOAT;
  }
}

// A hash of what this rank is about to run: the ranks' hashes are compared with one small
// all-reduce (max of h and of -h: they agree exactly when every rank has the same h).
uint64_t signature(const Collective& c, int64_t sequence) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(static_cast<uint64_t>(c.op));
  mix(static_cast<uint64_t>(c.dtype));
  mix(static_cast<uint64_t>(c.attr));
  mix(static_cast<uint64_t>(sequence));
  mix(static_cast<uint64_t>(c.input_shape.rank()));
  for (int64_t d : c.input_shape) mix(static_cast<uint64_t>(d));
  return h >> 1;  // fits an int64 and its negation
}

// `what` is describe(c, sequence), named in the messages.
void check_same_collective(const Collective& c, int64_t sequence, const std::string& what) {
  const int64_t h = static_cast<int64_t>(signature(c, sequence));
  int64_t mine[2] = {h, -h}, most[2] = {0, 0};
  call([&] { MPI_Allreduce(mine, most, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD); },
       "the check before " + what);
  if (most[0] == h && -most[1] == h) return;
  // They differ: every rank learns what each ran, and says it.
  constexpr int kText = 160;
  char text[kText] = {};
  std::snprintf(text, kText, "%s", what.c_str());
  std::vector<char> all(static_cast<size_t>(kText) * g_member.size);
  call([&] { MPI_Allgather(text, kText, MPI_CHAR, all.data(), kText, MPI_CHAR, MPI_COMM_WORLD); },
       "the exchange of collectives that differ");
  std::string message =
      "lt::distributed: the ranks' collectives differ (every rank must trace the "
      "same collectives in the same order):";
  for (int r = 0; r < g_member.size; ++r) {
    message += " rank " + std::to_string(r) + " runs " + std::string(&all[r * kText]) + ";";
  }
  message.pop_back();
  throw Error(message);
}

// The elements of a bf16 or f16 buffer as f32 (what MPI reduces), and back, rounded once.
std::vector<float> widen(const void* data, DType dtype, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<RegisterOf<T>, float>) {
      const T* in = static_cast<const T*>(data);
      for (int64_t i = 0; i < count; ++i) out[i] = load_element(in[i]);
    }
  });
  return out;
}
void narrow(const std::vector<float>& values, DType dtype, void* data) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<RegisterOf<T>, float>) {
      T* out = static_cast<T*>(data);
      for (size_t i = 0; i < values.size(); ++i) out[i] = store_element<T>(values[i]);
    }
  });
}

// A mean is the sum divided by the world's size, element by element.
void divide(void* data, DType dtype, int64_t count, int size) {
  if (dtype == DType::f64) {
    double* x = static_cast<double*>(data);
    for (int64_t i = 0; i < count; ++i) x[i] /= size;
  } else {
    float* x = static_cast<float*>(data);
    for (int64_t i = 0; i < count; ++i) x[i] /= static_cast<float>(size);
  }
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::max ? MPI_MAX : MPI_SUM;
}

void run_mpi(const Collective& c, const std::string& what) {
  const int size = g_member.size;
  const int64_t count = c.input_shape.numel();
  const bool wide = dtype_info(c.dtype).wide_register;  // bf16, f16: reduced in f32
  const MPI_Datatype type = mpi_type(c.dtype);
  const int element = static_cast<int>(dtype_size(c.dtype));
  switch (c.op) {
    case ir::OpKind::AllReduce:
    case ir::OpKind::ReduceScatter: {
      const auto op = static_cast<ReduceOp>(c.attr);
      const int64_t out_count = c.op == ir::OpKind::AllReduce ? count : count / size;
      std::vector<float> in_wide, out_wide;
      const void* in = c.input;
      void* out = c.output;
      if (wide) {
        in_wide = widen(c.input, c.dtype, count);
        out_wide.resize(static_cast<size_t>(out_count));
        in = in_wide.data();
        out = out_wide.data();
      }
      call(
          [&] {
            if (c.op == ir::OpKind::AllReduce) {
              MPI_Allreduce(in, out, static_cast<int>(count), type, mpi_op(op), MPI_COMM_WORLD);
            } else {
              MPI_Reduce_scatter_block(in, out, static_cast<int>(out_count), type, mpi_op(op),
                                       MPI_COMM_WORLD);
            }
          },
          what);
      if (op == ReduceOp::mean) divide(out, wide ? DType::f32 : c.dtype, out_count, size);
      if (wide) narrow(out_wide, c.dtype, c.output);
      return;
    }
    case ir::OpKind::AllGather:
      call(
          [&] {
            MPI_Allgather(c.input, static_cast<int>(count * element), MPI_BYTE, c.output,
                          static_cast<int>(count * element), MPI_BYTE, MPI_COMM_WORLD);
          },
          what);
      return;
    case ir::OpKind::Broadcast:
      if (g_member.rank == c.attr) std::memcpy(c.output, c.input, count * element);
      call(
          [&] {
            MPI_Bcast(c.output, static_cast<int>(count * element), MPI_BYTE,
                      static_cast<int>(c.attr), MPI_COMM_WORLD);
          },
          what);
      return;
    default:
      throw Error(std::string("lt::distributed: op ") + ir::op_info(c.op).name +
                  " is not a collective");
  }
}

}  // namespace

bool transport_built() {
  return true;
}

std::optional<Membership> transport_join() {
  if (!started_by_mpirun()) return std::nullopt;
  timeout_seconds();  // a bad LT_DISTRIBUTED_TIMEOUT is refused here, not mid-step
  // The device stream makes the calls, and the watchdog may abort while one blocks.
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw Error(
        "lt::distributed::init: this MPI library cannot be called from several threads at "
        "once (MPI_THREAD_MULTIPLE), which the device stream and the watchdog need");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_member.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_member.size);
  g_watchdog = new Watchdog();
  return g_member;
}

void transport_leave() {
  delete g_watchdog;
  g_watchdog = nullptr;
  MPI_Finalize();
}

void transport_abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

void transport_barrier() {
  call([] { MPI_Barrier(MPI_COMM_WORLD); }, "barrier");
}

void transport_run(const Collective& collective, int64_t sequence, const std::string& what) {
  check_same_collective(collective, sequence, what);
  run_mpi(collective, what);
}

}  // namespace lt::distributed::detail
