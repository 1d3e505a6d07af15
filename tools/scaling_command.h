#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "command.h"

namespace lt::tools {

struct ScalingCommandOptions {
  std::vector<int> tensor_counts = {1, 10, 50, 100, 200, 400};
  int64_t tensor_size = 16384;
  int steps = 6;
  std::string json_path;
};

// `lazytensor scaling`: synchronous transfers, compiles and step time against the number of
// parameter tensors, under each scalar policy.
int run_scaling_command(const ScalingCommandOptions& options);
// Adds `lazytensor scaling` and its options to `app`.
Command add_scaling_command(CLI::App& app);

}  // namespace lt::tools
