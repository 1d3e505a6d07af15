// Masked-language-model batches: windows over a token stream and BERT's masking.
#include "lazytensor/mlm.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "util/counter_uniform.h"

namespace lt::data {
namespace {

void check_options(const MlmOptions& o) {
  for (double p : {o.mask_prob, o.replace_mask, o.replace_random}) {
    if (!(p >= 0 && p <= 1)) {
      throw Error("mask_tokens: probabilities must be in [0, 1], got " + std::to_string(p));
    }
  }
  if (o.replace_mask + o.replace_random > 1) {
    throw Error("mask_tokens: replace_mask + replace_random exceeds 1");
  }
  if (o.vocab_size <= 0 || o.mask_id < 0 || o.mask_id >= o.vocab_size) {
    throw Error("mask_tokens: mask_id " + std::to_string(o.mask_id) +
                " is outside the vocabulary of " + std::to_string(o.vocab_size));
  }
}

// Draw `draw` (0, 1 or 2) of token `index` under `key`.
double uniform(uint64_t key, int64_t index, int draw) {
  return detail::counter_uniform(key,
                                 static_cast<uint64_t>(index) * 3 + static_cast<uint64_t>(draw));
}

int64_t round_up_32(int64_t n) {
  return (n + 31) / 32 * 32;
}

}  // namespace

int64_t predicted_capacity(int64_t tokens, double mask_prob) {
  if (tokens <= 0 || !(mask_prob >= 0 && mask_prob <= 1)) {
    throw Error("predicted_capacity: needs tokens > 0 and mask_prob in [0, 1], got " +
                std::to_string(tokens) + " tokens and mask_prob " + std::to_string(mask_prob));
  }
  const double n = static_cast<double>(tokens);
  const double bound = n * mask_prob + 6 * std::sqrt(n * mask_prob * (1 - mask_prob));
  return std::min(tokens, round_up_32(std::max<int64_t>(1, std::llround(std::ceil(bound)))));
}

MlmBatch mask_tokens(const std::vector<int64_t>& ids, int64_t batch, int64_t seq_len,
                     const MlmOptions& o, uint64_t key, int64_t first_row) {
  check_options(o);
  if (batch <= 0 || seq_len <= 0 || static_cast<int64_t>(ids.size()) != batch * seq_len) {
    throw Error("mask_tokens: " + std::to_string(ids.size()) + " ids do not make [" +
                std::to_string(batch) + ", " + std::to_string(seq_len) + "]");
  }
  if (first_row < 0) {
    throw Error("mask_tokens: first_row must not be negative, got " + std::to_string(first_row));
  }
  const int64_t n = batch * seq_len;
  std::vector<int64_t> shown = ids;
  std::vector<int64_t> labels(n, -100);
  std::vector<int64_t> positions;
  std::vector<int64_t> position_labels;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = first_row * seq_len + i;
    if (std::find(o.special_ids.begin(), o.special_ids.end(), ids[i]) != o.special_ids.end() ||
        uniform(key, index, 0) >= o.mask_prob) {
      continue;
    }
    labels[i] = ids[i];
    positions.push_back(i);
    position_labels.push_back(ids[i]);
    const double split = uniform(key, index, 1);
    if (split < o.replace_mask) {
      shown[i] = o.mask_id;
    } else if (split < o.replace_mask + o.replace_random) {
      // floor(u * V) < V for u < 1 in f64.
      shown[i] = static_cast<int64_t>(uniform(key, index, 2) * static_cast<double>(o.vocab_size));
    }
  }
  const int64_t predicted = static_cast<int64_t>(positions.size());
  int64_t capacity = predicted_capacity(n, o.mask_prob);
  if (predicted > capacity) capacity = std::min(n, round_up_32(predicted));
  positions.resize(capacity, 0);
  position_labels.resize(capacity, -100);
  const Shape shape{batch, seq_len};
  MlmBatch out;
  out.input_ids = from_vector(shown, shape);
  out.labels = from_vector(labels, shape);
  out.predicted_positions = from_vector(positions, Shape{capacity});
  out.predicted_labels = from_vector(position_labels, Shape{capacity});
  return out;
}

