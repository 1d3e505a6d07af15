#include <algorithm>
#include <cmath>
#include <numbers>

#include "lazytensor/error.h"
#include "lazytensor/optim.h"

namespace lt::optim {

namespace {

class ConstantSchedule final : public Schedule {
 public:
  double factor(int64_t) const override { return 1.0; }
};

class LinearSchedule final : public Schedule {
 public:
  LinearSchedule(int64_t warmup, int64_t total) : warmup_(warmup), total_(total) {}
  double factor(int64_t step) const override {
    if (step < warmup_)
      return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_));
    return std::max(0.0, static_cast<double>(total_ - step) /
                             static_cast<double>(std::max<int64_t>(1, total_ - warmup_)));
  }

 private:
  int64_t warmup_, total_;
};

class CosineSchedule final : public Schedule {
 public:
  CosineSchedule(int64_t warmup, int64_t total, double cycles)
      : warmup_(warmup), total_(total), cycles_(cycles) {}
  double factor(int64_t step) const override {
    if (step < warmup_)
      return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_));
    const double progress = static_cast<double>(step - warmup_) /
                            static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
    return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * cycles_ * 2.0 * progress)));
  }

 private:
  int64_t warmup_, total_;
  double cycles_;
};

}  // namespace

std::unique_ptr<Schedule> constant_schedule() {
  return std::make_unique<ConstantSchedule>();
}
std::unique_ptr<Schedule> linear_schedule(int64_t warmup_steps, int64_t total_steps) {
  return std::make_unique<LinearSchedule>(warmup_steps, total_steps);
}
std::unique_ptr<Schedule> cosine_schedule(int64_t warmup_steps, int64_t total_steps,
                                          double num_cycles) {
  return std::make_unique<CosineSchedule>(warmup_steps, total_steps, num_cycles);
}
std::unique_ptr<Schedule> make_schedule(const std::string& name, int64_t warmup_steps,
                                        int64_t total_steps) {
  if (name == "constant") return constant_schedule();
  if (name == "linear") return linear_schedule(warmup_steps, total_steps);
  if (name == "cosine") return cosine_schedule(warmup_steps, total_steps);
  throw Error("make_schedule: unknown schedule '" + name +
              "' (expected constant, linear or cosine)");
}

}  // namespace lt::optim
