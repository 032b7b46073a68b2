// Formatting shared by every report. format_number: the one number formatter for every table ampcheck prints or
// writes — `prec` significant digits, "-" for NaN (a value that was not measured), infinities as "inf".
#pragma once

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

namespace ampcheck::report {

inline std::string format_number(double v, int prec = 4) {
  if (std::isnan(v)) return "-";
  std::ostringstream os;
  os << std::setprecision(prec) << v;
  return os.str();
}

// Text for XML and HTML (junit.xml, report.html): the five markup characters as entities; control characters other
// than newline and tab, which XML 1.0 forbids, as spaces.
inline std::string escape_markup(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') ? ' ' : c;
    }
  }
  return out;
}

}  // namespace ampcheck::report
