// One BERT-base encoder layer trained in lazytensor (forward + backward per step), and the
// engine's matmul against the GEMM library it calls, on BERT-base's GEMM shapes.
//
//   transformer_block_benchmark [--batch 8] [--seq 128] [--steps 10] [--warmup 3]
//                               [--threads N] [--dropout 0.1] [--gemm-reps 11] [--skip-layer]
//                               [--skip-gemm] [--report] [--profile trace.json]
//
// The layer is HF's BertLayer in training mode, post-LN: self-attention with the additive mask
// (1 - mask) * -10000, softmax, dropout 0.1 on the probabilities, output projection, dropout,
// residual + LayerNorm (eps 1e-12); GELU (erf) MLP 768 -> 3072 -> 768, dropout, residual +
// LayerNorm. f32 parameters that require grad (BERT's init: N(0, 0.02) weights, zero biases,
// LayerNorm 1 / 0). Loss: mean(output * r) for a fixed random r. Each step traces forward and
// backward, then mark_step() and wait_device_ops(); gradients are cleared before each step
// (zero_grad(set_to_none=True)), so every step is the same graph.
//
// --threads N re-executes the program with LT_NUM_THREADS=N (the engine's kernel threads) and
// OMP_NUM_THREADS=N (oneDNN's threads, which are OpenMP's and read only at library load).
// --dropout P sets the dropout probability (0: no dropout at all; to see what dropout costs).
// --report prints lt::metrics::report() at the end; --profile writes a Chrome trace (Perfetto)
// of the timed steps.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/gemm.h"  // the engine's GEMM wrapper (src/), called directly below
#include "lazytensor/lazytensor.h"

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Options {
  int64_t batch = 8, seq = 128;
  int steps = 10, warmup = 3, threads = 0, gemm_reps = 11;
  double dropout = 0.1;
  bool layer = true, gemm = true, report = false;
  std::string profile;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--batch N] [--seq N] [--steps N] [--warmup N] [--threads N] [--dropout P]\n"
      "          [--gemm-reps N] [--skip-layer] [--skip-gemm] [--report]"
      " [--profile trace.json]\n",
      argv0);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0]);
      return argv[++i];
    };
    if (a == "--batch")
      o.batch = std::stoll(value());
    else if (a == "--seq")
      o.seq = std::stoll(value());
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--dropout")
      o.dropout = std::stod(value());
    else if (a == "--gemm-reps")
      o.gemm_reps = std::stoi(value());
    else if (a == "--skip-layer")
      o.layer = false;
    else if (a == "--skip-gemm")
      o.gemm = false;
    else if (a == "--report")
      o.report = true;
    else if (a == "--profile")
      o.profile = value();
    else
      usage(argv[0]);
  }
  if (o.batch < 1 || o.seq < 1 || o.steps < 1 || o.warmup < 0 || o.threads < 0 || o.gemm_reps < 7 ||
      !(o.dropout >= 0 && o.dropout < 1)) {
    std::fprintf(stderr, "bad arguments (steps >= 1, gemm-reps >= 7, 0 <= dropout < 1)\n");
    std::exit(2);
  }
  return o;
}

// --threads N: both thread settings are read when the engine and libgomp start, so the process
// starts over with them in its environment (once: the second time they already match).
void apply_threads(const Options& o, char** argv) {
  if (o.threads <= 0) return;
  const std::string n = std::to_string(o.threads);
  bool restart = false;
  for (const char* var : {"LT_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    const char* cur = std::getenv(var);
    if (!cur || n != cur) {
      setenv(var, n.c_str(), 1);
      restart = true;
    }
  }
  if (!restart) return;
  execv("/proc/self/exe", argv);
  std::perror("execv /proc/self/exe");
  std::exit(1);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown", isa;
  while (std::getline(in, line)) {
    if (model == "unknown" && line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
    } else if (isa.empty() && line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::vector<std::string> flags{std::istream_iterator<std::string>(words), {}};
      for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"}) {
        if (std::find(flags.begin(), flags.end(), f) != flags.end()) isa += std::string(" ") + f;
      }
    }
  }
  return model + " (" + (isa.empty() ? " no AVX2" : isa.substr(1)) + ")";
}

std::string env_or(const char* var, const std::string& fallback) {
  const char* v = std::getenv(var);
  return v && *v ? v : fallback;
}

// ---------------------------------------------------------------------------------------
// The layer.

constexpr int64_t kHidden = 768, kHeads = 12, kHeadDim = 64, kInter = 3072;
constexpr double kLnEps = 1e-12;

