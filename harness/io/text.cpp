// Untrusted text made printable (io/text.h): a UTF-8 decoder that reports, byte by byte, what is valid text.
#include "io/text.h"

#include <cstdint>
#include <sstream>

namespace ampcheck::io {

namespace {
// The length of the valid UTF-8 sequence at s[i] (1..4), or 0 when the byte at i does not start one.
size_t utf8_sequence_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, cp = b0 & 0x1Fu;
  else if (b0 >= 0xE0 && b0 <= 0xEF)
    n = 3, cp = b0 & 0x0Fu;
  else if (b0 >= 0xF0 && b0 <= 0xF4)
    n = 4, cp = b0 & 0x07u;
  else
    return 0;  // a continuation byte, an overlong lead (C0, C1) or past U+10FFFF (F5..FF)
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF) return 0;  // overlong, too large
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;                                         // a UTF-16 surrogate
  return n;
}

bool is_control(const std::string& s, size_t i, size_t n) {
  const unsigned char b0 = static_cast<unsigned char>(s[i]);
  if (n == 1) return (b0 < 0x20 && b0 != '\n' && b0 != '\t') || b0 == 0x7F;
  return n == 2 && b0 == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0;  // C1: U+0080..U+009F
}
}  // namespace

size_t first_invalid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string::npos;
}

size_t first_unprintable(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0 || is_control(s, i, n)) return i;
    i += n;
  }
  return std::string::npos;
}

std::string printable_text(const std::string& s) {
  if (first_unprintable(s) == std::string::npos) return s;
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n != 0 && !is_control(s, i, n)) {
      out.append(s, i, n);
      i += n;
      continue;
    }
    for (size_t k = 0; k < (n == 0 ? 1 : n); ++k) {  // an invalid byte alone; a control character's every byte
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 0xF];
    }
    i += n == 0 ? 1 : n;
  }
  return out;
}

std::string line_and_column(const std::string& s, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < s.size(); ++i) {
    if (s[i] == '\n') ++line, column = 1;
    else
      ++column;
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? "" : ", ") + parts[i];
  return s;
}

std::string number_text(double v, int significant_digits) {
  std::ostringstream os;
  os.precision(significant_digits);
  os << v;
  return os.str();
}

}  // namespace ampcheck::io
