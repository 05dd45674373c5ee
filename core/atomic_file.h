// Writing results so that a reader never sees half of one: a file is written to a temporary
// file beside its destination, flushed to disk and checked, then renamed over the destination
// (rename is atomic within a filesystem). A killed or failing writer leaves the old file, or
// none, never a truncated one. The same for whole folders (a report: complete or absent).
//
// Destinations are checked first: a missing parent folder is an error (nothing is created
// behind the user's back), and a destination that exists but is not a regular file (a folder,
// a device such as /dev/full, a FIFO) is refused; a rename would replace it.
#pragma once
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/interrupt_cleanup.h"

namespace sl {

// Throws sl::Error naming the path on any failure (the temporary file is removed).
void write_file_atomic(const std::string& path, std::string_view content);

// write_file_atomic for writers that stream (a multi-GB trace) or need a path of their own
// (SQLite): the destination is checked as above, the writer writes to file() or to temp_path(),
// and commit() flushes, fsyncs, checks and renames. Destroyed without commit() (an error, an
// exception), the temporary file is removed and the destination is left as it was. A character
// device destination (/dev/stdout) is written in place through file(), with write errors
// reported; writers that need a path (Kind::Path) refuse it.
class AtomicFile {
 public:
  enum class Kind { Stream, Path };
  explicit AtomicFile(const std::string& path, Kind kind = Kind::Stream);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  std::FILE* file() const { return f_; }                   // Kind::Stream
  const std::string& temp_path() const { return tmp_; }  // Kind::Path: write here, then commit()
  const std::string& path() const { return path_; }
  void write(std::string_view content);  // Kind::Stream: all of it to file(), or throws naming the path
  void commit();

 private:
  std::string path_, tmp_;
  InterruptCleanup cleanup_;  // the temporary file goes on Ctrl-C too
  std::FILE* f_ = nullptr;
  bool device_ = false, committed_ = false;
};

// Appends one line (a '\n' is added) with a single write(2) on a file opened O_APPEND, then
// fsyncs. Used for logs of finished work that a killed run must be able to resume from: a line
// is either whole or, at worst, a torn last line that readers skip (read_complete_lines).
void append_line_durable(const std::string& path, std::string_view line);

// The lines of a file that end in '\n' (a torn last line, from a writer killed mid-write, is
// left out and counted in *torn when given). A missing file gives no lines.
std::vector<std::string> read_complete_lines(const std::string& path, size_t* torn = nullptr);

// Cuts a torn last line (text after the last '\n') off the file, so that the next appended line
// starts on a line of its own. Returns the bytes removed.
size_t drop_torn_tail(const std::string& path);

// A folder built under a temporary name beside its final name and renamed into place by
// commit(); destroyed (with everything in it) if commit() was never reached. The final name
// must not exist yet.
class StagedDir {
 public:
  explicit StagedDir(std::string final_path);
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;
  const std::string& path() const { return staging_; }  // write here
  const std::string& final_path() const { return final_; }
  void commit();  // rename into place; throws sl::Error if the final name appeared meanwhile

 private:
  std::string final_, staging_;
  InterruptCleanup cleanup_;  // Ctrl-C removes the staging folder and what it holds
  bool committed_ = false;
};

// Removes staging folders left in `folder` by writers that were killed (their process is
// gone). Returns how many were removed.
size_t remove_stale_staging(const std::string& folder);

}  // namespace sl
