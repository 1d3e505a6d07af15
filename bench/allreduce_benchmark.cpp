// lt::distributed::all_reduce against Open MPI's own MPI_Allreduce on the same buffer sizes, in
// one process per rank: run it under mpirun (mpirun -np 2 build/release/bench/allreduce_benchmark).
// The engine's figure is a whole traced step: the all-reduce traced, cut by mark_step and
// waited for, with the ranks' check of what they run (one more small all-reduce) inside.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "lazytensor/lazytensor.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main() {
  lt::distributed::init();
  const int rank = lt::distributed::rank(), world = lt::distributed::world_size();
  if (world < 2) {
    std::fprintf(stderr, "allreduce_benchmark: run it under mpirun -np 2 or more\n");
    return 1;
  }
  if (rank == 0) {
    std::printf("all-reduce (sum) of f32, %d ranks; median of the repetitions\n", world);
    std::printf("%12s %12s %12s %12s %12s %8s\n", "elements", "MiB", "MPI (ms)", "MPI GB/s",
                "lt (ms)", "lt/MPI");
  }
  for (int64_t n : {int64_t{1} << 10, int64_t{1} << 14, int64_t{1} << 18, int64_t{1} << 20,
                    int64_t{1} << 22, int64_t{6553600}, int64_t{1} << 24}) {
    const int reps = n >= (int64_t{1} << 22) ? 7 : 21;
    std::vector<float> in(static_cast<size_t>(n), 1.0f), out(static_cast<size_t>(n));
    std::vector<double> mpi, engine;
    for (int r = 0; r < reps + 1; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (r > 0) mpi.push_back(seconds_since(start));
    }
    const lt::Tensor x = lt::ones({n});
    lt::mark_step();
    lt::distributed::barrier();
    for (int r = 0; r < reps + 1; ++r) {
      lt::distributed::barrier();
      const auto start = std::chrono::steady_clock::now();
      lt::Tensor y = lt::distributed::all_reduce(x);
      lt::mark_step();
      lt::wait_device_ops();
      if (r > 0) engine.push_back(seconds_since(start));
    }
    if (rank == 0) {
      const double m = median(mpi), e = median(engine);
      std::printf("%12lld %12.2f %12.3f %12.2f %12.3f %8.2f\n", static_cast<long long>(n),
                  n * 4.0 / 1048576, m * 1e3, n * 4.0 / m / 1e9, e * 1e3, e / m);
    }
  }
  lt::distributed::finalize();
  return 0;
}
