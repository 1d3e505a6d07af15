// lt::distributed: the collectives against a single-process computation of the same values,
// data-parallel training against one process on the combined batch, and the checks that name
// ranks that disagree. CTest runs this binary alone (a world of one) and under
// `mpirun -np 2` and `-np 3` (tests/CMakeLists.txt); each rank draws every rank's inputs from
// known seeds, so it can compute the expected result by itself.
#include <csignal>
#include <optional>
#include <random>

#include "test_support.h"

namespace {

using lt::DType;
using lt::Tensor;
namespace dist = lt::distributed;

// A fresh seed per test, the same on every rank (rank 0's, broadcast), named in failures;
// LT_TEST_SEED=<seed> replays one (mpirun passes it to every rank).
class Distributed : public ::testing::Test {
 protected:
  void SetUp() override {
    dist::init();
    const char* fixed = std::getenv("LT_TEST_SEED");
    const int64_t mine = fixed != nullptr ? std::stoll(fixed) : std::random_device{}();
    const Tensor drawn = lt::from_vector(std::vector<int64_t>{mine}, {1});
    seed_ = static_cast<uint64_t>(dist::broadcast(drawn, 0).to_vector<double>()[0]);
    trace_.emplace(__FILE__, __LINE__, "LT_TEST_SEED=" + std::to_string(seed_));
  }
  uint64_t seed(uint64_t salt) const { return seed_ * 1000003 + salt; }
  // Rank r's input: fresh values every rank can draw.
  Tensor input_of(int r, const lt::Shape& shape, DType dtype, uint64_t salt) const {
    return lt::randn(shape, seed(salt * 7919 + static_cast<uint64_t>(r))).to(dtype);
  }

 private:
  uint64_t seed_ = 0;
  std::optional<testing::ScopedTrace> trace_;
};

// Skips a test that needs other ranks, saying why.
#define NEEDS_RANKS()                                                                        \
  if (dist::world_size() < 2) {                                                              \
    GTEST_SKIP() << (dist::available() ? "needs other ranks: run under mpirun -np 2 or more" \
                                       : "built without MPI (Open MPI's libopenmpi-dev not " \
                                         "found at configure time)");                        \
  }

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

TEST_F(Distributed, AWorldOfOneReturnsEveryInput) {
  if (dist::world_size() != 1) GTEST_SKIP() << "runs in a world of one";
  EXPECT_EQ(dist::rank(), 0);
  const Tensor x = lt::randn({6, 3}, seed(1));
  for (const Tensor& y : {dist::all_reduce(x), dist::all_reduce(x, dist::ReduceOp::mean),
                          dist::all_gather(x), dist::reduce_scatter(x), dist::broadcast(x, 0)}) {
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(values(y), values(x));
  }
  std::vector<Tensor> grads = {x, x * 2.0};
  dist::all_reduce_coalesced(grads);
  EXPECT_EQ(values(grads[1]), values(x * 2.0));
  dist::barrier();
}

TEST_F(Distributed, BadArgumentsAreRefusedBeforeAnythingRuns) {
  const Tensor ids = lt::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  lt::wait_device_ops();
  const int64_t before = lt_test::counter("Collective");
  lt_test::expect_mentions(
      lt_test::error_message([&] { dist::all_reduce(ids, dist::ReduceOp::mean); }),
      {"all_reduce", "mean", "i64"});
  lt_test::expect_mentions(
      lt_test::error_message([&] { dist::all_reduce(lt::ones({2}, DType::boolean)); }),
      {"all_reduce", "bool"});
  lt_test::expect_mentions(
      lt_test::error_message([&] { dist::broadcast(ids, dist::world_size()); }),
      {"broadcast", "root"});
  lt_test::expect_mentions(
      lt_test::error_message([&] { dist::reduce_scatter(lt::ones({}), dist::ReduceOp::sum); }),
      {"reduce_scatter", "scalar"});
  if (dist::world_size() > 1) {
    const lt::Shape odd{dist::world_size() + 1, 2};
    lt_test::expect_mentions(lt_test::error_message([&] { dist::reduce_scatter(lt::ones(odd)); }),
                             {"reduce_scatter", odd.str(), "equal parts"});
  }
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(lt_test::counter("Collective"), before);
}

TEST_F(Distributed, AllReduceMatchesASingleProcessReduction) {
  NEEDS_RANKS();
  const int n = dist::world_size();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (const lt::Shape& shape : {lt::Shape{1}, lt::Shape{1001}, lt::Shape{3, 5, 7}}) {
      for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::mean, dist::ReduceOp::max}) {
        SCOPED_TRACE(std::string(lt::dtype_name(dtype)) + shape.str() + " " +
                     std::to_string(static_cast<int>(op)));
        const Tensor mine = input_of(dist::rank(), shape, dtype, 1);
        // Of a computed value, not of device data: the collective reads a kernel's output.
        const Tensor got = dist::all_reduce(mine * 1.0, op);
        // The expected values in double from every rank's input as stored.
        std::vector<double> want(static_cast<size_t>(shape.numel()), 0.0);
        for (int r = 0; r < n; ++r) {
          const std::vector<double> x = values(input_of(r, shape, dtype, 1));
          for (size_t i = 0; i < want.size(); ++i) {
            want[i] = op == dist::ReduceOp::max ? (r == 0 ? x[i] : std::max(want[i], x[i]))
                                                : want[i] + x[i];
          }
        }
        if (op == dist::ReduceOp::mean) {
          for (double& w : want) w /= n;
        }
        EXPECT_EQ(got.dtype(), dtype);
        const double rtol = dtype == DType::bf16 ? 0x1p-8 : dtype == DType::f32 ? 1e-6 : 1e-14;
        lt_test::expect_close(values(got), want, {rtol, rtol * n});
      }
    }
  }
  // Integers sum exactly.
  const Tensor counts = lt::from_vector(std::vector<int64_t>{dist::rank(), 1, -7}, {3});
  EXPECT_EQ(values(dist::all_reduce(counts)),
            (std::vector<double>{n * (n - 1) / 2.0, 1.0 * n, -7.0 * n}));
}