struct Layer {
  lt::Tensor wq, bq, wk, bk, wv, bv, wo, bo, ln1_w, ln1_b, wi, bi, wo2, bo2, ln2_w, ln2_b;
  std::vector<lt::Tensor*> params() {
    return {&wq,    &bq,    &wk, &bk, &wv,  &bv,  &wo,    &bo,
            &ln1_w, &ln1_b, &wi, &bi, &wo2, &bo2, &ln2_w, &ln2_b};
  }
};

Layer make_layer() {
  Layer l;
  uint64_t seed = 100;
  const auto weight = [&](int64_t out, int64_t in) {
    return lt::randn({out, in}, seed++).mul(0.02);
  };
  {
    lt::NoGradGuard no_grad;
    l.wq = weight(kHidden, kHidden), l.bq = lt::zeros({kHidden});
    l.wk = weight(kHidden, kHidden), l.bk = lt::zeros({kHidden});
    l.wv = weight(kHidden, kHidden), l.bv = lt::zeros({kHidden});
    l.wo = weight(kHidden, kHidden), l.bo = lt::zeros({kHidden});
    l.ln1_w = lt::ones({kHidden}), l.ln1_b = lt::zeros({kHidden});
    l.wi = weight(kInter, kHidden), l.bi = lt::zeros({kInter});
    l.wo2 = weight(kHidden, kInter), l.bo2 = lt::zeros({kHidden});
    l.ln2_w = lt::ones({kHidden}), l.ln2_b = lt::zeros({kHidden});
  }
  lt::mark_step();
  lt::wait_device_ops();
  for (lt::Tensor* p : l.params()) p->requires_grad_();
  return l;
}

// x [B, S, H], mask [B, S] (1: attend, 0: padding). Returns [B, S, H].
lt::Tensor bert_layer(const Layer& l, const lt::Tensor& x, const lt::Tensor& mask, double p) {
  // p == 0 skips dropout, as torch.nn.functional.dropout does.
  const auto drop = [p](const lt::Tensor& t) { return p > 0 ? lt::dropout(t, p, true) : t; };
  const int64_t B = x.shape()[0], S = x.shape()[1];
  const auto heads = [&](const lt::Tensor& t) {  // [B, S, H] -> [B, NH, S, D]
    return t.view({B, S, kHeads, kHeadDim}).permute({0, 2, 1, 3});
  };
  const lt::Tensor q = heads(lt::linear(x, l.wq, l.bq));
  const lt::Tensor k = heads(lt::linear(x, l.wk, l.bk));
  const lt::Tensor v = heads(lt::linear(x, l.wv, l.bv));
  const lt::Tensor additive = (1.0 - mask).mul(-10000.0).view({B, 1, 1, S});
  lt::Tensor scores = lt::matmul(q, k.transpose(2, 3)).div(std::sqrt(double(kHeadDim)));
  scores = scores + additive;
  lt::Tensor probs = lt::softmax(scores, -1);
  probs = drop(probs);
  const lt::Tensor context = lt::matmul(probs, v).permute({0, 2, 1, 3}).reshape({B, S, kHidden});
  lt::Tensor attn = drop(lt::linear(context, l.wo, l.bo));
  const lt::Tensor h1 = lt::layer_norm(attn + x, {kHidden}, l.ln1_w, l.ln1_b, kLnEps);
  const lt::Tensor inter = lt::gelu(lt::linear(h1, l.wi, l.bi));
  lt::Tensor out = drop(lt::linear(inter, l.wo2, l.bo2));
  return lt::layer_norm(out + h1, {kHidden}, l.ln2_w, l.ln2_b, kLnEps);
}

// GEMM flops of one forward: Q, K, V, O projections, the MLP, and the two attention products.
double layer_forward_flops(int64_t B, int64_t S) {
  const double T = double(B) * S;
  return 2 * T * kHidden * kHidden * 4 + 2 * T * kHidden * kInter * 2 +
         2.0 * B * kHeads * S * S * kHeadDim * 2;
}

