#pragma once
// Backends register a factory per device type; the runtime asks for the backend of a device
// and gets the same instance every time (created on first use, never destroyed: tensors in
// static storage may release buffers at exit). The runtime asks it; backends only register.
//
// The backends built into the library register themselves: each folder src/backend/<name>/
// defines lt::backend::<name>::register_backend(), and CMake's lazytensor_add_backend(<name>)
// lists it for the registry, which calls every listed one before its first answer. The
// registry includes no backend.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "compiler/kernel_program.h"
#include "lazytensor/device.h"
#include "lazytensor/runtime.h"

namespace lt::backend {

using BackendFactory =
    std::function<std::unique_ptr<Backend>(int index, const BackendSettings& settings)>;

// Replaces any factory for `type`. The kind's probe, if it has one, still decides whether the
// machine can run it.
void register_backend(DeviceType type, BackendFactory factory);

// What a device kind needs from the machine (a driver, a platform): `usable` when it is there,
// and `detail`, what was found or why it is missing.
struct Availability {
  bool usable = false;
  std::string detail;
};
using AvailabilityProbe = std::function<Availability()>;
// A device kind's probe, run once, the first time its kind's status is asked (device_kinds(),
// a device's first use). A kind with a probe and no factory is one the build knows but cannot
// serve yet; a kind with neither is unknown to the build. Returns the probe it replaces.
AvailabilityProbe register_device_probe(DeviceType type, AvailabilityProbe probe);
// Every device kind, served or not, with whether it is available and why (lt::device_kinds).
std::vector<DeviceKind> device_kinds();

// A device kind's code generator and compiler, run without its device (lt::check_codegen): the
// programs rendered in its dialect as functions named `names`, compiled for `arch`. The
// result's per-kernel fields are filled in by name; the caller fills in the rest.
using CodegenChecker =
    std::function<CodegenCheck(const std::vector<const compiler::KernelProgram*>& programs,
                               const std::vector<std::string>& names, const std::string& arch)>;
void register_codegen_checker(DeviceType type, CodegenChecker checker);
// lt::Error when no checker is registered for `type`.
CodegenCheck check_codegen(DeviceType type,
                           const std::vector<const compiler::KernelProgram*>& programs,
                           const std::vector<std::string>& names, const std::string& arch);
// Stops serving `type` (for tests). Backends already created stay alive, since buffers may
// still point into them, and wait_device_ops() still waits for them.
void unregister_backend(DeviceType type);
// Throws lt::Error naming the device, and the reason device_kinds() gives, when no backend
// serves it or its kind is unavailable here. `settings` are handed to the
// backend if this call creates it.
Backend& backend_for(const Device& device, const BackendSettings& settings);
// Every backend created so far.
std::vector<Backend*> live_backends();

}  // namespace lt::backend
