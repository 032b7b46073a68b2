// SVG chart rendering for report.html.
#include "report/svg.h"

#include "report/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace ampcheck::report::svg {

std::string escape(const std::string& s) { return escape_markup(s); }

std::vector<double> nice_ticks(double lo, double hi, int n) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, n);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;  // the 1/2/5/10 x mag nearest to raw, by ratio
  for (double m : {2.0, 5.0, 10.0})
    if (std::abs(std::log(m * mag / raw)) < std::abs(std::log(step / raw))) step = m * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}

namespace {
std::string px(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f", v);
  return b;
}

struct Frame {  // plot area and the data -> pixel mapping
  double left, top, right, bottom;
  double x0, x1, y0, y1;  // data ranges (y in transformed units)
  double sx(double x) const { return left + (x - x0) / (x1 - x0) * (right - left); }
  double sy(double y) const { return bottom - (y - y0) / (y1 - y0) * (bottom - top); }
};
}  // namespace

LineChart::LineChart(std::string title, std::string y_label, int log_base)
    : title_(std::move(title)), y_label_(std::move(y_label)), log_base_(log_base) {}

void LineChart::add_ticks(std::vector<int64_t> steps, std::string color, std::string label) {
  ticks_.push_back({std::move(steps), std::move(color), std::move(label)});
}

void LineChart::add_hline(double y, std::string color, std::string label) {
  hlines_.push_back({y, std::move(color), std::move(label)});
}

