// safetensors files: an 8-byte little-endian header length N, N bytes of JSON describing each
// tensor (dtype, shape, data_offsets into the data section) and optional "__metadata__", then
// the data section, which the tensors' byte ranges must cover exactly.
#include "lazytensor/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lazytensor/error.h"

namespace lt::safetensors {

namespace {

// Tensor bytes go between the file and from_host/to_host unconverted.
static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is copied as is");

// The reference implementation refuses longer headers; so do we, rather than allocate
// whatever a corrupt length asks for.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr uint64_t kLengthBytes = 8;
constexpr const char* kMetadataKey = "__metadata__";

// Ordered, so that a header is read and written in its own key order: ties in data order
// (zero-size tensors share an offset) keep the order they were saved in.
using Json = nlohmann::ordered_json;

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypeNames[] = {
    {"F32", DType::f32}, {"F64", DType::f64}, {"BF16", DType::bf16},    {"F16", DType::f16},
    {"I32", DType::i32}, {"I64", DType::i64}, {"BOOL", DType::boolean}, {"U8", DType::u8}};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("safetensors: " + path + ": " + what);
}

std::string tensor_label(const std::string& name) {
  return "tensor '" + name + "'";
}

// Appended piece by piece: "[" + std::to_string(...) trips GCC 12's -Wrestrict false positive.
std::string offsets_str(uint64_t begin, uint64_t end) {
  std::string out = "[";
  out += std::to_string(begin);
  out += ", ";
  out += std::to_string(end);
  out += "]";
  return out;
}

// For a failed system call: adds errno's description.
[[noreturn]] void fail_errno(const std::string& path, const std::string& what) {
  const int error = errno;
  fail(path, what + ": " + std::strerror(error));
}

uint64_t byte_size(const Tensor& tensor) {
  return static_cast<uint64_t>(tensor.numel()) * dtype_size(tensor.dtype());
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// A tensor's header entry, checked against itself; its range is checked against the others'.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;  // data_offsets, relative to the data section
  uint64_t end;
};

struct Index {
  std::vector<Entry> entries;  // in data order
  Metadata metadata;
  uint64_t data_start;  // the data section's offset in the file
  uint64_t data_size;
};

void read_at(const std::string& path, int fd, char* dst, uint64_t size, uint64_t offset) {
  while (size > 0) {
    // One read returns at most about 2 GiB on Linux, and may return less anyway.
    const ssize_t got = ::pread(fd, dst, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail_errno(path, "read failed at offset " + std::to_string(offset));
    // The size was checked against fstat's, so the file shrank while we read it.
    if (got == 0) {
      fail(path, "the file ended at offset " + std::to_string(offset) + " while reading");
    }
    dst += got;
    size -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

void write_all(const std::string& path, int fd, const char* src, uint64_t size) {
  while (size > 0) {
    const ssize_t put = ::write(fd, src, size);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail_errno(path, "write failed");
    src += put;
    size -= static_cast<uint64_t>(put);
  }
}

DType dtype_from_file(const std::string& path, const std::string& name, const std::string& text) {
  for (const DTypeName& known : kDTypeNames) {
    if (text == known.name) return known.dtype;
  }
  fail(path, tensor_label(name) + " has dtype '" + text +
                 "', which lazytensor does not support (supported: F32, F64, BF16, F16, I32, "
                 "I64, BOOL, U8)");
}

uint64_t unsigned_field(const std::string& path, const std::string& name, const char* field,
                        const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    fail(path, tensor_label(name) + ": " + field + " has a negative value " + value.dump());
  }
  fail(path,
       tensor_label(name) + ": " + field + " has " + value.dump() + ", not a non-negative integer");
}

const Json& array_field(const std::string& path, const std::string& name, const Json& entry,
                        const char* field) {
  const auto it = entry.find(field);
  if (it == entry.end()) fail(path, tensor_label(name) + " has no " + field);
  if (!it->is_array()) {
    fail(path, tensor_label(name) + ": " + field + " is " + it->dump() + ", not an array");
  }
  return *it;
}

Entry parse_entry(const std::string& path, const std::string& name, const Json& entry) {
  if (!entry.is_object()) {
    fail(path,
         tensor_label(name) + ": the entry is a JSON " + entry.type_name() + ", not an object");
  }
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end()) fail(path, tensor_label(name) + " has no dtype");
  if (!dtype->is_string()) {
    fail(path, tensor_label(name) + ": dtype is " + dtype->dump() + ", not a string");
  }

  const Json& shape_json = array_field(path, name, entry, "shape");
  if (shape_json.size() > static_cast<size_t>(Shape::kMaxRank)) {
    fail(path, tensor_label(name) + " has rank " + std::to_string(shape_json.size()) +
                   ", over the maximum of " + std::to_string(Shape::kMaxRank));
  }
  std::vector<int64_t> dims;
  for (const Json& dim : shape_json) {
    const uint64_t size = unsigned_field(path, name, "shape", dim);
    if (size > static_cast<uint64_t>(INT64_MAX)) {
      fail(path, tensor_label(name) + ": shape size " + std::to_string(size) + " is too large");
    }
    dims.push_back(static_cast<int64_t>(size));
  }

  const Json& offsets = array_field(path, name, entry, "data_offsets");
  if (offsets.size() != 2) {
    fail(path, tensor_label(name) + ": data_offsets is " + offsets.dump() + ", not [begin, end]");
  }
  const uint64_t begin = unsigned_field(path, name, "data_offsets", offsets[0]);
  const uint64_t end = unsigned_field(path, name, "data_offsets", offsets[1]);
  if (end < begin) {
    fail(path, tensor_label(name) + ": data_offsets " + offsets_str(begin, end) +
                   " ends before it begins");
  }

  Entry out{name, dtype_from_file(path, name, dtype->get<std::string>()), Shape(dims), begin, end};
  // Multiplied in Shape::numel's order, so that numel() on the shape cannot overflow either.
  int64_t numel = 1;
  bool overflow = false;
  for (int64_t dim : dims) overflow |= __builtin_mul_overflow(numel, dim, &numel);
  uint64_t bytes = 0;
  overflow |= __builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(out.dtype), &bytes);
  if (overflow) {
    fail(path, tensor_label(name) + ": shape " + out.shape.str() + " has too many elements");
  }
  if (bytes != end - begin) {
    fail(path, tensor_label(name) + ": shape " + out.shape.str() + " of " +
                   dtype->get<std::string>() + " needs " + std::to_string(bytes) +
                   " bytes but data_offsets " + offsets_str(begin, end) + " hold " +
                   std::to_string(end - begin));
  }
  return out;
}

Metadata parse_metadata(const std::string& path, const Json& json) {
  if (!json.is_object()) {
    fail(path, std::string(kMetadataKey) + " is a JSON " + json.type_name() + ", not an object");
  }
  Metadata metadata;
  for (const auto& [key, value] : json.items()) {
    if (!value.is_string()) {
      fail(path, std::string(kMetadataKey) + " entry '" + key + "' is " + value.dump() +
                     ", not a string");
    }
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

Json parse_header(const std::string& path, const std::string& text) {
  // The JSON parser keeps the last of two equal keys; a tensor named twice would then vanish
  // and leave a confusing hole in the data.
  std::set<std::string> names;
  std::string duplicate;
  const auto check_keys = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !names.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, check_keys);
  } catch (const Json::exception& e) {
    fail(path, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) {
    fail(path, std::string("the header is a JSON ") + header.type_name() + ", not an object");
  }
  if (!duplicate.empty()) fail(path, "the header names '" + duplicate + "' twice");
  return header;
}

// Reads and checks the header, and checks the tensors' ranges against each other and against
// the file's size, without reading the data.
Index read_checked_index(const std::string& path, int fd) {
  struct stat info;
  if (::fstat(fd, &info) != 0) fail_errno(path, "cannot stat");
  const auto file_size = static_cast<uint64_t>(info.st_size);
  if (file_size < kLengthBytes) {
    fail(path, "the file ends at " + std::to_string(file_size) +
                   ", within the 8-byte header length (truncated?)");
  }
  unsigned char length_bytes[kLengthBytes];
  read_at(path, fd, reinterpret_cast<char*>(length_bytes), kLengthBytes, 0);
  uint64_t header_size = 0;
  for (uint64_t i = 0; i < kLengthBytes; ++i) header_size |= uint64_t{length_bytes[i]} << (8 * i);
  if (header_size > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_size) + " is over the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes (not a safetensors file?)");
  }
  if (header_size > file_size - kLengthBytes) {
    fail(path, "the header needs " + std::to_string(header_size) +
                   " bytes at offset 8 but the file ends at " + std::to_string(file_size) +
                   " (truncated?)");
  }
  std::string text(header_size, '\0');
  read_at(path, fd, text.data(), header_size, kLengthBytes);

