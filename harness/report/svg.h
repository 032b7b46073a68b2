// Small SVG charts for report.html: a step-indexed line chart (lines, a shaded band, event ticks, threshold lines,
// linear or log10 y axis) and horizontal bar charts. Output is plain SVG markup with inline styles — no scripts,
// no external resources — so the report renders from a single file anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::report::svg {

std::string escape(const std::string& s);  // &, <, >, " and ' as entities

struct Line {
  std::vector<double> y;  // y[i] at step i; NaN = gap
  std::string color;
  double width = 1.5;
  std::string dash;   // stroke-dasharray, "" = solid
  std::string label;  // legend
};

struct Band {
  std::vector<double> lo, hi;  // per step
  std::string color;           // fill
  std::string label;
};

class LineChart {
 public:
  // log_base: 0 = linear y axis, 2 or 10 = logarithmic (ticks at integer powers; values <= 0 are gaps)
  LineChart(std::string title, std::string y_label, int log_base = 0);
  void add_line(Line l) { lines_.push_back(std::move(l)); }
  void set_band(Band b) {
    band_ = std::move(b);
    has_band_ = true;
  }
  // vertical ticks at these steps along the bottom (skipped steps, injections)
  void add_ticks(std::vector<int64_t> steps, std::string color, std::string label);
  void add_hline(double y, std::string color, std::string label);
  void set_note(std::string note) { note_ = std::move(note); }  // text in the plot area (e.g. "raised at step 0")
  void set_min_steps(int64_t n) { min_steps_ = n; }             // x axis spans at least this many steps
  // <svg class="chart" data-kind=kind ...>; kind is a short machine-readable name ("loss", "scale", "deviation").
  std::string render(const std::string& kind, int width = 430, int height = 210) const;

 private:
  struct Ticks {
    std::vector<int64_t> steps;
    std::string color, label;
  };
  struct HLine {
    double y;
    std::string color, label;
  };
  std::string title_, y_label_, note_;
  int log_base_;
  std::vector<Line> lines_;
  Band band_;
  bool has_band_ = false;
  std::vector<Ticks> ticks_;
  std::vector<HLine> hlines_;
  int64_t min_steps_ = 0;
};

struct Bar {
  std::string label;
  double value;  // NaN = not measured (drawn as "-")
  std::string color;
  std::string text;  // printed after the bar, e.g. "374k tok/s (1.9x)"
};

// Horizontal bars scaled to the largest value; data-kind=kind.
std::string bar_chart(const std::string& title, const std::vector<Bar>& bars, const std::string& kind, int width = 430);

// "Nice" axis ticks covering [lo, hi]: about n values at 1/2/5 x 10^k spacing.
std::vector<double> nice_ticks(double lo, double hi, int n);

}  // namespace ampcheck::report::svg
