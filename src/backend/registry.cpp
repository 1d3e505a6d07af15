#include "backend/registry.h"

#include <atomic>
#include <map>
#include <mutex>
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
  r.probes.erase(type);
}

void register_device_probe(DeviceType type, AvailabilityProbe probe) {
  Registry& r = registry_without_built_ins();
  std::lock_guard<std::mutex> lock(r.mu);
  r.probes[type] = std::move(probe);
}

namespace {

// A kind's status from what the registry holds for it (the registry's lock held).
DeviceKind status_of(const Registry& r, DeviceType type) {
  DeviceKind kind{device_type_name(type), false, ""};
  const bool served = r.factories.count(type) != 0;
  const auto probe = r.probes.find(type);
  if (probe == r.probes.end()) {
    kind.available = served;
    kind.reason = served ? "" : std::string("this build has no ") + kind.name + " backend";
    return kind;
  }
  const Availability found = probe->second();
  kind.available = served && found.usable;
  if (served) {
    kind.reason = found.detail;
  } else if (found.usable) {
    kind.reason = std::string("this build has no ") + kind.name + " backend yet (the machine has " +
                  found.detail + ")";
  } else {
    kind.reason =
        std::string("this build has no ") + kind.name + " backend yet, and " + found.detail;
  }
  return kind;
}

}  // namespace

std::vector<DeviceKind> device_kinds() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<DeviceKind> kinds;
  for (size_t t = 0; t < kDeviceTypes; ++t)
    kinds.push_back(status_of(r, static_cast<DeviceType>(t)));
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
  std::lock_guard<std::mutex> lock(r.mu);
  if (Backend* backend = r.backends[type][device.index].load()) return *backend;
  // Only a device's first use gets here: its kind is probed once per device.
  const DeviceKind kind = status_of(r, device.type);
  if (!kind.available) throw Error("device " + device.str() + " is unavailable: " + kind.reason);
  const auto factory = r.factories.find(device.type);
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
