#include "loss_plot.h"

#include <gd.h>
#include <gdfontmb.h>
#include <gdfonts.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "lazytensor/error.h"

namespace lt::tools {

namespace {

namespace fs = std::filesystem;

using Points = std::vector<std::pair<double, double>>;

constexpr double kEmaAlpha = 0.1;
constexpr double kYPadding = 0.05;  // of the loss range, so no curve touches the frame
constexpr int kMinWidth = 240;      // below this the margins leave no room to plot
constexpr int kMinHeight = 160;

struct Rgb {
  int r, g, b;
};
// The raw training loss is pale so that its EMA (the first palette colour, which no other
// series reuses) reads over it.
constexpr Rgb kRawTrain{170, 200, 228};
constexpr Rgb kPalette[] = {{31, 119, 180}, {230, 115, 0},   {44, 160, 44},
                            {214, 39, 40},  {148, 103, 189}, {140, 86, 75}};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

struct ImageDeleter {
  void operator()(gdImagePtr image) const { gdImageDestroy(image); }
};
struct GdFreeDeleter {
  void operator()(void* memory) const { gdFree(memory); }
};

Points finite_points(const Points& points) {
  Points out;
  for (const auto& [x, y] : points) {
    if (std::isfinite(x) && std::isfinite(y)) out.emplace_back(x, y);
  }
  return out;
}

// Debiased, as Adam's moments and TensorBoard's smoothing: the average from 0 divided by the
// weight its terms carry, so early points are not dragged toward the first value.
Points moving_average(const Points& points) {
  Points out;
  double average = 0, weight = 0;
  for (const auto& [x, y] : points) {
    average += kEmaAlpha * (y - average);
    weight += kEmaAlpha * (1 - weight);
    out.emplace_back(x, average / weight);
  }
  return out;
}

// An axis range with ticks at multiples of 1, 2 or 5 x 10^k.
struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 1;
  int decimals = 0;  // enough to tell neighbouring ticks apart

  Axis(double lo_in, double hi_in, int max_ticks, double min_step) : lo(lo_in), hi(hi_in) {
    const double raw = std::max((hi - lo) / std::max(max_ticks, 1), min_step);
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    step = 10 * magnitude;
    for (const double m : {1.0, 2.0, 5.0}) {
      if (m * magnitude >= raw * (1 - 1e-9)) {
        step = m * magnitude;
        break;
      }
    }
    // The epsilon keeps 0.1, whose log10 may come out a hair below -1, at one decimal.
    decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  }

  // Multiples of an integer count of steps, so that rounding errors do not accumulate.
  std::vector<double> ticks() const {
    std::vector<double> out;
    const double slack = 1e-9 * step;
    for (auto k = static_cast<long long>(std::ceil((lo - slack) / step)); k * step <= hi + slack;
         ++k) {
      out.push_back(static_cast<double>(k) * step);
    }
    return out;
  }

  std::string label(double value) const {
    char text[64];
    std::snprintf(text, sizeof(text), "%.*f", decimals, value);
    return text;
  }
};

int text_width(gdFontPtr font, const std::string& text) {
  return font->w * static_cast<int>(text.size());
}

// gd takes a mutable string but never writes through it.
unsigned char* gd_string(const std::string& text) {
  return reinterpret_cast<unsigned char*>(const_cast<char*>(text.c_str()));
}

int color(gdImagePtr image, Rgb rgb) {
  return gdImageColorAllocate(image, rgb.r, rgb.g, rgb.b);
}

void draw_polyline(gdImagePtr image, const std::vector<gdPoint>& points, int line_color,
                   int thickness) {
  gdImageSetAntiAliased(image, line_color);
  gdImageSetThickness(image, thickness);
  for (size_t i = 1; i < points.size(); ++i) {
    gdImageLine(image, points[i - 1].x, points[i - 1].y, points[i].x, points[i].y, gdAntiAliased);
  }
  gdImageSetThickness(image, 1);
}

// A white ring keeps a marker visible where it sits on another curve.
void draw_marker(gdImagePtr image, gdPoint at, int fill, int ring) {
  gdImageFilledEllipse(image, at.x, at.y, 10, 10, ring);
  gdImageFilledEllipse(image, at.x, at.y, 7, 7, fill);
}

struct Curve {
  std::string label;
  Points points;
  int color;
  int thickness;
  bool markers;
};

}  // namespace

