#pragma once
#include <string>
#include <utility>
#include <vector>

namespace lt::tools {

// One curve of a loss plot: (step, loss) points, in the order they are drawn.
struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;
};

// Writes a PNG line chart of `series` on shared axes (x = step, y = loss) with `title` at the
// top, a legend, light grey grid lines and ticks at 1, 2, 5 x 10^k. The first series is the
// per-step training loss: drawn thin, with its exponential moving average (alpha 0.1) over it
// as "<label> (EMA)"; the others (e.g. held-out loss) are drawn thicker, with markers.
// Non-finite points are skipped. The file is written to a temporary and renamed into place.
// Throws lt::Error naming `path` if it cannot be written or no series has a finite point.
void write_loss_plot(const std::string& path, const std::string& title,
                     const std::vector<Series>& series, int width = 800, int height = 480);

}  // namespace lt::tools
