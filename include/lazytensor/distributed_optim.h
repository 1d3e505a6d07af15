#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "lazytensor/optim.h"
#include "lazytensor/tensor.h"

// Optimizers over lt::distributed's process group (lazytensor/distributed.h).
namespace lt::distributed {

// AdamW with its state sharded across the ranks (ZeRO stage 1, as DeepSpeed's): each group's
// parameters are seen as one flat vector cut into world_size() equal shards (the last padded);
// this rank keeps the moments, and an f32 copy, of its shard alone. A step reduce-scatters the
// gradients (each rank gets the ranks' mean over its shard), updates the shard with AdamW, and
// all-gathers the shards into every parameter. The updates are those of plain data parallelism
// (AdamW is elementwise); the optimizer's memory per rank falls by the world's size. In a
// world of one it is AdamW over the flat vector. The parameters of a group share one dtype;
// precision 8bit is refused (its blocks are a parameter's rows). The shards are taken from the
// parameters when it is constructed and every step writes them back: load a checkpoint (or
// broadcast rank 0's parameters) before constructing it.
class ShardedAdamW {
 public:
  ShardedAdamW(std::vector<optim::ParamGroup<optim::AdamWOptions>> groups,
               optim::AdamW::Flavor flavor = optim::AdamW::Flavor::huggingface);
  ShardedAdamW(std::vector<Tensor> params, optim::AdamWOptions options,
               optim::AdamW::Flavor flavor = optim::AdamW::Flavor::torch);
  ~ShardedAdamW();

  // Gradients: the groups' handed-in grads, else the params' grad() (every rank must have them).
  void step();
  void zero_grad(bool set_to_none = true);
  void set_lr(double lr);
  std::vector<optim::ParamGroup<optim::AdamWOptions>>& groups() { return groups_; }
  // Bytes of optimizer state this rank holds: the shards' moments and their f32 copies.
  int64_t state_bytes() const;

 private:
  struct Shards;
  std::vector<optim::ParamGroup<optim::AdamWOptions>> groups_;
  std::unique_ptr<Shards> shards_;
};

}  // namespace lt::distributed