void run_layer(const Options& o, int threads) {
  const int64_t B = o.batch, S = o.seq;
  Layer layer = make_layer();
  lt::Tensor x, mask, r;
  {
    lt::NoGradGuard no_grad;
    x = lt::randn({B, S, kHidden}, 1);
    r = lt::randn({B, S, kHidden}, 2);
    // Every other sequence has its last quarter padded.
    std::vector<float> m(static_cast<size_t>(B * S), 1.f);
    for (int64_t b = 1; b < B; b += 2) {
      for (int64_t s = S - S / 4; s < S; ++s) m[b * S + s] = 0.f;
    }
    mask = lt::from_vector(m, {B, S});
  }
  lt::manual_seed(0);
  lt::mark_step();
  lt::wait_device_ops();

  lt::Tensor loss;
  std::vector<double> total, trace, cut, wait, matmul;
  const auto step = [&](bool timed) {
    for (lt::Tensor* p : layer.params()) p->mutable_grad() = lt::Tensor();
    const double mm0 = lt::metrics::timer_stats("MatMulTime").total_seconds;
    const auto t0 = Clock::now();
    loss = (bert_layer(layer, x, mask, o.dropout) * r).mean();
    loss.backward();
    const double t_trace = since(t0);
    lt::mark_step();
    const double t_cut = since(t0);
    lt::wait_device_ops();
    const double t_all = since(t0);
    if (timed) {
      total.push_back(t_all);
      trace.push_back(t_trace);
      cut.push_back(t_cut - t_trace);
      wait.push_back(t_all - t_cut);
      matmul.push_back(lt::metrics::timer_stats("MatMulTime").total_seconds - mm0);
    }
  };

  std::printf("\n## BERT-base encoder layer, forward + backward (lazytensor), dropout %g\n\n",
              o.dropout);
  const auto w0 = Clock::now();
  for (int i = 0; i < o.warmup; ++i) step(false);
  const double warm_steps = since(w0);
  lt::wait_kernel_compiles();
  const double warm_compiles = since(w0);
  step(false);  // the first step on native kernels only
  std::printf("warm-up: %d steps %.2f s, background kernel compiles done at %.2f s\n", o.warmup,
              warm_steps, warm_compiles);

  lt::metrics::reset();
  if (!o.profile.empty()) lt::profiler::start();
  for (int i = 0; i < o.steps; ++i) step(true);
  if (!o.profile.empty()) {
    lt::profiler::stop();
    lt::profiler::write_chrome_trace(o.profile);
    std::printf("profile of the timed steps: %s\n", o.profile.c_str());
  }
  const lt::StepStats stats = lt::last_step_stats();
  const int64_t recompiles = lt::metrics::counter_value("UncachedCompile");
  const double loss_value = loss.item();
  const std::vector<float> g = layer.wq.grad().norm().to_vector();

  const double step_s = median(total), mm_s = median(matmul);
  const double tokens = double(B) * S;
  // Backward: two GEMMs per forward GEMM, less the input gradients of the Q, K and V projections
  // (x needs no gradient: a lazy tensor nothing reads is never computed, nor in PyTorch).
  const double flops = 3 * layer_forward_flops(B, S) - 3 * 2.0 * B * S * kHidden * kHidden;
  std::printf(
      "graph: %lld IR nodes, %lld kernels, %lld launches, compile cache hit: %s, "
      "compiles during timed steps: %lld\n",
      static_cast<long long>(stats.graph_nodes), static_cast<long long>(stats.kernels),
      static_cast<long long>(stats.launches), stats.cache_hit ? "yes" : "no",
      static_cast<long long>(recompiles));
  std::printf("sanity: loss %.6g, |grad wq| %.6g\n\n", loss_value, g.empty() ? 0.0 : g[0]);
  std::printf(
      "| batch x seq | threads | dropout | step ms (median of %d) | tokens/s | MatMulTime ms/step "
      "| MatMulTime share | GEMM GFLOP/s in step | trace ms | mark_step ms | wait ms |\n",
      o.steps);
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %lldx%lld | %d | %g | %.1f | %.0f | %.1f | %.0f%% | %.1f | %.1f | %.1f | %.1f |\n",
              static_cast<long long>(B), static_cast<long long>(S), threads, o.dropout,
              step_s * 1e3, tokens / step_s, mm_s * 1e3, 100 * mm_s / step_s, flops / mm_s / 1e9,
              median(trace) * 1e3, median(cut) * 1e3, median(wait) * 1e3);
  std::printf("\n(steps, ms: ");
  for (double t : total) std::printf("%.1f ", t * 1e3);
  std::printf(")\n");
}

// ---------------------------------------------------------------------------------------
// lt::matmul against lt::backend::cpu::gemm.

struct GemmRow {
  int64_t r, n, k;
  double engine_s, engine_mm_s, library_s;
};

