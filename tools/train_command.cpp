#include "train_command.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>

#include "adamw_command.h"
#include "lazytensor/bert.h"
#include "lazytensor/lazytensor.h"
#include "lazytensor/mlm.h"
#include "lazytensor/safetensors.h"
#include "lazytensor/text.h"
#include "loss_plot.h"
#include "ranks.h"

namespace lt::tools {

namespace {

// The whole process's resource usage so far (all of its threads).
rusage process_usage() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage;
}

double seconds_of(const timeval& t) {
  return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
}

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kCheckpointFormat = "lazytensor-train-checkpoint-1";
constexpr const char* kExpAvg = "optimizer.exp_avg.";
constexpr const char* kExpAvgSq = "optimizer.exp_avg_sq.";
constexpr const char* kExpAvgAbsmax = "optimizer.exp_avg_absmax.";
constexpr const char* kExpAvgSqAbsmax = "optimizer.exp_avg_sq_absmax.";

// Where `make models` put the pretrained files: $LT_MODELS_DIR, else the checkout's models/.
fs::path models_dir() {
  if (const char* dir = std::getenv("LT_MODELS_DIR"); dir && *dir) return dir;
  return LT_DEFAULT_MODELS_DIR;
}

fs::path minilm_dir() {
  const fs::path dir = models_dir() / "all-MiniLM-L6-v2";
  if (!fs::exists(dir / "vocab.txt")) {
    throw Error("train: the all-MiniLM-L6-v2 files are not in " + dir.string() +
                " (run `make models`, or set LT_MODELS_DIR)");
  }
  return dir;
}

// Parameters that get no weight decay, as HuggingFace's run_mlm.py: biases and layer norms.
bool decays(const std::string& name) {
  const bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
  return !bias && name.find("LayerNorm") == std::string::npos;
}

// The corpus as two token streams: every twentieth document is held out.
struct TokenData {
  std::vector<int64_t> train, heldout;
  // The same documents one by one (rows of their own under --dynamic-padding).
  std::vector<std::vector<int64_t>> train_documents, heldout_documents;
  int64_t documents = 0;
  double seconds = 0;
};

TokenData tokenize_corpus(const std::string& path, const text::WordPieceTokenizer& tokenizer) {
  const auto start = Clock::now();
  TokenData d;
  const std::vector<text::Document> docs = text::read_corpus(path);
  d.documents = static_cast<int64_t>(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    const bool heldout = i % 20 == 19;
    std::vector<int64_t>& stream = heldout ? d.heldout : d.train;
    std::vector<int64_t> ids = tokenizer.encode(docs[i].text);
    stream.insert(stream.end(), ids.begin(), ids.end());
    stream.push_back(tokenizer.sep_id());
    (heldout ? d.heldout_documents : d.train_documents).push_back(std::move(ids));
  }
  d.seconds = seconds_since(start);
  return d;
}

nn::NamedTensors to_named(const std::vector<safetensors::NamedTensor>& tensors,
                          const std::string& skip_prefix) {
  nn::NamedTensors out;
  for (const auto& t : tensors) {
    if (t.name.rfind(skip_prefix, 0) != 0) out.emplace_back(t.name, t.tensor);
  }
  return out;
}

// The model, its optimizer and where the run stands: everything a checkpoint holds.
struct Trainer {
  models::BertConfig config;
  std::unique_ptr<models::Bert> model;
  std::unique_ptr<optim::AdamW> optimizer;
  // (group, index in group) of each named parameter, for the optimizer state.
  std::vector<std::pair<std::string, std::pair<size_t, size_t>>> slots;
  int64_t step = 0;  // optimizer steps taken
  std::vector<double> losses;
  std::vector<std::pair<int64_t, double>> heldout;
};

Trainer make_trainer(const TrainCommandOptions& o, bool announce) {
  Trainer t;
  t.config = models::BertConfig::preset(o.model);
  if (o.dropout >= 0) {
    t.config.hidden_dropout_prob = o.dropout;
    t.config.attention_probs_dropout_prob = o.dropout;
  }
  manual_seed(o.seed);
  t.model = std::make_unique<models::Bert>(t.config);
  if (o.init != "random") {
    fs::path file = o.init;
    if (o.init == "minilm") {
      if (o.model != "mini") {
        throw Error("train: --init minilm is all-MiniLM-L6-v2, a `mini` model; got --model " +
                    o.model);
      }
      file = minilm_dir() / "model.safetensors";
    }
    const nn::LoadResult r = t.model->load_pretrained(file.string());
    if (!r.unexpected.empty()) {
      throw Error("train: " + file.string() + " does not fit the " + o.model + " model: it has '" +
                  r.unexpected.front() + "'" +
                  (r.unexpected.size() > 1
                       ? " and " + std::to_string(r.unexpected.size() - 1) + " more unknown tensors"
                       : std::string()));
    }
    if (announce) {
      std::printf("init: %s", file.string().c_str());
      if (!r.missing.empty()) {
        std::printf(", %zu not in the file and initialized randomly (first: %s)", r.missing.size(),
                    r.missing.front().c_str());
      }
      std::printf("\n");
    }
  }
  if (distributed::world_size() > 1) {
    // Data parallelism: every rank starts from rank 0's parameters (as PyTorch DDP broadcasts
    // them when it wraps a model), before the optimizer takes any copy of them.
    const NoGradGuard no_grad;
    for (Tensor& p : t.model->parameters()) {
      Tensor same = p;
      same.copy_(distributed::broadcast(p, 0));
    }
  }
  optim::ParamGroup<optim::AdamWOptions> decay, no_decay;
  decay.options.lr = no_decay.options.lr = o.lr;
  decay.options.eps = no_decay.options.eps = 1e-8;
  decay.options.weight_decay = o.weight_decay;
  no_decay.options.weight_decay = 0;
  decay.options.precision = no_decay.options.precision =
      optim::parse_precision(o.optimizer_precision);
  for (auto& [name, param] : t.model->named_parameters()) {
    auto& group = decays(name) ? decay : no_decay;
    t.slots.emplace_back(name, std::pair{decays(name) ? 0 : 1, group.params.size()});
    group.params.push_back(param);
  }
  t.optimizer = std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup<optim::AdamWOptions>>{decay, no_decay},
      optim::AdamW::Flavor::torch);
  return t;
}

