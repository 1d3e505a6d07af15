#pragma once
#include <string>
#include <vector>

#include "command.h"

namespace lt::tools {

struct PlotCommandOptions {
  std::vector<std::string> runs;  // `lazytensor train --json` reports
  std::string out_path;           // the PNG to write
  std::string title;              // default: the first run's model and batch
  bool all_training = false;      // every run's training loss, not only the first's
};

// Draws the loss curves of several `train` runs on one chart: the first run's training loss
// and every run's held-out loss, each labelled by its file name.
int run_plot_command(const PlotCommandOptions& options);
// Adds `lazytensor plot` and its options to `app`.
Command add_plot_command(CLI::App& app);

}  // namespace lt::tools
