#include "compiler/kernel_program.h"

#include <cstring>

namespace lt::compiler {

uint64_t hash_bytes(const void* data, size_t size, uint64_t seed) {
  // FNV-1a over 8-byte words where possible, finished with a 64-bit mixer.
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    h = (h ^ word) * 0x100000001b3ull;
  }
  for (; i < size; ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

std::string KernelProgram::key() const {
  std::string key;
  auto put = [&key](const auto& value) {
    key.append(reinterpret_cast<const char*>(&value), sizeof(value));
  };
  put(static_cast<uint8_t>(reduce));
  put(static_cast<uint32_t>(instrs.size()));
  for (const Instr& instr : instrs) {
    put(instr.kind);
    put(instr.op);
    put(instr.dtype);
    put(instr.args);
    put(instr.index);
    if (instr.kind == InstrKind::Constant) put(instr.constant);
  }
  put(static_cast<uint32_t>(outputs.size()));
  for (int32_t out : outputs) put(out);
  for (DType dtype : input_dtypes) put(dtype);
  put(num_scalars);
  return key;
}

}  // namespace lt::compiler