  Index index;
  index.data_start = kLengthBytes + header_size;
  index.data_size = file_size - index.data_start;
  const Json header = parse_header(path, text);
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      index.metadata = parse_metadata(path, value);
    } else {
      index.entries.push_back(parse_entry(path, key, value));
    }
  }

  // As the reference implementation does: ordered by range, each tensor starts where the one
  // before it ends, so the ranges neither overlap nor leave holes.
  std::vector<Entry>& entries = index.entries;
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& entry = entries[i];
    if (entry.begin < covered) {
      const Entry& previous = entries[i - 1];
      fail(path, tensor_label(entry.name) + " (data_offsets " +
                     offsets_str(entry.begin, entry.end) + ") overlaps " +
                     tensor_label(previous.name) + " (data_offsets " +
                     offsets_str(previous.begin, previous.end) + ")");
    }
    if (entry.begin > covered) {
      const std::string where = i == 0 ? " before " + tensor_label(entry.name)
                                       : " between " + tensor_label(entries[i - 1].name) + " and " +
                                             tensor_label(entry.name);
      fail(path,
           "data bytes " + offsets_str(covered, entry.begin) + where + " belong to no tensor");
    }
    covered = entry.end;
  }
  if (covered > index.data_size) {
    const auto missing = std::find_if(entries.begin(), entries.end(),
                                      [&](const Entry& e) { return e.end > index.data_size; });
    fail(path, tensor_label(missing->name) + " needs " +
                   std::to_string(missing->end - missing->begin) + " bytes at offset " +
                   std::to_string(index.data_start + missing->begin) + " but the file ends at " +
                   std::to_string(file_size) + " (truncated?)");
  }
  if (covered < index.data_size) {
    fail(path, "the last " + std::to_string(index.data_size - covered) +
                   " bytes of the file belong to no tensor");
  }
  return index;
}

