// Plain-text corpora: fortune files (entries between "%" lines) and paragraphs of text files.
#include <utf8proc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "lazytensor/error.h"
#include "lazytensor/text.h"

namespace lt::text {
namespace {

namespace fs = std::filesystem;

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\n\r\v\f") == std::string_view::npos;
}

// Text files only: a NUL byte or invalid UTF-8 marks binary data (such as fortune's .dat
// indexes).
bool is_utf8_text(std::string_view data) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(data.data());
  const auto size = static_cast<utf8proc_ssize_t>(data.size());
  for (utf8proc_ssize_t at = 0; at < size;) {
    int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes + at, size - at, &c);
    if (n < 0 || c == 0) return false;
    at += n;
  }
  return true;
}

std::string read_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.is_open() || file.bad()) {
    throw Error("read_corpus: cannot read '" + path.string() + "'");
  }
  return data;
}

// A fortune file's entries, or a text file's paragraphs, that are not blank.
void append_documents(const std::string& path, std::string_view data, std::vector<Document>& out) {
  std::vector<std::string_view> lines;
  for (size_t begin = 0; begin < data.size();) {
    const size_t newline = std::min(data.find('\n', begin), data.size());
    lines.push_back(data.substr(begin, newline - begin));
    begin = newline + 1;
  }
  const bool fortune = std::find(lines.begin(), lines.end(), "%") != lines.end();
  const auto separates = [&](std::string_view line) {
    return fortune ? line == "%" : is_blank(line);
  };

  int64_t number = 0;
  std::string text;
  const auto finish_document = [&] {
    if (!is_blank(text)) out.push_back({path + "#" + std::to_string(++number), std::move(text)});
    text.clear();
  };
  bool first_line = true;
  for (const std::string_view line : lines) {
    if (separates(line)) {
      finish_document();
      first_line = true;
      continue;
    }
    if (!first_line) text += '\n';
    text += line;
    first_line = false;
  }
  finish_document();
}

}  // namespace

std::vector<Document> read_corpus(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) throw Error("read_corpus: '" + path + "' does not exist");

  std::vector<Document> documents;
  if (fs::is_directory(status)) {
    std::vector<fs::path> files;
    for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
      // symlink_status: a link (fortune's .u8 names for the same files) is not followed.
      if (fs::is_regular_file(it->symlink_status(error))) files.push_back(it->path());
    }
    if (error) throw Error("read_corpus: cannot list '" + path + "': " + error.message());
    std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
      return a.filename().native() < b.filename().native();
    });
    for (const fs::path& file : files) {
      const std::string data = read_file(file);
      if (is_utf8_text(data)) append_documents(file.string(), data, documents);
    }
  } else {
    const std::string data = read_file(path);
    if (!is_utf8_text(data)) throw Error("read_corpus: '" + path + "' is not UTF-8 text");
    append_documents(path, data, documents);
  }
  if (documents.empty()) throw Error("read_corpus: '" + path + "' has no documents");
  return documents;
}

}  // namespace lt::text
