// io::printable_text (io/text.h), the one rule for text from files on its way to a terminal or a report: valid UTF-8
// kept, every invalid byte and every byte of a control character other than newline and tab as \xNN, idempotent.
#include "io/text.h"

#include <gtest/gtest.h>

#include <string>

namespace ampcheck::io {
namespace {

TEST(PrintableText, KeepsValidUtf8NewlineAndTab) {
  for (const std::string s :
       {"", "fp16-autocast", "Grüße aus 東京 ✓ 🙂", "two\nlines\tand a tab", "a\\xE9 spelled out"}) {
    EXPECT_EQ(printable_text(s), s) << s;
    EXPECT_EQ(first_unprintable(s), std::string::npos) << s;
    EXPECT_EQ(first_invalid_utf8(s), std::string::npos) << s;
  }
}

TEST(PrintableText, EscapesEachInvalidByte) {
  EXPECT_EQ(printable_text("caf\xe9"), "caf\\xE9");  // Latin-1
  EXPECT_EQ(first_invalid_utf8("caf\xe9"), 3u);
  EXPECT_EQ(printable_text("\xc0\xaf"), "\\xC0\\xAF");                    // an overlong '/'
  EXPECT_EQ(printable_text("\xed\xa0\x80"), "\\xED\\xA0\\x80");           // a UTF-16 surrogate
  EXPECT_EQ(printable_text("\xf4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable_text("\xe2\x82"), "\\xE2\\x82");                    // a sequence cut short
  EXPECT_EQ(printable_text("\xe2\x82\xac\xe2"), "\xe2\x82\xac\\xE2");     // the euro kept, the cut byte escaped
}

TEST(PrintableText, EscapesControlCharactersButNewlineAndTab) {
  EXPECT_EQ(printable_text("\x1b[31mred"), "\\x1B[31mred");  // ESC: a terminal escape sequence
  EXPECT_EQ(printable_text("a\rb\x7f"), "a\\x0Db\\x7F");     // CR, DEL
  EXPECT_EQ(printable_text("\xc2\x9b"
                           "2J"),
            "\\xC2\\x9B2J");  // C1 CSI (U+009B), valid UTF-8 but a control
  EXPECT_EQ(printable_text(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(first_unprintable("ok\x1b"), 2u);
  EXPECT_EQ(first_invalid_utf8("ok\x1b"), std::string::npos);  // a control character is valid UTF-8
  EXPECT_EQ(printable_text("\xc2\xa0"), "\xc2\xa0");           // U+00A0 (no-break space) is printable
}

TEST(PrintableText, IsIdempotent) {
  for (const std::string s : {"caf\xe9", "\x1b]0;t\x07", "\xc2\x9b", "\xff\xfe", "plain"}) {
    const std::string once = printable_text(s);
    EXPECT_EQ(printable_text(once), once) << once;
    EXPECT_EQ(first_unprintable(once), std::string::npos) << once;
  }
}

TEST(PrintableText, LineAndColumnOfAnOffset) {
  EXPECT_EQ(line_and_column("name: caf\xe9", 9), "1:10");
  EXPECT_EQ(line_and_column("a: 1\nname: r\xe9", 12), "2:8");
}

}  // namespace
}  // namespace ampcheck::io
