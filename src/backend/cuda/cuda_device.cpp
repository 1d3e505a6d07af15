#include "backend/cuda/cuda_device.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/kernel_disk_cache.h"
#include "compiler/kernel_program.h"
#include "lazytensor/error.h"
#include "metrics/metrics_registry.h"

namespace lt::backend::cuda {

namespace {

// The largest kernel argument the routines pass by value: a copy's 8 sizes or strides.
constexpr size_t kMaxArgumentBytes = 64;
// Uploads and reads go through pinned chunks of at most this many bytes (a larger transfer in
// pieces), and at most kMaxFreeChunks free ones are kept for reuse.
constexpr size_t kStagingPiece = size_t{64} << 20;
constexpr size_t kMaxFreeChunks = 8;
// cuBLASLt's workspace.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

CuDevicePtr device_pointer(const void* handle) {
  return static_cast<CuDevicePtr>(reinterpret_cast<uintptr_t>(handle));
}

// A kernel and the arguments of its next launch.
struct Kernel {
  CuFunction function = nullptr;
  std::shared_ptr<void> module;  // the code lives there
  std::vector<std::array<unsigned char, kMaxArgumentBytes>> values;
  std::vector<void*> params;  // cuLaunchKernel's: each value's address, kept with the values
};

}  // namespace

struct Device::State {
  Driver driver;
  std::shared_ptr<const KernelCompiler> compiler;
  CuDevice device = 0;
  CuContext context = nullptr;
  CuStream stream = nullptr;
  std::string arch, description;
  int64_t memory_bytes = 0;
  std::filesystem::path cache_dir;  // empty: programs are not kept
  size_t cache_bytes = 0;           // the most they take there

  // cuBLASLt, where there is one: its handle (made on the stream's thread, with the context
  // current), a workspace, and a plan per product shape.
  std::optional<BlasLt> blas;
  void* blas_handle = nullptr;
  CuDevicePtr workspace = 0;                // freed with the state, before its stream
  std::atomic<int64_t> workspace_bytes{0};  // read by the host's memory checks
  struct Plan {
    void* desc = nullptr;
    void* layouts[3] = {};  // b as the column-major "A", a as "B", c
    BlasLtHeuristic heuristic{};
    bool usable = false;  // the library has an algorithm for it
  };
  // By whether the output has the operands' type, the operands' cudaDataType, batches, m, n, k.
  using PlanKey = std::array<int64_t, 6>;
  std::map<PlanKey, Plan> plans;

  // Pinned host memory for uploads and reads: a chunk is in flight until its event has passed.
  struct Chunk {
    void* host = nullptr;
    size_t bytes = 0;
    CuEvent done = nullptr;
  };
  mutable std::mutex staging_mutex;
  std::vector<Chunk> in_flight, free_chunks;

  // The context is current per thread: each call that needs it makes it current first.
  void bind() const { driver.check(driver.context_set_current(context), "cuCtxSetCurrent"); }

  // Chunks whose copies have run are free again; `all` after the stream has drained.
  void reclaim(bool all) {
    auto done = [&](const Chunk& c) { return all || driver.event_query(c.done) == kCuSuccess; };
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      if (!done(*it)) {
        ++it;
        continue;
      }
      free_chunks.push_back(*it);
      it = in_flight.erase(it);
    }
    while (free_chunks.size() > kMaxFreeChunks) {
      release(free_chunks.front());
      free_chunks.erase(free_chunks.begin());
    }
  }

  // A chunk of at least `bytes` not in flight: the smallest free one, or a new one.
  Chunk take(size_t bytes) {
    reclaim(false);
    auto best = free_chunks.end();
    for (auto it = free_chunks.begin(); it != free_chunks.end(); ++it) {
      if (it->bytes >= bytes && (best == free_chunks.end() || it->bytes < best->bytes)) best = it;
    }
    if (best != free_chunks.end()) {
      const Chunk chunk = *best;
      free_chunks.erase(best);
      return chunk;
    }
    Chunk chunk;
    chunk.bytes = std::max<size_t>(std::bit_ceil(bytes), 4096);  // bytes <= kStagingPiece
    driver.check(driver.mem_host_alloc(&chunk.host, chunk.bytes, 0), "cuMemHostAlloc");
    const CuResult created = driver.event_create(&chunk.done, kCuEventDisableTiming);
    if (created != kCuSuccess) {
      driver.mem_free_host(chunk.host);
      driver.check(created, "cuEventCreate");
    }
    return chunk;
  }

