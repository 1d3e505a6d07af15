#include "backend/cuda/cuda_device.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lazytensor/error.h"

namespace lt::backend::cuda {

namespace {

// The largest kernel argument the routines pass by value: a copy's 8 sizes or strides.
constexpr size_t kMaxArgumentBytes = 64;
// Free staging chunks kept for reuse; beyond that, returned to the driver.
constexpr size_t kMaxFreeChunks = 16;

CuDevicePtr device_pointer(const void* handle) {
  return static_cast<CuDevicePtr>(reinterpret_cast<uintptr_t>(handle));
}

// A kernel and the arguments of its next launch.
struct Kernel {
  CuFunction function = nullptr;
  std::shared_ptr<void> module;  // the code lives there
  std::vector<std::array<unsigned char, kMaxArgumentBytes>> values;
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
    chunk.bytes = std::max<size_t>(std::bit_ceil(bytes), 4096);
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
                                     std::shared_ptr<const KernelCompiler> compiler, int ordinal,
                                     std::string* why) {
  auto state = std::make_shared<State>();
  state->driver = driver;
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
  return std::shared_ptr<Device>(new Device(std::move(state)));
}

const std::string& Device::arch() const {
  return state_->arch;
}

size_t Device::staging_chunks() const {
  std::lock_guard lock(state_->staging_mutex);
  return state_->in_flight.size() + state_->free_chunks.size();
}

std::string Device::description() const {
  return state_->description;
}

int64_t Device::global_memory_bytes() const {
  return state_->memory_bytes;
}

std::shared_ptr<void> Device::build(const std::vector<const compiler::KernelProgram*>& programs,
                                    const std::vector<std::string>& symbols,
                                    const std::string& routines) const {
  const std::string image =
      state_->compiler->image(generate_source(programs, symbols) + routines, state_->arch);
  state_->bind();
  CuModule module = nullptr;
  state_->driver.check(state_->driver.module_load_data(&module, image.data()), "cuModuleLoadData");
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
  if (bytes == 0) return;
  State& s = *state_;
  s.bind();
  std::lock_guard lock(s.staging_mutex);
  const State::Chunk chunk = s.take(bytes);
  std::memcpy(chunk.host, src, bytes);
  CuResult r = s.driver.memcpy_htod_async(device_pointer(buffer), chunk.host, bytes, s.stream);
  if (r == kCuSuccess) r = s.driver.event_record(chunk.done, s.stream);
  if (r != kCuSuccess) {
    // Not queued: the chunk may be in use by nothing, or by a copy that failed; wait for the
    // stream before the chunk is reused.
    s.driver.stream_synchronize(s.stream);
    s.free_chunks.push_back(chunk);
    s.driver.check(r, "cuMemcpyHtoDAsync");
  }
  s.in_flight.push_back(chunk);
}

void Device::read(const void* buffer, void* dst, size_t bytes) const {
  if (bytes == 0) return;
  State& s = *state_;
  s.bind();
  std::lock_guard lock(s.staging_mutex);
  const State::Chunk chunk = s.take(bytes);
  CuResult r = s.driver.memcpy_dtoh_async(chunk.host, device_pointer(buffer), bytes, s.stream);
  const CuResult synced = s.driver.stream_synchronize(s.stream);
  if (r == kCuSuccess) r = synced;
  if (r == kCuSuccess) std::memcpy(dst, chunk.host, bytes);
  s.free_chunks.push_back(chunk);
  s.driver.check(r, "cuMemcpyDtoHAsync");
}

void Device::set_arg(void* kernel, int index, size_t bytes, const void* value) const {
  if (bytes > kMaxArgumentBytes) {
    throw Error("cuda: a kernel argument of " + std::to_string(bytes) + " bytes (at most " +
                std::to_string(kMaxArgumentBytes) + ")");
  }
  auto& values = static_cast<Kernel*>(kernel)->values;
  if (values.size() <= static_cast<size_t>(index)) values.resize(index + 1);
  std::memcpy(values[index].data(), value, bytes);
}

void Device::launch(void* kernel, size_t global, size_t local) const {
  auto& k = *static_cast<Kernel*>(kernel);
  std::vector<void*> params;
  for (auto& value : k.values) params.push_back(value.data());
  state_->bind();
  state_->driver.check(
      state_->driver.launch_kernel(k.function, static_cast<unsigned>(global / local), 1, 1,
                                   static_cast<unsigned>(local), 1, 1, 0, state_->stream,
                                   params.data(), nullptr),
      "cuLaunchKernel");
}

void Device::finish() const {
  State& s = *state_;
  s.bind();
  s.driver.check(s.driver.stream_synchronize(s.stream), "cuStreamSynchronize");
  std::lock_guard lock(s.staging_mutex);
  s.reclaim(true);
}

}  // namespace lt::backend::cuda
