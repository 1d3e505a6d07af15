// f32 GEMM on BERT-base's Linear shapes: OpenBLAS's cblas_sgemm, oneDNN's matmul and the
// engine's wrapper (lt::backend::cpu::gemm), in one process with the same threads. The numbers
// decide which library runs the engine's f32 matrix multiplies. A fourth column times the
// wrapper's autocast product (bf16 operands, f32 sums and result: oneDNN's bf16 kernels, AMX
// where the CPU has it, or widened into sgemm where oneDNN has none), and the MLM decoder's
// three products (N = 30522) follow the Linear ones. A second table times attention's batched
// products (batch 8 x 12 heads, sequence 128) one product per matrix against the wrapper's
// batched call (lt::backend::cpu::gemm_batched), in f32 and with bf16 operands.
//
// For rows R and a weight W[N,K], a Linear layer computes
//   forward  Y[R,N]  = X[R,K] * W[N,K]^T   (trans_b, as torch.nn.functional.linear)
//   dX       dX[R,K] = dY[R,N] * W[N,K]    (no transposes)
//   dW       dW[N,K] = dY[R,N]^T * X[R,K]  (trans_a)
// Each is timed 9 times, in 3 rounds that take turns between the three, so that a change in
// the machine's load falls on all of them alike; the table gives the median in GFLOP/s.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dnnl.hpp>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/gemm.h"

