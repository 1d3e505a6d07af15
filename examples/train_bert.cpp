// The BERT loop of docs/training.md, whole: all-MiniLM-L6-v2 (or a tiny random BERT) trained as
// a masked language model on the fortunes corpus. Usage: train_bert [tiny|mini] [steps] [lr].
// Each step is one graph, compiled once; the loss of every tenth step is read, which waits.
#include <lazytensor/lazytensor.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string model_name = argc > 1 ? argv[1] : "mini";
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 400;
  const double lr = argc > 3 ? std::atof(argv[3]) : 2e-4;
  const char* models_env = std::getenv("LT_MODELS_DIR");
  const std::string models = models_env ? models_env : "models";
  try {
    lt::models::Bert model(lt::models::BertConfig::preset(model_name));
    if (model_name == "mini") {
      model.load_pretrained(models + "/all-MiniLM-L6-v2/model.safetensors");  // MLM head: random
    }
    lt::text::WordPieceTokenizer tokenizer(models + "/all-MiniLM-L6-v2/vocab.txt");
    std::vector<int64_t> stream;
    for (const auto& doc : lt::text::read_corpus("/usr/share/games/fortunes")) {
      for (int64_t id : tokenizer.encode(doc.text)) stream.push_back(id);
      stream.push_back(tokenizer.sep_id());
    }
    lt::data::TokenWindows windows(stream, /*seq_len=*/128, tokenizer.cls_id(), tokenizer.sep_id(),
                                   /*seed=*/42);
    lt::optim::AdamW opt(model.parameters(), {.lr = lr, .eps = 1e-8, .weight_decay = 0.01});
    lt::mark_step();  // initial values and loaded weights
    double first = 0, last = 0;
    for (int64_t step = 0; step < steps; ++step) {
      // BERT's masking by the host (the key: the batch number), so the MLM head runs only at
      // the predicted tokens, a fixed number of rows (lt::data::predicted_capacity).
      lt::data::MlmBatch batch =
          lt::data::mask_tokens(windows.shuffled_ids(step, 8), 8, 128, {}, /*key=*/step);
      lt::Tensor loss =
          model.mlm_loss_at(batch.input_ids, batch.predicted_positions, batch.predicted_labels);
      loss.backward();
      opt.step();
      opt.zero_grad();  // before the cut: gradients dead there are never stored
      lt::mark_step();  // one graph per step, compiled once
      if (step % 10 == 0 || step == steps - 1) {
        last = loss.item();
        if (step == 0) first = last;
        std::printf("step %lld: loss %.4f\n", static_cast<long long>(step + 1), last);
      }
    }
    std::printf("graphs compiled: %lld\n",
                static_cast<long long>(lt::metrics::counter_value("UncachedCompile")));
    if (last >= first) return 1;
    std::printf("the loss fell from %.4f to %.4f\n", first, last);
    return 0;
  } catch (const lt::Error& e) {
    std::fprintf(stderr, "train_bert: %s\n", e.what());
    return 1;
  }
}
