#pragma once
// Text input for BERT-style models: the WordPiece tokenizer and a plain-text corpus reader.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lt::text {

// BERT's tokenizer: the ids HuggingFace's BertTokenizer gives (do_lower_case, Chinese characters
// split, accents stripped when lower-casing), without [CLS]/[SEP]. Where its Python and Rust
// versions differ (a word-final capital sigma, unassigned code points), these are the Python
// one's. Text that spells a special token, such as "[MASK]", is ordinary text here and never
// becomes that token.
class WordPieceTokenizer {
 public:
  // Reads a BERT vocab.txt (one token per line, id = line number). lt::Error naming the path if
  // it is unreadable or empty, or lacks one of [PAD], [UNK], [CLS], [SEP] and [MASK].
  explicit WordPieceTokenizer(const std::string& vocab_path, bool lower_case = true);

  // The word pieces of `text` (UTF-8; lt::Error if it is not), no special tokens added.
  std::vector<std::string> tokenize(std::string_view text) const;
  // The ids of those pieces.
  std::vector<int64_t> encode(std::string_view text) const;

  // lt::Error naming the token when it is not in the vocabulary.
  int64_t token_to_id(std::string_view token) const;
  // lt::Error when `id` is not in [0, vocab_size()).
  const std::string& id_to_token(int64_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }

  int64_t pad_id() const { return pad_id_; }
  int64_t unk_id() const { return unk_id_; }
  int64_t cls_id() const { return cls_id_; }
  int64_t sep_id() const { return sep_id_; }
  int64_t mask_id() const { return mask_id_; }

 private:
  // Lets the vocabulary be searched with a string_view, without building a std::string.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  // Appends the ids of the word pieces of one word (UTF-8, after basic tokenization) whose code
  // points start at the byte offsets `starts` (with the end of the word as the last entry).
  void append_word_pieces(std::string_view word, const std::vector<size_t>& starts,
                          std::string& scratch, std::vector<int64_t>& ids) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> ids_;
  size_t longest_token_bytes_ = 0;
  bool lower_case_;
  int64_t pad_id_ = 0;
  int64_t unk_id_ = 0;
  int64_t cls_id_ = 0;
  int64_t sep_id_ = 0;
  int64_t mask_id_ = 0;
};

struct Document {
  std::string source;  // "<file path>#<n>": the file and the document's 1-based number in it
  std::string text;
};

// The documents of a corpus. A file with lines that are exactly "%" is a fortune file: its
// entries between those lines are the documents. Any other text file's documents are its
// paragraphs (separated by blank lines). A folder: its regular files (symlinks skipped, e.g.
// fortune's .u8 links), sorted by name, skipping files that are not UTF-8 text (NUL bytes or
// invalid UTF-8, e.g. fortune's .dat indexes). Documents that are empty or only whitespace are
// dropped; a document's text is its lines joined with '\n', without the trailing newline.
// lt::Error naming the path if it does not exist, cannot be read or yields no documents.
std::vector<Document> read_corpus(const std::string& path);

}  // namespace lt::text
