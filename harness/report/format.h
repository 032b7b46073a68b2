// Formatting shared by every report. format_number: the one number formatter for every table ampcheck prints or
// writes — `prec` significant digits, "-" for NaN (a value that was not measured), infinities as "inf".
#pragma once

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

namespace ampcheck::report {

std::string format_number(double v, int prec = 4);
// A number with an SI prefix and its unit (374000, "tok/s" -> "374k tok/s"); "-" where not finite.
std::string format_si(double v, const char* unit);
// A size in MiB or GiB ("-" where not positive).
std::string format_bytes(int64_t b);

// Text for XML and HTML (junit.xml, report.html): printable first (io::printable_text — a byte that is not UTF-8 or a
// control character other than newline and tab, which XML 1.0 forbids, as \xNN), then the five markup characters as
// entities.
std::string escape_markup(const std::string& s);
// Text for one cell or line of Markdown (summary.md): printable, on one line (a newline as a space), a '|' that would
// end the table cell as \|, and '<', '>', '&' as entities (a renderer would read them as HTML).
std::string markdown_text(const std::string& s);

}  // namespace ampcheck::report
