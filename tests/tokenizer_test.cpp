// The WordPiece tokenizer gives HuggingFace's ids for all-MiniLM-L6-v2 (hand-written cases and
// the whole fortunes corpus), and read_corpus splits fortune files and paragraphs.
#include <gtest/gtest.h>
#include <lazytensor/error.h>
#include <lazytensor/text.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using lt::text::Document;
using lt::text::read_corpus;
using lt::text::WordPieceTokenizer;
using lt_test::error_message;
using lt_test::expect_mentions;
using lt_test::TempDir;

const std::string kVocabPath = std::string(LT_MODELS_DIR) + "/all-MiniLM-L6-v2/vocab.txt";
const std::string kFixturePath = std::string(LT_TEST_DATA_DIR) + "/fortunes_wordpiece.json";
const std::string kCorpusPath = "/usr/share/games/fortunes";

void write_file(const fs::path& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// --- The tokenizer on a small vocabulary, without the model ----------------------------------

const std::string kSpecialTokens = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";

class SmallVocabulary : public testing::Test {
 protected:
  // Ids from 0: the special tokens, then `tokens` in order.
  std::string vocabulary(const std::vector<std::string>& tokens) {
    std::string text = kSpecialTokens;
    for (const std::string& token : tokens) text += token + "\n";
    const fs::path path = dir_.path() / "vocab.txt";
    write_file(path, text);
    return path.string();
  }

  TempDir dir_;
};

TEST_F(SmallVocabulary, SplitsGreedilyLongestMatchFirst) {
  const WordPieceTokenizer tokenizer(vocabulary({"un", "una", "##aff", "##able", "##ffa", "##b"}));
  // The longest match first: "una" rather than "un".
  EXPECT_EQ(tokenizer.tokenize("unaffab"), (std::vector<std::string>{"una", "##ffa", "##b"}));
  EXPECT_EQ(tokenizer.encode("unaffab"), (std::vector<int64_t>{6, 9, 10}));
  // After "una" and "##b" no entry matches "##le" or "##l": the whole word is [UNK], not the
  // pieces matched so far.
  EXPECT_EQ(tokenizer.tokenize("unable"), (std::vector<std::string>{"[UNK]"}));
  EXPECT_EQ(tokenizer.encode("un unable una"), (std::vector<int64_t>{5, 1, 6}));
}

TEST_F(SmallVocabulary, KnowsItsSpecialTokensAndIds) {
  const WordPieceTokenizer tokenizer(vocabulary({"hello"}));
  EXPECT_EQ(tokenizer.vocab_size(), 6);
  EXPECT_EQ(tokenizer.pad_id(), 0);
  EXPECT_EQ(tokenizer.unk_id(), 1);
  EXPECT_EQ(tokenizer.cls_id(), 2);
  EXPECT_EQ(tokenizer.sep_id(), 3);
  EXPECT_EQ(tokenizer.mask_id(), 4);
  EXPECT_EQ(tokenizer.token_to_id("hello"), 5);
  EXPECT_EQ(tokenizer.id_to_token(5), "hello");
}

TEST_F(SmallVocabulary, ReadsWindowsLineEnds) {
  const fs::path path = dir_.path() / "crlf.txt";
  write_file(path, "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nhello\r\n");
  const WordPieceTokenizer tokenizer(path.string());
  EXPECT_EQ(tokenizer.encode("Hello"), (std::vector<int64_t>{5}));
}

TEST_F(SmallVocabulary, CasedKeepsCaseAndAccents) {
  const WordPieceTokenizer tokenizer(vocabulary({"Café", "cafe"}), /*lower_case=*/false);
  EXPECT_EQ(tokenizer.tokenize("Café cafe CAFE"),
            (std::vector<std::string>{"Café", "cafe", "[UNK]"}));
}

TEST_F(SmallVocabulary, ErrorsNameTheFileOrToken) {
  const std::string missing = (dir_.path() / "no-such-vocab.txt").string();
  expect_mentions(error_message([&] { WordPieceTokenizer{missing}; }),
                  {"WordPieceTokenizer", missing});

  const fs::path empty = dir_.path() / "empty.txt";
  write_file(empty, "");
  expect_mentions(error_message([&] { WordPieceTokenizer{empty.string()}; }),
                  {empty.string(), "empty"});

  const fs::path no_mask = dir_.path() / "no-mask.txt";
  write_file(no_mask, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
  expect_mentions(error_message([&] { WordPieceTokenizer{no_mask.string()}; }),
                  {no_mask.string(), "[MASK]"});

  const WordPieceTokenizer tokenizer(vocabulary({"hello"}));
  expect_mentions(error_message([&] { tokenizer.token_to_id("goodbye"); }),
                  {"token_to_id", "goodbye"});
  expect_mentions(error_message([&] { tokenizer.id_to_token(6); }), {"id_to_token", "6"});
  expect_mentions(error_message([&] { tokenizer.id_to_token(-1); }), {"id_to_token", "-1"});
  expect_mentions(error_message([&] { tokenizer.encode("caf\xc3"); }), {"UTF-8", "byte 3"});
}

// --- all-MiniLM-L6-v2 against HuggingFace ----------------------------------------------------

class MiniLm : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kVocabPath))
        << kVocabPath << " is missing: run `make models` to download all-MiniLM-L6-v2";
  }
  static const WordPieceTokenizer& tokenizer() {
    static const WordPieceTokenizer loaded(kVocabPath);
    return loaded;
  }
};