TEST_F(Distributed, AllGatherConcatenatesTheRanksInOrder) {
  NEEDS_RANKS();
  const lt::Shape shape{3, 4};
  const Tensor got = dist::all_gather(input_of(dist::rank(), shape, DType::f32, 2));
  EXPECT_EQ(got.shape(), (lt::Shape{3 * dist::world_size(), 4}));
  std::vector<double> want;
  for (int r = 0; r < dist::world_size(); ++r) {
    const std::vector<double> x = values(input_of(r, shape, DType::f32, 2));
    want.insert(want.end(), x.begin(), x.end());
  }
  EXPECT_EQ(values(got), want);
}

TEST_F(Distributed, ReduceScatterGivesEachRankItsPart) {
  NEEDS_RANKS();
  const int n = dist::world_size();
  const lt::Shape shape{2 * n, 5};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::mean, dist::ReduceOp::max}) {
      SCOPED_TRACE(std::string(lt::dtype_name(dtype)) + " " + std::to_string(static_cast<int>(op)));
      const Tensor got = dist::reduce_scatter(input_of(dist::rank(), shape, dtype, 3), op);
      EXPECT_EQ(got.shape(), (lt::Shape{2, 5}));
      EXPECT_EQ(got.dtype(), dtype);
      std::vector<double> all(static_cast<size_t>(shape.numel()), 0.0);
      for (int r = 0; r < n; ++r) {
        const std::vector<double> x = values(input_of(r, shape, dtype, 3));
        for (size_t i = 0; i < all.size(); ++i) {
          all[i] =
              op == dist::ReduceOp::max ? (r == 0 ? x[i] : std::max(all[i], x[i])) : all[i] + x[i];
        }
      }
      if (op == dist::ReduceOp::mean) {
        for (double& a : all) a /= n;
      }
      const std::vector<double> want(all.begin() + dist::rank() * 10,
                                     all.begin() + (dist::rank() + 1) * 10);
      const double rtol = dtype == DType::bf16 ? 0x1p-8 : dtype == DType::f32 ? 1e-6 : 1e-14;
      lt_test::expect_close(values(got), want, {rtol, rtol * n});
    }
  }
}

