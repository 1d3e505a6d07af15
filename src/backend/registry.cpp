#include "backend/registry.h"

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "lazytensor/error.h"

// Each built-in backend's registration function, from the list CMake generated.
#define LT_BACKEND(name)        \
  namespace lt::backend::name { \
  void register_backend();      \
  }
#include "registered_backends.inc"
#undef LT_BACKEND

namespace lt::backend {

namespace {

// Devices per type the registry can hold; far more than a machine has.
constexpr int kMaxDevices = 64;
constexpr size_t kDeviceTypes = static_cast<size_t>(DeviceType::opencl) + 1;

struct Registry {
  std::mutex mu;
  std::map<DeviceType, BackendFactory> factories;
  std::map<DeviceType, AvailabilityProbe> probes;
  std::map<DeviceType, Availability> probed;  // each probe's answer, asked once
  std::map<DeviceType, CodegenChecker> checkers;
  // Lock-free lookups after creation: the hot paths (every upload, read and cut) ask.
  std::atomic<Backend*> backends[kDeviceTypes][kMaxDevices] = {};
  std::vector<Backend*> created;
};

Registry& registry_without_built_ins() {
  static Registry* r = new Registry();  // never destroyed, nor are its backends
  return *r;
}

// The registry, once every built-in backend has registered (they call register_backend,
// which takes the registry's lock: so outside it).
Registry& registry() {
  static std::once_flag registered;
  std::call_once(registered, [] {
#define LT_BACKEND(name) name::register_backend();
#include "registered_backends.inc"
#undef LT_BACKEND
  });
  return registry_without_built_ins();
}

}  // namespace

void register_backend(DeviceType type, BackendFactory factory) {
  Registry& r = registry_without_built_ins();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[type] = std::move(factory);
}

AvailabilityProbe register_device_probe(DeviceType type, AvailabilityProbe probe) {
  Registry& r = registry_without_built_ins();
  std::lock_guard<std::mutex> lock(r.mu);
  r.probed.erase(type);
  AvailabilityProbe previous = std::move(r.probes[type]);
  r.probes[type] = std::move(probe);
  return previous;
}

namespace {

// What `type`'s probe finds, asked once per process (a probe may load a driver and start its
// threads) and outside the registry's lock (the lock guards lookups on hot paths); nullopt for
// a kind without a probe.
std::optional<Availability> probe_of(Registry& r, DeviceType type) {
  AvailabilityProbe probe;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (const auto it = r.probed.find(type); it != r.probed.end()) return it->second;
    const auto it = r.probes.find(type);
    if (it == r.probes.end() || !it->second) return std::nullopt;
    probe = it->second;
  }
  const Availability found = probe();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.probed.emplace(type, found).first->second;
}

// A kind's status from whether a backend serves it and what its probe found.
DeviceKind status_of(DeviceType type, bool served, const std::optional<Availability>& found) {
  DeviceKind kind{device_type_name(type), false, ""};
  if (!found) {
    kind.available = served;
    kind.reason = served ? "" : std::string("this build has no ") + kind.name + " backend";
    return kind;
  }
  kind.available = served && found->usable;
  if (served) {
    kind.reason = found->detail;
  } else if (found->usable) {
    kind.reason = std::string("this build has no ") + kind.name + " backend yet (the machine has " +
                  found->detail + ")";
  } else {
    kind.reason =
        std::string("this build has no ") + kind.name + " backend yet, and " + found->detail;
  }
  return kind;
}

bool served(Registry& r, DeviceType type) {
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories.count(type) != 0;
}

}  // namespace

std::vector<DeviceKind> device_kinds() {
  Registry& r = registry();
  std::vector<DeviceKind> kinds;
  for (size_t t = 0; t < kDeviceTypes; ++t) {
    const auto type = static_cast<DeviceType>(t);
    kinds.push_back(status_of(type, served(r, type), probe_of(r, type)));
  }
  return kinds;
}

void register_codegen_checker(DeviceType type, CodegenChecker checker) {
  Registry& r = registry_without_built_ins();
  std::lock_guard<std::mutex> lock(r.mu);
  r.checkers[type] = std::move(checker);
}

CodegenCheck check_codegen(DeviceType type,
                           const std::vector<const compiler::KernelProgram*>& programs,
                           const std::vector<std::string>& names, const std::string& arch) {
  CodegenChecker checker;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.checkers.find(type);
    if (it == r.checkers.end()) {
      throw Error(std::string("check_codegen: no code generator for ") + device_type_name(type) +
                  " devices in this build");
    }
    checker = it->second;
  }
  return checker(programs, names, arch);
}

void unregister_backend(DeviceType type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories.erase(type);
  for (auto& backend : r.backends[static_cast<size_t>(type)]) backend.store(nullptr);
}

Backend& backend_for(const Device& device, const BackendSettings& settings) {
  Registry& r = registry();
  const auto type = static_cast<size_t>(device.type);
  if (type >= kDeviceTypes || device.index < 0 || device.index >= kMaxDevices) {
    throw Error("device " + device.str() + ": no such device");
  }
  if (Backend* backend = r.backends[type][device.index].load(std::memory_order_acquire)) {
    return *backend;
  }
  // Only a device's first use gets here.
  const std::optional<Availability> found = probe_of(r, device.type);
  std::lock_guard<std::mutex> lock(r.mu);
  if (Backend* backend = r.backends[type][device.index].load()) return *backend;
  const auto factory = r.factories.find(device.type);
  const DeviceKind kind = status_of(device.type, factory != r.factories.end(), found);
  if (!kind.available) throw Error("device " + device.str() + " is unavailable: " + kind.reason);
  Backend* backend = factory->second(device.index, settings).release();
  r.created.push_back(backend);
  r.backends[type][device.index].store(backend, std::memory_order_release);
  return *backend;
}

std::vector<Backend*> live_backends() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.created;
}

}  // namespace lt::backend
