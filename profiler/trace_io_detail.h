// Internal to trace_io: what the fast JSON loader (trace_io_fast.cpp) shares with the precise
// one (trace_io.cpp).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "profiler/trace.h"
#include "profiler/trace_io.h"

namespace sl::prof::trace_io_detail {

// The bytes of a JSON document: text in memory or a regular file read with pread (so that a
// large trace is read in chunk-sized pieces into reused buffers, never whole).
class Source {
 public:
  virtual ~Source() = default;
  size_t size() const { return size_; }
  // Copies bytes [offset, offset + n) to dst; throws sl::Error naming the file on a read error.
  virtual void read(size_t offset, char* dst, size_t n) const = 0;

 protected:
  size_t size_ = 0;
};

class MemorySource : public Source {
 public:
  explicit MemorySource(std::string_view text);
  void read(size_t offset, char* dst, size_t n) const override;

 private:
  std::string_view text_;
};

class FileSource : public Source {
 public:
  explicit FileSource(const std::string& path);  // sl::Error "cannot open trace '...'"
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  bool regular() const { return regular_; }  // size() and read() only for regular files
  void read(size_t offset, char* dst, size_t n) const override;

 private:
  std::string path_;
  int fd_ = -1;
  bool regular_ = false;
};

// Whether `needle` occurs in the last `window` bytes.
bool tail_contains(const Source& src, std::string_view needle, size_t window);

// The top level of a parsed document.
struct TopLevel {
  simdjson::dom::element events, base, block, device_properties, distributed;
  bool has_events = false, has_base = false, has_block = false, has_device_properties = false,
       has_distributed = false;
  size_t events_keys = 0;  // top-level "traceEvents" keys seen (a repeated key: the last wins)
};
// sl::Error, as the loader always reported, when it is not an object with a traceEvents array.
TopLevel read_top_level(simdjson::dom::element doc, const std::string& origin);
Ns base_time_of(const TopLevel& top, const std::string& origin);  // 0 when absent
bool has_our_block(const TopLevel& top);
void load_device_properties(const TopLevel& top, Trace& t, const std::string& origin);
// distributedInfo's rank and world_size into t (absent: left unknown; present but not an integer
// in 0..2^20, or a rank outside the world: an error naming the field).
void load_distributed_info(const TopLevel& top, Trace& t, const std::string& origin);
void load_block(simdjson::dom::object block, Trace& t, const std::string& origin);
// Whether the block sets the record counts (load_block then overwrites the events' counts).
bool block_has_counts(simdjson::dom::object block);

// Reads a file straight into simdjson's padded buffer.
simdjson::padded_string read_file_padded(const std::string& path);
// The precise loader: `text` is followed by SIMDJSON_PADDING readable bytes.
Trace load_precise(std::string_view text, const std::string& origin, JsonLoadStats* stats);

// The fast loader; nullopt when the precise loader must run (stats->fallback says why).
std::optional<Trace> load_fast(const Source& src, const std::string& origin, const JsonLoadOptions& opts,
                               JsonLoadStats* stats);

}  // namespace sl::prof::trace_io_detail
