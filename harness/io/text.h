// Text from outside — HDF5 attributes and names, scenario YAML, JSON-lines and summary.json strings, command-line
// paths, error messages that quote any of them — on its way to a terminal or a report (JSON, Markdown, HTML, JUnit
// XML). One rule everywhere (docs/ROBUSTNESS.md, "Text from files"): valid UTF-8 is kept as it is; each byte that is
// not part of a valid UTF-8 sequence, and each byte of a control character other than newline and tab (C0 — ESC
// starts a terminal escape sequence —, DEL, and C1, U+0080..U+009F), is written as \xNN (upper-case hex). The result
// is valid, printable UTF-8 that every format can hold, and a second pass leaves it unchanged.
// Below the rule, the two pieces of text every layer writes into its messages: a list joined, a number.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ampcheck::io {

// s with every byte that breaks the rule written as \xNN (see above).
std::string printable_text(const std::string& s);
// The byte offset where s first breaks the rule, or std::string::npos when it is printable text already.
size_t first_unprintable(const std::string& s);
// The byte offset of the first byte that is not part of a valid UTF-8 sequence (control characters allowed), or
// std::string::npos. Overlong forms, UTF-16 surrogates and code points past U+10FFFF are invalid.
size_t first_invalid_utf8(const std::string& s);
// 1-based line and column (in bytes) of a byte offset of s: "LINE:COLUMN".
std::string line_and_column(const std::string& s, size_t offset);

// ---- pieces of messages

// The parts separated by ", " ("a, b, c"; "" for none).
std::string joined(const std::vector<std::string>& parts);
// v as a stream writes it with `significant_digits` significant digits ("0.125", "1.5e-05", "nan", "inf"): the
// numbers of messages and events (report::format_number, for tables, writes a NaN as "-").
std::string number_text(double v, int significant_digits);

}  // namespace ampcheck::io
