// One number formatter for every table ampcheck prints or writes: `prec` significant digits, "-" for NaN
// (a value that was not measured); infinities print as "inf".
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

}  // namespace ampcheck::report