MlmBatch mask_tokens(const Tensor& ids, const MlmOptions& o) {
  if (!ids.defined() || dtype_is_floating(ids.dtype()) || ids.dtype() == DType::boolean) {
    throw Error("mask_tokens: expected integer token ids, got " +
                (ids.defined() ? std::string(dtype_name(ids.dtype())) : std::string("undefined")));
  }
  check_options(o);
  const Shape& shape = ids.shape();
  // Ids up to 2^53 are exact in f64, and where() computes in a floating type.
  const Tensor values = ids.to(DType::f64);
  const Tensor never = full({}, 2.0, DType::f64);  // above every uniform draw
  Tensor choose = rand(shape, DType::f64);
  for (int64_t special : o.special_ids) {
    choose = where(ids.eq(static_cast<double>(special)), never, choose);
  }
  const Tensor predicted = choose.lt(o.mask_prob);
  // One more draw splits the predicted tokens: [0, replace_mask) masked, the next
  // replace_random random, the rest kept.
  const Tensor split = where(predicted, rand(shape, DType::f64), never);
  const Tensor masked = split.lt(o.replace_mask);
  const Tensor randomized =
      where(split.ge(o.replace_mask), split, never).lt(o.replace_mask + o.replace_random);
  // floor(u * V) < V for u < 1 in f64; the cast truncates, which is floor here.
  const Tensor random_ids =
      (rand(shape, DType::f64) * static_cast<double>(o.vocab_size)).to(DType::i64).to(DType::f64);
  const Tensor shown = where(masked, full({}, static_cast<double>(o.mask_id), DType::f64),
                             where(randomized, random_ids, values));
  MlmBatch batch;
  batch.input_ids = shown.to(DType::i64);
  batch.labels = where(predicted, values, full({}, -100.0, DType::f64)).to(DType::i64);
  return batch;
}

TokenWindows::TokenWindows(std::vector<int64_t> stream, int64_t seq_len, int64_t cls_id,
                           int64_t sep_id, uint64_t seed)
    : stream_(std::move(stream)), seq_len_(seq_len), cls_id_(cls_id), sep_id_(sep_id), seed_(seed) {
  if (seq_len < 3) {
    throw Error("TokenWindows: sequences need at least 3 tokens ([CLS], one token, [SEP]), got " +
                std::to_string(seq_len));
  }
  windows_ = static_cast<int64_t>(stream_.size()) / (seq_len - 2);
}

std::vector<int64_t> TokenWindows::window(int64_t w) const {
  if (w < 0 || w >= windows_) {
    throw Error("TokenWindows: window " + std::to_string(w) + " of " + std::to_string(windows_));
  }
  std::vector<int64_t> out;
  out.reserve(seq_len_);
  out.push_back(cls_id_);
  const auto begin = stream_.begin() + w * (seq_len_ - 2);
  out.insert(out.end(), begin, begin + (seq_len_ - 2));
  out.push_back(sep_id_);
  return out;
}

