// Text from outside — HDF5 attributes and names, scenario YAML, JSON-lines and summary.json strings, command-line
// paths, error messages that quote any of them — on its way to a terminal or a report (JSON, Markdown, HTML, JUnit
// XML). One rule everywhere (docs/ROBUSTNESS.md, "Text from files"): valid UTF-8 is kept as it is; each byte that is
// not part of a valid UTF-8 sequence, and each byte of a control character other than newline and tab (C0 — ESC
// starts a terminal escape sequence —, DEL, and C1, U+0080..U+009F), is written as \xNN (upper-case hex). The result
// is valid, printable UTF-8 that every format can hold, and a second pass leaves it unchanged.
#pragma once

#include <cstddef>
#include <string>

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

}  // namespace ampcheck::io
