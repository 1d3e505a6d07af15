// BERT's WordPiece tokenizer, reproducing HuggingFace's Python one id for id: BasicTokenizer,
// then WordpieceTokenizer, in transformers' models/bert/tokenization_bert.py (before version 5;
// tokenization_bert_legacy.py since). The Rust tokenizer (tokenizers' BertNormalizer and
// BertPreTokenizer) agrees except on a word-final capital sigma and on unassigned code points,
// which it keeps as [UNK] where Python drops them. The Unicode data (general categories, case
// mappings, canonical decompositions) is utf8proc's.
#include <utf8proc.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "lazytensor/error.h"
#include "lazytensor/text.h"

namespace lt::text {
namespace {

// Longer words become [UNK] whole, as in BERT.
constexpr size_t kMaxCharsPerWord = 100;
constexpr int32_t kCapitalSigma = 0x03A3;
constexpr int32_t kSmallSigma = 0x03C3;
constexpr int32_t kFinalSigma = 0x03C2;

utf8proc_category_t category(int32_t c) {
  return utf8proc_category(c);
}

bool is_other_category(int32_t c) {  // C*: control, format, surrogate, private use, unassigned
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

// BERT's _is_control: tab, newline and carriage return count as whitespace instead.
bool is_control(int32_t c) {
  return c != '\t' && c != '\n' && c != '\r' && is_other_category(c);
}

// BERT's _is_whitespace.
bool is_whitespace(int32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || category(c) == UTF8PROC_CATEGORY_ZS;
}

// After cleaning, the words are split where Python's str.split() splits: at spaces and at the
// line and paragraph separators U+2028/U+2029, which are neither control nor Zs characters.
bool separates_words(int32_t c) {
  if (c < 0x80) return c == ' ';
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// BERT's _is_chinese_char: the CJK Unified Ideographs blocks, which get spaces around them.
bool is_cjk(int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// BERT's _is_punctuation: all non-alphanumeric printable ASCII (so "$", "^", "`" too) and the
// Unicode punctuation categories.
bool is_punctuation(int32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  if (c < 0x80) return false;  // the rest of ASCII: letters, digits, controls and space
  const utf8proc_category_t cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

// Unicode's Case_Ignorable property (DerivedCoreProperties): the Mn, Me, Cf, Lm and Sk
// categories, and the characters whose Word_Break is MidLetter, MidNumLet or Single_Quote (UAX
// #29), which utf8proc does not expose, hence the list.
bool is_case_ignorable(int32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      break;
  }
  switch (c) {
    case 0x0027:  // Single_Quote
    case 0x002E:  // MidNumLet
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0xFE52:
    case 0xFF07:
    case 0xFF0E:
    case 0x003A:  // MidLetter
    case 0x00B7:
    case 0x0387:
    case 0x055F:
    case 0x05F4:
    case 0x2027:
    case 0xFE13:
    case 0xFE55:
    case 0xFF1A:
      return true;
    default:
      return false;
  }
}

// Unicode's Cased property, as the letter categories with case plus whatever has a case
// mapping (enclosed and Roman-numeral letters). It misses the few cased characters without a
// mapping (U+00AA, U+00BA, the squared Latin capitals): only a capital sigma next to one can
// come out differently from Python's.
bool is_cased(int32_t c) {
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
         cat == UTF8PROC_CATEGORY_LT || utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
}

// Python's str.lower() maps a capital sigma to the final form when a cased letter precedes it
// and none follows (skipping case-ignorable characters both ways); mapping code point by code
// point would always give the medial form, and the vocabulary has both. The one other
// difference, U+0130 lowering to "i" plus a combining dot rather than to "i", disappears when
// the accents are stripped.
int32_t lower_sigma(const std::vector<int32_t>& word, size_t begin, size_t end, size_t at) {
  size_t i = at;
  while (i > begin && is_case_ignorable(word[i - 1])) --i;
  if (i == begin || !is_cased(word[i - 1])) return kSmallSigma;
  i = at + 1;
  while (i < end && is_case_ignorable(word[i])) ++i;
  return i < end && is_cased(word[i]) ? kSmallSigma : kFinalSigma;
}

void append_utf8(std::string& out, int32_t c) {
  utf8proc_uint8_t bytes[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(c, bytes);
  out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

// The buffers the steps of one encode() reuse from word to word.
struct Scratch {
  std::string lowered;         // a word lower-cased, as UTF-8 for utf8proc_decompose
  std::vector<int32_t> chars;  // a word after normalization
  std::string piece;           // a word after punctuation splitting, as UTF-8
  std::vector<size_t> starts;  // byte offsets of the piece's code points, and its end
  std::string prefixed;        // "##" and the rest of the piece
};

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(const std::string& vocab_path, bool lower_case)
    : lower_case_(lower_case) {
  std::ifstream file(vocab_path, std::ios::binary);
  if (!file) {
    throw Error("WordPieceTokenizer: cannot read the vocabulary file '" + vocab_path + "'");
  }
  std::string line;
  while (std::getline(file, line)) {
    // HuggingFace reads the file with Python's universal newlines.
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A token listed twice keeps its last id, as in HuggingFace's load_vocab.
    ids_.insert_or_assign(line, static_cast<int64_t>(tokens_.size()));
    longest_token_bytes_ = std::max(longest_token_bytes_, line.size());
    tokens_.push_back(std::move(line));
  }
  if (file.bad()) throw Error("WordPieceTokenizer: error reading '" + vocab_path + "'");
  if (tokens_.empty()) {
    throw Error("WordPieceTokenizer: the vocabulary '" + vocab_path + "' is empty");
  }
  const auto special = [&](const std::string& token) {
    const auto it = ids_.find(token);
    if (it == ids_.end()) {
      throw Error("WordPieceTokenizer: the vocabulary '" + vocab_path + "' has no " + token +
                  " token");
    }
    return it->second;
  };
  pad_id_ = special("[PAD]");
  unk_id_ = special("[UNK]");
  cls_id_ = special("[CLS]");
  sep_id_ = special("[SEP]");
  mask_id_ = special("[MASK]");
}

int64_t WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) {
    throw Error("WordPieceTokenizer::token_to_id: '" + std::string(token) +
                "' is not in the vocabulary");
  }
  return it->second;
}

const std::string& WordPieceTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error("WordPieceTokenizer::id_to_token: id " + std::to_string(id) + " is not in [0, " +
                std::to_string(vocab_size()) + ")");
  }
  return tokens_[static_cast<size_t>(id)];
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  for (const int64_t id : encode(text)) pieces.push_back(tokens_[static_cast<size_t>(id)]);
  return pieces;
}

std::vector<int64_t> WordPieceTokenizer::encode(std::string_view text) const {
  // BERT's _clean_text and _tokenize_chinese_chars: drop NUL, U+FFFD and control characters,
  // turn whitespace into spaces and put spaces around CJK ideographs.
  std::vector<int32_t> cleaned;
  cleaned.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  for (utf8proc_ssize_t at = 0; at < size;) {
    int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes + at, size - at, &c);
    if (n < 0) {
      throw Error("WordPieceTokenizer: the text is not valid UTF-8 (at byte " + std::to_string(at) +
                  ")");
    }
    at += n;
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) {
      cleaned.push_back(' ');
    } else if (is_cjk(c)) {
      cleaned.insert(cleaned.end(), {' ', c, ' '});
    } else {
      cleaned.push_back(c);
    }
  }