// --precision: the dtype of the forward's matrix products.
DType products_dtype(const TrainCommandOptions& o) {
  return o.precision == "bf16" ? DType::bf16 : DType::f32;
}

json run_settings(const TrainCommandOptions& o) {
  return {{"model", o.model},
          {"batch", o.batch},
          {"seq", o.seq},
          {"seed", o.seed},
          {"lr", o.lr},
          {"warmup", o.warmup},
          {"steps", o.steps},
          {"schedule", o.schedule},
          {"weight_decay", o.weight_decay},
          {"optimizer_precision", o.optimizer_precision},
          {"clip_norm", o.clip_norm},
          {"dropout", o.dropout},
          {"mlm_head", o.mlm_head}};
}

void save_checkpoint(const std::string& path, const Trainer& t, const TrainCommandOptions& o) {
  std::vector<safetensors::NamedTensor> tensors;
  for (auto& [name, param] : t.model->state_dict()) tensors.push_back({name, param});
  for (const auto& [name, slot] : t.slots) {
    const auto& s = t.optimizer->state(slot.first, slot.second);
    tensors.push_back({kExpAvg + name, s.exp_avg});
    tensors.push_back({kExpAvgSq + name, s.exp_avg_sq});
    if (s.exp_avg_absmax.defined()) {  // 8-bit moments: the codes' block maxima
      tensors.push_back({kExpAvgAbsmax + name, s.exp_avg_absmax});
      tensors.push_back({kExpAvgSqAbsmax + name, s.exp_avg_sq_absmax});
    }
  }
  const GeneratorState g = generator_state();
  safetensors::Metadata meta{{"format", kCheckpointFormat},
                             {"step", std::to_string(t.step)},
                             {"generator_seed", std::to_string(g.seed)},
                             {"generator_offset", std::to_string(g.offset)},
                             {"config", t.config.to_json()},
                             {"run", run_settings(o).dump()},
                             {"losses", json(t.losses).dump()},
                             {"heldout", json(t.heldout).dump()}};
  safetensors::save(path, tensors, meta);
}

// Restores a checkpoint into a trainer made with the same flags.
void resume(Trainer& t, const TrainCommandOptions& o) {
  const safetensors::File ck = safetensors::load(o.resume_path);
  auto meta = [&](const std::string& key) -> const std::string& {
    auto it = ck.metadata.find(key);
    if (it == ck.metadata.end()) {
      throw Error("train --resume: " + o.resume_path + " is not a training checkpoint (no '" + key +
                  "' in its metadata)");
    }
    return it->second;
  };
  if (meta("format") != kCheckpointFormat) {
    throw Error("train --resume: " + o.resume_path + " has format '" + meta("format") +
                "', expected " + kCheckpointFormat);
  }
  json run = json::parse(meta("run"));
  for (const char* key : {"model", "batch", "seq", "seed"}) {
    if (run.at(key) != run_settings(o).at(key)) {
      throw Error("train --resume: the checkpoint was made with --" + std::string(key) + " " +
                  run.at(key).dump() + ", not " + run_settings(o).at(key).dump());
    }
  }
  // Checkpoints from before the option have fp32 state.
  const std::string precision = run.value("optimizer_precision", std::string("fp32"));
  if (precision != o.optimizer_precision) {
    throw Error("train --resume: the checkpoint holds " + precision +
                " optimizer state, not --optimizer-precision " + o.optimizer_precision);
  }
  // Checkpoints from before --mlm-head ran the head at every position.
  if (!run.contains("mlm_head")) run["mlm_head"] = "all";
  for (const char* key :
       {"lr", "warmup", "steps", "schedule", "weight_decay", "clip_norm", "mlm_head"}) {
    if (run.at(key) != run_settings(o).at(key)) {
      std::string flag = key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      std::fprintf(stderr,
                   "train --resume: warning: --%s %s differs from the checkpoint's %s: the run "
                   "will not match an uninterrupted one\n",
                   flag.c_str(), run_settings(o).at(key).dump().c_str(),
                   run.at(key).dump().c_str());
    }
  }
  t.model->load_state_dict(to_named(ck.tensors, "optimizer."), /*strict=*/true);
  t.step = std::stoll(meta("step"));
  // The state the optimizer made for --optimizer-precision is what the checkpoint must hold:
  // the same tensors, shapes and dtypes.
  for (const auto& [name, slot] : t.slots) {
    auto& s = t.optimizer->mutable_state(slot.first, slot.second);
    for (auto [prefix, target] : {std::pair{kExpAvg, &s.exp_avg},
                                  {kExpAvgSq, &s.exp_avg_sq},
                                  {kExpAvgAbsmax, &s.exp_avg_absmax},
                                  {kExpAvgSqAbsmax, &s.exp_avg_sq_absmax}}) {
      if (!target->defined()) continue;
      const Tensor* saved = ck.find(prefix + name);
      if (!saved)
        throw Error("train --resume: the checkpoint has no '" + std::string(prefix) + name + "'");
      if (saved->shape() != target->shape() || saved->dtype() != target->dtype()) {
        throw Error("train --resume: '" + std::string(prefix) + name + "' is " +
                    saved->shape().str() + " " + dtype_name(saved->dtype()) +
                    " but the optimizer keeps it as " + target->shape().str() + " " +
                    dtype_name(target->dtype()));
      }
      *target = *saved;
    }
    s.step = t.step;
  }
  set_generator_state({std::stoull(meta("generator_seed")), std::stoull(meta("generator_offset"))});
  t.losses = json::parse(meta("losses")).get<std::vector<double>>();
  t.heldout = json::parse(meta("heldout")).get<std::vector<std::pair<int64_t, double>>>();
}

