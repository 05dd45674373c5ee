#include "core/input_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace sl {

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(what, " '", path, "': ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(what, " '", path, "': ", kind_of(st.st_mode), ", not a regular file");
}

bool is_stream(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  return S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode);
}

void read_stream(const std::string& path, const std::string& what, double wait_s, size_t max_bytes,
                 const std::function<void(const char*, size_t)>& out) {
  // Non-blocking open: a FIFO without a writer would block open() itself.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(what, " '", path, "': ", std::strerror(errno));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  const bool fifo = ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
  size_t total = 0;
  char buf[1 << 16];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  bool got_any = false;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      got_any = true;
      total += size_t(n);
      SL_CHECK(total <= max_bytes, what, " '", path, "': more than ", max_bytes, " bytes on the stream");
      out(buf, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) fail(what, " '", path, "': ", std::strerror(errno));
    // n == 0: end of data, unless a FIFO's writer has not connected yet (Linux reports EOF then
    // too); EAGAIN: no data yet. Wait for data or a hang-up, bounded while nothing came.
    if (n == 0 && (got_any || !fifo)) break;
    const auto left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (!got_any && left <= 0)
      fail(what, " '", path, "': nothing to read after ", wait_s, " s (a FIFO with no writer?)");
    struct pollfd p {fd, POLLIN, 0};
    const int r = ::poll(&p, 1, got_any ? 1000 : std::max(1, int(left * 1000)));
    if (r < 0 && errno != EINTR) fail(what, " '", path, "': ", std::strerror(errno));
    if (n == 0 && r == 0 && !got_any) continue;  // still no writer: loop until the deadline
    if (n == 0 && (p.revents & POLLHUP) && !(p.revents & POLLIN) && !got_any) {
      // The writer came and went without writing: an empty stream.
      break;
    }
  }
}

std::string read_stream(const std::string& path, const std::string& what, double wait_s, size_t max_bytes) {
  std::string text;
  read_stream(path, what, wait_s, max_bytes, [&](const char* p, size_t n) { text.append(p, n); });
  return text;
}

}  // namespace sl