Fd open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(path, "cannot open");
  return Fd(fd);
}

const char* dtype_to_file(const std::string& path, const std::string& name, DType dtype) {
  for (const DTypeName& known : kDTypeNames) {
    if (dtype == known.dtype) return known.name;
  }
  fail(path, tensor_label(name) + " has dtype " + dtype_name(dtype) +
                 ", which safetensors files written here cannot hold");
}

// The header of a file holding `tensors` in order, padded with spaces as the reference writer
// pads it, so that the data section starts 8-byte aligned. Throws on anything save refuses.
std::string make_header(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const Metadata& metadata) {
  // The header lists the tensors in data order, metadata first, as the reference writer does.
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == kMetadataKey) {
      fail(path, "a tensor may not be named '__metadata__': the format keeps it for metadata");
    }
    if (!names.insert(name).second) fail(path, "two tensors are named '" + name + "'");
    if (!tensor.defined()) fail(path, tensor_label(name) + " is undefined");
    const uint64_t bytes = byte_size(tensor);
    header[name] = {{"dtype", dtype_to_file(path, name, tensor.dtype())},
                    {"shape", tensor.shape().to_vector()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {
    fail(path, std::string("a tensor name or metadata string is not UTF-8 (") + e.what() + ")");
  }
  text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');
  return text;
}

// The file a save writes before renaming it over the target; removed unless the save
// completes.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target), path_(target + ".tmp") {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_errno(target_, "cannot create " + path_);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }

  void sync_and_rename() {
    if (::fsync(fd_) != 0) fail_errno(target_, "fsync of " + path_ + " failed");
    // Some file systems report a failed write only at close.
    if (::close(std::exchange(fd_, -1)) != 0) fail_errno(target_, "close of " + path_ + " failed");
    if (::rename(path_.c_str(), target_.c_str()) != 0) {
      fail_errno(target_, "cannot rename " + path_ + " over it");
    }
    renamed_ = true;
  }

 private:
  std::string target_;
  std::string path_;
  int fd_;
  bool renamed_ = false;
};

