// core/utf8.h against hand-made byte sequences (RFC 3629's valid ranges).
#include <gtest/gtest.h>

#include <string>

#include "core/utf8.h"

using sl::is_valid_utf8;
using sl::valid_utf8;

TEST(Utf8, WellFormedTextIsKept) {
  for (const std::string& s : {std::string(""), std::string("gemm_fp8_wide_kernel<2>"), std::string("\xE2\x82\xAC"),
                              std::string("\xF0\x9F\x98\x80"), std::string("\xC2\x80"), std::string("\xED\x9F\xBF"),
                              std::string("\xF4\x8F\xBF\xBF"), std::string("a\0b", 3)}) {
    EXPECT_TRUE(is_valid_utf8(s)) << s;
    EXPECT_EQ(valid_utf8(s), s);
  }
}

TEST(Utf8, EachBadByteBecomesOneReplacementCharacter) {
  const std::string R = "\xEF\xBF\xBD";
  const std::pair<std::string, std::string> cases[] = {
      {"\xFF", R},                                     // never in UTF-8
      {"a\xC0\xAF" "b", "a" + R + R + "b"},            // overlong '/'
      {"\xED\xA0\x80", R + R + R},                     // a surrogate
      {"\xF4\x90\x80\x80", R + R + R + R},             // past U+10FFFF
      {"\xE2\x82", R + R},                             // cut short at the end
      {"\xE2\x82" "x", R + R + "x"},                   // cut short before ASCII
      {"\x80" "ok", R + "ok"},                         // a lone continuation byte
  };
  for (const auto& [in, want] : cases) {
    EXPECT_FALSE(is_valid_utf8(in));
    EXPECT_EQ(valid_utf8(in), want);
    EXPECT_TRUE(is_valid_utf8(valid_utf8(in)));
  }
}
