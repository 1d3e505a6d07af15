// ZeRO stage 1 (lazytensor/distributed_optim.h): AdamW over this rank's shard of each group's
// flattened parameters, with reduce-scatter before and all-gather after.
#include <string>

#include "lazytensor/autograd.h"
#include "lazytensor/distributed.h"
#include "lazytensor/distributed_optim.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "lazytensor/runtime.h"

namespace lt::distributed {

struct ShardedAdamW::Shards {
  // One parameter per group: this rank's shard, of the same number of elements on every rank
  // (the flat vector padded to world_size() of them).
  std::unique_ptr<optim::AdamW> inner;
};

namespace {

// The group's parameters (or gradients) as one flat vector padded with zeros to `padded`.
Tensor flatten(const std::vector<Tensor>& tensors, int64_t padded, DType dtype) {
  std::vector<Tensor> parts;
  int64_t total = 0;
  for (const Tensor& t : tensors) {
    parts.push_back(t.detach().reshape({-1}));
    total += t.numel();
  }
  if (padded > total) parts.push_back(zeros({padded - total}, dtype));
  return parts.size() == 1 ? parts[0] : cat(parts, 0);
}

}  // namespace

ShardedAdamW::ShardedAdamW(std::vector<optim::ParamGroup<optim::AdamWOptions>> groups,
                           optim::AdamW::Flavor flavor)
    : groups_(std::move(groups)), shards_(std::make_unique<Shards>()) {
  const int64_t world = world_size(), rank = distributed::rank();
  std::vector<optim::ParamGroup<optim::AdamWOptions>> inner_groups;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& group = groups_[g];
    if (group.params.empty()) {
      throw Error("ShardedAdamW: group " + std::to_string(g) + " has no parameters");
    }
    if (!group.grads.empty() && group.grads.size() != group.params.size()) {
      throw Error("ShardedAdamW: group " + std::to_string(g) + " has " +
                  std::to_string(group.params.size()) + " parameters but " +
                  std::to_string(group.grads.size()) + " gradients");
    }
    if (group.options.precision == optim::Precision::q8) {
      throw Error(
          "ShardedAdamW: precision 8bit quantizes blocks of a parameter's rows; a flat "
          "shard has none (group " +
          std::to_string(g) + ": use fp32, mixed or bf16)");
    }
    const DType dtype = group.params[0].dtype();
    int64_t total = 0;
    for (size_t i = 0; i < group.params.size(); ++i) {
      if (group.params[i].dtype() != dtype) {
        throw Error("ShardedAdamW: group " + std::to_string(g) + " mixes dtypes (parameter 0 is " +
                    dtype_name(dtype) + ", parameter " + std::to_string(i) + " " +
                    dtype_name(group.params[i].dtype()) + "); one flat vector needs one dtype");
      }
      total += group.params[i].numel();
    }
    const int64_t shard_size = (total + world - 1) / world;
    const Tensor flat = flatten(group.params, shard_size * world, dtype);
    optim::ParamGroup<optim::AdamWOptions> shard;
    shard.options = group.options;
    shard.params.push_back(flat.slice(0, rank * shard_size, (rank + 1) * shard_size).clone());
    shard.grads.push_back(zeros({shard_size}, dtype));
    inner_groups.push_back(std::move(shard));
  }
  shards_->inner = std::make_unique<optim::AdamW>(std::move(inner_groups), flavor);
  mark_step();  // the shards become device data, as the state does
}

ShardedAdamW::ShardedAdamW(std::vector<Tensor> params, optim::AdamWOptions options,
                           optim::AdamW::Flavor flavor)
    : ShardedAdamW(
          std::vector<optim::ParamGroup<optim::AdamWOptions>>{{std::move(params), {}, options}},
          flavor) {}

ShardedAdamW::~ShardedAdamW() = default;

void ShardedAdamW::step() {
  const NoGradGuard no_grad;
  const int64_t world = world_size();
  auto& inner = shards_->inner->groups();
  // Every group's gradients first: a missing one throws before any collective is traced.
  std::vector<std::vector<Tensor>> all_grads;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& group = groups_[g];
    std::vector<Tensor> grads = group.grads;
    if (grads.empty()) {
      for (size_t i = 0; i < group.params.size(); ++i) {
        const Tensor grad = group.params[i].grad();
        if (!grad.defined()) {
          throw Error("ShardedAdamW: parameter " + std::to_string(i) + " of group " +
                      std::to_string(g) +
                      " has no gradient (every parameter of a sharded group "
                      "needs one, on every rank)");
        }
        grads.push_back(grad);
      }
    }
    all_grads.push_back(std::move(grads));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& group = groups_[g];
    const std::vector<Tensor>& grads = all_grads[g];
    const int64_t shard_size = inner[g].params[0].numel();
    const DType dtype = group.params[0].dtype();
    inner[g].options.lr = group.options.lr;
    inner[g].options.weight_decay = group.options.weight_decay;
    inner[g].grads[0] = reduce_scatter(flatten(grads, shard_size * world, dtype), ReduceOp::mean);
  }
  shards_->inner->step();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Tensor full = all_gather(inner[g].params[0]);
    int64_t at = 0;
    for (const Tensor& p : groups_[g].params) {
      Tensor target = p;
      target.copy_(full.slice(0, at, at + p.numel()).reshape(p.shape().to_vector()));
      at += p.numel();
    }
  }
}

void ShardedAdamW::zero_grad(bool set_to_none) {
  for (auto& group : groups_) {
    if (!group.grads.empty()) continue;
    for (const Tensor& p : group.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.mutable_grad() = Tensor();
      } else {
        p.mutable_grad().zero_();
      }
    }
  }
}

void ShardedAdamW::set_lr(double lr) {
  for (auto& group : groups_) group.options.lr = lr;
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t bytes = 0;
  auto size = [](const Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(dtype_size(t.dtype())) : 0;
  };
  const auto& inner = shards_->inner->groups();
  for (size_t g = 0; g < inner.size(); ++g) {
    const optim::AdamW::State& s = shards_->inner->state(g, 0);
    bytes += size(inner[g].params[0]);
    for (const Tensor* t : {&s.exp_avg, &s.exp_avg_sq, &s.max_exp_avg_sq, &s.master,
                            &s.exp_avg_absmax, &s.exp_avg_sq_absmax}) {
      bytes += size(*t);
    }
  }
  return bytes;
}

}  // namespace lt::distributed
