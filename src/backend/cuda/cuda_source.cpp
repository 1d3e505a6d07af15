#include "backend/cuda/cuda_source.h"

#include <dlfcn.h>

#include <cstdio>
#include <regex>
#include <string>

#include "backend/dynamic_symbol.h"
#include "backend/kernel_source.h"
#include "lazytensor/error.h"

namespace lt::backend::cpu {
extern const char* const kKernelPrelude;  // the CPU's prelude, with op_table.def inlined
}

namespace lt::backend::cuda {

namespace {

// NVRTC has no libc and no GCC builtins: the prelude's are mapped onto CUDA's device functions
// (each computes the same correctly rounded or documented result as the builtin).
constexpr const char* kBuiltinShim = R"(
#define __builtin_fmaf fmaf
#define __builtin_rintf rintf
#define __builtin_sqrtf sqrtf
#define __builtin_sqrt sqrt
#define __builtin_fabsf fabsf
#define __builtin_fabs fabs
#define __builtin_copysignf copysignf
#define __builtin_copysign copysign
#define __builtin_floorf floorf
#define __builtin_floor floor
#define __builtin_fmodf fmodf
#define __builtin_fmod fmod
#define __builtin_exp exp
#define __builtin_log log
#define __builtin_erf erf
#define __builtin_pow pow
#define __builtin_powf powf
#define __builtin_tanh tanh
#define __builtin_sinf sinf
#define __builtin_sin sin
#define __builtin_cosf cosf
#define __builtin_cos cos
#define __builtin_clzll __clzll
#define __builtin_memcpy memcpy
#define __builtin_inff() __int_as_float(0x7f800000)
#define __builtin_nanf(s) __int_as_float(0x7fc00000)
#define __builtin_inf() __longlong_as_double(0x7ff0000000000000LL)
#define __builtin_nan(s) __longlong_as_double(0x7ff8000000000000LL)
)";

// Every compile's options besides the architecture. Multiply-adds are not contracted, as on the
// CPU (-ffp-contract=off).
constexpr const char* kOptions[] = {"-default-device", "--std=c++17", "--fmad=false",
                                    "--ptxas-options=-v"};

// ptxas's -v report: per entry, "Compiling entry function 'f'", then "N bytes stack frame,
// S bytes spill stores, L bytes spill loads" and "Used R registers".
std::vector<KernelReport> parse_report(const std::string& log) {
  // ptxas's -v report: per entry, "Compiling entry function 'f'"; then "Function properties for
  // f" followed by "N bytes stack frame, S bytes spill stores, L bytes spill loads" (also given
  // for device functions it did not inline: not the entry's); then "Used R registers".
  std::vector<KernelReport> kernels;
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex properties(R"(Function properties for (\S+))");
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  std::smatch m;
  std::string described;  // the function the next frame line belongs to
  bool framed = false;
  size_t line_start = 0;
  while (line_start < log.size()) {
    size_t line_end = log.find('\n', line_start);
    if (line_end == std::string::npos) line_end = log.size();
    const std::string line = log.substr(line_start, line_end - line_start);
    if (std::regex_search(line, m, entry)) {
      kernels.push_back({m[1].str()});
      framed = false;
    } else if (std::regex_search(line, m, properties)) {
      described = m[1].str();
    } else if (!kernels.empty() && described == kernels.back().name &&
               std::regex_search(line, m, frame)) {
      kernels.back().stack_bytes = std::stoi(m[1].str());
      kernels.back().spill_bytes = std::stoi(m[2].str()) + std::stoi(m[3].str());
      framed = true;
    } else if (!kernels.empty() && std::regex_search(line, m, used)) {
      kernels.back().registers = std::stoi(m[1].str());
      kernels.back().reported = framed;
    }
    line_start = line_end + 1;
  }
  return kernels;
}

}  // namespace

std::string generate_source(const std::vector<const compiler::KernelProgram*>& programs,
                            const std::vector<std::string>& symbols) {
  std::string out = kBuiltinShim;
  out += cpu::kKernelPrelude;
  out += "\n";
  for (size_t i = 0; i < programs.size(); ++i) {
    out += render_kernel(*programs[i], symbols[i], KernelDialect::cuda);
  }
  return out;
}

std::optional<Nvrtc> Nvrtc::open(std::string* why) {
  std::string tried;
  for (const char* name :
       {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so"}) {
    void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    tried += (tried.empty() ? "" : ", ") + std::string(name);
    if (library == nullptr) continue;
    Nvrtc nvrtc;
    const auto bind = [&](auto& fn, const char* symbol) { return resolve(library, symbol, fn); };
    // Every call used, or none: an NVRTC older than 11.1 has no CUBIN output.
    if (bind(nvrtc.create_, "nvrtcCreateProgram") && bind(nvrtc.compile_, "nvrtcCompileProgram") &&
        bind(nvrtc.log_size_, "nvrtcGetProgramLogSize") && bind(nvrtc.log_, "nvrtcGetProgramLog") &&
        bind(nvrtc.cubin_size_, "nvrtcGetCUBINSize") && bind(nvrtc.cubin_, "nvrtcGetCUBIN") &&
        bind(nvrtc.destroy_, "nvrtcDestroyProgram") && bind(nvrtc.version_, "nvrtcVersion")) {
      return nvrtc;
    }
    dlclose(library);
    tried += " (too old: no CUBIN output)";
  }
  if (why != nullptr) *why = "no NVRTC library (tried " + tried + ")";
  return std::nullopt;
}

std::string Nvrtc::version() const {
  int major = 0, minor = 0;
  version_(&major, &minor);
  return "NVRTC " + std::to_string(major) + "." + std::to_string(minor);
}

CompileReport Nvrtc::compile(const std::string& source, const std::string& arch) const {
  return compile(source, arch, nullptr);
}

std::string Nvrtc::image(const std::string& source, const std::string& arch) const {
  std::string cubin;
  const CompileReport report = compile(source, arch, &cubin);
  if (!report.compiled)
    throw Error("cuda: the kernels did not compile for " + arch + "\n" + report.log);
  return cubin;
}

std::string Nvrtc::cache_key() const {
  std::string key = version();
  for (const char* option : kOptions) key += std::string(" ") + option;
  return key;
}

CompileReport Nvrtc::compile(const std::string& source, const std::string& arch,
                             std::string* cubin) const {
  CompileReport report;
  Program program = nullptr;
  if (create_(&program, source.c_str(), "lazytensor_kernels.cu", 0, nullptr, nullptr) != 0) {
    report.log = "nvrtcCreateProgram failed";
    return report;
  }
  const std::string arch_option = "--gpu-architecture=" + arch;
  std::vector<const char*> options = {arch_option.c_str()};
  for (const char* option : kOptions) options.push_back(option);
  const int status = compile_(program, static_cast<int>(options.size()), options.data());
  size_t size = 0;
  log_size_(program, &size);
  report.log.assign(size, '\0');
  if (size > 0) log_(program, report.log.data());
  if (!report.log.empty() && report.log.back() == '\0') report.log.pop_back();
  size_t binary = 0;
  report.compiled = status == 0 && cubin_size_(program, &binary) == 0 && binary > 0;
  if (report.compiled && cubin != nullptr) {
    cubin->assign(binary, '\0');
    report.compiled = cubin_(program, cubin->data()) == 0;
  }
  destroy_(&program);
  report.kernels = parse_report(report.log);
  return report;
}

}  // namespace lt::backend::cuda
