// safetensors files: every supported dtype and shape round-trips bit for bit, files laid out by
// hand as the reference implementation writes them load, every damaged file (down to each
// truncation length) throws lt::Error naming the file and the tensor and creates no tensor, and
// save replaces a file atomically or leaves it as it was.
#include "lazytensor/safetensors.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_support.h"

namespace {

namespace st = lt::safetensors;
using lt::DType;
using lt::Shape;
using lt::Tensor;
using lt_test::error_message;
using lt_test::expect_mentions;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string host_bytes(const Tensor& t) {
  std::string bytes(static_cast<size_t>(t.numel()) * lt::dtype_size(t.dtype()), '\0');
  t.to_host(bytes.data());
  return bytes;
}

std::string le64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

template <class T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

// A file in the reference layout, built byte by byte: the header is padded with spaces to a
// multiple of 8 bytes when `pad`, as the reference writer does (readers must not rely on it).
std::string file_bytes(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

// Uploads happen only when a tensor is created, so an unchanged count means none was.
int64_t uploads() {
  return lt_test::counter("TransferToDeviceAsync") + lt_test::counter("TransferToDeviceSync");
}

class SafetensorsTest : public testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }

  // Writes `bytes` as a file and returns the message of the error that load() throws for it,
  // after checking that read_index() throws the same, that the message names the file, and
  // that no tensor was created.
  std::string read_error(const std::string& bytes) {
    const std::string file = path("bad.safetensors");
    write_bytes(file, bytes);
    const int64_t uploads_before = uploads();
    const std::string from_load = error_message([&] { st::load(file); });
    EXPECT_EQ(uploads(), uploads_before) << "a bad file created tensors";
    EXPECT_EQ(error_message([&] { st::read_index(file); }), from_load);
    EXPECT_EQ(from_load.rfind("safetensors: " + file + ": ", 0), 0u) << from_load;
    return from_load;
  }

  // The names of the files left in the test's directory.
  std::set<std::string> files() const { return dir_.files(); }

 private:
  lt_test::TempDir dir_;
};

TEST_F(SafetensorsTest, EveryDTypeAndShapeRoundTripsBitForBit) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{7},
                                     Shape{2, 3, 4, 5}};
  std::vector<st::NamedTensor> tensors;
  std::vector<std::string> want_bytes;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64,
                      DType::boolean, DType::u8}) {
    for (const Shape& shape : shapes) {
      std::string bytes(static_cast<size_t>(shape.numel()) * lt::dtype_size(dtype), '\0');
      // Any bit pattern (NaN payloads included) must survive; bools are stored as 0 and 1.
      for (char& byte : bytes) {
        byte = static_cast<char>(dtype == DType::boolean ? random() % 2 : random() % 256);
      }
      tensors.push_back({std::string(lt::dtype_name(dtype)) + shape.str(),
                         lt::from_host(bytes.data(), shape, dtype)});
      want_bytes.push_back(bytes);
    }
  }
  const std::string file = path("all.safetensors");
  st::save(file, tensors);

  const st::File loaded = st::load(file);
  EXPECT_TRUE(loaded.metadata.empty());
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  const std::vector<st::TensorInfo> index = st::read_index(file);
  ASSERT_EQ(index.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    const st::NamedTensor& got = loaded.tensors[i];
    EXPECT_EQ(got.name, tensors[i].name);  // data order is the order saved
    EXPECT_EQ(got.tensor.dtype(), tensors[i].tensor.dtype());
    EXPECT_EQ(got.tensor.shape().str(), tensors[i].tensor.shape().str());
    EXPECT_EQ(host_bytes(got.tensor), want_bytes[i]);
    EXPECT_EQ(&loaded.at(got.name), &got.tensor);
    EXPECT_EQ(index[i].name, got.name);
    EXPECT_EQ(index[i].dtype, got.tensor.dtype());
    EXPECT_EQ(index[i].shape.str(), got.tensor.shape().str());
  }
}

