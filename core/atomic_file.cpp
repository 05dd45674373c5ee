#include "core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace sl {

namespace fs = std::filesystem;

namespace {

std::string parent_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

void check_parent(const std::string& path) {
  const std::string parent = parent_of(path);
  struct stat st {};
  if (::stat(parent.c_str(), &st) != 0)
    fail("cannot write '", path, "': its folder '", parent, "' does not exist (", std::strerror(errno), ")");
  SL_CHECK(S_ISDIR(st.st_mode), "cannot write '", path, "': '", parent, "' is not a folder");
}

mode_t default_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

// STREAMLAB_WRITE_FAIL_AFTER=N (tests): an AtomicFile's commit fails with ENOSPC once more than N
// bytes were written, as a full disk would (the injected failure of the no-partial-file tests).
static long long injected_write_limit() {
  static const long long v = [] {
    const char* e = std::getenv("STREAMLAB_WRITE_FAIL_AFTER");
    return e && *e ? std::atoll(e) : -1LL;
  }();
  return v;
}

// One writer for both: the destination checks, the temporary file, the interrupt cleanup and
// the injected failures live in AtomicFile.
void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicFile out(path);
  out.write(content);
  out.commit();
}

void AtomicFile::write(std::string_view content) {
  if (!content.empty() && std::fwrite(content.data(), 1, content.size(), f_) != content.size())
    fail("writing '", path_, "' failed: ", std::strerror(errno));
}

namespace {

// Names that stand for an open stream of this process (/dev/stdout, /dev/fd/3, /proc/self/fd/1):
// the descriptor's number, else -1. Such a name is written through a duplicate of the descriptor,
// whatever it leads to: resolving it would find a pipe (no path) or the file the shell opened,
// and opening that again would start a new file offset (over `>> log`'s earlier lines, or over
// what the program wrote to stdout before) where the duplicate shares the shell's offset and its
// O_APPEND.
int stream_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const size_t n = std::strlen(prefix);
    if (path.compare(0, n, prefix) != 0) continue;
    const std::string num = path.substr(n);
    if (num.empty() || num.size() > 9 || num.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::atoi(num.c_str());
  }
  return -1;
}

// A hidden name beside `dest` for its temporary form: ".NAME" + suffix, or ".streamlab" + suffix
// where NAME is so long that the result would pass the file-name limit (255 bytes on most
// filesystems).
std::string hidden_name_beside(const std::string& dest, const std::string& suffix) {
  const std::string name = fs::path(dest).filename().string();
  return parent_of(dest) + "/." + (name.size() > 200 ? std::string("streamlab") : name) + suffix;
}

// `fd` as a stdio stream for writing; on failure `fd` is closed and the error names `path`.
std::FILE* stream_of(int fd, const std::string& path) {
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    fail("cannot open '", path, "' for writing: ", std::strerror(err));
  }
  return f;
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, Kind kind) : path_(path) {
  SL_CHECK(!path.empty(), "cannot write a file with an empty name");
  check_parent(path);
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;  // (through symbolic links)
  if (const int stream = stream_descriptor(path); stream >= 0) {
    SL_CHECK(kind == Kind::Stream, "refusing to write '", path, "': this writer needs a file, not a stream");
    const int fd = ::dup(stream);
    SL_CHECK(fd >= 0, "cannot write '", path, "': descriptor ", stream, " is not open (", std::strerror(errno), ")");
    f_ = stream_of(fd, path);
    device_ = true;
    return;
  }
  if (exists && !S_ISREG(st.st_mode)) {
    // A terminal, a device, a named pipe: written in place (a rename would replace the node and
    // the output would not reach it); anything else that is not a regular file (a folder) is
    // refused, and so is every such destination for writers that need a path.
    SL_CHECK(kind == Kind::Stream && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)), "refusing to write '", path,
             "': it exists and is not a regular file");
    // Opened without blocking first: a FIFO that no process reads is an error, not a hang.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0 && errno == ENXIO) fail("refusing to write '", path, "': it is a FIFO that no process is reading");
    SL_CHECK(fd >= 0, "cannot open '", path, "' for writing: ", std::strerror(errno));
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot open '", path, "' for writing: ", std::strerror(err));
    }
    f_ = stream_of(fd, path);
    device_ = true;
    return;
  }
  if (struct stat lst {}; ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    // A link to a regular file: the file is replaced and the link kept (renaming over the link
    // would turn it into a file of its own).
    SL_CHECK(exists, "refusing to write '", path, "': it is a symbolic link to a missing file");
    std::error_code ec;
    path_ = fs::canonical(path, ec).string();
    SL_CHECK(!ec, "cannot write '", path, "': cannot resolve the symbolic link (", ec.message(), ")");
  }
  tmp_ = hidden_name_beside(path_, ".tmp.XXXXXX");
  const int fd = ::mkstemp(tmp_.data());
  SL_CHECK(fd >= 0, "cannot create a temporary file beside '", path_, "': ", std::strerror(errno));
  cleanup_.reset(tmp_);
  if (::fchmod(fd, default_file_mode()) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail("cannot prepare a temporary file beside '", path, "': ", std::strerror(err));
  }
  if (kind == Kind::Path) {
    ::close(fd);  // the writer opens the (empty) file itself: SQLite takes it as an empty database
    return;
  }
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail("cannot open a temporary file beside '", path, "': ", std::strerror(err));
  }
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (f_) std::fclose(f_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::commit() {
  SL_CHECK(!committed_, "'", path_, "': committed twice");
  auto give_up = [&](const char* what, int err) {
    if (f_) std::fclose(f_);
    f_ = nullptr;
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    committed_ = true;  // nothing left to clean up
    fail("writing '", path_, "' failed (", what, "): ", std::strerror(err),
         device_ ? "" : "; the destination was left as it was");
  };
  if (f_) {
    if (std::fflush(f_) != 0 || std::ferror(f_)) give_up("write", errno ? errno : EIO);
    const long long limit = injected_write_limit();
    if (limit >= 0 && std::ftell(f_) > limit) give_up("write", ENOSPC);
    if (!device_ && ::fsync(::fileno(f_)) != 0) give_up("fsync", errno);
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) give_up("close", errno);
  } else if (!tmp_.empty()) {
    // A Path writer closed its file: make it durable before it replaces the destination.
    const int fd = ::open(tmp_.c_str(), O_RDONLY);
    if (fd < 0) give_up("open", errno);
    struct stat st {};
    const long long limit = injected_write_limit();
    if (limit >= 0 && ::fstat(fd, &st) == 0 && st.st_size > limit) {
      ::close(fd);
      give_up("write", ENOSPC);
    }
    if (::fchmod(fd, default_file_mode()) != 0 || ::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      give_up("fsync", err);
    }
    ::close(fd);
  }
  if (!device_ && ::rename(tmp_.c_str(), path_.c_str()) != 0) give_up("rename", errno);
  cleanup_.release();  // renamed into place: the name now belongs to the destination
  committed_ = true;
}