  void release(const Chunk& chunk) const {
    driver.mem_free_host(chunk.host);
    driver.event_destroy(chunk.done);
  }

  ~State() {
    if (stream != nullptr) {
      driver.context_set_current(context);
      driver.stream_synchronize(stream);
      for (auto& [key, plan] : plans) {
        for (void* layout : plan.layouts) {
          if (layout != nullptr) blas->layout_destroy(layout);
        }
        if (plan.desc != nullptr) blas->desc_destroy(plan.desc);
      }
      if (blas_handle != nullptr) blas->destroy(blas_handle);
      if (workspace != 0) driver.mem_free_async(workspace, stream);
      driver.stream_synchronize(stream);
      for (const Chunk& c : in_flight) release(c);
      for (const Chunk& c : free_chunks) release(c);
      driver.stream_destroy(stream);
    }
    if (context != nullptr) driver.primary_context_release(device);
  }
};

Device::Device(std::shared_ptr<State> state) : state_(std::move(state)) {}
Device::~Device() = default;

std::shared_ptr<Device> Device::open(const Driver& driver,
                                     std::shared_ptr<const KernelCompiler> compiler,
                                     std::optional<BlasLt> blas, int ordinal,
                                     const std::string& cache_dir, size_t cache_bytes,
                                     std::string* why) {
  auto state = std::make_shared<State>();
  state->driver = driver;
  state->blas = std::move(blas);
  if (!cache_dir.empty() && compiler->images_outlive_the_process()) {
    state->cache_dir = std::filesystem::path(cache_dir) / "cuda";
    state->cache_bytes = cache_bytes;
  }
  state->compiler = std::move(compiler);
  const auto fail = [&](const char* call, CuResult result) {
    *why = driver.describe(call, result);
    return nullptr;
  };
  if (const CuResult r = driver.init(0); r != kCuSuccess) return fail("cuInit", r);
  int count = 0;
  if (const CuResult r = driver.device_count(&count); r != kCuSuccess) {
    return fail("cuDeviceGetCount", r);
  }
  if (ordinal < 0 || ordinal >= count) {
    *why = "the CUDA driver sees " + std::to_string(count) + (count == 1 ? " GPU" : " GPUs") +
           ", none numbered " + std::to_string(ordinal);
    return nullptr;
  }
  if (const CuResult r = driver.device_get(&state->device, ordinal); r != kCuSuccess) {
    return fail("cuDeviceGet", r);
  }
  int major = 0, minor = 0, pools = 0;
  driver.device_attribute(&major, kCuAttributeComputeCapabilityMajor, state->device);
  driver.device_attribute(&minor, kCuAttributeComputeCapabilityMinor, state->device);
  driver.device_attribute(&pools, kCuAttributeMemoryPoolsSupported, state->device);
  char name[256] = {};
  driver.device_name(name, sizeof name - 1, state->device);
  if (pools == 0) {
    *why = std::string(name) + " has no stream-ordered allocator (cuMemAllocAsync)";
    return nullptr;
  }
  size_t memory = 0;
  driver.device_total_memory(&memory, state->device);
  state->memory_bytes = static_cast<int64_t>(memory);
  state->arch = "sm_" + std::to_string(major) + std::to_string(minor);
  int version = 0;
  driver.driver_version(&version);
  state->description = std::string(name) + " (" + state->arch + "), CUDA driver " +
                       std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10) +
                       ", kernels by " + state->compiler->version();
  if (const CuResult r = driver.primary_context_retain(&state->context, state->device);
      r != kCuSuccess) {
    state->context = nullptr;
    return fail("cuDevicePrimaryCtxRetain", r);
  }
  if (const CuResult r = driver.context_set_current(state->context); r != kCuSuccess) {
    return fail("cuCtxSetCurrent", r);
  }
  if (const CuResult r = driver.stream_create(&state->stream, kCuStreamNonBlocking);
      r != kCuSuccess) {
    state->stream = nullptr;
    return fail("cuStreamCreate", r);
  }
  // The pool keeps what it has: with its default threshold (0) it gives its memory back to the
  // driver at every synchronization, and each step would allocate it anew.
  CuMemPool pool = nullptr;
  uint64_t keep_all = UINT64_MAX;
  if (driver.default_mem_pool(&pool, state->device) == kCuSuccess) {
    driver.mem_pool_set_attribute(pool, kCuMemPoolAttrReleaseThreshold, &keep_all);
  }
  return std::shared_ptr<Device>(new Device(std::move(state)));
}