TEST_F(Distributed, BroadcastSendsTheRootsTensorFromEveryRoot) {
  NEEDS_RANKS();
  for (int root = 0; root < dist::world_size(); ++root) {
    for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
      const Tensor mine = input_of(dist::rank(), {17}, DType::f32, 4).to(dtype);
      const Tensor got = dist::broadcast(mine, root);
      EXPECT_EQ(values(got), values(input_of(root, {17}, DType::f32, 4).to(dtype)));
    }
  }
}

TEST_F(Distributed, CoalescedBucketsMatchOneAllReduceEach) {
  NEEDS_RANKS();
  std::vector<Tensor> tensors;
  const std::vector<lt::Shape> shapes = {{5}, {3, 4}, {1}, {2, 2, 2}, {33}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const DType dtype = i % 2 ? DType::f64 : DType::f32;
    tensors.push_back(input_of(dist::rank(), shapes[i], dtype, 10 + i));
  }
  std::vector<std::vector<double>> singles;
  for (const Tensor& t : tensors)
    singles.push_back(values(dist::all_reduce(t, dist::ReduceOp::mean)));
  const int64_t before = lt_test::counter("Collective");
  // 64-byte buckets: f32 [5] and [1] together, [33] alone; f64 [3, 4] and [2, 2, 2] apart.
  dist::all_reduce_coalesced(tensors, dist::ReduceOp::mean, 64);
  // One graph for all: reading each tensor by itself would run its bucket's all-reduce again.
  lt::mark_step();
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(tensors[i].shape(), shapes[i]);
    EXPECT_EQ(tensors[i].dtype(), i % 2 ? DType::f64 : DType::f32);
    lt_test::expect_close(values(tensors[i]), singles[i], {1e-6, 1e-7});
  }
  EXPECT_EQ(lt_test::counter("Collective") - before, 4);
}

TEST_F(Distributed, CollectivesThatDifferBetweenRanksAreNamed) {
  NEEDS_RANKS();
  // Rank 0 reduces 4 elements, the others 5: every rank learns what each ran.
  const Tensor x = lt::ones({dist::rank() == 0 ? 4 : 5});
  const std::string message = lt_test::error_message([&] { values(dist::all_reduce(x)); });
  lt_test::expect_mentions(message, {"differ", "rank 0 runs all_reduce(sum)", "f32[4]",
                                     "rank 1 runs all_reduce(sum)", "f32[5]"});
  // As any failed step's, its error is raised once (the read raised it); the ranks go on
  // together.
  EXPECT_NO_THROW(lt::wait_device_ops());
  EXPECT_EQ(values(dist::all_reduce(lt::ones({2}))), std::vector<double>(2, dist::world_size()));
  // A step whose collective fails commits nothing: a parameter updated in place with the
  // reduced gradient keeps its value on every rank.
  Tensor param = lt::from_vector(std::vector<float>{1, 2, 3}, {3});
  lt::mark_step();
  const Tensor grad = lt::ones({dist::rank() == 0 ? 3 : 4});
  param.sub_(dist::all_reduce(grad).slice(0, 0, 3), 0.5);
  lt::mark_step();
  lt_test::expect_mentions(lt_test::error_message([] { lt::wait_device_ops(); }), {"differ"});
  EXPECT_EQ(values(param), (std::vector<double>{1, 2, 3}));
}

