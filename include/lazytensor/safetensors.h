#pragma once
// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors), as
// written by huggingface's `safetensors.torch.save_file` and read by `load_file`.
//
// Supported dtypes: F32, F64, BF16, I32, I64 and BOOL. Every failure throws lt::Error with a
// message that starts with "safetensors: " and names the file and, where one is involved, the
// tensor. A file is checked whole before any tensor is created, so a bad file creates none.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lazytensor/dtype.h"
#include "lazytensor/shape.h"
#include "lazytensor/tensor.h"

namespace lt::safetensors {

// The file's free-form "__metadata__" entry.
using Metadata = std::map<std::string, std::string>;

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
};

struct File {
  std::vector<NamedTensor> tensors;  // in the order of their bytes in the file
  Metadata metadata;

  const Tensor* find(std::string_view name) const;  // nullptr when there is no such tensor
  const Tensor& at(std::string_view name) const;    // throws lt::Error naming `name` when absent
};

File load(const std::string& path);

// The tensors' names, dtypes and shapes (in file order) and the metadata, checked as load()
// checks them but without reading the tensor data: to see that a checkpoint fits a model
// before loading it.
std::vector<TensorInfo> read_index(const std::string& path, Metadata* metadata = nullptr);

// Writes the tensors in the order given. The file is written to `path + ".tmp"`, synced to
// disk and renamed over `path`, so a reader sees the old file or the whole new one; a failure
// before the rename leaves `path` untouched and removes the temporary file (a failure to sync
// the directory after it throws too: the new file is in place but may not survive a crash).
// Duplicate names, the name "__metadata__" and undefined tensors are refused before anything
// is written.
void save(const std::string& path, const std::vector<NamedTensor>& tensors,
          const Metadata& metadata = {});

}  // namespace lt::safetensors