TEST_F(SafetensorsTest, MetadataRoundTrips) {
  const st::Metadata metadata = {{"format", "pt"}, {"empty", ""}, {"note", "naïve \"quoted\"\n"}};
  const std::string file = path("meta.safetensors");
  st::save(file, {{"w", lt::from_vector({1.f, 2.f}, {2})}}, metadata);
  EXPECT_EQ(st::load(file).metadata, metadata);
  st::Metadata from_index;
  EXPECT_EQ(st::read_index(file, &from_index).size(), 1u);
  EXPECT_EQ(from_index, metadata);
}

TEST_F(SafetensorsTest, SavedFileHasTheReferenceLayout) {
  const std::string file = path("layout.safetensors");
  st::save(file,
           {{"z", lt::from_vector({int64_t{-1}}, {1})}, {"a", lt::from_vector({0.5f, 2.f}, {2})}});
  const std::string bytes = read_bytes(file);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i)
    header_size |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  EXPECT_EQ(header_size % 8, 0u);
  const std::string header = bytes.substr(8, header_size);
  const nlohmann::json json = nlohmann::json::parse(header);
  EXPECT_FALSE(json.contains("__metadata__"));
  EXPECT_EQ(json["z"],
            nlohmann::json::parse(R"({"dtype": "I64", "shape": [1], "data_offsets": [0, 8]})"));
  EXPECT_EQ(json["a"],
            nlohmann::json::parse(R"({"dtype": "F32", "shape": [2], "data_offsets": [8, 16]})"));
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.rfind('}') + 1) << "padding is spaces";
  EXPECT_EQ(bytes.substr(8 + header_size), bytes_of({int64_t{-1}}) + bytes_of({0.5f, 2.f}));
}

TEST_F(SafetensorsTest, LoadsFilesInTheReferenceLayout) {
  // As huggingface's writer lays out a file: metadata first, keys not in data order.
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a.mask":{"dtype":"BOOL","shape":[3],"data_offsets":[28,31]},)"
                             R"("b.weight":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},)"
                             R"("c.step":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                             R"("d.half":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},)"
                             R"("e.ids":{"dtype":"I32","shape":[2],"data_offsets":[20,28]},)"
                             R"("f.empty":{"dtype":"F64","shape":[0,4],"data_offsets":[31,31]}})";
  // bf16 1.0 and -2.0 are the upper halves of the f32 patterns 0x3f800000 and 0xc0000000.
  const std::string data = bytes_of({1.5f, -2.f}) + bytes_of({int64_t{1} << 40}) +
                           bytes_of<uint16_t>({0x3f80, 0xc000}) + bytes_of({7, -8}) +
                           bytes_of<uint8_t>({1, 0, 1});
  for (bool pad : {true, false}) {
    SCOPED_TRACE(pad ? "padded header" : "unpadded header");
    const std::string file = path(pad ? "padded.safetensors" : "unpadded.safetensors");
    write_bytes(file, file_bytes(header, data, pad));
    const st::File loaded = st::load(file);
    EXPECT_EQ(loaded.metadata, (st::Metadata{{"format", "pt"}}));
    std::vector<std::string> names;
    for (const st::NamedTensor& t : loaded.tensors) names.push_back(t.name);
    EXPECT_EQ(names, (std::vector<std::string>{"b.weight", "c.step", "d.half", "e.ids", "a.mask",
                                               "f.empty"}));
    EXPECT_EQ(loaded.at("b.weight").shape().str(), "[2, 1]");
    EXPECT_EQ(loaded.at("b.weight").to_vector<float>(), (std::vector<float>{1.5f, -2.f}));
    EXPECT_EQ(loaded.at("c.step").dim(), 0);
    EXPECT_EQ(loaded.at("c.step").to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40}));
    EXPECT_EQ(loaded.at("d.half").dtype(), DType::bf16);
    EXPECT_EQ(loaded.at("d.half").to_vector<float>(), (std::vector<float>{1.f, -2.f}));
    EXPECT_EQ(loaded.at("e.ids").to_vector<int32_t>(), (std::vector<int32_t>{7, -8}));
    EXPECT_EQ(loaded.at("a.mask").dtype(), DType::boolean);
    EXPECT_EQ(host_bytes(loaded.at("a.mask")), bytes_of<uint8_t>({1, 0, 1}));
    EXPECT_EQ(loaded.at("f.empty").shape().str(), "[0, 4]");
    EXPECT_EQ(loaded.at("f.empty").dtype(), DType::f64);
  }
}

