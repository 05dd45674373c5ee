// Safe writes (core/atomic_file.h): a destination holds the old content or the new one, never a
// part; bad destinations are refused; a killed writer leaves no partial file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"
#include "tests/cpu/temp_dir.h"

namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

struct TempDir : sl::test::TempDir {
  TempDir() : sl::test::TempDir("sl_atomic") {}
};

size_t entries(const std::string& dir) {
  return size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

}  // namespace

TEST(AtomicFile, WritesAndReplacesWithoutLeftovers) {
  TempDir d;
  const std::string p = d.path + "/out.json";
  sl::write_file_atomic(p, "first");
  EXPECT_EQ(read_all(p), "first");
  sl::write_file_atomic(p, "second, longer");
  EXPECT_EQ(read_all(p), "second, longer");
  EXPECT_EQ(entries(d.path), 1u);  // no temporary file left behind
}

TEST(AtomicFile, RefusesBadDestinations) {
  TempDir d;
  EXPECT_THROW(sl::write_file_atomic(d.path + "/missing/dir/x.json", "x"), sl::Error);
  EXPECT_FALSE(fs::exists(d.path + "/missing"));  // nothing created behind the user's back
  fs::create_directory(d.path + "/adir");
  EXPECT_THROW(sl::write_file_atomic(d.path + "/adir", "x"), sl::Error);
  EXPECT_TRUE(fs::is_directory(d.path + "/adir"));
  ASSERT_EQ(::mkfifo((d.path + "/fifo").c_str(), 0600), 0);
  EXPECT_THROW(sl::write_file_atomic(d.path + "/fifo", "x"), sl::Error);  // no reader: refused, no hang
  ASSERT_EQ(::symlink("nothing-here", (d.path + "/dangling").c_str()), 0);
  EXPECT_THROW(sl::write_file_atomic(d.path + "/dangling", "x"), sl::Error);
  EXPECT_FALSE(fs::exists(d.path + "/nothing-here"));
}

// A symbolic link to a regular file: the file gets the new content and the link stays a link (a
// rename over the link replaced it with a file of its own).
TEST(AtomicFile, ALinkKeepsPointingAtTheReplacedFile) {
  TempDir d;
  sl::write_file_atomic(d.path + "/real.json", "old");
  ASSERT_EQ(::symlink("real.json", (d.path + "/link.json").c_str()), 0);
  sl::write_file_atomic(d.path + "/link.json", "new");
  EXPECT_TRUE(fs::is_symlink(d.path + "/link.json"));
  EXPECT_EQ(read_all(d.path + "/real.json"), "new");
  EXPECT_EQ(entries(d.path), 2u);
}

// Names of this process's open streams are written in place, whatever they lead to: a pipe (which
// has no path to rename over) and a file the shell opened (/dev/stdout > file).
TEST(AtomicFile, StreamNamesAreWrittenInPlace) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  sl::write_file_atomic("/proc/self/fd/" + std::to_string(fds[1]), "through the pipe");
  char buf[64] = {};
  const ssize_t n = ::read(fds[0], buf, sizeof buf);
  EXPECT_EQ(std::string(buf, size_t(n > 0 ? n : 0)), "through the pipe");
  ::close(fds[0]);
  ::close(fds[1]);
  TempDir d;
  const std::string file = d.path + "/captured";
  sl::write_file_atomic(file, "earlier lines\n");
  // As `>> log`: the descriptor's own offset and O_APPEND are kept (opening the name again would
  // start at offset 0, or truncate).
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  sl::write_file_atomic("/proc/self/fd/" + std::to_string(fd), "new\n");
  sl::write_file_atomic("/dev/fd/" + std::to_string(fd), "more\n");
  ::close(fd);
  EXPECT_EQ(read_all(file), "earlier lines\nnew\nmore\n");
  EXPECT_THROW(sl::write_file_atomic("/dev/fd/987654", "x"), sl::Error);  // not open
  EXPECT_EQ(entries(d.path), 1u);
  // A FIFO that a process reads is written to.
  const std::string fifo = d.path + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_all(fifo); });
  for (int i = 0; i < 2000; ++i) {
    try {
      sl::write_file_atomic(fifo, "via the fifo");
      break;
    } catch (const sl::Error&) {  // the reader has not opened it yet
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  reader.join();
  EXPECT_EQ(got, "via the fifo");
}

TEST(AtomicFile, DeviceWriteErrorsAreReported) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  // A character device is written in place (never replaced by a rename), and its ENOSPC is an error.
  EXPECT_THROW(sl::write_file_atomic("/dev/full", std::string(1 << 16, 'x')), sl::Error);
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
  sl::write_file_atomic("/dev/null", "fine");
}

TEST(AtomicFile, AKilledWriterLeavesTheOldFile) {
  TempDir d;
  const std::string p = d.path + "/big.bin";
  sl::write_file_atomic(p, "old");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string big(size_t(400) << 20, 'y');  // long enough to be killed mid-write
    sl::write_file_atomic(p, big);
    ::_exit(0);
  }
  // Kill it once its temporary file has appeared (it is writing).
  for (int i = 0; i < 2000 && entries(d.path) < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  const std::string now = read_all(p);
  // Either the writer had already finished (all new) or the old file is intact: never a part.
  EXPECT_TRUE(now == "old" || now.size() == (size_t(400) << 20)) << now.size();
}

TEST(AtomicFile, TornLastLineIsSkipped) {
  TempDir d;
  const std::string p = d.path + "/cells.jsonl";
  sl::append_line_durable(p, "{\"a\":1}");
  sl::append_line_durable(p, "{\"a\":2}");
  {
    std::ofstream f(p, std::ios::app);
    f << "{\"a\":3";  // a writer killed mid-line
  }
  size_t torn = 0;
  const auto lines = sl::read_complete_lines(p, &torn);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "{\"a\":2}");
  EXPECT_EQ(torn, 1u);
  EXPECT_EQ(sl::drop_torn_tail(p), 6u);
  sl::append_line_durable(p, "{\"a\":4}");
  const auto after = sl::read_complete_lines(p, &torn);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[2], "{\"a\":4}");
  EXPECT_EQ(torn, 0u);
  EXPECT_TRUE(sl::read_complete_lines(d.path + "/none.jsonl").empty());
}

TEST(AtomicFile, StagedDirIsAllOrNothing) {
  TempDir d;
  const std::string final_path = d.path + "/report";
  {
    sl::StagedDir s(final_path);
    sl::write_file_atomic(s.path() + "/a.txt", "a");
    // destroyed without commit: as if the writer failed
  }
  EXPECT_FALSE(fs::exists(final_path));
  EXPECT_EQ(entries(d.path), 0u);
  {
    sl::StagedDir s(final_path);
    sl::write_file_atomic(s.path() + "/a.txt", "a");
    s.commit();
  }
  EXPECT_EQ(read_all(final_path + "/a.txt"), "a");
  EXPECT_THROW(sl::StagedDir again(final_path), sl::Error);  // never over an existing folder
}

TEST(AtomicFile, StaleStagingOfDeadWritersIsRemoved) {
  TempDir d;
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);  // a pid that is certainly gone now
  const std::string stale = d.path + "/.report.staging-" + std::to_string(pid) + "-0";
  const std::string live = d.path + "/.other.staging-" + std::to_string(::getpid()) + "-7";
  fs::create_directory(stale);
  fs::create_directory(live);
  EXPECT_EQ(sl::remove_stale_staging(d.path), 1u);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
}
