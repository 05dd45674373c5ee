// Screenshots: a PNG that decodes (stb_image, the reading side) to exactly the pixels written,
// and failures that leave nothing behind under the requested name or its temporary name.
#include <gtest/gtest.h>

#include <stb/stb_image.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "ui/screenshot.h"

namespace sl::ui {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("sl_screenshot_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(d);
  return d;
}

TEST(Screenshot, DecodesToThePixelsWritten) {
  const int w = 37, h = 11;  // odd sizes: no row padding to hide behind
  std::vector<uint8_t> px(size_t(w) * h * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t((i * 7919u) >> 3);
  const fs::path d = temp_dir(), path = d / "shot.png";
  write_png(path.string(), px, w, h);
  int rw = 0, rh = 0, comp = 0;
  unsigned char* back = stbi_load(path.string().c_str(), &rw, &rh, &comp, 4);
  ASSERT_NE(back, nullptr) << stbi_failure_reason();
  EXPECT_EQ(rw, w);
  EXPECT_EQ(rh, h);
  EXPECT_TRUE(std::equal(px.begin(), px.end(), back));
  stbi_image_free(back);
  EXPECT_FALSE(fs::exists(path.string() + ".part"));
  fs::remove_all(d);
}

TEST(Screenshot, FailuresLeaveNothingBehind) {
  const fs::path d = temp_dir();
  std::vector<uint8_t> px(4 * 4 * 4, 255);
  // A directory that does not exist.
  EXPECT_THROW(write_png((d / "no" / "shot.png").string(), px, 4, 4), Error);
  // A name that is a directory: the temporary file is written, the rename fails, and the
  // temporary file goes.
  fs::create_directories(d / "taken");
  try {
    write_png((d / "taken").string(), px, 4, 4);
    ADD_FAILURE() << "writing over a directory did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("taken"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists((d / "taken").string() + ".part"));
  EXPECT_TRUE(fs::is_directory(d / "taken"));
  // Pixels that do not match the size.
  EXPECT_THROW(write_png((d / "bad.png").string(), px, 5, 4), Error);
  EXPECT_FALSE(fs::exists(d / "bad.png"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace sl::ui