TEST_F(SafetensorsTest, FindAndAtOnAMissingName) {
  const std::string file = path("one.safetensors");
  st::save(file, {{"present", lt::from_vector({1.f}, {1})}});
  const st::File loaded = st::load(file);
  EXPECT_NE(loaded.find("present"), nullptr);
  EXPECT_EQ(loaded.find("absent"), nullptr);
  expect_mentions(error_message([&] { loaded.at("absent"); }), {"safetensors: ", "'absent'"});
}

TEST_F(SafetensorsTest, EveryTruncationThrowsNamingTheFirstMissingTensor) {
  const std::string file = path("full.safetensors");
  st::save(file, {{"first", lt::from_vector({1.f, 2.f}, {2})},
                  {"second", lt::from_vector({int64_t{3}, int64_t{4}, int64_t{5}}, {3})},
                  {"third", lt::from_vector({true, false, true}, {3})}});
  const std::string bytes = read_bytes(file);
  const size_t data_start = bytes.size() - (8 + 24 + 3);
  for (size_t length = 0; length < bytes.size(); ++length) {
    SCOPED_TRACE("length " + std::to_string(length));
    const std::string message = read_error(bytes.substr(0, length));
    expect_mentions(message, {"truncated?", "file ends at " + std::to_string(length)});
    if (length < data_start) continue;
    const size_t available = length - data_start;
    expect_mentions(message, {available < 8 ? "'first'" : available < 32 ? "'second'" : "'third'"});
  }
}

TEST_F(SafetensorsTest, HeaderLengthBeyondTheFile) {
  expect_mentions(read_error(le64(1000) + "{}"), {"header needs 1000 bytes", "truncated?"});
  expect_mentions(read_error(le64(uint64_t{1} << 62) + "{}"), {"over the limit"});
}

TEST_F(SafetensorsTest, HeaderNotAJsonObject) {
  expect_mentions(read_error(file_bytes("{not json", "")), {"not valid JSON"});
  expect_mentions(read_error(file_bytes("[1, 2]", "")), {"array, not an object"});
  expect_mentions(read_error(file_bytes(R"({"__metadata__": {"k": 1}})", "")),
                  {"__metadata__", "'k'"});
}

TEST_F(SafetensorsTest, UnsupportedDTypesAreNamed) {
  expect_mentions(read_error(file_bytes(
                      R"({"w": {"dtype": "U16", "shape": [1], "data_offsets": [0, 2]}})", "ab")),
                  {"tensor 'w'", "'U16'"});
  expect_mentions(read_error(file_bytes(
                      R"({"h": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", "a")),
                  {"tensor 'h'", "'F8_E4M3'"});
}

TEST_F(SafetensorsTest, OffsetsMustMatchTheShape) {
  expect_mentions(
      read_error(file_bytes(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
                            std::string(8, '\0'))),
      {"tensor 'w'", "needs 12 bytes", "[0, 8]"});
  expect_mentions(
      read_error(file_bytes(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})",
                            std::string(8, '\0'))),
      {"tensor 'w'", "ends before it begins"});
}