// The rename is durable only once the directory holding the file is synced.
void sync_directory(const std::string& path) {
  std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (directory.empty()) directory = ".";
  Fd fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    fail_errno(path,
               "the file is in place but may not survive a crash: syncing its directory "
               "failed");
  }
}

}  // namespace

const Tensor* File::find(std::string_view name) const {
  for (const NamedTensor& entry : tensors) {
    if (entry.name == name) return &entry.tensor;
  }
  return nullptr;
}

const Tensor& File::at(std::string_view name) const {
  if (const Tensor* tensor = find(name)) return *tensor;
  throw Error("safetensors: no tensor named '" + std::string(name) + "' among the file's " +
              std::to_string(tensors.size()) + " tensors");
}

File load(const std::string& path) {
  const Fd fd = open_for_reading(path);
  Index index = read_checked_index(path, fd.get());
  // One read of the whole data section: every byte is in hand before the first tensor is
  // created, and the peak is one copy of the data plus the tensors.
  const auto data = std::make_unique_for_overwrite<char[]>(index.data_size);
  read_at(path, fd.get(), data.get(), index.data_size, index.data_start);

  File file;
  file.metadata = std::move(index.metadata);
  file.tensors.reserve(index.entries.size());
  for (const Entry& entry : index.entries) {
    try {
      file.tensors.push_back(
          {entry.name, from_host(data.get() + entry.begin, entry.shape, entry.dtype)});
    } catch (const Error& e) {
      fail(path, tensor_label(entry.name) + ": " + e.what());
    }
  }
  return file;
}

std::vector<TensorInfo> read_index(const std::string& path, Metadata* metadata) {
  const Fd fd = open_for_reading(path);
  Index index = read_checked_index(path, fd.get());
  std::vector<TensorInfo> infos;
  infos.reserve(index.entries.size());
  for (Entry& entry : index.entries) {
    infos.push_back({std::move(entry.name), entry.dtype, entry.shape});
  }
  if (metadata != nullptr) *metadata = std::move(index.metadata);
  return infos;
}

void save(const std::string& path, const std::vector<NamedTensor>& tensors,
          const Metadata& metadata) {
  const std::string header = make_header(path, tensors, metadata);
  TempFile file(path);
  unsigned char length_bytes[kLengthBytes];
  for (uint64_t i = 0; i < kLengthBytes; ++i) length_bytes[i] = (header.size() >> (8 * i)) & 0xff;
  write_all(path, file.fd(), reinterpret_cast<const char*>(length_bytes), kLengthBytes);
  write_all(path, file.fd(), header.data(), header.size());
  for (const auto& [name, tensor] : tensors) {
    const uint64_t bytes = byte_size(tensor);
    const auto host = std::make_unique_for_overwrite<char[]>(bytes);
    try {
      tensor.to_host(host.get());
    } catch (const Error& e) {
      fail(path, tensor_label(name) + ": " + e.what());
    }
    write_all(path, file.fd(), host.get(), bytes);
  }
  file.sync_and_rename();
  sync_directory(path);
}

}  // namespace lt::safetensors
