// Escaping for the report formats (format.h): every string a report writes passes io::printable_text first, so
// summary.json, junit.xml, summary.md and report.html show the same text for the same bytes.
#include "report/format.h"

#include "io/text.h"

#include <cmath>
#include <initializer_list>
#include <utility>

namespace ampcheck::report {

namespace {

// printable text with the characters in `escapes` replaced by their spelling
std::string escaped(const std::string& raw, std::initializer_list<std::pair<char, const char*>> escapes) {
  const std::string s = io::printable_text(raw);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const char* spelled = nullptr;
    for (const auto& [from, to] : escapes)
      if (c == from) spelled = to;
    if (spelled) out += spelled;
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string format_number(double v, int prec) { return std::isnan(v) ? "-" : io::number_text(v, prec); }

std::string escape_markup(const std::string& raw) {
  return escaped(raw, {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&quot;"}, {'\'', "&#39;"}});
}

std::string markdown_text(const std::string& raw) {
  return escaped(raw, {{'\n', " "}, {'|', "\\|"}, {'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}});
}

std::string format_si(double v, const char* unit) {
  if (!std::isfinite(v)) return "-";
  const char* prefixes[] = {"", "k", "M", "G", "T"};
  int p = 0;
  while (std::abs(v) >= 1000 && p < 4) v /= 1000, ++p;
  return format_number(v, 3) + prefixes[p] + unit;
}

std::string format_bytes(int64_t b) {
  if (b <= 0) return "-";
  const double mib = static_cast<double>(b) / (1 << 20);
  return mib >= 1024 ? format_number(mib / 1024, 3) + " GiB" : format_number(mib, 3) + " MiB";
}

}  // namespace ampcheck::report
