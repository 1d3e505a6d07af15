#include "plot_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "lazytensor/error.h"
#include "loss_plot.h"

namespace lt::tools {

namespace {

nlohmann::json read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("plot: cannot read " + path);
  nlohmann::json report;
  try {
    in >> report;
  } catch (const nlohmann::json::exception& e) {
    throw Error("plot: " + path + " is not JSON: " + e.what());
  }
  if (!report.contains("losses") || !report.contains("heldout")) {
    throw Error("plot: " + path + " is not a `lazytensor train --json` report (no losses)");
  }
  return report;
}

}  // namespace

int run_plot_command(const PlotCommandOptions& o) {
  std::vector<Series> series;
  std::string title = o.title;
  for (size_t r = 0; r < o.runs.size(); ++r) {
    const nlohmann::json report = read_report(o.runs[r]);
    const std::string label = std::filesystem::path(o.runs[r]).stem().string();
    try {
      // One training loss keeps the chart readable where the held-out curves are what
      // compare; --all-training draws each run's (runs on the same batches).
      if (r == 0 || o.all_training) {
        Series train{label + " training loss", {}};
        const auto losses = report.at("losses").get<std::vector<double>>();
        for (size_t k = 0; k < losses.size(); ++k)
          train.points.emplace_back(double(k + 1), losses[k]);
        series.push_back(std::move(train));
      }
      if (r == 0) {
        if (title.empty()) {
          title = "BERT " + report.value("model", std::string("?")) + " MLM, batch " +
                  std::to_string(report.value("batch", 0)) + " x " +
                  std::to_string(report.value("seq", 0));
        }
      }
      Series heldout{label + " held-out", {}};
      for (const auto& point : report.at("heldout")) {
        heldout.points.emplace_back(point.at(0).get<double>(), point.at(1).get<double>());
      }
      series.push_back(std::move(heldout));
    } catch (const nlohmann::json::exception& e) {
      throw Error("plot: " + o.runs[r] + ": " + e.what());
    }
  }
  write_loss_plot(o.out_path, title, series);
  std::printf("plot: %s\n", o.out_path.c_str());
  return 0;
}

Command add_plot_command(CLI::App& app) {
  auto options = std::make_shared<PlotCommandOptions>();
  auto* plot = app.add_subcommand("plot", "the loss curves of several `train --json` reports");
  plot->add_option("runs", options->runs, "train reports (JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  plot->add_option("--out", options->out_path, "the PNG to write")->required();
  plot->add_option("--title", options->title, "default: the first run's model and batch");
  plot->add_flag("--all-training", options->all_training,
                 "every run's training loss (default: the first run's only)");
  return {plot, [options] { return run_plot_command(*options); }};
}

}  // namespace lt::tools