  std::vector<int64_t> ids;
  Scratch s;
  for (size_t begin = 0; begin < cleaned.size();) {
    if (separates_words(cleaned[begin])) {
      ++begin;
      continue;
    }
    size_t end = begin;
    while (end < cleaned.size() && !separates_words(cleaned[end])) ++end;

    // Lower-case, decompose (NFD) and drop the nonspacing marks: Python's lower() and then
    // BasicTokenizer._run_strip_accents.
    s.chars.assign(cleaned.begin() + static_cast<ptrdiff_t>(begin),
                   cleaned.begin() + static_cast<ptrdiff_t>(end));
    const bool ascii =
        std::all_of(s.chars.begin(), s.chars.end(), [](int32_t c) { return c < 0x80; });
    if (lower_case_ && ascii) {
      // Most words: nothing to decompose and no marks.
      for (int32_t& c : s.chars) {
        if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
      }
    } else if (lower_case_) {
      s.lowered.clear();
      for (size_t i = begin; i < end; ++i) {
        const int32_t c = cleaned[i];
        append_utf8(s.lowered,
                    c == kCapitalSigma ? lower_sigma(cleaned, begin, end, i) : utf8proc_tolower(c));
      }
      // The decomposition is at most a few code points per character; retry if it is longer.
      s.chars.resize(s.lowered.size() * 2);
      const auto decompose = [&] {
        return utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(s.lowered.data()),
                                  static_cast<utf8proc_ssize_t>(s.lowered.size()), s.chars.data(),
                                  static_cast<utf8proc_ssize_t>(s.chars.size()),
                                  UTF8PROC_DECOMPOSE);
      };
      utf8proc_ssize_t n = decompose();
      if (n > static_cast<utf8proc_ssize_t>(s.chars.size())) {
        s.chars.resize(static_cast<size_t>(n));
        n = decompose();
      }
      if (n < 0) throw Error(std::string("WordPieceTokenizer: ") + utf8proc_errmsg(n));
      s.chars.resize(static_cast<size_t>(n));
      std::erase_if(s.chars, [](int32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; });
    }