void write_loss_plot(const std::string& path, const std::string& title,
                     const std::vector<Series>& series, int width, int height) {
  if (width < kMinWidth || height < kMinHeight) {
    throw Error("loss plot: cannot write " + path + ": " + std::to_string(width) + "x" +
                std::to_string(height) + " is smaller than " + std::to_string(kMinWidth) + "x" +
                std::to_string(kMinHeight));
  }
  std::unique_ptr<gdImage, ImageDeleter> owner(gdImageCreateTrueColor(width, height));
  if (!owner) throw Error("loss plot: cannot allocate the image for " + path);
  gdImagePtr image = owner.get();

  std::vector<Curve> curves;
  for (size_t i = 0; i < series.size(); ++i) {
    Points points = finite_points(series[i].points);
    if (points.empty()) continue;
    if (i == 0) {
      Points average = moving_average(points);
      curves.push_back({series[i].label, std::move(points), color(image, kRawTrain), 1, false});
      curves.push_back(
          {series[i].label + " (EMA)", std::move(average), color(image, kPalette[0]), 2, false});
    } else {
      curves.push_back({series[i].label, std::move(points),
                        color(image, kPalette[1 + (i - 1) % (kPaletteSize - 1)]), 2, true});
    }
  }
  if (curves.empty()) throw Error("loss plot: no finite points to draw in " + path);

  double x_lo = curves[0].points[0].first, x_hi = x_lo;
  double y_lo = curves[0].points[0].second, y_hi = y_lo;
  for (const Curve& curve : curves) {
    for (const auto& [x, y] : curve.points) {
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }
  // A single step or a flat loss still needs a span to map onto pixels.
  if (x_hi - x_lo <= 1e-9 * std::max(std::abs(x_lo), std::abs(x_hi))) {
    x_lo -= 1;
    x_hi += 1;
  }
  const double y_span = y_hi - y_lo;
  const double y_pad = y_span > 1e-9 * std::max(std::abs(y_lo), std::abs(y_hi))
                           ? kYPadding * y_span
                           : (y_lo == 0 ? 1 : kYPadding * std::abs(y_lo));
  y_lo -= y_pad;
  y_hi += y_pad;

  const gdFontPtr font = gdFontGetSmall();
  const gdFontPtr title_font = gdFontGetMediumBold();
  const int gap = 6;
  const int tick_length = 4;
  const int top = title_font->h + 2 * gap;
  const int bottom = height - (tick_length + gap + font->h + gap + font->h + gap);
  const Axis y_axis(y_lo, y_hi, (bottom - top) / 40, 0);
  const std::vector<double> y_ticks = y_axis.ticks();
  int y_label_width = 0;
  for (const double tick : y_ticks) {
    y_label_width = std::max(y_label_width, text_width(font, y_axis.label(tick)));
  }
  const int left = gap + font->h + gap + y_label_width + gap + tick_length;
  const int right = width - 3 * gap;
  // Steps are counts, so the x axis never ticks between them.
  const Axis x_axis(x_lo, x_hi, (right - left) / 80, 1);

  // Inset so that markers at the first and last step stay inside the frame.
  const int x_inset = 6;
  auto to_x = [&](double x) {
    return left + x_inset +
           static_cast<int>(std::lround((x - x_lo) / (x_hi - x_lo) * (right - left - 2 * x_inset)));
  };
  auto to_y = [&](double y) {
    return bottom - static_cast<int>(std::lround((y - y_lo) / (y_hi - y_lo) * (bottom - top)));
  };

  const int white = color(image, {255, 255, 255});
  const int grid = color(image, {228, 228, 228});
  const int frame = color(image, {110, 110, 110});
  const int text = color(image, {40, 40, 40});
  gdImageFilledRectangle(image, 0, 0, width - 1, height - 1, white);

  for (const double tick : y_ticks) {
    const int y = to_y(tick);
    gdImageLine(image, left, y, right, y, grid);
    gdImageLine(image, left - tick_length, y, left, y, frame);
    const std::string label = y_axis.label(tick);
    gdImageString(image, font, left - tick_length - gap - text_width(font, label), y - font->h / 2,
                  gd_string(label), text);
  }
  for (const double tick : x_axis.ticks()) {
    const int x = to_x(tick);
    gdImageLine(image, x, top, x, bottom, grid);
    gdImageLine(image, x, bottom, x, bottom + tick_length, frame);
    const std::string label = x_axis.label(tick);
    const int label_x =
        std::min(x - text_width(font, label) / 2, width - 1 - text_width(font, label));
    gdImageString(image, font, label_x, bottom + tick_length + gap, gd_string(label), text);
  }

  for (const Curve& curve : curves) {
    std::vector<gdPoint> pixels;
    for (const auto& [x, y] : curve.points) {
      const gdPoint p{to_x(x), to_y(y)};
      // Repeated pixels would blend the anti-aliased line darker where points are dense.
      if (pixels.empty() || p.x != pixels.back().x || p.y != pixels.back().y) pixels.push_back(p);
    }
    draw_polyline(image, pixels, curve.color, curve.thickness);
    // A lone point draws no line, so it gets a marker whatever its series.
    if (curve.markers || pixels.size() == 1) {
      for (const gdPoint p : pixels) draw_marker(image, p, curve.color, white);
    }
  }
  gdImageRectangle(image, left, top, right, bottom, frame);

  gdImageString(image, title_font, (width - text_width(title_font, title)) / 2, gap,
                gd_string(title), text);
  const std::string x_name = "step";
  gdImageString(image, font, (left + right - text_width(font, x_name)) / 2, height - gap - font->h,
                gd_string(x_name), text);
  const std::string y_name = "loss";
  gdImageStringUp(image, font, gap, (top + bottom + text_width(font, y_name)) / 2,
                  gd_string(y_name), text);

  // Top right: a decaying loss leaves that corner empty.
  const int swatch = 24;
  const int row = font->h + 4;
  int legend_width = 0;
  for (const Curve& curve : curves) {
    legend_width = std::max(legend_width, text_width(font, curve.label));
  }
  legend_width += 3 * gap + swatch;
  const int legend_height = static_cast<int>(curves.size()) * row + gap;
  const int legend_x = right - gap - legend_width;
  const int legend_y = top + gap;
  gdImageFilledRectangle(image, legend_x, legend_y, legend_x + legend_width,
                         legend_y + legend_height, white);
  gdImageRectangle(image, legend_x, legend_y, legend_x + legend_width, legend_y + legend_height,
                   grid);
  for (size_t i = 0; i < curves.size(); ++i) {
    const int y = legend_y + gap / 2 + static_cast<int>(i) * row + row / 2;
    const int x = legend_x + gap;
    draw_polyline(image, {{x, y}, {x + swatch, y}}, curves[i].color, curves[i].thickness);
    if (curves[i].markers) draw_marker(image, {x + swatch / 2, y}, curves[i].color, white);
    gdImageString(image, font, x + swatch + gap, y - font->h / 2, gd_string(curves[i].label), text);
  }

  int size = 0;
  std::unique_ptr<void, GdFreeDeleter> png(gdImagePngPtr(image, &size));
  if (!png) throw Error("loss plot: cannot encode " + path);
  // A reader never sees half a file: write a temporary beside the target, then rename it.
  const fs::path temporary = path + "." + std::to_string(getpid()) + ".tmp";
  std::error_code ignored;
  {
    std::ofstream out(temporary, std::ios::binary);
    out.write(static_cast<const char*>(png.get()), size);
    out.close();
    if (!out) {
      fs::remove(temporary, ignored);
      throw Error("loss plot: cannot write " + path);
    }
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    fs::remove(temporary, ignored);
    throw Error("loss plot: cannot write " + path + ": " + error.message());
  }
}

}  // namespace lt::tools
