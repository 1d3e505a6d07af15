// A step that fails commits nothing: parameters, optimizer moments and step counts, the
// generator and every tensor updated in place keep their bits from before the step, the error
// names what was wrong, and a run that hit a bad batch and went on ends with the bits of a run
// that skipped it. Index errors are raised at the call when the host knows the ids, else by
// the step's first read.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/fault_injection.h"
#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt::DType;
using lt::Tensor;
using lt_test::error_message;
using lt_test::expect_mentions;

constexpr int64_t kVocab = 97, kBatch = 4, kLength = 8;

lt::models::BertConfig small_bert() {
  lt::models::BertConfig config = lt::models::BertConfig::preset("tiny");
  config.vocab_size = kVocab;
  config.max_position_embeddings = 16;
  return config;
}

// Bits, so that -0 and 0 (or two NaNs) are told apart.
std::vector<uint32_t> bits_of(const Tensor& t) {
  const std::vector<float> values = t.to(DType::f32).to_vector();
  std::vector<uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

// Everything a training step may change: parameters, both moments and the step count of each,
// and the generator.
struct Snapshot {
  std::vector<std::vector<uint32_t>> tensors;
  std::vector<int64_t> steps;
  std::pair<uint64_t, uint64_t> generator;  // seed, offset
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const std::vector<Tensor>& params, const lt::optim::AdamW& optimizer) {
  Snapshot s;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& state = optimizer.state(0, i);
    s.tensors.push_back(bits_of(params[i]));
    s.tensors.push_back(bits_of(state.exp_avg));
    s.tensors.push_back(bits_of(state.exp_avg_sq));
    s.steps.push_back(state.step);
  }
  const lt::GeneratorState generator = lt::generator_state();
  s.generator = {generator.seed, generator.offset};
  return s;
}

struct Batch {
  std::vector<int64_t> ids, labels;
};

Batch random_batch(std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> token(1, kVocab - 1), coin(0, 3);
  Batch b;
  for (int64_t i = 0; i < kBatch * kLength; ++i) {
    b.ids.push_back(token(rng));
    b.labels.push_back(coin(rng) == 0 ? token(rng) : -100);
  }
  return b;
}

// How a bad batch goes wrong.
enum class Fault {
  host_id,        // an id past the vocabulary in ids the host uploaded: raised at the call
  device_id,      // the same id computed on the device: raised by reading the loss
  device_target,  // a label past the vocabulary, computed on the device
  kernel,         // a kernel that fails
  memory,         // no memory for the step's outputs: raised by mark_step
};

// Trains a small BERT (dropout on, AdamW) on fresh batches; at step `bad` the batch goes wrong
// as `fault` says and the error is caught (or, with fault unset, that batch is skipped). Each
// step reads its loss, as training loops do. Returns the final snapshot; `at_failure` gets the
// snapshot right after the failed step was raised, `before_failure` right before it.
Snapshot train(uint64_t seed, int64_t steps, int64_t bad, const Fault* fault,
               Snapshot* before_failure = nullptr, Snapshot* at_failure = nullptr,
               std::string* error = nullptr) {
  lt::manual_seed(seed);
  lt::models::Bert model(small_bert());
  lt::optim::AdamWOptions options;
  options.lr = 1e-2;
  options.weight_decay = 0.01;
  const std::vector<Tensor> params = model.parameters();
  lt::optim::AdamW optimizer(params, options);
  std::mt19937_64 rng(seed);
  for (int64_t step = 0; step < steps; ++step) {
    Batch batch = random_batch(rng);
    if (step == bad && !fault) continue;
    const bool failing = step == bad;
    if (failing && before_failure) *before_failure = snapshot(params, optimizer);
    if (failing && (*fault == Fault::host_id || *fault == Fault::device_id)) {
      batch.ids[kLength + 3] = kVocab;
    }
    if (failing && *fault == Fault::device_target) batch.labels[5] = kVocab + 4;
    const lt::Shape shape{kBatch, kLength};
    // Ids computed on the device: the host cannot check them as the ops are traced.
    const bool on_device = failing && *fault != Fault::host_id;
    const auto upload = [&](const std::vector<int64_t>& values) {
      if (!on_device) return lt::from_vector(values, shape);
      return lt::from_vector(std::vector<float>(values.begin(), values.end()), shape)
          .to(DType::i64);
    };
    try {
      optimizer.zero_grad();
      const Tensor loss = model.mlm_loss(upload(batch.ids), upload(batch.labels));
      loss.backward();
      std::vector<Tensor> grads;
      for (const Tensor& p : params) grads.push_back(p.grad());
      lt::clip_grad_norm_(grads, 1.0);
      optimizer.step();
      if (failing && *fault == Fault::kernel) lt::backend::inject_execution_failures(1);
      if (failing && *fault == Fault::memory) {
        lt::set_device_memory_limit(static_cast<size_t>(lt::device_memory_stats().bytes_in_use));
      }
      lt::mark_step();
      lt::set_device_memory_limit(0);
      const double logged = loss.item();  // as a training loop's log reads it
      EXPECT_FALSE(failing) << "the bad batch trained, loss " << logged;
    } catch (const lt::Error& e) {
      lt::set_device_memory_limit(0);
      EXPECT_TRUE(failing) << e.what();
      if (error) *error = e.what();
      if (at_failure) *at_failure = snapshot(params, optimizer);
    }
  }
  lt::wait_device_ops();
  return snapshot(params, optimizer);
}