    // Every punctuation character is a piece of its own, then WordPiece splits each piece.
    for (size_t i = 0; i < s.chars.size();) {
      size_t piece_end = i + 1;
      if (!is_punctuation(s.chars[i])) {
        while (piece_end < s.chars.size() && !is_punctuation(s.chars[piece_end])) ++piece_end;
      }
      s.piece.clear();
      s.starts.clear();
      for (; i < piece_end; ++i) {
        s.starts.push_back(s.piece.size());
        append_utf8(s.piece, s.chars[i]);
      }
      s.starts.push_back(s.piece.size());
      append_word_pieces(s.piece, s.starts, s.prefixed, ids);
    }
    begin = end;
  }
  return ids;
}

// Greedy longest-match-first: the longest vocabulary entry that starts the rest of the word,
// "##"-prefixed after the first; a word with a rest that no entry starts is [UNK] whole.
void WordPieceTokenizer::append_word_pieces(std::string_view word,
                                            const std::vector<size_t>& starts, std::string& scratch,
                                            std::vector<int64_t>& ids) const {
  const size_t n_chars = starts.size() - 1;
  if (n_chars > kMaxCharsPerWord) {
    ids.push_back(unk_id_);
    return;
  }
  const size_t first_piece = ids.size();
  for (size_t begin = 0; begin < n_chars;) {
    std::string_view candidates = word.substr(starts[begin]);
    size_t prefix = 0;
    if (begin > 0) {
      scratch.assign("##");
      scratch.append(candidates);
      candidates = scratch;
      prefix = 2;
    }
    int64_t id = -1;
    size_t end = n_chars;
    for (; end > begin; --end) {
      const size_t length = prefix + starts[end] - starts[begin];
      if (length > longest_token_bytes_) continue;
      const auto it = ids_.find(candidates.substr(0, length));
      if (it != ids_.end()) {
        id = it->second;
        break;
      }
    }
    if (id < 0) {
      ids.resize(first_piece);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(id);
    begin = end;
  }
}

}  // namespace lt::text