namespace {

// 0 .. n - 1 in the order of `epoch`: Fisher-Yates with a 64-bit Mersenne Twister, both fully
// specified, so the order is the same with every standard library (std::shuffle's algorithm
// is not specified).
std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace

const std::vector<int64_t>& TokenWindows::epoch_order(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_order_ = epoch_permutation(seed_, epoch, windows_);
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

Tensor TokenWindows::shuffled_batch(int64_t index, int64_t batch_size) const {
  return from_vector(shuffled_ids(index, batch_size), Shape{batch_size, seq_len_});
}

Tensor TokenWindows::ordered_batch(int64_t first, int64_t batch_size) const {
  return from_vector(ordered_ids(first, batch_size), Shape{batch_size, seq_len_});
}

std::vector<int64_t> TokenWindows::shuffled_ids(int64_t index, int64_t batch_size) const {
  if (windows_ == 0) {
    throw Error("TokenWindows: " + std::to_string(stream_.size()) +
                " tokens do not fill one window of " + std::to_string(seq_len_) + " tokens");
  }
  if (index < 0 || batch_size <= 0) {
    throw Error("TokenWindows: batch " + std::to_string(index) + " of size " +
                std::to_string(batch_size));
  }
  std::vector<int64_t> ids;
  ids.reserve(batch_size * seq_len_);
  for (int64_t k = 0; k < batch_size; ++k) {
    const int64_t position = index * batch_size + k;
    const std::vector<int64_t> w = window(epoch_order(position / windows_)[position % windows_]);
    ids.insert(ids.end(), w.begin(), w.end());
  }
  return ids;
}

std::vector<int64_t> TokenWindows::ordered_ids(int64_t first, int64_t batch_size) const {
  if (first < 0 || batch_size <= 0 || first + batch_size > windows_) {
    throw Error("TokenWindows: windows " + std::to_string(first) + " to " +
                std::to_string(first + batch_size) + " of " + std::to_string(windows_));
  }
  std::vector<int64_t> ids;
  ids.reserve(batch_size * seq_len_);
  for (int64_t k = 0; k < batch_size; ++k) {
    const std::vector<int64_t> w = window(first + k);
    ids.insert(ids.end(), w.begin(), w.end());
  }
  return ids;
}

DocumentBatches::DocumentBatches(std::vector<std::vector<int64_t>> documents, int64_t max_len,
                                 int64_t cls_id, int64_t sep_id, int64_t pad_id, uint64_t seed)
    : documents_(std::move(documents)),
      max_len_(max_len),
      cls_id_(cls_id),
      sep_id_(sep_id),
      pad_id_(pad_id),
      seed_(seed) {
  if (max_len < 3) {
    throw Error("DocumentBatches: rows need at least 3 tokens ([CLS], one token, [SEP]), got " +
                std::to_string(max_len));
  }
  std::erase_if(documents_, [](const std::vector<int64_t>& d) { return d.empty(); });
}

DocumentBatches::Batch DocumentBatches::rows_of(const std::vector<int64_t>& documents,
                                                bool to_longest) const {
  Batch b;
  b.rows = static_cast<int64_t>(documents.size());
  b.length = to_longest ? 0 : max_len_;
  for (int64_t d : documents) {
    const int64_t row = std::min<int64_t>(static_cast<int64_t>(documents_[d].size()) + 2, max_len_);
    if (to_longest) b.length = std::max(b.length, row);
  }
  b.ids.assign(b.rows * b.length, pad_id_);
  b.attention.assign(b.rows * b.length, 0);
  for (int64_t r = 0; r < b.rows; ++r) {
    const std::vector<int64_t>& doc = documents_[documents[r]];
    const int64_t kept = std::min<int64_t>(static_cast<int64_t>(doc.size()), max_len_ - 2);
    int64_t* ids = &b.ids[r * b.length];
    ids[0] = cls_id_;
    std::copy(doc.begin(), doc.begin() + kept, ids + 1);
    ids[kept + 1] = sep_id_;
    std::fill(&b.attention[r * b.length], &b.attention[r * b.length] + kept + 2, 1);
    b.tokens += kept + 2;
  }
  return b;
}

DocumentBatches::Batch DocumentBatches::shuffled(int64_t index, int64_t batch_size,
                                                 bool to_longest) const {
  if (documents_.empty()) throw Error("DocumentBatches: no documents");
  if (index < 0 || batch_size <= 0) {
    throw Error("DocumentBatches: batch " + std::to_string(index) + " of size " +
                std::to_string(batch_size));
  }
  const int64_t n = size();
  std::vector<int64_t> picked;
  int64_t epoch = -1;
  std::vector<int64_t> order;
  for (int64_t k = 0; k < batch_size; ++k) {
    const int64_t position = index * batch_size + k;
    if (position / n != epoch) {
      epoch = position / n;
      order = epoch_permutation(seed_, epoch, n);
    }
    picked.push_back(order[position % n]);
  }
  return rows_of(picked, to_longest);
}

DocumentBatches::Batch DocumentBatches::ordered(int64_t first, int64_t batch_size,
                                                bool to_longest) const {
  if (first < 0 || batch_size <= 0 || first + batch_size > size()) {
    throw Error("DocumentBatches: documents " + std::to_string(first) + " to " +
                std::to_string(first + batch_size) + " of " + std::to_string(size()));
  }
  std::vector<int64_t> picked(batch_size);
  for (int64_t k = 0; k < batch_size; ++k) picked[k] = first + k;
  return rows_of(picked, to_longest);
}

}  // namespace lt::data