// A tiny regression MLP, trained by data parallelism (each rank on its part of every batch,
// gradients averaged) and by one process on the whole batch: the same parameters.
struct Mlp {
  std::vector<Tensor> params;
  explicit Mlp(uint64_t seed) {
    params = {lt::randn({8, 16}, seed) * 0.3, lt::zeros({16}), lt::randn({16, 1}, seed + 1) * 0.3,
              lt::zeros({1})};
    for (Tensor& p : params) p.requires_grad_();
  }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    const Tensor h = (lt::matmul(x, params[0]) + params[1]).tanh();
    const Tensor d = lt::matmul(h, params[2]) + params[3] - y;
    return (d * d).mean();
  }
};

TEST_F(Distributed, DataParallelTrainingMatchesOneProcessOnTheCombinedBatch) {
  NEEDS_RANKS();
  const int n = dist::world_size();
  const int64_t per_rank = 4;
  const uint64_t base = seed(20);
  Mlp parallel(base), single(base);
  // SGD: its update is linear in the gradient, so a sum where a mean belongs shows.
  lt::optim::SGDOptions options;
  options.lr = 0.05;
  options.momentum = 0.9;
  lt::optim::SGD parallel_opt(parallel.params, options), single_opt(single.params, options);
  for (int step = 0; step < 5; ++step) {
    const Tensor x = lt::randn({per_rank * n, 8}, base + 100 + step);
    const Tensor y = lt::randn({per_rank * n, 1}, base + 200 + step);
    // This rank's rows of the batch.
    const int64_t first = dist::rank() * per_rank;
    parallel.loss(x.slice(0, first, first + per_rank), y.slice(0, first, first + per_rank))
        .backward();
    dist::average_gradients(parallel.params);
    parallel_opt.step();
    parallel_opt.zero_grad();
    single.loss(x, y).backward();
    single_opt.step();
    single_opt.zero_grad();
    lt::mark_step();
  }
  for (size_t i = 0; i < single.params.size(); ++i) {
    lt_test::expect_close(values(parallel.params[i]), values(single.params[i]), {1e-5, 1e-6});
  }
  // Every rank holds the same parameters.
  for (const Tensor& p : parallel.params) {
    const Tensor spread = dist::all_reduce(p, dist::ReduceOp::max) - p;
    EXPECT_EQ(values(spread), std::vector<double>(p.numel(), 0.0));
  }
}

// The tiny BERT, trained data-parallel on every rank's rows of each batch, reaches the
// parameters one process reaches on the whole batches (no dropout; every position labeled, so
// the ranks' mean losses average to the whole batch's). AdamW over averaged gradients is
// checked against ShardedAdamW below.
TEST_F(Distributed, DataParallelBertMatchesOneProcessOnTheCombinedBatch) {
  NEEDS_RANKS();
  const int64_t n = dist::world_size(), per_rank = 2, seq = 12;
  lt::models::BertConfig config = lt::models::BertConfig::preset("tiny");
  config.vocab_size = 500;
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0;
  lt::manual_seed(seed(40));
  lt::models::Bert parallel(config);
  lt::manual_seed(seed(40));
  lt::models::Bert single(config);
  // SGD, linear in the gradient: AdamW's normalization would turn the last-bit differences of
  // an element whose contributions cancel (the ranks sum in another order) into lr-sized ones.
  lt::optim::SGDOptions options;
  options.lr = 0.5;
  options.momentum = 0.9;
  lt::optim::SGD parallel_opt(parallel.parameters(), options);
  lt::optim::SGD single_opt(single.parameters(), options);
  std::mt19937_64 draw(seed(41));
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> ids, labels;
    for (int64_t k = 0; k < per_rank * n * seq; ++k) {
      ids.push_back(static_cast<int64_t>(draw() % config.vocab_size));
      labels.push_back(static_cast<int64_t>(draw() % config.vocab_size));
    }
    const Tensor x = lt::from_vector(ids, {per_rank * n, seq});
    const Tensor y = lt::from_vector(labels, {per_rank * n, seq});
    const int64_t first = dist::rank() * per_rank;
    parallel.mlm_loss(x.slice(0, first, first + per_rank), y.slice(0, first, first + per_rank))
        .backward();
    dist::average_gradients(parallel.parameters());
    parallel_opt.step();
    parallel_opt.zero_grad();
    single.mlm_loss(x, y).backward();
    single_opt.step();
    single_opt.zero_grad();
    lt::mark_step();
  }
  const lt::nn::NamedTensors got = parallel.named_parameters(), want = single.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(got[i].first);
    lt_test::expect_close(values(got[i].second), values(want[i].second), {1e-4, 2e-6});
  }
}