// The engine's call and the library's call alternate, so that a disturbance of the machine
// falls on both alike.
GemmRow time_gemm(int64_t R, int64_t N, int64_t K, int reps) {
  GemmRow row{R, N, K, 0, 0, 0};
  constexpr int kWarm = 3;
  // The engine: x [R, K] times w [N, K] transposed, as linear does.
  lt::NoGradGuard no_grad;
  const lt::Tensor x = lt::randn({R, K}, 7);
  const lt::Tensor w = lt::randn({N, K}, 8).mul(0.02);
  lt::mark_step();
  lt::wait_device_ops();
  // The library wrapper, on buffers allocated once.
  const auto buffer = [](int64_t n) {
    return std::unique_ptr<float, decltype(&std::free)>(
        static_cast<float*>(std::aligned_alloc(64, ((n * 4 + 63) / 64) * 64)), &std::free);
  };
  auto a = buffer(R * K), b = buffer(N * K), c = buffer(R * N);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < R * K; ++i) a.get()[i] = normal(gen);
  for (int64_t i = 0; i < N * K; ++i) b.get()[i] = 0.02f * normal(gen);
  std::memset(c.get(), 0, R * N * 4);

  std::vector<double> engine, engine_mm, library;
  for (int i = 0; i < kWarm + reps; ++i) {
    const double mm0 = lt::metrics::timer_stats("MatMulTime").total_seconds;
    auto t0 = Clock::now();
    {
      lt::Tensor y = lt::matmul(x, w.t());
      lt::mark_step();
      lt::wait_device_ops();
    }
    const double t_engine = since(t0);
    const double t_mm = lt::metrics::timer_stats("MatMulTime").total_seconds - mm0;
    if (i == kWarm - 1) lt::wait_kernel_compiles();
    t0 = Clock::now();
    lt::backend::cpu::gemm(lt::DType::f32, false, true, R, N, K, 1.0, a.get(), K, b.get(), K, 0.0,
                           c.get(), N);
    const double t_library = since(t0);
    if (i >= kWarm) {
      engine.push_back(t_engine);
      engine_mm.push_back(t_mm);
      library.push_back(t_library);
    }
  }
  row.engine_s = median(engine);
  row.engine_mm_s = median(engine_mm);
  row.library_s = median(library);
  return row;
}

void run_gemm(const Options& o) {
  std::printf(
      "\n## lt::matmul (trace + mark_step + wait) vs lt::backend::cpu::gemm (%s), f32, "
      "median of %d\n\n",
      lt::backend::cpu::gemm_library(lt::DType::f32), o.gemm_reps);
  std::printf(
      "| R | x [R,K] @ w[N,K]^T | engine ms | engine GFLOP/s | of which MatMulTime ms "
      "| library ms | library GFLOP/s | engine/library throughput |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int64_t R : {1024, 2048, 4096}) {
    for (const auto& [N, K] : {std::pair<int64_t, int64_t>{768, 768}, {3072, 768}, {768, 3072}}) {
      const GemmRow g = time_gemm(R, N, K, o.gemm_reps);
      const double flops = 2.0 * R * N * K;
      std::printf("| %lld | K=%lld, N=%lld | %.2f | %.1f | %.2f | %.2f | %.1f | %.2f |\n",
                  static_cast<long long>(R), static_cast<long long>(K), static_cast<long long>(N),
                  g.engine_s * 1e3, flops / g.engine_s / 1e9, g.engine_mm_s * 1e3,
                  g.library_s * 1e3, flops / g.library_s / 1e9, g.library_s / g.engine_s);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  apply_threads(o, argv);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.threads > 0 ? o.threads : std::atoi(env_or("LT_NUM_THREADS", "0").c_str());
  const int engine_threads = threads > 0 ? threads : hw;
  std::printf("# transformer_block_benchmark\n\n");
  std::printf("CPU: %s, %d hardware threads\n", cpu_model().c_str(), hw);
  std::printf(
      "threads: engine kernels %d (LT_NUM_THREADS=%s), GEMM library OpenMP "
      "OMP_NUM_THREADS=%s\n",
      engine_threads, env_or("LT_NUM_THREADS", "unset").c_str(),
      env_or("OMP_NUM_THREADS", "unset (one per core)").c_str());
  {
    std::ifstream loadavg("/proc/loadavg");
    std::string one, five;
    loadavg >> one >> five;
    std::printf("load average before the run: %s (1 min), %s (5 min)\n", one.c_str(), five.c_str());
  }
  std::printf("kernel compiler: %s, tiered: %s; f32 GEMM library: %s\n",
              lt::kernel_compiler().c_str(), lt::tiered_compilation() ? "on" : "off",
              lt::backend::cpu::gemm_library(lt::DType::f32));
  std::fflush(stdout);
  try {
    if (o.layer) run_layer(o, engine_threads);
    std::fflush(stdout);
    if (o.gemm) run_gemm(o);
  } catch (const lt::Error& e) {
    std::fprintf(stderr, "lt::Error: %s\n", e.what());
    return 1;
  }
  if (o.report) std::printf("\n## lt::metrics::report()\n\n%s", lt::metrics::report().c_str());
  return 0;
}