void append_line_durable(const std::string& path, std::string_view line) {
  check_parent(path);
  std::string data(line);
  data += '\n';
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0666);
  SL_CHECK(fd >= 0, "cannot open '", path, "' for appending: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("refusing to append to '", path, "': not a regular file");
  }
  // One write(2) on an O_APPEND file: a concurrent or later reader sees the line whole or, if
  // the writer was killed mid-call, a torn last line without its '\n'.
  const bool ok = ::write(fd, data.data(), data.size()) == ssize_t(data.size());
  const int err = errno;
  const bool synced = ok && ::fsync(fd) == 0;
  ::close(fd);
  SL_CHECK(ok && synced, "appending to '", path, "' failed: ", std::strerror(err));
}

std::vector<std::string> read_complete_lines(const std::string& path, size_t* torn) {
  if (torn) *torn = 0;
  std::vector<std::string> out;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return out;
  SL_CHECK(S_ISREG(st.st_mode), "'", path, "' is not a regular file");
  std::ifstream f(path, std::ios::binary);
  SL_CHECK(f, "cannot read '", path, "'");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t i = 0;
  while (i < all.size()) {
    const size_t nl = all.find('\n', i);
    if (nl == std::string::npos) {
      if (torn) *torn = 1;
      break;
    }
    out.push_back(all.substr(i, nl - i));
    i = nl + 1;
  }
  return out;
}

size_t drop_torn_tail(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return 0;
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t keep = all.rfind('\n') == std::string::npos ? 0 : all.rfind('\n') + 1;
  if (keep == all.size()) return 0;
  SL_CHECK(::truncate(path.c_str(), off_t(keep)) == 0, "cannot cut the torn last line off '", path, "': ",
           std::strerror(errno));
  return all.size() - keep;
}

namespace {
std::atomic<int> g_staged_counter{0};
}

StagedDir::StagedDir(std::string final_path) : final_(std::move(final_path)) {
  while (!final_.empty() && final_.size() > 1 && final_.back() == '/') final_.pop_back();
  check_parent(final_);
  SL_CHECK(!fs::exists(final_), "'", final_, "' already exists: not writing over it");
  staging_ = hidden_name_beside(final_, ".staging-" + std::to_string(::getpid()) + "-" +
                                            std::to_string(g_staged_counter++));
  std::error_code ec;
  fs::remove_all(staging_, ec);
  SL_CHECK(fs::create_directory(staging_, ec) && !ec, "cannot create the folder '", staging_, "': ", ec.message());
  cleanup_.reset(staging_, /*folder=*/true);
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);  // never throws; a leftover is cleaned by remove_stale_staging
}

void StagedDir::commit() {
  SL_CHECK(!committed_, "'", final_, "' was already committed");
  SL_CHECK(!fs::exists(final_), "'", final_, "' appeared while it was being written: its contents are left in '",
           staging_, "'");
  if (::rename(staging_.c_str(), final_.c_str()) != 0)
    fail("cannot rename '", staging_, "' to '", final_, "': ", std::strerror(errno));
  cleanup_.release();  // (after the rename: a signal in between finds no staging folder to remove)
  committed_ = true;
}

size_t remove_stale_staging(const std::string& folder) {
  size_t removed = 0;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return 0;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string n = e.path().filename().string();
    const size_t at = n.rfind(".staging-");
    if (n.empty() || n[0] != '.' || at == std::string::npos) continue;
    // ".<name>.staging-<pid>-<n>": stale when that process is gone.
    const long pid = std::strtol(n.c_str() + at + 9, nullptr, 10);
    if (pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM)) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    removed += !rm;
  }
  return removed;
}

}  // namespace sl