// A progress line on stderr: redrawn in place on a terminal, every tenth of the run otherwise.
class Progress {
 public:
  Progress(int64_t total, bool quiet) : total_(total), quiet_(quiet), tty_(isatty(2)) {}
  void update(int64_t step, double loss, double tokens_per_second, double eta_seconds,
              std::optional<double> heldout) {
    if (quiet_) return;
    if (!tty_ && step != total_ && step % std::max<int64_t>(1, total_ / 10) != 0) return;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(1, total_));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    const long eta = std::lround(eta_seconds);
    char held[32] = "";
    if (heldout) std::snprintf(held, sizeof held, " held-out %.4f", *heldout);
    std::fprintf(stderr, "%s[%s] %lld/%lld loss %.4f%s | %.0f tok/s | ETA %ld:%02ld   %s",
                 tty_ ? "\r" : "", bar.c_str(), static_cast<long long>(step),
                 static_cast<long long>(total_), loss, held, tokens_per_second, eta / 60, eta % 60,
                 tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  void finish() {
    if (!quiet_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  int64_t total_;
  bool quiet_, tty_;
};

struct TrainResult {
  std::string policy;
  std::vector<double> step_seconds;
  // Device time over the whole run (evaluations included): executions, and the GEMM library
  // calls of matrix products within them.
  double execute_seconds = 0, gemm_seconds = 0;
  std::vector<int64_t> sync_transfers, compiles;
  std::map<std::string, int64_t> counters_total, counters_after_first;
  int64_t peak_device_bytes = 0;
  double step_seconds_median = 0;
  // Real tokens (padding left out) a second; windows hold no padding.
  double tokens_per_second = 0;
  std::vector<int64_t> step_tokens, step_lengths;  // all ranks' real tokens, padded length
  int64_t first_step = 0;
  // The first step's CPU time in the OS kernel (all of the process's threads) and its page
  // faults: handing the process the memory its state and activations first take, which on a
  // virtual machine whose host takes back free memory is seconds of that step.
  double first_step_system_seconds = 0;
  int64_t first_step_page_faults = 0;
};

class Run {
 public:
  Run(const TrainCommandOptions& o, const text::WordPieceTokenizer& tokenizer,
      const TokenData& data, bool announce)
      : o_(o),
        trainer_(make_trainer(o, announce)),
        train_windows_(data.train, o.seq, tokenizer.cls_id(), tokenizer.sep_id(), o.seed),
        heldout_windows_(data.heldout, o.seq, tokenizer.cls_id(), tokenizer.sep_id(), o.seed),
        schedule_(optim::make_schedule(o.schedule, warmup(o), o.steps)) {
    mlm_.vocab_size = trainer_.config.vocab_size;
    mlm_.mask_id = tokenizer.mask_id();
    mlm_.special_ids = {tokenizer.pad_id(), tokenizer.cls_id(), tokenizer.sep_id()};
    if (o.rows == "documents") {
      train_documents_.emplace(data.train_documents, o.seq, tokenizer.cls_id(), tokenizer.sep_id(),
                               tokenizer.pad_id(), o.seed);
      heldout_documents_.emplace(data.heldout_documents, o.seq, tokenizer.cls_id(),
                                 tokenizer.sep_id(), tokenizer.pad_id(), o.seed);
    }
    eval_batches_ = std::min(
        o.eval_batches,
        (heldout_documents_ ? heldout_documents_->size() : heldout_windows_.size()) / o.batch);
    if (!o.resume_path.empty()) resume(trainer_, o);
    if (distributed::world_size() > 1) draw_per_rank();
    // Initial values, loaded weights, restored state and the weights' bf16 copies (under
    // --precision bf16) become device data now, so that the first training step traces the
    // same graph as every later one.
    if (compute_dtype() == DType::bf16) make_autocast_copies(trainer_.model->parameters());
    mark_step();
    wait_device_ops();
  }

  // Data parallelism (under mpirun): each rank draws its own dropout: the generator continues
  // from rank 0's state with the rank mixed into the seed (rank 0's is unchanged, so a
  // checkpoint it saves resumes alike). Masks are drawn by the host from the seed and the
  // batch number (mask_batch), so the ranks together mask as one process would.
  void draw_per_rank() {
    GeneratorState g = generator_state();
    g.seed ^= static_cast<uint64_t>(distributed::rank()) * 0x9e3779b97f4a7c15ull;
    set_generator_state(g);
  }

  // A batch's rows on the host, row-major [rows, length]: windows (every token attends, no
  // mask) or documents with their attention mask.
  struct HostRows {
    std::vector<int64_t> ids, attention;
    int64_t length = 0;
    int64_t tokens = 0;  // real tokens, padding left out
  };
  HostRows train_rows(int64_t index, int64_t rows) const {
    if (!train_documents_) {
      return {train_windows_.shuffled_ids(index, rows), {}, o_.seq, rows * o_.seq};
    }
    data::DocumentBatches::Batch b = train_documents_->shuffled(index, rows, o_.dynamic_padding);
    return {std::move(b.ids), std::move(b.attention), b.length, b.tokens};
  }
  HostRows heldout_rows(int64_t first, int64_t rows) const {
    if (!heldout_documents_) {
      return {heldout_windows_.ordered_ids(first, rows), {}, o_.seq, rows * o_.seq};
    }
    data::DocumentBatches::Batch b = heldout_documents_->ordered(first, rows, o_.dynamic_padding);
    return {std::move(b.ids), std::move(b.attention), b.length, b.tokens};
  }

  // One rank's part of a batch: BERT's masking of rows [first_row, first_row + batch), by the
  // host (the key depends only on the seed, the stream, training or held-out, and the batch
  // number, so a resumed run draws the same masks and evaluations the same ones every time),
  // and those rows' attention mask.
  enum class MaskStream : uint64_t { train = 1, heldout = 2 };
  struct StepBatch {
    data::MlmBatch mlm;
    Tensor attention;  // undefined for windows
  };
  StepBatch mask_batch(const HostRows& rows, int64_t first_row, MaskStream stream,
                       int64_t index) const {
    const uint64_t key =
        ((o_.seed * 0x9e3779b97f4a7c15ull) ^ (static_cast<uint64_t>(stream) << 56)) +
        static_cast<uint64_t>(index);
    const int64_t begin = first_row * rows.length, end = begin + o_.batch * rows.length;
    StepBatch b;
    b.mlm =
        data::mask_tokens(std::vector<int64_t>(rows.ids.begin() + begin, rows.ids.begin() + end),
                          o_.batch, rows.length, mlm_, key, first_row);
    if (!rows.attention.empty()) {
      b.attention = from_vector(
          std::vector<int64_t>(rows.attention.begin() + begin, rows.attention.begin() + end),
          Shape{o_.batch, rows.length});
    }
    return b;
  }

  // The step's loss; --mlm-head predicted runs the head at the predicted tokens only.
  Tensor mlm_loss(const StepBatch& b) const {
    return o_.mlm_head == "all"
               ? trainer_.model->mlm_loss(b.mlm.input_ids, b.mlm.labels, b.attention)
               : trainer_.model->mlm_loss_at(b.mlm.input_ids, b.mlm.predicted_positions,
                                             b.mlm.predicted_labels, b.attention);
  }

  DType compute_dtype() const { return products_dtype(o_); }

  static int64_t warmup(const TrainCommandOptions& o) {
    return o.warmup < 0 ? o.steps / 10 : o.warmup;
  }

  Trainer& trainer() { return trainer_; }
  int64_t eval_batches() const { return eval_batches_; }
  int64_t train_windows() const { return train_windows_.size(); }

  // Mean MLM loss over the first eval_batches held-out batches, with masks that are the same
  // at every evaluation (keyed by the seed and the held-out batch number), in evaluation mode.
  double evaluate() {
    if (eval_batches_ == 0) return NAN;
    const NoGradGuard no_grad;
    trainer_.model->eval();
    std::vector<Tensor> losses;
    for (int64_t k = 0; k < eval_batches_; ++k) {
      const StepBatch b =
          mask_batch(heldout_rows(k * o_.batch, o_.batch), 0, MaskStream::heldout, k);
      {
        const AutocastGuard autocast(compute_dtype());
        losses.push_back(mlm_loss(b));
      }
      mark_step();  // one batch per graph: the same graph each time, and one batch's memory
    }
    trainer_.model->train();
    double sum = 0;
    for (const Tensor& l : losses) sum += l.item();
    return sum / static_cast<double>(losses.size());
  }

  // Traces one training step (batch number trainer.step) and cuts the graph; returns the loss.
  // `tokens` gets the batch's real tokens (all ranks'), `length` its rows' padded length.
  Tensor trace_step(std::vector<data::MlmBatch>* exported, int64_t& tokens, int64_t& length) {
    Trainer& t = trainer_;
    // Under mpirun the step's batch is --batch rows per rank, and rank r masks and trains on
    // rows [r * batch, (r + 1) * batch): the ranks together see the batches and masks one
    // process with --batch world x batch would (and one length, under dynamic padding).
    const int64_t world = distributed::world_size();
    const HostRows rows = train_rows(t.step, o_.batch * world);
    tokens = rows.tokens;
    length = rows.length;
    const StepBatch b = mask_batch(rows, distributed::rank() * o_.batch, MaskStream::train, t.step);
    Tensor loss;
    {
      // The forward under autocast; its backward records its own precision (as PyTorch's).
      const AutocastGuard autocast(compute_dtype());
      loss = mlm_loss(b);
    }
    loss.backward();
    if (world > 1) {
      // Gradients averaged before clipping and the optimizer (as DDP's), and the loss reported
      // is the ranks' mean.
      distributed::average_gradients(t.model->parameters());
      loss = distributed::all_reduce(loss, distributed::ReduceOp::mean);
    }
    if (o_.clip_norm > 0) {
      std::vector<Tensor> grads;
      for (const Tensor& p : t.model->parameters()) grads.push_back(p.grad());
      clip_grad_norm_(grads, o_.clip_norm);
    }
    t.optimizer->set_lr(schedule_->lr(o_.lr, t.step));
    t.optimizer->step();
    // Gradients released before the cut: dead there, the step's kernels never store them (the
    // clipped ones were a write of every parameter's size, AdamW's only traffic it did not need).
    t.optimizer->zero_grad();
    ++t.step;
    if (exported) exported->push_back(b.mlm);
    mark_step();
    return loss;
  }

  TrainResult train(ScalarPolicy policy, bool evaluate_and_save) {
    set_scalar_policy(policy);
    Trainer& t = trainer_;
    TrainResult r;
    r.policy = scalar_policy_name(policy);
    r.first_step = t.step + 1;
    const int64_t eval_every =
        o_.eval_every > 0 ? o_.eval_every : std::max<int64_t>(1, o_.steps / 10);
    if (evaluate_and_save && t.heldout.empty()) t.heldout.emplace_back(t.step, evaluate());

    std::vector<data::MlmBatch> exported;
    metrics::reset();
    reset_peak_device_memory();
    if (!o_.trace_path.empty()) {
      profiler::start();
      profiler::set_thread_name("host (tracing)");
    }
    Progress progress(o_.steps, o_.quiet);
    Tensor pending_loss;
    auto read_loss = [&] {
      if (pending_loss.defined()) t.losses.push_back(pending_loss.item());
      pending_loss = Tensor();
    };
    std::map<std::string, int64_t> before = counters();
    const auto run_start = Clock::now();
    while (t.step < o_.steps) {
      const bool first = t.step + 1 == r.first_step;
      const rusage usage_before = process_usage();
      const DeviceEvent start = record_event();
      Tensor loss;
      {
        profiler::Scope span("trace step", "host");
        int64_t tokens = 0, length = 0;
        loss = trace_step(o_.export_batches_path.empty() ? nullptr : &exported, tokens, length);
        r.step_tokens.push_back(tokens);
        r.step_lengths.push_back(length);
      }
      const DeviceEvent end = record_event();
      const auto now = counters();
      r.sync_transfers.push_back(delta(now, before, "TransferToDeviceSync"));
      r.compiles.push_back(delta(now, before, "UncachedCompile"));
      if (t.step == r.first_step) r.counters_after_first = now;
      read_loss();  // the previous step's: it finished while this one was traced
      pending_loss = loss;
      r.step_seconds.push_back(end.seconds_since(start));
      if (first) {
        const rusage usage_after = process_usage();
        r.first_step_system_seconds =
            seconds_of(usage_after.ru_stime) - seconds_of(usage_before.ru_stime);
        r.first_step_page_faults = (usage_after.ru_minflt + usage_after.ru_majflt) -
                                   (usage_before.ru_minflt + usage_before.ru_majflt);
      }
      std::optional<double> heldout;
      if (evaluate_and_save && (t.step % eval_every == 0 || t.step == o_.steps)) {
        read_loss();
        heldout = evaluate();
        t.heldout.emplace_back(t.step, *heldout);
      }
      if (evaluate_and_save && o_.save_every > 0 && !o_.save_path.empty() &&
          t.step % o_.save_every == 0 && t.step != o_.steps) {
        read_loss();
        save_checkpoint(o_.save_path, t, o_);
      }
      const double elapsed = seconds_since(run_start);
      const int64_t done = t.step - r.first_step + 1;
      const double last = t.losses.empty() ? NAN : t.losses.back();
      const int64_t tokens_done =
          std::accumulate(r.step_tokens.end() - done, r.step_tokens.end(), int64_t{0});
      progress.update(t.step, last, static_cast<double>(tokens_done) / elapsed,
                      elapsed / done * static_cast<double>(o_.steps - t.step), heldout);
      before = counters();
    }
    read_loss();
    wait_device_ops();
    progress.finish();
    r.counters_total = counters();
    for (auto& [name, value] : r.counters_after_first) value = r.counters_total[name] - value;
    r.peak_device_bytes = device_memory_stats().peak_bytes;
    r.execute_seconds = metrics::timer_stats("ExecuteTime").total_seconds;
    r.gemm_seconds = metrics::timer_stats("MatMulTime").total_seconds;
    std::vector<double> after_first(
        r.step_seconds.begin() + std::min<size_t>(1, r.step_seconds.size()), r.step_seconds.end());
    r.step_seconds_median = median(after_first.empty() ? r.step_seconds : after_first);
    if (r.step_tokens.empty()) {
      r.tokens_per_second = 0;
    } else if (o_.rows == "windows") {
      r.tokens_per_second = r.step_seconds_median > 0
                                ? static_cast<double>(r.step_tokens.front()) / r.step_seconds_median
                                : 0;
    } else {
      // Steps of different lengths take different times: real tokens over the time they took,
      // the first step (compiles) left out.
      const size_t first = std::min<size_t>(1, r.step_seconds.size() - 1);
      const double seconds =
          std::accumulate(r.step_seconds.begin() + first, r.step_seconds.end(), 0.0);
      const auto tokens = static_cast<double>(
          std::accumulate(r.step_tokens.begin() + first, r.step_tokens.end(), int64_t{0}));
      r.tokens_per_second = seconds > 0 ? tokens / seconds : 0;
    }
    if (!o_.trace_path.empty()) {
      profiler::stop();
      profiler::write_chrome_trace(o_.trace_path);
    }
    if (!exported.empty()) export_batches(exported);
    return r;
  }

 private:
  void export_batches(const std::vector<data::MlmBatch>& batches) {
    const int64_t n = static_cast<int64_t>(batches.size());
    std::vector<int64_t> ids, labels;
    for (const auto& b : batches) {
      const auto i = b.input_ids.to_vector<int64_t>();
      const auto l = b.labels.to_vector<int64_t>();
      ids.insert(ids.end(), i.begin(), i.end());
      labels.insert(labels.end(), l.begin(), l.end());
    }
    const Shape shape{n, o_.batch, o_.seq};
    safetensors::save(o_.export_batches_path,
                      {{"input_ids", from_vector(ids, shape)},
                       {"labels", from_vector(labels, shape)},
                       {"attention_mask", ones(shape, DType::i64)}},
                      {{"first_step", std::to_string(trainer_.step - n + 1)}});
  }

  const TrainCommandOptions& o_;
  Trainer trainer_;
  data::TokenWindows train_windows_, heldout_windows_;
  std::optional<data::DocumentBatches> train_documents_, heldout_documents_;  // --rows documents
  std::unique_ptr<optim::Schedule> schedule_;
  data::MlmOptions mlm_;
  int64_t eval_batches_ = 0;
};

// The share of the batches' positions that are padding.
double padding_share(const TrainCommandOptions& o, const TrainResult& r) {
  int64_t positions = 0, tokens = 0;
  for (size_t s = 0; s < r.step_tokens.size(); ++s) {
    positions += o.batch * distributed::world_size() * r.step_lengths[s];
    tokens += r.step_tokens[s];
  }
  return positions > 0 ? 1.0 - static_cast<double>(tokens) / static_cast<double>(positions) : 0;
}

json result_json(const TrainCommandOptions& o, const Trainer& t, const TrainResult& r,
                 int64_t params) {
  json j = {
      {"model", o.model},
      {"device", default_device().str()},
      {"init", o.init},
      {"data", o.data},
      {"params", params},
      {"steps", o.steps},
      {"batch", o.batch},
      {"world_size", distributed::world_size()},
      {"seq", o.seq},
      {"lr", o.lr},
      {"warmup", Run::warmup(o)},
      {"schedule", o.schedule},
      {"clip_norm", o.clip_norm},
      {"weight_decay", o.weight_decay},
      {"precision", o.precision},
      {"optimizer_precision", o.optimizer_precision},
      {"mlm_head", o.mlm_head},
      {"matmul_library", matmul_library(products_dtype(o))},
      {"matmul_isa", matmul_isa(products_dtype(o))},
      {"kernel_isa", kernel_isa()},
      {"seed", o.seed},
      {"scalar_policy", r.policy},
      {"kernel_compiler", kernel_compiler()},
      {"first_step", r.first_step},
      {"losses", t.losses},
      {"heldout", t.heldout},
      {"step_seconds", r.step_seconds},
      {"first_step_system_seconds", r.first_step_system_seconds},
      {"first_step_page_faults", r.first_step_page_faults},
      {"step_seconds_median", r.step_seconds_median},
      {"tokens_per_second", r.tokens_per_second},
      {"rows", o.rows},
      {"dynamic_padding", o.dynamic_padding},
      {"lengths_per_step", r.step_lengths},
      {"distinct_lengths", std::set<int64_t>(r.step_lengths.begin(), r.step_lengths.end()).size()},
      {"padding_share", padding_share(o, r)},
      {"size_binds", r.counters_total.count("SizeBind") ? r.counters_total.at("SizeBind") : 0},
      {"sync_transfers_per_step", r.sync_transfers},
      {"compiles_per_step", r.compiles},
      {"peak_device_bytes", r.peak_device_bytes},
      {"execute_seconds", r.execute_seconds},
      {"gemm_seconds", r.gemm_seconds},
      {"gemm_share", r.execute_seconds > 0 ? r.gemm_seconds / r.execute_seconds : 0.0},
      {"counters", r.counters_total},
      {"counters_after_first_step", r.counters_after_first}};
  return j;
}

void write_json(const std::string& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw Error("train --json: cannot write " + path);
}

int64_t count_params(const models::Bert& model) {
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  return n;
}

void check_options(const TrainCommandOptions& o) {
  if (o.steps < 0) throw Error("train: --steps must be at least 0");
  if (o.batch <= 0) throw Error("train: --batch must be positive");
  if (o.seq < 3) throw Error("train: --seq must be at least 3 ([CLS], a token, [SEP])");
  if (!(o.lr >= 0)) throw Error("train: --lr must be non-negative");
  if (o.compare && (!o.resume_path.empty() || !o.save_path.empty())) {
    throw Error(
        "train: --compare runs each scalar policy from the start; it takes no --save or --resume");
  }
  if (o.compare && o.steps < 2) throw Error("train: --compare needs at least 2 steps");
  if (o.rows != "windows" && !o.export_batches_path.empty()) {
    throw Error("train: --export-batches writes windows of --seq tokens; it takes no --rows " +
                o.rows);
  }
  if (o.seq > models::BertConfig::preset(o.model).max_position_embeddings) {
    throw Error("train: --seq " + std::to_string(o.seq) + " exceeds the model's " +
                std::to_string(models::BertConfig::preset(o.model).max_position_embeddings) +
                " positions");
  }
}

}  // namespace

int run_train_command(const TrainCommandOptions& options) {
  // Under mpirun, data parallelism: every rank trains; rank 0 alone prints, writes the JSON and
  // plot, and saves checkpoints.
  TrainCommandOptions o = options;
  if (o.dynamic_padding) o.rows = "documents";
  if (!join_world_as_writer("train")) {
    o.quiet = true;
    o.json_path.clear();
    o.plot_path.clear();
    o.save_path.clear();
    o.trace_path.clear();
    o.export_batches_path.clear();
  }
  if (distributed::world_size() > 1 && o.compare) {
    throw Error("train: --compare runs alone, not under mpirun");
  }
  check_options(o);
  const text::WordPieceTokenizer tokenizer((minilm_dir() / "vocab.txt").string());
  const TokenData data = tokenize_corpus(o.data, tokenizer);
  std::printf(
      "data: %s: %lld documents, %zu training and %zu held-out tokens (tokenized in %.2f s)\n",
      o.data.c_str(), static_cast<long long>(data.documents), data.train.size(),
      data.heldout.size(), data.seconds);

  if (o.compare) {
    const std::unique_ptr<FreshKernelCache> fresh_cache = std::make_unique<FreshKernelCache>();
    std::vector<TrainResult> results;
    json runs = json::array();
    int64_t params = 0;
    for (ScalarPolicy policy : {ScalarPolicy::argument, ScalarPolicy::cached,
                                ScalarPolicy::uncached, ScalarPolicy::constant}) {
      std::fprintf(stderr, "%s:\n", scalar_policy_name(policy));
      Run run(o, tokenizer, data, results.empty());
      params = count_params(*run.trainer().model);
      results.push_back(run.train(policy, /*evaluate_and_save=*/false));
      runs.push_back(result_json(o, run.trainer(), results.back(), params));
    }
    std::printf("\nBERT %s MLM training, batch %lld x %lld, %lld steps, kernels: %s\n",
                o.model.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.seq),
                static_cast<long long>(o.steps), kernel_compiler().c_str());
    std::printf("%-10s %12s %10s %14s %14s %16s\n", "policy", "step (ms)", "tokens/s",
                "sync xfer/step", "compiles/step", "slower than arg");
    for (const TrainResult& r : results) {
      int64_t sync = 0, compiles = 0;
      for (size_t k = 1; k < r.compiles.size(); ++k) {
        sync += r.sync_transfers[k];
        compiles += r.compiles[k];
      }
      const double later = static_cast<double>(std::max<size_t>(1, r.compiles.size() - 1));
      std::printf("%-10s %12.1f %10.0f %14.1f %14.2f %15.1f%%\n", r.policy.c_str(),
                  r.step_seconds_median * 1e3, r.tokens_per_second, sync / later, compiles / later,
                  (r.step_seconds_median / results[0].step_seconds_median - 1) * 100);
    }
    if (!o.json_path.empty()) {
      json out = runs[0];
      out["compare"] = runs;
      write_json(o.json_path, out);
    }
    return 0;
  }

  Run run(o, tokenizer, data, true);
  Trainer& t = run.trainer();
  const int64_t params = count_params(*t.model);
  std::printf(
      "model: BERT %s (%lld parameters), %lld steps of %lld x %lld tokens from step %lld, "
      "%lld training windows, held-out loss over %lld batches, scalars %s, kernels %s%s\n",
      o.model.c_str(), static_cast<long long>(params), static_cast<long long>(o.steps),
      static_cast<long long>(o.batch), static_cast<long long>(o.seq),
      static_cast<long long>(t.step + 1), static_cast<long long>(run.train_windows()),
      static_cast<long long>(run.eval_batches()), o.scalars.c_str(), kernel_compiler().c_str(),
      distributed::world_size() > 1
          ? (", " + std::to_string(distributed::world_size()) + " ranks (data parallel)").c_str()
          : "");
  std::printf("products: %s, %s on %s; kernels: %s\n", o.precision.c_str(),
              matmul_library(run.compute_dtype()).c_str(), matmul_isa(run.compute_dtype()).c_str(),
              kernel_isa().c_str());
  const TrainResult r = run.train(parse_scalar_policy(o.scalars), /*evaluate_and_save=*/true);
  if (!o.save_path.empty()) save_checkpoint(o.save_path, t, o);

  int64_t later_sync = 0, later_compiles = 0;
  for (size_t k = 1; k < r.compiles.size(); ++k) {
    later_sync += r.sync_transfers[k];
    later_compiles += r.compiles[k];
  }
  std::printf(
      "steps %lld-%lld: median step %.1f ms, %.0f tokens/s, peak device memory %.1f MiB, "
      "compiles after the first step %lld, synchronous transfers after it %lld; GEMMs %.0f%% "
      "of device time (%s products)\n",
      static_cast<long long>(r.first_step), static_cast<long long>(t.step),
      r.step_seconds_median * 1e3, r.tokens_per_second, r.peak_device_bytes / 1048576.0,
      static_cast<long long>(later_compiles), static_cast<long long>(later_sync),
      r.execute_seconds > 0 ? 100 * r.gemm_seconds / r.execute_seconds : 0.0, o.precision.c_str());
  if (!t.losses.empty()) {
    std::printf("loss: first %.4f, last %.4f", t.losses.front(), t.losses.back());
    if (!t.heldout.empty()) {
      std::printf("; held-out: step %lld %.4f -> step %lld %.4f",
                  static_cast<long long>(t.heldout.front().first), t.heldout.front().second,
                  static_cast<long long>(t.heldout.back().first), t.heldout.back().second);
    }
    std::printf("\n");
  }
  std::printf("\n%s", metrics::report().c_str());
  const json out = result_json(o, t, r, params);
  if (!o.json_path.empty()) write_json(o.json_path, out);
  std::string plot = o.plot_path;
  if (plot.empty() && !o.json_path.empty())
    plot = fs::path(o.json_path).replace_extension(".png").string();
  if (!plot.empty() && !t.losses.empty()) {
    Series train{"training loss", {}}, heldout{"held-out loss", {}};
    for (size_t k = 0; k < t.losses.size(); ++k)
      train.points.emplace_back(double(k + 1), t.losses[k]);
    for (const auto& [step, loss] : t.heldout) heldout.points.emplace_back(double(step), loss);
    write_loss_plot(plot,
                    "BERT " + o.model + " MLM (" + o.init + " init), batch " +
                        std::to_string(o.batch) + " x " + std::to_string(o.seq),
                    {train, heldout});
    std::printf("plot: %s\n", plot.c_str());
  }
  distributed::finalize();
  return 0;
}

Command add_train_command(CLI::App& app) {
  auto options = std::make_shared<TrainCommandOptions>();
  auto* train = app.add_subcommand(
      "train", "train BERT (masked-language model) on real text, from scratch or MiniLM's weights");
  train->add_option("--model", options->model, "tiny, mini, base or large")
      ->check(CLI::IsMember({"tiny", "mini", "base", "large"}))
      ->capture_default_str();
  train
      ->add_option("--init", options->init,
                   "random, minilm (all-MiniLM-L6-v2, from `make models`) or a safetensors file")
      ->capture_default_str();
  train->add_option("--data", options->data, "a UTF-8 text file or a folder of them")
      ->capture_default_str();
  train->add_option("--steps", options->steps, "optimizer steps in all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  train->add_option("--batch", options->batch, "sequences per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  train->add_option("--seq", options->seq, "tokens per sequence")
      ->check(CLI::Range(3, 512))
      ->capture_default_str();
  train->add_option("--lr", options->lr, "peak learning rate")->capture_default_str();
  train->add_option("--warmup", options->warmup, "warm-up steps (default: a tenth)");
  train->add_option("--schedule", options->schedule, "constant, linear or cosine")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}))
      ->capture_default_str();
  train->add_option("--clip-norm", options->clip_norm, "global gradient norm (0: no clipping)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  train->add_option("--weight-decay", options->weight_decay, "AdamW's decoupled weight decay")
      ->capture_default_str();
  train
      ->add_option("--precision", options->precision,
                   "fp32, or bf16: autocast (matrix products on bf16 copies with f32 sums; "
                   "f32 weights, optimizer, softmax, layer norm and loss)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  train
      ->add_option("--optimizer-precision", options->optimizer_precision,
                   "AdamW's state: fp32, bf16 (moments, weights kept f32) or 8bit (block-wise "
                   "quantized moments)")
      ->check(CLI::IsMember({"fp32", "bf16", "8bit"}))
      ->capture_default_str();
  train
      ->add_option("--mlm-head", options->mlm_head,
                   "predicted: the MLM head at the predicted tokens only (BERT's pretraining); "
                   "all: at every position (HuggingFace's BertForMaskedLM); the same loss")
      ->check(CLI::IsMember({"predicted", "all"}))
      ->capture_default_str();
  train->add_option("--dropout", options->dropout, "dropout probability (default: the model's 0.1)")
      ->check(CLI::Range(0.0, 0.99));
  train->add_option("--scalars", options->scalars, "argument, cached, uncached or constant")
      ->check(CLI::IsMember({"argument", "cached", "uncached", "constant"}))
      ->capture_default_str();
  train->add_option("--seed", options->seed, "initial weights, batch order, masks, dropout")
      ->capture_default_str();
  train->add_option("--eval-every", options->eval_every,
                    "held-out loss every K steps (default: ten times a run)");
  train->add_option("--eval-batches", options->eval_batches, "held-out batches per evaluation")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  train->add_option("--json", options->json_path,
                    "write the metrics as JSON (and the loss curve as PNG beside it)");
  train->add_option("--plot", options->plot_path, "write the loss curve here (PNG)");
  train->add_option("--trace", options->trace_path, "write a Chrome trace-event timeline");
  train->add_option("--save", options->save_path,
                    "write a checkpoint (safetensors) at the end, and every --save-every steps");
  train->add_option("--save-every", options->save_every, "checkpoint period in steps")
      ->check(CLI::NonNegativeNumber);
  train->add_option("--resume", options->resume_path, "continue from a checkpoint");
  train->add_option(
      "--export-batches", options->export_batches_path,
      "write the masked batches of the run (safetensors), for the PyTorch parity check");
  train
      ->add_option("--rows", options->rows,
                   "windows: --seq tokens of the corpus each; documents: one document each, cut "
                   "at --seq and padded to it")
      ->check(CLI::IsMember({"windows", "documents"}))
      ->capture_default_str();
  train->add_flag("--dynamic-padding", options->dynamic_padding,
                  "rows are documents, each batch padded to its longest (one compiled graph for "
                  "every length)");
  train->add_flag("--compare", options->compare,
                  "the same steps under each scalar policy, side by side");
  train->add_flag("--quiet", options->quiet, "no progress bar");
  return {train, [options] { return run_train_command(*options); }};
}

}  // namespace lt::tools