std::string Device::description() const {
  return state_->description;
}

int64_t Device::global_memory_bytes() const {
  return state_->memory_bytes;
}

std::string Device::image(const std::string& source, bool* cached) const {
  const State& s = *state_;
  *cached = false;
  if (s.cache_dir.empty()) return s.compiler->image(source, s.arch);
  // The compiler's version and the architecture are in the key: a new NVRTC or another GPU
  // compiles again.
  char stem[64];
  std::snprintf(stem, sizeof stem, "lt_%016llx_%s",
                static_cast<unsigned long long>(
                    compiler::hash_string(s.compiler->version() + "\n" + s.arch + "\n" + source)),
                s.arch.c_str());
  const std::filesystem::path path = s.cache_dir / (std::string(stem) + ".cubin");
  if (std::ifstream in{path, std::ios::binary}) {
    std::string cached_image((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    if (!cached_image.empty()) {
      metrics::counter("KernelDiskCacheHit").add();
      mark_recently_used(path);
      *cached = true;
      return cached_image;
    }
  }
  std::string compiled = s.compiler->image(source, s.arch);
  metrics::counter("KernelCompile").add();
  // Written whole under a name of this process, then renamed: another process reads all of a
  // file or none. A cache that cannot be written only costs the next process a compile.
  std::error_code error;
  std::filesystem::create_directories(s.cache_dir, error);
  static std::atomic<uint64_t> writes{0};  // two devices may store the same program at once
  const std::filesystem::path partial =
      s.cache_dir / (std::string(stem) + "." + std::to_string(getpid()) + "." +
                     std::to_string(writes.fetch_add(1)) + ".tmp");
  if (std::ofstream out{partial, std::ios::binary}; out.write(compiled.data(), compiled.size())) {
    out.close();
    std::filesystem::rename(partial, path, error);
  }
  std::filesystem::remove(partial, error);
  trim_disk_cache(s.cache_dir, ".cubin", s.cache_bytes);
  return compiled;
}

std::shared_ptr<void> Device::build(const std::vector<const compiler::KernelProgram*>& programs,
                                    const std::vector<std::string>& symbols,
                                    const std::string& routines) const {
  const std::string source = generate_source(programs, symbols) + routines;
  bool cached = false;
  std::string image = this->image(source, &cached);
  state_->bind();
  CuModule module = nullptr;
  CuResult loaded = state_->driver.module_load_data(&module, image.data());
  if (loaded != kCuSuccess && cached) {
    // A cached image the driver refuses (a file damaged on disk) is compiled again.
    image = state_->compiler->image(source, state_->arch);
    loaded = state_->driver.module_load_data(&module, image.data());
  }
  state_->driver.check(loaded, "cuModuleLoadData");
  return std::shared_ptr<void>(module, [state = state_](void* m) {
    state->driver.context_set_current(state->context);
    state->driver.module_unload(m);
  });
}

std::shared_ptr<void> Device::kernel(const std::shared_ptr<void>& program,
                                     const std::string& name) const {
  auto kernel = std::make_shared<Kernel>();
  kernel->module = program;
  state_->driver.check(
      state_->driver.module_get_function(&kernel->function, program.get(), name.c_str()),
      "cuModuleGetFunction");
  return kernel;
}

std::shared_ptr<void> Device::allocate(size_t bytes) const {
  state_->bind();
  CuDevicePtr ptr = 0;
  // A buffer of 0 bytes takes one, as on every device: its handle must be a real pointer.
  state_->driver.check(
      state_->driver.mem_alloc_async(&ptr, std::max<size_t>(bytes, 1), state_->stream),
      "cuMemAllocAsync");
  return std::shared_ptr<void>(reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)),
                               [state = state_](void* p) {
                                 // In stream order: after every launch queued on the buffer.
                                 state->driver.context_set_current(state->context);
                                 state->driver.mem_free_async(device_pointer(p), state->stream);
                               });
}

