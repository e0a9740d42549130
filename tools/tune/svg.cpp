// stoker-tune's chart (--svg FILE): throughput and peak memory against num_workers, a line per
// batch size, axes with round ticks, a legend, and the recommended setting ringed.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "data/format.hpp"
#include "tune/tune.hpp"

namespace stoker::tune {
namespace {

using stoker::detail::format_bytes;
using stoker::detail::format_count;

std::string xml_text(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A round step for about `ticks` intervals over [0, top]: 1, 2 or 5 times a power of ten.
double nice_step(double top, int ticks) {
  const double raw = std::max(top, 1e-9) / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

std::string short_number(double v) {
  if (v >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

}  // namespace

std::string render_svg(const std::string& title, const std::vector<Result>& results,
                       const std::optional<Recommendation>& rec) {
  constexpr double kWidth = 960;
  constexpr double kHeight = 460;
  constexpr double kPanelW = 370;
  constexpr double kPanelH = 280;
  constexpr double kTop = 90;
  constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                      "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  std::map<std::size_t, std::vector<const Result*>> series;  // batch size -> points
  int min_w = std::numeric_limits<int>::max();
  int max_w = 0;
  double max_sps = 0;
  double max_mib = 0;
  for (const Result& r : results) {
    if (!r.ok) continue;
    series[r.setting.batch].push_back(&r);
    min_w = std::min(min_w, r.setting.workers);
    max_w = std::max(max_w, r.setting.workers);
    max_sps = std::max(max_sps, r.samples_per_s);
    max_mib = std::max(max_mib, static_cast<double>(r.peak_memory) / 1048576.0);
  }
  if (max_w <= min_w) {
    min_w = std::max(0, min_w - 1);
    max_w = min_w + 2;
  }
  for (auto& [batch, points] : series) {
    std::sort(points.begin(), points.end(), [](const Result* x, const Result* y) {
      return x->setting.workers < y->setting.workers;
    });
  }

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
      "font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n"
      "<text x=\"{2}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
      "font-weight=\"bold\">{3}</text>\n",
      kWidth, kHeight, kWidth / 2, xml_text(title));
  if (rec) {
    const Result& p = results[rec->index];
    const Result& b = results[rec->best];
    std::string caption = fmt::format(
        "recommended: num_workers={}, batch_size={}: {} samples/s, {} peak", p.setting.workers,
        p.setting.batch, format_count(p.samples_per_s), format_bytes(p.peak_memory));
    if (rec->index != rec->best) {
      caption += fmt::format(" (best: {} samples/s at num_workers={}, batch_size={})",
                             format_count(b.samples_per_s), b.setting.workers, b.setting.batch);
    }
    svg += fmt::format("<text x=\"{}\" y=\"50\" text-anchor=\"middle\">{}</text>\n", kWidth / 2,
                       xml_text(caption));
  }

  struct Panel {
    double left;
    const char* label;
    double top_value;
    bool memory;
  };
  const Panel panels[] = {
      {80, "throughput (samples/s)", max_sps, false},
      {80 + kPanelW + 110, "peak memory of the process tree (MiB)", max_mib, true}};
  for (const Panel& p : panels) {
    const double step = nice_step(p.top_value * 1.1, 5);
    const double top = std::max(step, std::ceil(p.top_value * 1.1 / step) * step);
    auto x_of = [&](int w) {
      return p.left + (w - min_w) * kPanelW / static_cast<double>(max_w - min_w);
    };
    auto y_of = [&](double v) { return kTop + kPanelH - v / top * kPanelH; };
    svg += fmt::format(
        "<g class=\"panel\">\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" "
        "font-weight=\"bold\">{}</text>\n",
        p.left + kPanelW / 2, kTop - 12, xml_text(p.label));
    // Grid lines and y ticks.
    for (double v = 0; v <= top + step / 2; v += step) {
      const double y = y_of(v);
      svg += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>\n"
          "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
          p.left, y, p.left + kPanelW, y, p.left - 6, y + 4, short_number(v));
    }
    // X ticks: every worker count when there are few, else about ten.
    const int x_step = std::max(1, (max_w - min_w + 9) / 10);
    for (int w = min_w; w <= max_w; w += x_step) {
      const double x = x_of(w);
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e0e0e0\"/>\n"
          "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
          x, kTop, kTop + kPanelH, kTop + kPanelH + 16, w);
    }
    // Axes and their labels.
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\"/>\n"
        "<line x1=\"{0:.1f}\" y1=\"{2:.1f}\" x2=\"{3:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\"/>\n"
        "<text x=\"{4:.1f}\" y=\"{5:.1f}\" text-anchor=\"middle\">num_workers</text>\n",
        p.left, kTop, kTop + kPanelH, p.left + kPanelW, p.left + kPanelW / 2, kTop + kPanelH + 36);
    // One line per batch size.
    std::size_t colour = 0;
    for (const auto& [batch, points] : series) {
      const char* c = kColours[colour++ % std::size(kColours)];
      std::string path;
      for (const Result* r : points) {
        const double v =
            p.memory ? static_cast<double>(r->peak_memory) / 1048576.0 : r->samples_per_s;
        path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "" : " ", x_of(r->setting.workers),
                            y_of(v));
      }
      svg += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
          "points=\"{}\"/>\n",
          c, path);
      for (const Result* r : points) {
        const double v =
            p.memory ? static_cast<double>(r->peak_memory) / 1048576.0 : r->samples_per_s;
        svg += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>num_workers={}, "
            "batch_size={}: {} samples/s, {} peak</title></circle>\n",
            x_of(r->setting.workers), y_of(v), c, r->setting.workers, batch,
            format_count(r->samples_per_s), format_bytes(r->peak_memory));
        if (rec && r == &results[rec->index]) {
          svg += fmt::format(
              "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"9\" fill=\"none\" "
              "stroke=\"#000\" stroke-width=\"2\"/>\n",
              x_of(r->setting.workers), y_of(v));
        }
      }
    }
    svg += "</g>\n";
  }

  // Legend, under the panels.
  double x = 80;
  const double y = kTop + kPanelH + 66;
  std::size_t colour = 0;
  for (const auto& [batch, points] : series) {
    const char* c = kColours[colour++ % std::size(kColours)];
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2\"/>\n<circle cx=\"{4:.1f}\" cy=\"{1:.1f}\" r=\"4\" fill=\"{3}\"/>\n"
        "<text x=\"{5:.1f}\" y=\"{6:.1f}\">batch_size={7}</text>\n",
        x, y, x + 24, c, x + 12, x + 30, y + 4, batch);
    x += 140;
  }
  if (rec) {
    svg += fmt::format(
        "<circle cx=\"{0:.1f}\" cy=\"{1:.1f}\" r=\"9\" fill=\"none\" stroke=\"#000\" "
        "stroke-width=\"2\"/>\n<text x=\"{2:.1f}\" y=\"{3:.1f}\">recommended</text>\n",
        x + 12, y, x + 30, y + 4);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace stoker::tune
