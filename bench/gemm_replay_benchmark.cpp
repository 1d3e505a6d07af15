// The GEMMs of a step against the library alone on the same calls. Reads a timeline written
// with --trace (lazytensor train, adamw, or lt::profiler), where every library product of the
// CPU device is a span of category "gemm" naming all its arguments but the data; makes each
// distinct call again, alone in this process, on operands of the same sizes and leading
// dimensions, and prints per call its time in the step (median over the executions kept)
// beside its time alone (median of repeated calls on warm operands), then the totals a step.
// "alone / in step" under 1 is time the step loses around the library: cold operands, threads
// waking, the cache state other launches leave.
//
// Usage: gemm_replay_benchmark TRACE [--skip N] [--cold WHICH]
//   N: executions left out first (default 3); WHICH: what the cold calls flush from the caches,
//   any of a (operand A), b (operand B), c (the result); default abc.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/cpu/gemm.h"
#include "engine_timing.h"
#include "lazytensor/dtype.h"

namespace {

using lt::DType;

// One library call as the timeline describes it (backend/cpu/opaque_ops.cpp).
struct Call {
  DType dtype = DType::f32, result = DType::f32;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0;
  bool batched = false;
  lt::backend::cpu::GemmBatch batch;
};

DType dtype_named(const std::string& name) {
  for (DType d : {DType::f32, DType::f64, DType::bf16}) {
    if (name == lt::dtype_name(d)) return d;
  }
  throw std::runtime_error("gemm_replay_benchmark: a product of dtype " + name);
}

std::vector<int64_t> integers(const std::string& list) {
  std::vector<int64_t> values;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::stoll(item));
  return values;
}

Call parse(const std::string& detail) {
  Call call;
  std::stringstream in(detail);
  for (std::string token; in >> token;) {
    const size_t eq = token.find('=');
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    if (key == "dtype") call.dtype = dtype_named(value);
    if (key == "result") call.result = dtype_named(value);
    if (key == "trans_a") call.trans_a = value == "1";
    if (key == "trans_b") call.trans_b = value == "1";
    if (key == "m") call.m = std::stoll(value);
    if (key == "n") call.n = std::stoll(value);
    if (key == "k") call.k = std::stoll(value);
    if (key == "lda") call.lda = std::stoll(value);
    if (key == "ldb") call.ldb = std::stoll(value);
    if (key == "batch" || key == "a_strides" || key == "b_strides") {
      const std::vector<int64_t> values = integers(value);
      call.batched = true;
      call.batch.rank = static_cast<int>(values.size());
      int64_t* target = key == "batch"       ? call.batch.sizes
                        : key == "a_strides" ? call.batch.a_strides
                                             : call.batch.b_strides;
      std::copy(values.begin(), values.end(), target);
    }
  }
  return call;
}

// Elements an operand spans: its matrix (rows of `ld`) at the farthest batch offset.
int64_t span(int64_t rows, int64_t ld, const Call& call, const int64_t* strides) {
  int64_t last = 0;
  if (call.batched) {
    for (int d = 0; d < call.batch.rank; ++d) last += (call.batch.sizes[d] - 1) * strides[d];
  }
  return last + rows * ld;
}

// Random operand values in [-1, 1], stored as `dtype`.
std::vector<char> random_operand(DType dtype, int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<char> bytes(static_cast<size_t>(count) * lt::dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const float value = uniform(rng);
    if (dtype == DType::f64) {
      const double wide = value;
      std::memcpy(bytes.data() + i * 8, &wide, 8);
    } else if (dtype == DType::bf16) {
      uint32_t bits;
      std::memcpy(&bits, &value, 4);
      const auto upper = static_cast<uint16_t>(bits >> 16);
      std::memcpy(bytes.data() + i * 2, &upper, 2);
    } else {
      std::memcpy(bytes.data() + i * 4, &value, 4);
    }
  }
  return bytes;
}