std::string LineChart::render(const std::string& kind, int width, int height) const {
  auto tr = [&](double v) {  // data value -> axis units (NaN where it cannot be drawn)
    if (!std::isfinite(v)) return std::numeric_limits<double>::quiet_NaN();
    if (log_base_ == 0) return v;
    return v > 0 ? std::log(v) / std::log(static_cast<double>(log_base_)) : std::numeric_limits<double>::quiet_NaN();
  };
  // ranges
  int64_t n = min_steps_;
  double lo = INFINITY, hi = -INFINITY;
  auto extend = [&](double v) {
    const double t = tr(v);
    if (std::isfinite(t)) lo = std::min(lo, t), hi = std::max(hi, t);
  };
  for (const auto& l : lines_) {
    n = std::max<int64_t>(n, static_cast<int64_t>(l.y.size()));
    for (double v : l.y) extend(v);
  }
  if (has_band_) {
    n = std::max<int64_t>(n, static_cast<int64_t>(band_.hi.size()));
    for (double v : band_.lo) extend(v);
    for (double v : band_.hi) extend(v);
  }
  for (const auto& h : hlines_) extend(h.y);
  for (const auto& t : ticks_)
    for (int64_t s : t.steps) n = std::max<int64_t>(n, s + 1);
  const bool empty = !std::isfinite(lo);
  if (empty) lo = 0, hi = 1;
  if (hi - lo < 1e-12) {
    const double pad = log_base_ ? 0.5 : std::max(1e-6, std::abs(hi) * 0.05);
    lo -= pad, hi += pad;
  } else {
    const double pad = (hi - lo) * 0.05;
    lo -= pad, hi += pad;
  }
  Frame f{54,
          26,
          static_cast<double>(width) - 10,
          static_cast<double>(height) - 40,
          0,
          static_cast<double>(std::max<int64_t>(1, n - 1)),
          lo,
          hi};

  std::ostringstream o;
  o << "<svg class=\"chart\" data-kind=\"" << escape(kind) << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << width << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
    << "\" role=\"img\" aria-label=\"" << escape(title_) << "\">\n";
  o << "<text x=\"" << px(f.left) << "\" y=\"15\" class=\"ct\">" << escape(title_) << "</text>\n";
  o << "<rect x=\"" << px(f.left) << "\" y=\"" << px(f.top) << "\" width=\"" << px(f.right - f.left) << "\" height=\""
    << px(f.bottom - f.top) << "\" fill=\"#fff\" stroke=\"#bbb\"/>\n";
  // y grid and labels
  std::vector<double> yt;
  if (log_base_) {
    for (double e = std::ceil(lo); e <= std::floor(hi); e += 1) yt.push_back(e);
    while (yt.size() > 6) {  // thin to at most 6
      std::vector<double> thin;
      for (size_t i = 0; i < yt.size(); i += 2) thin.push_back(yt[i]);
      yt = thin;
    }
  } else {
    yt = nice_ticks(lo, hi, 4);
  }
  for (double t : yt) {
    if (t < lo || t > hi) continue;
    const double y = f.sy(t);
    std::string label;
    if (log_base_ == 2) label = "2^" + format_number(t + 0.0, 3);
    else if (log_base_ == 10)
      label = format_number(std::pow(10.0, t), 3);
    else
      label = format_number(t, 4);
    o << "<line x1=\"" << px(f.left) << "\" x2=\"" << px(f.right) << "\" y1=\"" << px(y) << "\" y2=\"" << px(y)
      << "\" stroke=\"#eee\"/><text x=\"" << px(f.left - 4) << "\" y=\"" << px(y + 3)
      << "\" class=\"ax\" text-anchor=\"end\">" << escape(label) << "</text>\n";
  }
  // x labels
  for (double t : nice_ticks(0, f.x1, 5)) {
    const double x = f.sx(t);
    o << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << px(f.bottom) << "\" y2=\"" << px(f.bottom + 3)
      << "\" stroke=\"#888\"/><text x=\"" << px(x) << "\" y=\"" << px(f.bottom + 13)
      << "\" class=\"ax\" text-anchor=\"middle\">" << format_number(t, 6) << "</text>\n";
  }
  o << "<text x=\"" << px(f.right) << "\" y=\"" << px(f.bottom + 13)
    << "\" class=\"ax\" text-anchor=\"end\">step</text>\n";
  o << "<text x=\"12\" y=\"" << px((f.top + f.bottom) / 2)
    << "\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 12 " << px((f.top + f.bottom) / 2) << ")\">"
    << escape(y_label_) << "</text>\n";

  const size_t stride = static_cast<size_t>(std::max<int64_t>(1, (n + 999) / 1000));  // at most ~1000 points
  auto clampy = [&](double t) { return std::clamp(f.sy(t), f.top, f.bottom); };
  // band
  if (has_band_) {
    std::ostringstream pts;
    const size_t m = std::min(band_.lo.size(), band_.hi.size());
    for (size_t i = 0; i < m; i += stride)
      if (std::isfinite(tr(band_.hi[i])))
        pts << px(f.sx(static_cast<double>(i))) << "," << px(clampy(tr(band_.hi[i]))) << " ";
    for (size_t k = m; k-- > 0;)
      if (k % stride == 0 && std::isfinite(tr(band_.lo[k])))
        pts << px(f.sx(static_cast<double>(k))) << "," << px(clampy(tr(band_.lo[k]))) << " ";
    o << "<polygon class=\"band\" points=\"" << pts.str() << "\" fill=\"" << band_.color << "\" stroke=\"none\"/>\n";
  }
  for (const auto& h : hlines_) {
    const double t = tr(h.y);
    if (!std::isfinite(t)) continue;
    o << "<line x1=\"" << px(f.left) << "\" x2=\"" << px(f.right) << "\" y1=\"" << px(f.sy(t)) << "\" y2=\""
      << px(f.sy(t)) << "\" stroke=\"" << h.color << "\" stroke-dasharray=\"4 3\"/>\n";
  }
  // lines: one polyline per finite run of points
  for (const auto& l : lines_) {
    std::ostringstream pts;
    size_t count = 0;
    double first_x = 0, first_y = 0;
    auto emit = [&]() {
      if (count > 1)
        o << "<polyline class=\"series\" points=\"" << pts.str() << "\" fill=\"none\" stroke=\"" << l.color
          << "\" stroke-width=\"" << l.width << "\"" << (l.dash.empty() ? "" : " stroke-dasharray=\"" + l.dash + "\"")
          << " stroke-linejoin=\"round\"/>\n";
      else if (count == 1)  // a lone point: a dot, so it is visible
        o << "<circle class=\"series\" cx=\"" << px(first_x) << "\" cy=\"" << px(first_y) << "\" r=\"2.5\" fill=\""
          << l.color << "\"/>\n";
      pts.str("");
      count = 0;
    };
    for (size_t i = 0; i < l.y.size(); ++i) {
      const double t = tr(l.y[i]);
      if (!std::isfinite(t)) {
        emit();
        continue;
      }
      if (i % stride != 0 && i + 1 != l.y.size()) continue;
      const double x = f.sx(static_cast<double>(i)), y = clampy(t);
      if (count == 0) first_x = x, first_y = y;
      pts << px(x) << "," << px(y) << " ";
      ++count;
    }
    emit();
  }
  for (const auto& tk : ticks_)
    for (int64_t s : tk.steps)
      o << "<line class=\"tick\" x1=\"" << px(f.sx(static_cast<double>(s))) << "\" x2=\""
        << px(f.sx(static_cast<double>(s))) << "\" y1=\"" << px(f.bottom) << "\" y2=\"" << px(f.bottom - 10)
        << "\" stroke=\"" << tk.color << "\" stroke-width=\"2\"/>\n";
  if (!note_.empty() || empty)
    o << "<text x=\"" << px((f.left + f.right) / 2) << "\" y=\"" << px((f.top + f.bottom) / 2)
      << "\" class=\"note\" text-anchor=\"middle\">" << escape(note_.empty() ? "no data" : note_) << "</text>\n";
  // legend
  double lx = f.left;
  const double ly = height - 8;
  auto legend = [&](const std::string& color, const std::string& label, bool box) {
    if (label.empty()) return;
    if (box)
      o << "<rect x=\"" << px(lx) << "\" y=\"" << px(ly - 8) << "\" width=\"12\" height=\"8\" fill=\"" << color
        << "\"/>";
    else
      o << "<line x1=\"" << px(lx) << "\" x2=\"" << px(lx + 12) << "\" y1=\"" << px(ly - 4) << "\" y2=\"" << px(ly - 4)
        << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>";
    o << "<text x=\"" << px(lx + 15) << "\" y=\"" << px(ly) << "\" class=\"lg\">" << escape(label) << "</text>\n";
    lx += 22 + 5.6 * static_cast<double>(label.size());
  };
  for (const auto& l : lines_) legend(l.color, l.label, false);
  if (has_band_) legend(band_.color, band_.label, true);
  for (const auto& h : hlines_) legend(h.color, h.label, false);
  for (const auto& t : ticks_)
    if (!t.steps.empty()) legend(t.color, t.label + " (" + std::to_string(t.steps.size()) + ")", true);
  o << "</svg>\n";
  return o.str();
}

