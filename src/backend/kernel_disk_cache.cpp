#include "backend/kernel_disk_cache.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace lt::backend {

namespace fs = std::filesystem;

void mark_recently_used(const fs::path& file) {
  std::error_code ec;
  fs::last_write_time(file, fs::file_time_type::clock::now(), ec);
}

void trim_disk_cache(const fs::path& dir, std::string_view extension, size_t max_bytes) {
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  size_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != extension) continue;
    total += entry.file_size(ec);
    files.emplace_back(entry.last_write_time(ec), entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& [time, path] : files) {
    if (total <= max_bytes) break;
    total -= std::min<size_t>(total, fs::file_size(path, ec));
    fs::remove(path, ec);
  }
}

}  // namespace lt::backend