namespace {

constexpr int kRounds = 3;
constexpr int kRunsPerRound = 3;
// OpenBLAS's idle threads spin for a while after a call (oneDNN's OpenMP threads too), taking
// cores from the next library measured: each round's warm-up outlasts that.
constexpr double kWarmupSeconds = 0.15;

struct Shape {
  const char* product;
  bool trans_a, trans_b;
  int64_t m, n, k;
};

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Appends the wall times of kRunsPerRound runs of `run`, after a warm-up, to `times`.
void time_round(const std::function<void()>& run, std::vector<double>& times) {
  const auto warmup_end =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kWarmupSeconds);
  do {
    run();
  } while (std::chrono::steady_clock::now() < warmup_end);
  for (int i = 0; i < kRunsPerRound; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

double median(std::vector<double> times) {
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

std::string load_average() {
  std::ifstream loadavg("/proc/loadavg");
  std::string one_minute;
  loadavg >> one_minute;
  return one_minute;
}

uint16_t to_bf16(float x) {  // round to nearest even (the values here are finite)
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<uint16_t>((bits + 0x7fffu + (bits >> 16 & 1)) >> 16);
}

// Largest difference between two results, relative to the largest magnitude in `expected`.
double relative_difference(const std::vector<float>& expected, const std::vector<float>& actual,
                           size_t size) {
  double difference = 0, scale = 0;
  for (size_t i = 0; i < size; ++i) {
    difference = std::max(difference, std::abs(double{expected[i]} - actual[i]));
    scale = std::max(scale, std::abs(double{expected[i]}));
  }
  return difference / scale;
}

// Attention's batched products over [8, 12] (batch x heads) matrices, as the engine runs them:
// the heads of Q, K, V and the context's gradient are views of [8, 128, 12, d] (row stride
// 12 d, head stride d), the scores and probabilities contiguous [8, 12, 128, 128].
void time_attention(const std::vector<float>& a, const std::vector<float>& b,
                    const std::vector<uint16_t>& a16, const std::vector<uint16_t>& b16,
                    std::vector<float>& c) {
  constexpr int64_t kBatch = 8, kHeads = 12, kSeq = 128;
  struct Product {
    const char* name;
    bool trans_a, trans_b, a_is_head;  // a_is_head: A is a head view, else scores-like
    int64_t head_dim;
  };
  std::printf(
      "\nAttention's batched products, %ld x %ld matrices of sequence %ld; GFLOP/s, median of %d "
      "runs\n\n",
      static_cast<long>(kBatch), static_cast<long>(kHeads), static_cast<long>(kSeq),
      kRounds * kRunsPerRound);
  std::printf(
      "| product | head dim | f32, a product per matrix | f32, batched | batched / per matrix | "
      "bf16 operands, per matrix | bf16 operands, batched | batched / per matrix |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t d : {32, 64}) {
    for (const Product& p : {Product{"scores Q K^T (and dP = dO V^T)", false, true, true, d},
                             Product{"context P V (and dQ = dS K)", false, false, false, d},
                             Product{"dV = P^T dO (and dK = dS^T Q)", true, false, false, d}}) {
      const int64_t m = kSeq, n = p.trans_b ? kSeq : d, k = p.trans_b ? d : kSeq;
      lt::backend::cpu::GemmBatch batch;
      batch.rank = 2;
      batch.sizes[0] = kBatch;
      batch.sizes[1] = kHeads;
      const int64_t head_ld = kHeads * d;
      const int64_t lda = p.a_is_head ? head_ld : kSeq, ldb = head_ld;
      batch.a_strides[0] = p.a_is_head ? kSeq * head_ld : kHeads * kSeq * kSeq;
      batch.a_strides[1] = p.a_is_head ? d : kSeq * kSeq;
      batch.b_strides[0] = kSeq * head_ld;
      batch.b_strides[1] = d;
      const auto per_matrix = [&](lt::DType dtype, const void* pa, const void* pb) {
        const size_t esize = dtype == lt::DType::f32 ? 4 : 2;
        for (int64_t i = 0; i < kBatch; ++i) {
          for (int64_t h = 0; h < kHeads; ++h) {
            lt::backend::cpu::gemm(dtype, lt::DType::f32, p.trans_a, p.trans_b, m, n, k, 1.0,
                                   static_cast<const char*>(pa) +
                                       (i * batch.a_strides[0] + h * batch.a_strides[1]) * esize,
                                   lda,
                                   static_cast<const char*>(pb) +
                                       (i * batch.b_strides[0] + h * batch.b_strides[1]) * esize,
                                   ldb, 0.0, c.data() + (i * kHeads + h) * m * n, n);
          }
        }
      };
      const auto batched = [&](lt::DType dtype, const void* pa, const void* pb) {
        lt::backend::cpu::gemm_batched(dtype, lt::DType::f32, p.trans_a, p.trans_b, m, n, k, pa,
                                       lda, pb, ldb, c.data(), batch);
      };
      std::vector<double> times[4];
      for (int round = 0; round < kRounds; ++round) {
        time_round([&] { per_matrix(lt::DType::f32, a.data(), b.data()); }, times[0]);
        time_round([&] { batched(lt::DType::f32, a.data(), b.data()); }, times[1]);
        time_round([&] { per_matrix(lt::DType::bf16, a16.data(), b16.data()); }, times[2]);
        time_round([&] { batched(lt::DType::bf16, a16.data(), b16.data()); }, times[3]);
      }
      const double flops = 2.0 * kBatch * kHeads * m * n * k;
      double rate[4];
      for (int i = 0; i < 4; ++i) rate[i] = flops / median(times[i]) * 1e-9;
      std::printf("| %s | %ld | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", p.name,
                  static_cast<long>(d), rate[0], rate[1], rate[1] / rate[0], rate[2], rate[3],
                  rate[3] / rate[2]);
    }
  }
}

}  // namespace

int main() {
  std::vector<Shape> shapes;
  for (int64_t rows : {1024, 2048, 4096}) {
    for (auto [k, n] : {std::pair<int64_t, int64_t>{768, 768}, {768, 3072}, {3072, 768}}) {
      shapes.push_back({"forward", false, true, rows, n, k});
      shapes.push_back({"dX", false, false, rows, k, n});
      shapes.push_back({"dW", true, false, n, k, rows});
    }
  }
  constexpr int64_t kVocab = 30522, kHidden = 768, kRows = 1024;
  shapes.push_back({"decoder forward", false, true, kRows, kVocab, kHidden});
  shapes.push_back({"decoder dX", false, false, kRows, kHidden, kVocab});
  shapes.push_back({"decoder dW", true, false, kVocab, kHidden, kRows});

  // Operands big enough for every shape, filled with random values in [-1, 1].
  const size_t max_elements = kVocab * kRows;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> a(max_elements), b(max_elements);
  for (float& x : a) x = uniform(rng);
  for (float& x : b) x = uniform(rng);
  std::vector<float> c_openblas(max_elements), c_onednn(max_elements), c_wrapper(max_elements),
      c_autocast(max_elements);
  std::vector<uint16_t> a16(max_elements), b16(max_elements);
  std::transform(a.begin(), a.end(), a16.begin(), to_bf16);
  std::transform(b.begin(), b.end(), b16.begin(), to_bf16);

  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl_version_t* onednn = dnnl_version();

  std::printf("CPU: %s\n", cpu_model().c_str());
  std::printf("Threads: %d (OpenBLAS, pthreads), %d (oneDNN, OpenMP); %u hardware threads\n",
              openblas_get_num_threads(), omp_get_max_threads(),
              std::thread::hardware_concurrency());
  std::printf("Libraries: %s; oneDNN %d.%d.%d; wrapper runs f32 on %s, bf16 operands on %s (%s)\n",
              openblas_get_config(), onednn->major, onednn->minor, onednn->patch,
              lt::backend::cpu::gemm_library(lt::DType::f32),
              lt::backend::cpu::gemm_library(lt::DType::bf16),
              std::string(lt::backend::cpu::gemm_library(lt::DType::bf16)).starts_with("oneDNN")
                  ? "its bf16 kernels"
                  : "widened into sgemm: this CPU has no bf16 kernel in oneDNN");
  std::printf("Load average (1 min) before: %s\n", load_average().c_str());
  std::printf(
      "f32, median of %d runs (%d rounds of %d, each after %.2f s of warm-up), GFLOP/s "
      "(higher is better)\n\n",
      kRounds * kRunsPerRound, kRounds, kRunsPerRound, kWarmupSeconds);
  std::printf(
      "| product | m | n | k | trans | OpenBLAS | oneDNN | wrapper | oneDNN / OpenBLAS | max rel "
      "diff | wrapper, bf16 operands | bf16 / f32 |\n");
  std::printf("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");

  double log_ratio_sum = 0;
  for (const Shape& s : shapes) {
    const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n, ldc = s.n;
    const double flops = 2.0 * s.m * s.n * s.k;

    const auto openblas = [&] {
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                  s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), lda,
                  b.data(), ldb, 0.0f, c_openblas.data(), ldc);
    };

    // The primitive is built once, outside the timing, as a cache would keep it.
    using dims = dnnl::memory::dims;
    const auto f32 = dnnl::memory::data_type::f32;
    const dnnl::memory::desc a_desc({s.m, s.k}, f32, s.trans_a ? dims{1, lda} : dims{lda, 1});
    const dnnl::memory::desc b_desc({s.k, s.n}, f32, s.trans_b ? dims{1, ldb} : dims{ldb, 1});
    const dnnl::memory::desc c_desc({s.m, s.n}, f32, dims{ldc, 1});
    const dnnl::matmul matmul(
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_desc, b_desc, c_desc), engine));
    const dnnl::memory a_memory(a_desc, engine, a.data()), b_memory(b_desc, engine, b.data()),
        c_memory(c_desc, engine, c_onednn.data());
    const auto onednn = [&] {
      matmul.execute(
          stream,
          {{DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, b_memory}, {DNNL_ARG_DST, c_memory}});
      stream.wait();
    };

    const auto wrapper = [&] {
      lt::backend::cpu::gemm(lt::DType::f32, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0, a.data(),
                             lda, b.data(), ldb, 0.0, c_wrapper.data(), ldc);
    };

    const auto autocast = [&] {
      lt::backend::cpu::gemm(lt::DType::bf16, lt::DType::f32, s.trans_a, s.trans_b, s.m, s.n, s.k,
                             1.0, a16.data(), lda, b16.data(), ldb, 0.0, c_autocast.data(), ldc);
    };

    std::vector<double> openblas_times, onednn_times, wrapper_times, autocast_times;
    for (int round = 0; round < kRounds; ++round) {
      time_round(openblas, openblas_times);
      time_round(onednn, onednn_times);
      time_round(wrapper, wrapper_times);
      time_round(autocast, autocast_times);
    }
    const double openblas_seconds = median(openblas_times);
    const double onednn_seconds = median(onednn_times);
    const double wrapper_seconds = median(wrapper_times);
    const double autocast_seconds = median(autocast_times);

    const size_t c_size = static_cast<size_t>(s.m * s.n);
    const double difference = std::max(relative_difference(c_openblas, c_onednn, c_size),
                                       relative_difference(c_openblas, c_wrapper, c_size));
    const double ratio = openblas_seconds / onednn_seconds;
    log_ratio_sum += std::log(ratio);
    std::printf("| %s | %ld | %ld | %ld | %s | %.1f | %.1f | %.1f | %.2f | %.1e | %.1f | %.2f |\n",
                s.product, static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k),
                s.trans_a ? "A^T" : (s.trans_b ? "B^T" : "none"), flops / openblas_seconds * 1e-9,
                flops / onednn_seconds * 1e-9, flops / wrapper_seconds * 1e-9, ratio, difference,
                flops / autocast_seconds * 1e-9, wrapper_seconds / autocast_seconds);
  }

  const double geomean = std::exp(log_ratio_sum / static_cast<double>(shapes.size()));
  std::printf(
      "\nFaster overall: %s (geometric mean of oneDNN / OpenBLAS throughput: %.2f over %zu "
      "shapes)\n",
      geomean >= 1 ? "oneDNN" : "OpenBLAS", geomean, shapes.size());
  time_attention(a, b, a16, b16, c_wrapper);
  std::printf("Load average (1 min) after: %s\n", load_average().c_str());
}