std::string bar_chart(const std::string& title, const std::vector<Bar>& bars, const std::string& kind, int width) {
  const double label_w = 150, text_w = 130, row = 20, top = 24;
  const double height = top + row * static_cast<double>(bars.size()) + 8;
  double max_v = 0;
  for (const auto& b : bars)
    if (std::isfinite(b.value)) max_v = std::max(max_v, b.value);
  const double bar_w = width - label_w - text_w - 10;
  std::ostringstream o;
  o << "<svg class=\"chart bars\" data-kind=\"" << escape(kind) << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << width << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
    << "\" role=\"img\" aria-label=\"" << escape(title) << "\">\n<text x=\"4\" y=\"15\" class=\"ct\">" << escape(title)
    << "</text>\n";
  for (size_t i = 0; i < bars.size(); ++i) {
    const auto& b = bars[i];
    const double y = top + row * static_cast<double>(i);
    o << "<text x=\"" << px(label_w - 6) << "\" y=\"" << px(y + 13) << "\" class=\"ax\" text-anchor=\"end\">"
      << escape(b.label) << "</text>";
    const double w = (std::isfinite(b.value) && max_v > 0) ? std::max(1.0, b.value / max_v * bar_w) : 0;
    if (w > 0)
      o << "<rect class=\"bar\" x=\"" << px(label_w) << "\" y=\"" << px(y + 3) << "\" width=\"" << px(w)
        << "\" height=\"14\" fill=\"" << b.color << "\"/>";
    o << "<text x=\"" << px(label_w + w + 4) << "\" y=\"" << px(y + 13) << "\" class=\"lg\">"
      << escape(std::isfinite(b.value) ? b.text : "-") << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace ampcheck::report::svg