void Device::write(void* buffer, const void* src, size_t bytes, bool /*blocking*/) const {
  State& s = *state_;
  s.bind();
  std::lock_guard lock(s.staging_mutex);
  for (size_t at = 0; at < bytes; at += kStagingPiece) {
    const size_t piece = std::min(kStagingPiece, bytes - at);
    const State::Chunk chunk = s.take(piece);
    std::memcpy(chunk.host, static_cast<const char*>(src) + at, piece);
    CuResult r =
        s.driver.memcpy_htod_async(device_pointer(buffer) + at, chunk.host, piece, s.stream);
    if (r == kCuSuccess) r = s.driver.event_record(chunk.done, s.stream);
    if (r != kCuSuccess) {
      // Not queued, or queued without its event: the chunk is reused only after the stream.
      s.driver.stream_synchronize(s.stream);
      s.free_chunks.push_back(chunk);
      s.driver.check(r, "cuMemcpyHtoDAsync");
    }
    s.in_flight.push_back(chunk);
  }
}

void Device::read(const void* buffer, void* dst, size_t bytes) const {
  State& s = *state_;
  s.bind();
  std::lock_guard lock(s.staging_mutex);
  for (size_t at = 0; at < bytes; at += kStagingPiece) {
    const size_t piece = std::min(kStagingPiece, bytes - at);
    const State::Chunk chunk = s.take(piece);
    CuResult r =
        s.driver.memcpy_dtoh_async(chunk.host, device_pointer(buffer) + at, piece, s.stream);
    const CuResult synced = s.driver.stream_synchronize(s.stream);
    if (r == kCuSuccess) r = synced;
    if (r == kCuSuccess) std::memcpy(static_cast<char*>(dst) + at, chunk.host, piece);
    s.free_chunks.push_back(chunk);
    s.driver.check(r, "cuMemcpyDtoHAsync");
  }
}

void Device::set_arg(void* kernel, int index, size_t bytes, const void* value) const {
  if (bytes > kMaxArgumentBytes) {
    throw Error("cuda: a kernel argument of " + std::to_string(bytes) + " bytes (at most " +
                std::to_string(kMaxArgumentBytes) + ")");
  }
  Kernel& k = *static_cast<Kernel*>(kernel);
  if (k.values.size() <= static_cast<size_t>(index)) {
    k.values.resize(index + 1);  // moves the values: their addresses are taken again
    k.params.clear();
    for (auto& held : k.values) k.params.push_back(held.data());
  }
  std::memcpy(k.values[index].data(), value, bytes);
}

void Device::launch(void* kernel, size_t global, size_t local) const {
  auto& k = *static_cast<Kernel*>(kernel);
  state_->bind();
  state_->driver.check(
      state_->driver.launch_kernel(k.function, static_cast<unsigned>(global / local), 1, 1,
                                   static_cast<unsigned>(local), 1, 1, 0, state_->stream,
                                   k.params.data(), nullptr),
      "cuLaunchKernel");
}

std::string Device::matmul_library() const {
  if (!state_->blas) return "CUDA C++ (generated tiled kernel)";
  return "cuBLASLt " + std::to_string(state_->blas->version());
}