struct Case {
  std::string what;
  std::string text;
  std::vector<int64_t> ids;
};

// The ids are HuggingFace's (transformers 5.24, tokenizers 0.23): BertTokenizerLegacy (Python)
// and BertTokenizer (Rust) give them alike, add_special_tokens=False, split_special_tokens=True,
// except where a case says otherwise.
TEST_F(MiniLm, MatchesHuggingFaceOnHandWrittenCases) {
  const std::vector<Case> cases = {
      {"accents, precomposed", "Café Über", {7668, 19169}},
      {"accents, combining", "CAFE\u0301 U\u0308ber", {7668, 19169}},
      {"accents stripped inside words", "résumé naïve", {13746, 15743}},
      {"several marks", "e\u0301\u0301", {1041}},
      {"punctuation", "Hello, world!", {7592, 1010, 2088, 999}},
      {"apostrophe", "don't", {2123, 1005, 1056}},
      {"ASCII symbols count as punctuation", "$5^2`~|", {1002, 1019, 1034, 1016, 1036, 1066, 1064}},
      {"literal ## is punctuation", "a##b", {1037, 1001, 1001, 1038}},
      {"CJK ideographs are words", "我爱北京天安门", {1855, 100, 1781, 1755, 1811, 1820, 100}},
      {"CJK inside a word", "hello世界!", {7592, 1745, 100, 999}},
      {"Hangul decomposes to jamo",
       "한국어",
       {1469, 30006, 30021, 29991, 30014, 30020, 29999, 30008}},
      {"control characters vanish, tab separates", "a\ab\bc\td", {5925, 1040}},
      {"NUL vanishes", "a\0b"s, {11113}},
      {"C1 controls vanish", "x\u0080\u0099y", {1060, 2100}},
      {"U+FFFD vanishes", "x\uFFFDy", {1060, 2100}},
      {"byte order mark vanishes", "\uFEFFhi", {7632}},
      {"no-break space separates", "x\u00A0y", {1060, 1061}},
      {"line separator separates", "a\u2028b", {1037, 1038}},
      {"out-of-vocabulary character", "hello ☃ world", {7592, 100, 2088}},
      {"out-of-vocabulary character inside a word", "snow☃man", {100}},
      {"fullwidth letters", "ｆｕｌｌ", {100}},
      {"## pieces", "unaffable tokenization", {14477, 20961, 3468, 19204, 3989}},
      {"numbers", "1234567 3.14159", {13138, 19961, 2575, 2581, 1017, 1012, 15471, 28154}},
      {"sharp s", "Straße", {2358, 27807}},
      {"dotted capital I", "İstanbul", {9960}},
      {"special tokens are text", "[MASK] x", {1031, 7308, 1033, 1060}},
      // Python's str.lower() writes a word-final capital sigma as ς; the Rust tokenizer lowers
      // code point by code point and gives [1169, 29722, 29730, 29733, 1173, 14608, 29733,
      // 1012] (σ throughout). These are the Python tokenizer's ids.
      {"final sigma", "ΟΔΟΣ ΣΑΣ.", {1169, 29722, 15297, 1173, 14608, 19579, 1012}},
      {"empty", "", {}},
      {"whitespace only", "  \n\t \r\n", {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(tokenizer().encode(c.text), c.ids) << c.what << ": \"" << c.text << "\"";
  }
}

TEST_F(MiniLm, TokenizeGivesThePieces) {
  EXPECT_EQ(tokenizer().tokenize("Unaffable, Café!"),
            (std::vector<std::string>{"una", "##ffa", "##ble", ",", "cafe", "!"}));
  EXPECT_EQ(tokenizer().vocab_size(), 30522);
  EXPECT_EQ(tokenizer().pad_id(), 0);
  EXPECT_EQ(tokenizer().unk_id(), 100);
  EXPECT_EQ(tokenizer().cls_id(), 101);
  EXPECT_EQ(tokenizer().sep_id(), 102);
  EXPECT_EQ(tokenizer().mask_id(), 103);
  EXPECT_EQ(tokenizer().token_to_id("##ble"), 3468);
  EXPECT_EQ(tokenizer().id_to_token(7668), "cafe");
}

// Words of more than 100 characters (counted after accents are stripped) are [UNK] whole.
TEST_F(MiniLm, LongWordsAreUnknown) {
  // "aaa", then "##aa" while two or more are left, then "##a".
  const auto pieces_of_a = [](int n) {
    std::vector<int64_t> ids = {13360};
    for (n -= 3; n >= 2; n -= 2) ids.push_back(11057);
    if (n == 1) ids.push_back(2050);
    return ids;
  };
  const std::string hundred(100, 'a');
  EXPECT_EQ(tokenizer().encode(hundred), pieces_of_a(100));
  EXPECT_EQ(tokenizer().encode(hundred + "a"), (std::vector<int64_t>{100}));
  EXPECT_EQ(tokenizer().encode(std::string(101, 'A')), (std::vector<int64_t>{100}));
  EXPECT_EQ(tokenizer().encode(hundred + "\u0301"), pieces_of_a(100));
  // Punctuation splits a long run into words of their own.
  std::vector<int64_t> split = pieces_of_a(60);
  split.push_back(1012);
  for (const int64_t id : pieces_of_a(60)) split.push_back(id);
  EXPECT_EQ(tokenizer().encode(std::string(60, 'a') + "." + std::string(60, 'a')), split);
}

// --- The fortunes corpus against HuggingFace -------------------------------------------------

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

// FNV-1a over the ids, each as 8 little-endian bytes.
uint64_t fnv1a64(const std::vector<int64_t>& ids, uint64_t hash = kFnvOffset) {
  for (const int64_t id : ids) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (static_cast<uint64_t>(id) >> (8 * byte)) & 0xff;
      hash *= kFnvPrime;
    }
  }
  return hash;
}

