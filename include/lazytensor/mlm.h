#pragma once
// Masked-language-model data: fixed-length windows over a token stream, drawn in a shuffled
// order that depends only on the seed and the batch number (so a resumed run draws the same
// batches), and BERT's masking done on the device from the counter-based generator.
#include <cstdint>
#include <vector>

#include "lazytensor/tensor.h"

namespace lt::data {

struct MlmOptions {
  int64_t vocab_size = 30522;
  int64_t mask_id = 103;                          // [MASK]
  std::vector<int64_t> special_ids{0, 101, 102};  // never masked: [PAD], [CLS], [SEP]
  double mask_prob = 0.15;                        // of the other tokens, predicted
  double replace_mask = 0.8;                      // of those, shown as [MASK]
  double replace_random = 0.1;                    // shown as a random token (the rest: as they are)
};

struct MlmBatch {
  Tensor input_ids;  // [B, L] i64: the masked tokens
  Tensor labels;     // [B, L] i64: the original id where predicted, -100 elsewhere
  // Only from the host's masking (undefined from the device's): the predicted tokens' flat
  // positions b * L + l in order, then position 0 up to predicted_capacity(), and their
  // labels, -100 for the padding. Bert::mlm_loss_at runs the MLM head at these rows only; its
  // loss is mlm_loss(input_ids, labels)'s.
  Tensor predicted_positions;  // [K] i64
  Tensor predicted_labels;     // [K] i64
};

// BERT's masking of ids [B, L] (i64), as HuggingFace's DataCollatorForLanguageModeling: each
// token that is not special is predicted with probability mask_prob; a predicted token is
// replaced by [MASK] with probability replace_mask, by a uniformly drawn token with
// probability replace_random, and kept otherwise. Three draws of the generator (lt::rand): a
// new mask every step without a recompile, the same masks from the same generator state.
MlmBatch mask_tokens(const Tensor& ids, const MlmOptions& options);

// The same masking done by the host for ids it holds (row-major [batch, L]), so that it knows
// which tokens are predicted before anything runs. Each token's three uniform draws are a
// counter-based hash of `key` and the token's index (first_row + b) * L + l: the masks depend
// only on the key and the ids, so a resumed run draws the same ones, and ranks that each mask
// their rows of one batch (first_row = their first row) draw what one process would. The
// distribution is mask_tokens', not its random stream.
MlmBatch mask_tokens(const std::vector<int64_t>& ids, int64_t batch, int64_t seq_len,
                     const MlmOptions& options, uint64_t key, int64_t first_row = 0);

// The row count K of predicted_positions for `tokens` tokens: the mean count plus six standard
// deviations of the binomial, rounded up to a multiple of 32 and at most `tokens`, so that K
// is the same for nearly every batch (no recompiles). A batch with more predicted tokens gets
// the next multiple of 32 that holds them: odds of about 2e-9 for 8 x 128 tokens at 15%, below
// 1e-6 for any size.
int64_t predicted_capacity(int64_t tokens, double mask_prob);

// Windows [CLS] t_k ... t_{k+L-3} [SEP] over a token stream, at stride L - 2 (the tail that
// does not fill a window is dropped; a stream shorter than one window has none).
class TokenWindows {
 public:
  TokenWindows(std::vector<int64_t> stream, int64_t seq_len, int64_t cls_id, int64_t sep_id,
               uint64_t seed);
  int64_t size() const { return windows_; }
  int64_t seq_len() const { return seq_len_; }
  // Batch number `index` (from 0, running on over epochs): the next `batch_size` windows of an
  // order reshuffled every epoch, as [batch_size, L] i64 on the device. It depends only on the
  // seed and the index.
  Tensor shuffled_batch(int64_t index, int64_t batch_size) const;
  // Windows first, first + 1, ... in stream order (held-out evaluation).
  Tensor ordered_batch(int64_t first, int64_t batch_size) const;
  // The same two batches as host ids, row-major [batch_size, L] (for the host's masking).
  std::vector<int64_t> shuffled_ids(int64_t index, int64_t batch_size) const;
  std::vector<int64_t> ordered_ids(int64_t first, int64_t batch_size) const;
  // The host ids of window w.
  std::vector<int64_t> window(int64_t w) const;

 private:
  const std::vector<int64_t>& epoch_order(int64_t epoch) const;

  std::vector<int64_t> stream_;
  int64_t seq_len_, cls_id_, sep_id_, windows_;
  uint64_t seed_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

// Documents as rows, for dynamic padding: row d is [CLS], the first max_len - 2 tokens of
// document d, [SEP]; a batch is `batch_size` rows padded with pad_id to its longest row (as
// HuggingFace's DataCollatorWithPadding pads) or to max_len, with an attention mask of 1 for
// the tokens and 0 for the padding.
class DocumentBatches {
 public:
  DocumentBatches(std::vector<std::vector<int64_t>> documents, int64_t max_len, int64_t cls_id,
                  int64_t sep_id, int64_t pad_id, uint64_t seed);
  int64_t size() const { return static_cast<int64_t>(documents_.size()); }
  int64_t max_len() const { return max_len_; }

  struct Batch {
    std::vector<int64_t> ids;        // row-major [rows, length]
    std::vector<int64_t> attention;  // the same shape: 1 for tokens, 0 for padding
    int64_t rows = 0, length = 0;
    int64_t tokens = 0;  // real tokens (the attention mask's sum)
  };
  // Batch number `index` (from 0, running on over epochs) of an order reshuffled every epoch;
  // it depends only on the seed and the index. `to_longest`: padded to its longest row, else
  // to max_len.
  Batch shuffled(int64_t index, int64_t batch_size, bool to_longest) const;
  // Documents first, first + 1, ... in corpus order (held-out evaluation).
  Batch ordered(int64_t first, int64_t batch_size, bool to_longest) const;

 private:
  Batch rows_of(const std::vector<int64_t>& documents, bool to_longest) const;

  std::vector<std::vector<int64_t>> documents_;
  int64_t max_len_, cls_id_, sep_id_, pad_id_;
  uint64_t seed_;
};

}  // namespace lt::data