// Takes `bytes` at `data` out of every cache level (written back first where dirty), so that
// the next call reads them from memory. Elsewhere than x86-64, reads 1 GiB of its own instead.
void evict(const std::vector<char>& data) {
#if defined(__x86_64__)
  for (size_t at = 0; at < data.size(); at += 64) _mm_clflush(data.data() + at);
  _mm_mfence();
#else
  static const std::vector<uint64_t> sweep((size_t{1} << 30) / sizeof(uint64_t), 1);
  uint64_t total = 0;
  for (size_t i = 0; i < sweep.size(); i += 8) total += sweep[i];
  volatile uint64_t kept = total;  // the reads must happen
  (void)kept;
  (void)data;
#endif
}

// Microseconds of one call alone, warm (the same operands called again: in cache where they
// fit) and cold (operands and result flushed from the caches before each call): medians of 15
// after 3 warm-ups.
std::pair<double, double> alone_us(const Call& call, const std::string& cold_buffers,
                                   std::mt19937& rng) {
  const int64_t a_rows = call.trans_a ? call.k : call.m;
  const int64_t b_rows = call.trans_b ? call.n : call.k;
  std::vector<char> a =
      random_operand(call.dtype, span(a_rows, call.lda, call, call.batch.a_strides), rng);
  std::vector<char> b =
      random_operand(call.dtype, span(b_rows, call.ldb, call, call.batch.b_strides), rng);
  const int64_t products = call.batched ? call.batch.count() : 1;
  std::vector<char> c(static_cast<size_t>(products * call.m * call.n) *
                      lt::dtype_size(call.result));
  auto run = [&] {
    if (call.batched) {
      lt::backend::cpu::gemm_batched(call.dtype, call.result, call.trans_a, call.trans_b, call.m,
                                     call.n, call.k, a.data(), call.lda, b.data(), call.ldb,
                                     c.data(), call.batch);
    } else {
      lt::backend::cpu::gemm(call.dtype, call.result, call.trans_a, call.trans_b, call.m, call.n,
                             call.k, 1.0, a.data(), call.lda, b.data(), call.ldb, 0.0, c.data(),
                             call.n);
    }
  };
  auto median_of_calls = [&](bool cold) {
    std::vector<double> times;
    for (int i = 0; i < 18; ++i) {
      if (cold) {
        if (cold_buffers.find('a') != std::string::npos) evict(a);
        if (cold_buffers.find('b') != std::string::npos) evict(b);
        if (cold_buffers.find('c') != std::string::npos) evict(c);
      }
      const auto start = std::chrono::steady_clock::now();
      run();
      const auto end = std::chrono::steady_clock::now();
      if (i >= 3) times.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  const double warm = median_of_calls(false);
  return {warm, median_of_calls(true)};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

std::string describe(const Call& call) {
  std::string text = std::string(lt::dtype_name(call.dtype)) + "->" + lt::dtype_name(call.result) +
                     " " + std::to_string(call.m) + "x" + std::to_string(call.n) + "x" +
                     std::to_string(call.k) + (call.trans_a ? " A^T" : "") +
                     (call.trans_b ? " B^T" : "");
  if (call.batched) text += " batch " + std::to_string(call.batch.count());
  return text;
}

struct Seen {
  std::vector<double> durations_us;  // every call in the executions kept
  std::vector<int> per_execution;    // calls in each execution kept
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TRACE [--skip N] [--cold abc]\n", argv[0]);
    return 2;
  }
  size_t skip = 3;
  std::string cold_buffers = "abc";
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--skip") == 0) skip = static_cast<size_t>(std::stoul(argv[i + 1]));
    if (std::strcmp(argv[i], "--cold") == 0) cold_buffers = argv[i + 1];
  }
  try {
    std::ifstream file(argv[1]);
    if (!file) throw std::runtime_error(std::string("cannot read ") + argv[1]);
    const nlohmann::json trace = nlohmann::json::parse(file);
    const nlohmann::json& events = trace.is_array() ? trace : trace.at("traceEvents");
    std::vector<std::pair<double, double>> executions;  // [begin, end) in microseconds
    std::vector<const nlohmann::json*> calls;
    double matmul_launches_us = 0;
    std::vector<const nlohmann::json*> matmul_launches;
    for (const nlohmann::json& e : events) {
      if (e.value("ph", "") != "X") continue;
      const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
      if (e.value("name", "") == "execute") executions.emplace_back(ts, ts + dur);
      if (e.value("cat", "") == "gemm") calls.push_back(&e);
      if (e.value("cat", "") == "launch" && e.value("name", "") == "matmul") {
        matmul_launches.push_back(&e);
      }
    }
    std::sort(executions.begin(), executions.end());
    if (executions.size() <= skip) {
      throw std::runtime_error("no execution after the first " + std::to_string(skip));
    }
    executions.erase(executions.begin(), executions.begin() + static_cast<long>(skip));
    auto execution_of = [&](const nlohmann::json& e) -> long {
      const double ts = e.at("ts").get<double>(), end = ts + e.at("dur").get<double>();
      for (size_t x = 0; x < executions.size(); ++x) {
        if (executions[x].first <= ts && end <= executions[x].second) return static_cast<long>(x);
      }
      return -1;
    };
    std::map<std::string, Seen> seen;
    for (const nlohmann::json* e : calls) {
      const long x = execution_of(*e);
      if (x < 0) continue;
      Seen& s = seen[e->at("args").at("detail").get<std::string>()];
      s.per_execution.resize(executions.size());
      s.durations_us.push_back(e->at("dur").get<double>());
      ++s.per_execution[static_cast<size_t>(x)];
    }
    std::vector<double> launches_per_execution(executions.size(), 0);
    for (const nlohmann::json* e : matmul_launches) {
      const long x = execution_of(*e);
      if (x < 0) continue;
      matmul_launches_us += e->at("dur").get<double>();
      ++launches_per_execution[static_cast<size_t>(x)];
    }
    if (seen.empty()) throw std::runtime_error("no library product in the executions kept");

    struct Row {
      std::string what;
      double calls, in_step, warm, cold;
    };
    std::vector<Row> rows;
    std::mt19937 rng(20261207);
    for (const auto& [detail, s] : seen) {
      const Call call = parse(detail);
      std::vector<double> counts(s.per_execution.begin(), s.per_execution.end());
      const auto [warm, cold] = alone_us(call, cold_buffers, rng);
      rows.push_back({describe(call), median(counts), median(s.durations_us), warm, cold});
    }
    std::sort(rows.begin(), rows.end(),
              [](const Row& a, const Row& b) { return a.calls * a.in_step > b.calls * b.in_step; });
    std::printf("CPU: %s; products: bf16 on %s, f32 on %s (%s)\n", lt::bench::cpu_model().c_str(),
                lt::backend::cpu::gemm_isa(DType::bf16), lt::backend::cpu::gemm_isa(DType::f32),
                lt::backend::cpu::gemm_library(DType::f32));
    std::printf("%zu executions kept (the first %zu left out); cold calls flush: %s\n\n",
                executions.size(), skip, cold_buffers.c_str());
    std::printf(
        "| product (m x n x k) | calls a step | in step (us) | alone, warm (us) | alone, cold "
        "(us) | warm / in step | cold / in step |\n|---|---:|---:|---:|---:|---:|---:|\n");
    double in_step_total = 0, warm_total = 0, cold_total = 0, calls_total = 0;
    for (const Row& r : rows) {
      calls_total += r.calls;
      std::printf("| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f |\n", r.what.c_str(), r.calls,
                  r.in_step, r.warm, r.cold, r.warm / r.in_step, r.cold / r.in_step);
      in_step_total += r.calls * r.in_step;
      warm_total += r.calls * r.warm;
      cold_total += r.calls * r.cold;
    }
    std::printf(
        "\nA step's library products: %.1f ms in the step; alone %.1f ms warm, %.1f ms cold.\n"
        "alone / in step: %.2f warm, %.2f cold.\n"
        "The step's %.0f matmul launches (operand copies and the call): %.1f ms; %.0f library "
        "products.\n",
        in_step_total / 1e3, warm_total / 1e3, cold_total / 1e3, warm_total / in_step_total,
        cold_total / in_step_total, median(launches_per_execution),
        matmul_launches_us / 1e3 / static_cast<double>(executions.size()), calls_total);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_replay_benchmark: %s\n", e.what());
    return 1;
  }
  return 0;
}