// ZeRO stage 1 updates what plain data parallelism does (AdamW is elementwise), holding a
// world_size()-th of the state; in a world of one it is AdamW over the flat parameters.
TEST_F(Distributed, ShardedAdamWMatchesDataParallelAdamW) {
  const int n = dist::world_size();
  const int64_t per_rank = 3;
  const uint64_t base = seed(30);
  Mlp plain(base), sharded(base);
  lt::optim::AdamWOptions options;
  options.lr = 1e-2;
  options.weight_decay = 0.01;
  // The two paths average gradients by different collectives, whose sums may round apart
  // where the ranks' gradients cancel; AdamW's first step, lr g / (|g| + eps'), turns that
  // into lr / eps' times as much. A larger eps keeps the factor near 1.
  options.eps = 1e-3;
  lt::optim::AdamW plain_opt({{plain.params, {}, options}}, lt::optim::AdamW::Flavor::huggingface);
  dist::ShardedAdamW sharded_opt({{sharded.params, {}, options}},
                                 lt::optim::AdamW::Flavor::huggingface);
  for (int step = 0; step < 4; ++step) {
    const int64_t first = dist::rank() * per_rank;
    const Tensor x =
        lt::randn({per_rank * n, 8}, base + 100 + step).slice(0, first, first + per_rank);
    const Tensor y =
        lt::randn({per_rank * n, 1}, base + 200 + step).slice(0, first, first + per_rank);
    // A schedule's learning rate reaches the shards.
    plain_opt.set_lr(options.lr * (1 + step));
    sharded_opt.set_lr(options.lr * (1 + step));
    plain.loss(x, y).backward();
    dist::average_gradients(plain.params);
    plain_opt.step();
    plain_opt.zero_grad();
    sharded.loss(x, y).backward();
    sharded_opt.step();
    sharded_opt.zero_grad();
    lt::mark_step();
  }
  for (size_t i = 0; i < plain.params.size(); ++i) {
    lt_test::expect_close(values(sharded.params[i]), values(plain.params[i]), {1e-6, 1e-7});
  }
  // This rank's state: its shard's f32 copy and two moments.
  int64_t total = 0;
  for (const Tensor& p : plain.params) total += p.numel();
  const int64_t shard = (total + n - 1) / n;
  EXPECT_EQ(sharded_opt.state_bytes(), 3 * shard * 4);
}

// Run by tests/distributed/check_failed_rank.cmake only: the last rank dies (SIGKILL), or
// stops issuing collectives (sleeps), while the others wait in an all-reduce; the job must end
// with an error, not hang.
TEST_F(Distributed, FailedRankEndsTheJob) {
  const char* failure = std::getenv("LT_TEST_FAIL_LAST_RANK");
  if (failure == nullptr) {
    GTEST_SKIP() << "run by check_failed_rank.cmake (mpirun with LT_TEST_FAIL_LAST_RANK)";
  }
  NEEDS_RANKS();
  values(dist::all_reduce(lt::ones({4})));
  // Both ranks got this far: the job's end is the failure's doing, not a failed start.
  std::printf("rank %d: first all-reduce done\n", dist::rank());
  std::fflush(stdout);
  if (dist::rank() == dist::world_size() - 1) {
    if (std::string(failure) == "kill") std::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(600));
  }
  values(dist::all_reduce(lt::ones({4})));
  ADD_FAILURE() << "rank " << dist::rank() << " completed an all-reduce without the last rank";
}

}  // namespace
