// Escaping for the report formats (format.h): every string a report writes passes io::printable_text first, so
// summary.json, junit.xml, summary.md and report.html show the same text for the same bytes.
#include "report/format.h"

#include "io/text.h"

namespace ampcheck::report {

std::string escape_markup(const std::string& raw) {
  const std::string s = io::printable_text(raw);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
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
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string markdown_text(const std::string& raw) {
  const std::string s = io::printable_text(raw);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '\n':
        out += ' ';
        break;
      case '|':
        out += "\\|";
        break;
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace ampcheck::report