TEST_F(SafetensorsTest, RangesMustNeitherOverlapNorLeaveHoles) {
  expect_mentions(read_error(file_bytes(R"({
      "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                        std::string(12, '\0'))),
                  {"tensor 'b'", "overlaps", "tensor 'a'"});
  expect_mentions(read_error(file_bytes(R"({
      "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                                        std::string(12, '\0'))),
                  {"[4, 8]", "tensor 'a'", "tensor 'b'", "no tensor"});
  expect_mentions(
      read_error(file_bytes(R"({"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                            std::string(8, '\0'))),
      {"[0, 4]", "before tensor 'b'"});
  expect_mentions(
      read_error(file_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                            std::string(12, '\0'))),
      {"last 8 bytes", "no tensor"});
}

TEST_F(SafetensorsTest, MalformedEntries) {
  expect_mentions(read_error(file_bytes(
                      R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 0]}})", "")),
                  {"tensor 'w'", "negative"});
  expect_mentions(
      read_error(
          file_bytes(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "abcd")),
      {"tensor 'w'", "1.5"});
  expect_mentions(read_error(file_bytes(R"({"w": {"dtype": "F32", "shape": [4294967296,
      4294967296, 4294967296, 0], "data_offsets": [0, 0]}})",
                                        "")),
                  {"tensor 'w'", "too many elements"});
  expect_mentions(read_error(file_bytes(R"({"w": {"dtype": "F32", "shape": [1]}})", "abcd")),
                  {"tensor 'w'", "no data_offsets"});
  expect_mentions(read_error(file_bytes(R"({"w": [1]})", "")), {"tensor 'w'", "not an object"});
  expect_mentions(read_error(file_bytes(R"({
      "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
      "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                        std::string(8, '\0'))),
                  {"'w' twice"});
}

TEST_F(SafetensorsTest, SaveRefusesBadTensorsBeforeWriting) {
  const std::string file = path("refused.safetensors");
  const Tensor t = lt::from_vector({1.f}, {1});
  expect_mentions(error_message([&] {
                    st::save(file, {{"x", t}, {"y", t}, {"x", t}});
                  }),
                  {"safetensors: " + file, "'x'"});
  expect_mentions(error_message([&] {
                    st::save(file, {{"x", t}, {"u", Tensor()}});
                  }),
                  {"safetensors: " + file, "tensor 'u'", "undefined"});
  expect_mentions(error_message([&] { st::save(file, {{"__metadata__", t}}); }), {"__metadata__"});
  EXPECT_TRUE(files().empty());
}

TEST_F(SafetensorsTest, SaveIntoAMissingDirectoryLeavesNothing) {
  const std::string file = path("missing/x.safetensors");
  expect_mentions(error_message([&] {
                    st::save(file, {{"x", lt::from_vector({1.f}, {1})}});
                  }),
                  {"safetensors: " + file, "No such file"});
  EXPECT_TRUE(files().empty());
}

TEST_F(SafetensorsTest, SaveReplacesAnExistingFile) {
  const std::string file = path("x.safetensors");
  st::save(file, {{"old", lt::from_vector({1.f, 2.f, 3.f}, {3})}});
  st::save(file, {{"new", lt::from_vector({4.0}, {1})}});
  const st::File loaded = st::load(file);
  ASSERT_EQ(loaded.tensors.size(), 1u);
  EXPECT_EQ(loaded.at("new").to_vector<double>(), (std::vector<double>{4.0}));
  EXPECT_EQ(files(), (std::set<std::string>{"x.safetensors"}));
}

TEST_F(SafetensorsTest, FailedSavesLeaveTheOldFileUntouched) {
  const std::string file = path("x.safetensors");
  st::save(file, {{"old", lt::from_vector({1.f, 2.f}, {2})}});
  const std::string old_bytes = read_bytes(file);
  const Tensor big = lt::zeros({1 << 16});

  // Refused before writing.
  error_message([&] { st::save(file, {{"a", big}, {"a", big}}); });
  EXPECT_EQ(read_bytes(file), old_bytes);

  // A write that fails midway: the file size limit turns the write into EFBIG.
  rlimit saved_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved_limit), 0);
  const auto saved_handler = std::signal(SIGXFSZ, SIG_IGN);
  {
    const lt_test::Restore restore([&] {
      setrlimit(RLIMIT_FSIZE, &saved_limit);
      std::signal(SIGXFSZ, saved_handler);
    });
    rlimit small = saved_limit;
    small.rlim_cur = 4096;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    expect_mentions(error_message([&] {
                      st::save(file, {{"big", big}});
                    }),
                    {"safetensors: " + file, "write failed"});
  }
  EXPECT_EQ(read_bytes(file), old_bytes);
  EXPECT_EQ(files(), (std::set<std::string>{"x.safetensors"}));

  // The rename fails: the target is a directory.
  const std::string dir_target = path("dir.safetensors");
  std::filesystem::create_directories(dir_target + "/inside");
  expect_mentions(error_message([&] {
                    st::save(dir_target, {{"big", big}});
                  }),
                  {"safetensors: " + dir_target, "cannot rename"});
  EXPECT_EQ(files(), (std::set<std::string>{"x.safetensors", "dir.safetensors"}));
}

}  // namespace