std::string hex(uint64_t value, int digits) {
  char text[17];
  std::snprintf(text, sizeof text, "%0*llx", digits, static_cast<unsigned long long>(value));
  return text;
}

std::string file_of(const Document& document) {
  return fs::path(document.source.substr(0, document.source.rfind('#'))).filename().string();
}

std::string describe(const Document& document, const std::vector<int64_t>& ids) {
  std::ostringstream out;
  out << document.source << ": \"" << document.text.substr(0, 300) << "\"\n  our ids:";
  for (const int64_t id : ids) out << " " << id;
  return out.str();
}

// The ids of every document of /usr/share/games/fortunes, as counts and hashes per file and in
// full for the first documents and those with non-ASCII or control characters, from
// bench/reference/tokenizer_reference.py. A mismatch names the first document that differs.
TEST_F(MiniLm, MatchesHuggingFaceOnTheFortunesCorpus) {
  ASSERT_TRUE(fs::is_directory(kCorpusPath))
      << kCorpusPath << " is missing: install the Debian package fortunes";
  std::ifstream fixture_file(kFixturePath);
  ASSERT_TRUE(fixture_file) << kFixturePath
                            << " is missing: run bench/reference/tokenizer_reference.py";
  const nlohmann::json fixture = nlohmann::json::parse(fixture_file);

  const std::vector<Document> documents = read_corpus(kCorpusPath);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<int64_t>> ids;
  ids.reserve(documents.size());
  size_t bytes = 0;
  for (const Document& document : documents) {
    ids.push_back(tokenizer().encode(document.text));
    bytes += document.text.size();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encoded %zu documents (%zu bytes) in %.3f s\n", documents.size(), bytes, seconds);

  // Each file's documents, in corpus order.
  std::vector<std::pair<std::string, std::vector<size_t>>> files;
  for (size_t i = 0; i < documents.size(); ++i) {
    const std::string file = file_of(documents[i]);
    if (files.empty() || files.back().first != file) files.push_back({file, {}});
    files.back().second.push_back(i);
  }
  std::vector<std::string> names, want_names;
  for (const auto& [name, members] : files) names.push_back(name);
  for (const nlohmann::json& file : fixture["files"]) want_names.push_back(file["name"]);
  ASSERT_EQ(names, want_names) << "the corpus files differ from the reference's";

  std::map<std::string, size_t> file_index;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto& [name, members] = files[f];
    file_index[name] = f;
    const nlohmann::json& want = fixture["files"][f];
    ASSERT_EQ(members.size(), want["documents"].get<size_t>()) << name << ": document count";
    std::istringstream want_hashes(want["document_hashes"].get<std::string>());
    uint64_t file_hash = kFnvOffset;
    size_t tokens = 0;
    bool reported = false;
    for (const size_t i : members) {
      file_hash = fnv1a64(ids[i], file_hash);
      tokens += ids[i].size();
      std::string want_hash;
      want_hashes >> want_hash;
      if (!reported && hex(fnv1a64(ids[i]) & 0xffffffff, 8) != want_hash) {
        ADD_FAILURE() << "first document whose ids differ from HuggingFace's: "
                      << describe(documents[i], ids[i]);
        reported = true;
      }
    }
    EXPECT_EQ(tokens, want["tokens"].get<size_t>()) << name << ": token count";
    EXPECT_EQ(hex(file_hash, 16), want["fnv1a64"].get<std::string>()) << name << ": ids hash";
  }

  for (const nlohmann::json& want : fixture["documents"]) {
    const auto file = file_index.find(want["file"].get<std::string>());
    ASSERT_NE(file, file_index.end()) << want["file"];
    const size_t i = files[file->second].second.at(want["index"].get<size_t>());
    EXPECT_EQ(ids[i], want["ids"].get<std::vector<int64_t>>()) << describe(documents[i], ids[i]);
  }
}

