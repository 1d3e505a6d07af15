// The training loop of docs/autograd.md, whole: a two-layer MLP learns two Gaussian blobs with
// dropout, a linear warm-up schedule and AdamW. Each step's forward pass, backward pass and
// update are one graph, compiled once; the loss is read every 20 steps.
#include <lazytensor/lazytensor.h>

#include <cstdio>
#include <random>
#include <vector>

int main() {
  // The data: 256 points, two classes.
  std::mt19937 gen(7);
  std::normal_distribution<float> noise(0.0f, 0.6f);
  std::vector<float> points;
  std::vector<int64_t> classes;
  for (int i = 0; i < 256; ++i) {
    const int label = i % 2;
    points.push_back((label ? 1.5f : -1.5f) + noise(gen));
    points.push_back((label ? -1.0f : 1.0f) + noise(gen));
    classes.push_back(label);
  }
  const lt::Tensor x = lt::from_vector(points, {256, 2});
  const lt::Tensor labels = lt::from_vector(classes, {256});

  lt::Tensor w1 = (lt::randn({64, 2}, 1) * 0.5).requires_grad_();
  lt::Tensor b1 = lt::zeros({64}).requires_grad_();
  lt::Tensor w2 = (lt::randn({2, 64}, 2) * 0.2).requires_grad_();
  lt::mark_step();  // the parameters' initial values: a graph of their own
  lt::optim::AdamW opt({w1, b1, w2}, {.lr = 1e-2});  // gradients: the params' grad()
  auto schedule = lt::optim::linear_schedule(10, 100);
  for (int step = 0; step < 100; ++step) {
    opt.set_lr(schedule->lr(1e-2, step));  // a kernel argument: no recompile
    lt::Tensor h = lt::dropout(lt::gelu(lt::linear(x, w1, b1)), 0.1);  // a new mask each step
    lt::Tensor loss = lt::cross_entropy(lt::linear(h, w2), labels);
    loss.backward();  // traced, not run: the gradients are more lazy ops
    opt.step();       // under NoGradGuard, in place
    opt.zero_grad();  // before the cut: gradients dead there are never stored
    lt::mark_step();  // forward + backward + AdamW: one graph, compiled once, run async
    if (step % 20 == 19) std::printf("step %3d  loss %.4f\n", step + 1, loss.item());
  }
  // The parameters, the optimizer's zero state, and the training step: once for 100 steps.
  std::printf("graphs compiled: %lld\n",
              static_cast<long long>(lt::metrics::counter_value("UncachedCompile")));
  return 0;
}