class FailedStepTest : public ::testing::Test {
 protected:
  void SetUp() override { lt::wait_device_ops(); }
  void TearDown() override {
    lt::set_device_memory_limit(0);
    lt::wait_device_ops();
  }
};

void expect_failed_step_commits_nothing(Fault fault, const std::vector<std::string>& mentions) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Snapshot before, after;
  std::string error;
  const Snapshot went_on = train(seed, 4, 2, &fault, &before, &after, &error);
  expect_mentions(error, mentions);
  EXPECT_TRUE(before == after) << "the failed step changed the parameters, moments, step "
                                  "counts or generator";
  EXPECT_EQ(before.steps, std::vector<int64_t>(before.steps.size(), 2));
  const Snapshot skipped = train(seed, 4, 2, nullptr);
  EXPECT_TRUE(went_on == skipped) << "the run that hit the bad batch differs from the one that "
                                     "skipped it";
}

TEST_F(FailedStepTest, AHostIdPastTheVocabularyIsRaisedAtTheCall) {
  expect_failed_step_commits_nothing(Fault::host_id,
                                     {"embedding", "id 97", "position [1, 3]", "0 to 96"});
}

TEST_F(FailedStepTest, ADeviceIdPastTheVocabularyFailsTheStepAndCommitsNothing) {
  expect_failed_step_commits_nothing(Fault::device_id,
                                     {"step", "embedding", "index 97", "size 97"});
}

TEST_F(FailedStepTest, ADeviceTargetPastTheVocabularyFailsTheStepAndCommitsNothing) {
  expect_failed_step_commits_nothing(Fault::device_target,
                                     {"cross_entropy", "target 101", "position", "97 classes"});
}

TEST_F(FailedStepTest, AFailedKernelCommitsNothing) {
  expect_failed_step_commits_nothing(Fault::kernel, {"step", "injected kernel failure"});
}

TEST_F(FailedStepTest, NoMemoryForTheStepCommitsNothing) {
  expect_failed_step_commits_nothing(Fault::memory, {"cannot allocate"});
}

TEST_F(FailedStepTest, IndexErrorsAreLtErrorsOfTheirOwnKind) {
  const Tensor table = lt::ones({3, 2});
  EXPECT_THROW(lt::embedding(lt::from_vector(std::vector<int64_t>{3}, {1}), table), lt::IndexError);
  const Tensor from_device = lt::from_vector(std::vector<float>{-1}, {1}).to(DType::i64);
  const Tensor rows = lt::embedding(from_device, table);
  EXPECT_THROW(rows.to_vector(), lt::IndexError);
  // Targets: the host's are checked at the call, -100 (ignore_index) passes, -5 does not.
  const Tensor logits = lt::zeros({3, 4});
  EXPECT_NO_THROW(
      lt::cross_entropy(logits, lt::from_vector(std::vector<int64_t>{-100, 3, 0}, {3})));
  expect_mentions(
      error_message([&] {
        lt::cross_entropy(logits, lt::from_vector(std::vector<int64_t>{-100, -5, 0}, {3}));
      }),
      {"cross_entropy", "target -5", "position [1]", "ignore_index -100"});
  EXPECT_THROW(lt::cross_entropy(logits, lt::from_vector(std::vector<int64_t>{0, 4, -100}, {3})),
               lt::IndexError);
  // The device's targets when the step runs.
  const Tensor targets = lt::from_vector(std::vector<float>{1, -100, 9}, {3}).to(DType::i64);
  const Tensor loss = lt::cross_entropy(logits, targets);
  expect_mentions(error_message([&] { loss.item(); }), {"cross_entropy", "target 9", "position 2"});
  EXPECT_NO_THROW(lt::wait_device_ops()) << "raised once, by the read";
}

TEST_F(FailedStepTest, AFailureNobodyReadsIsRaisedByTheNextMarkStep) {
  Tensor p = lt::from_vector(std::vector<float>{1, 2, 3}, {3});
  lt::mark_step();
  const Tensor bad = lt::from_vector(std::vector<float>{5}, {1}).to(DType::i64);
  p.add_(lt::embedding(bad, lt::ones({3, 3})).reshape({3}));
  lt::mark_step();
  lt::record_event().wait();  // the failed step has run, and nobody read a value of it
  const Tensor q = p * 2.0;
  const std::string raised = error_message([&] { lt::mark_step(); });
  expect_mentions(raised, {"mark_step", "index 5"});
  // p kept its value, and the step that raised the error was launched.
  EXPECT_EQ(p.to_vector(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(q.to_vector(), (std::vector<float>{2, 4, 6}));
  EXPECT_NO_THROW(lt::wait_device_ops());
}

}  // namespace