// --- read_corpus -----------------------------------------------------------------------------

TEST(ReadCorpus, FortuneFileEntriesAreTheDocuments) {
  TempDir dir;
  const fs::path path = dir.path() / "quotes";
  write_file(path, "first\nentry\n%\n\n%\nsecond entry\n\n  indented\n%\n   \n%\nlast\n");
  const std::vector<Document> documents = read_corpus(path.string());
  ASSERT_EQ(documents.size(), 3u);
  EXPECT_EQ(documents[0].text, "first\nentry");
  EXPECT_EQ(documents[1].text, "second entry\n\n  indented");
  EXPECT_EQ(documents[2].text, "last");
  EXPECT_EQ(documents[0].source, path.string() + "#1");
  EXPECT_EQ(documents[2].source, path.string() + "#3");
}

TEST(ReadCorpus, OtherTextFilesAreSplitIntoParagraphs) {
  TempDir dir;
  const fs::path path = dir.path() / "notes.txt";
  // "100%" is not a line of its own "%": this is not a fortune file.
  write_file(path, "\nparagraph one\nat 100%\n\n \t\n\nparagraph two\r\nends here");
  const std::vector<Document> documents = read_corpus(path.string());
  ASSERT_EQ(documents.size(), 2u);
  EXPECT_EQ(documents[0].text, "paragraph one\nat 100%");
  EXPECT_EQ(documents[1].text, "paragraph two\r\nends here");
  EXPECT_EQ(documents[1].source, path.string() + "#2");
}

TEST(ReadCorpus, FolderTakesItsTextFilesInNameOrder) {
  TempDir dir;
  write_file(dir.path() / "b", "bee\n%\nbuzz\n");
  write_file(dir.path() / "a", "ant\n");
  write_file(dir.path() / "a.dat", "\x00\x00\x00\x02"s);  // fortune's index: NUL bytes
  write_file(dir.path() / "latin1", "caf\xe9\n");         // not UTF-8
  fs::create_symlink("a", dir.path() / "a.u8");
  fs::create_directory(dir.path() / "sub");
  write_file(dir.path() / "sub" / "c", "cicada\n");
  const std::vector<Document> documents = read_corpus(dir.path().string());
  std::vector<std::string> texts, sources;
  for (const Document& document : documents) {
    texts.push_back(document.text);
    sources.push_back(document.source);
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"ant", "bee", "buzz"}));
  EXPECT_EQ(sources, (std::vector<std::string>{(dir.path() / "a").string() + "#1",
                                               (dir.path() / "b").string() + "#1",
                                               (dir.path() / "b").string() + "#2"}));
}

TEST(ReadCorpus, ErrorsNameThePath) {
  TempDir dir;
  const std::string missing = (dir.path() / "missing").string();
  expect_mentions(error_message([&] { read_corpus(missing); }), {"read_corpus", missing, "exist"});

  const fs::path blank = dir.path() / "blank";
  write_file(blank, "\n  \n%\n\n");
  expect_mentions(error_message([&] { read_corpus(blank.string()); }),
                  {blank.string(), "no documents"});

  const fs::path binary = dir.path() / "binary.dat";
  write_file(binary, "\x01\x00\x02"s);
  expect_mentions(error_message([&] { read_corpus(binary.string()); }), {binary.string(), "UTF-8"});

  const fs::path only_binary = dir.path() / "only-binary";
  fs::create_directory(only_binary);
  write_file(only_binary / "x.dat", "\x00"s);
  expect_mentions(error_message([&] { read_corpus(only_binary.string()); }),
                  {only_binary.string(), "no documents"});
}

}  // namespace
