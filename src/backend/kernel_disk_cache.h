// Compiled kernels kept on disk between processes (the CPU's shared objects, CUDA's CUBINs):
// bounded in bytes, the least recently used dropped first.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace lt::backend {

// Marks a cached file as used now, so that trimming keeps it longest.
void mark_recently_used(const std::filesystem::path& file);

// Removes the least recently used files of `dir` whose names end in `extension` until those
// left take at most `max_bytes`. Errors (a file another process removed first) are ignored.
void trim_disk_cache(const std::filesystem::path& dir, std::string_view extension,
                     size_t max_bytes);

}  // namespace lt::backend