bool Device::library_matmul(const void* a, const void* b, void* c, int64_t batches, int64_t m,
                            int64_t n, int64_t k, DType operands, DType output) const {
  State& s = *state_;
  if (!s.blas || m <= 0 || n <= 0 || k <= 0) return false;
  int type = 0, compute = kComputeF32, scale = kCudaR32F;
  switch (operands) {
    case DType::f32:
      type = kCudaR32F;
      break;
    case DType::f64:
      type = kCudaR64F, compute = kComputeF64, scale = kCudaR64F;
      break;
    case DType::bf16:
      type = kCudaR16BF;
      break;
    case DType::f16:
      type = kCudaR16F;
      break;
    default:
      return false;
  }
  if (output != operands && !(output == DType::f32 && compute == kComputeF32)) return false;
  const int out_type = output == operands ? type : kCudaR32F;
  const BlasLt& blas = *s.blas;
  const auto check = [](int status, const char* call) {
    if (status != 0) {
      throw Error(std::string("cuda: ") + call + " failed with cuBLAS status " +
                  std::to_string(status));
    }
  };
  s.bind();
  if (s.workspace == 0) {
    s.driver.check(s.driver.mem_alloc_async(&s.workspace, kWorkspaceBytes, s.stream),
                   "cuMemAllocAsync");
    s.workspace_bytes.store(static_cast<int64_t>(kWorkspaceBytes));
  }
  if (s.blas_handle == nullptr) check(blas.create(&s.blas_handle), "cublasLtCreate");
  // Row-major c = a . b is column-major c^T = b^T . a^T: b as an n x k "A", a as a k x m "B",
  // c as an n x m "D", none transposed.
  const State::PlanKey key = {operands == output, type, batches, m, n, k};
  auto [it, fresh] = s.plans.try_emplace(key);
  State::Plan& plan = it->second;
  if (fresh) {
    try {
      check(blas.desc_create(&plan.desc, compute, scale), "cublasLtMatmulDescCreate");
      const uint64_t rows[3] = {static_cast<uint64_t>(n), static_cast<uint64_t>(k),
                                static_cast<uint64_t>(n)};
      const uint64_t cols[3] = {static_cast<uint64_t>(k), static_cast<uint64_t>(m),
                                static_cast<uint64_t>(m)};
      const int64_t strides[3] = {k * n, m * k, m * n};
      const int32_t count = static_cast<int32_t>(batches);
      for (int l = 0; l < 3; ++l) {
        check(blas.layout_create(&plan.layouts[l], l == 2 ? out_type : type, rows[l], cols[l],
                                 static_cast<int64_t>(rows[l])),
              "cublasLtMatrixLayoutCreate");
        if (batches > 1) {
          check(blas.layout_set(plan.layouts[l], kLayoutBatchCount, &count, sizeof count),
                "cublasLtMatrixLayoutSetAttribute");
          check(blas.layout_set(plan.layouts[l], kLayoutStridedBatchOffset, &strides[l],
                                sizeof strides[l]),
                "cublasLtMatrixLayoutSetAttribute");
        }
      }
      void* preference = nullptr;
      check(blas.preference_create(&preference), "cublasLtMatmulPreferenceCreate");
      const uint64_t workspace = kWorkspaceBytes;
      blas.preference_set(preference, kPreferenceMaxWorkspaceBytes, &workspace, sizeof workspace);
      int returned = 0;
      const int status = blas.heuristic(s.blas_handle, plan.desc, plan.layouts[0], plan.layouts[1],
                                        plan.layouts[2], plan.layouts[2], preference, 1,
                                        &plan.heuristic, &returned);
      blas.preference_destroy(preference);
      plan.usable = status == 0 && returned > 0;
    } catch (...) {
      // Half made: asked again next time.
      for (void* layout : plan.layouts) {
        if (layout != nullptr) blas.layout_destroy(layout);
      }
      if (plan.desc != nullptr) blas.desc_destroy(plan.desc);
      s.plans.erase(it);
      throw;
    }
  }
  if (!plan.usable) return false;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool doubles = scale == kCudaR64F;
  check(blas.matmul(s.blas_handle, plan.desc, doubles ? static_cast<const void*>(&one_d) : &one_f,
                    b, plan.layouts[0], a, plan.layouts[1],
                    doubles ? static_cast<const void*>(&zero_d) : &zero_f, c, plan.layouts[2], c,
                    plan.layouts[2], plan.heuristic.algo, reinterpret_cast<void*>(s.workspace),
                    kWorkspaceBytes, s.stream),
        "cublasLtMatmul");
  return true;
}

int64_t Device::reserved_bytes() const {
  return state_->workspace_bytes.load();
}

void Device::finish() const {
  State& s = *state_;
  s.bind();
  s.driver.check(s.driver.stream_synchronize(s.stream), "cuStreamSynchronize");
  std::lock_guard lock(s.staging_mutex);
  s.reclaim(true);
}

std::shared_ptr<void> Device::mark() const {
  State& s = *state_;
  s.bind();
  CuEvent event = nullptr;
  s.driver.check(s.driver.event_create(&event, kCuEventDisableTiming), "cuEventCreate");
  const CuResult recorded = s.driver.event_record(event, s.stream);
  if (recorded != kCuSuccess) s.driver.event_destroy(event);
  s.driver.check(recorded, "cuEventRecord");
  return std::shared_ptr<void>(event, [state = state_](void* e) {
    state->driver.context_set_current(state->context);
    state->driver.event_destroy(static_cast<CuEvent>(e));
  });
}

void Device::wait(const std::shared_ptr<void>& marker) const {
  State& s = *state_;
  s.bind();
  s.driver.check(s.driver.event_synchronize(static_cast<CuEvent>(marker.get())),
                 "cuEventSynchronize");
  std::lock_guard lock(s.staging_mutex);
  s.reclaim(false);
}

}  // namespace lt::backend::cuda
