// The ticker of long phases: lines while the phase runs, none once it ends.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "experiments/cli/phase_ticker.h"

namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) s += buf;
  return s;
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST(PhaseTicker, LinesWhileThePhaseRunsNoneAfter) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    sl::cli::PhaseTicker t(f, "allocating", 0.05);
    std::this_thread::sleep_for(std::chrono::milliseconds(330));
  }
  const std::string during = contents(f);
  EXPECT_GE(lines(during), 3u) << during;  // about 6 ticks in 0.33 s at 0.05 s
  EXPECT_LE(lines(during), 7u) << during;
  EXPECT_NE(during.find("allocating: still running ("), std::string::npos) << during;
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(contents(f), during) << "a line after the phase ended";
  std::fclose(f);
}

TEST(PhaseTicker, AShortPhasePrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  { sl::cli::PhaseTicker t(f, "loading", 10.0); }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}
