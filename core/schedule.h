// A recorded stream schedule: which streams and events exist (and who owns them), and, in
// program order, every op (with the stream it runs on and the buffers it reads and writes),
// every event record and every event wait. Backends that run ops in program order (the CPU
// reference) still produce the schedule the CUDA backend would execute, so the structure can
// be printed, compared across policies, and checked for hazards without a GPU.
//
// Knows nothing of any model: names and owners are strings given by the caller.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sl {

struct ScheduleStream {
  int id = 0;
  std::string name;   // e.g. "main", "target.aux0", "mtp1.aux2"
  std::string owner;  // who created it, e.g. "target", "mtp.layer1", "process"
  int priority = 0;
};

struct ScheduleEvent {
  int id = 0;
  std::string name;   // e.g. "L3.fork", "mtp0.join1"
  std::string owner;  // e.g. "L3"
};

struct ScheduleEntry {
  enum Kind { Op, Record, Wait } kind = Op;
  int stream = 0;
  int event = -1;             // Record / Wait
  std::string name;           // op name (Op)
  std::string scope;          // e.g. "step0/target/L3/attn"
  std::vector<int> reads;     // buffer ids (Op)
  std::vector<int> writes;    // buffer ids (Op)
};

class Schedule {
 public:
  void add_stream(const ScheduleStream& s) { streams_.push_back(s); }
  void add_event(const ScheduleEvent& e) { events_.push_back(e); }
  void name_buffer(int id, const std::string& name);

  void op(int stream, std::string name, std::string scope, std::vector<int> reads, std::vector<int> writes);
  void record(int event, int stream, std::string scope);
  void wait(int stream, int event, std::string scope);
  void clear_entries() { entries_.clear(); }

  const std::vector<ScheduleStream>& streams() const { return streams_; }
  const std::vector<ScheduleEvent>& events() const { return events_; }
  const std::vector<ScheduleEntry>& entries() const { return entries_; }
  std::string buffer_name(int id) const;
  std::string stream_name(int id) const;
  std::string event_name(int id) const;

  // Hazards when the streams really run concurrently: for every pair of ops on different
  // streams that touch the same buffer with at least one write (RAW, WAR, WAW), the earlier
  // one (program order) must happen-before the later one through stream order and
  // record -> wait edges. Returns one human-readable line per hazard (empty = safe).
  std::vector<std::string> hazards() const;

  // happens_before[i][j] for entry indices, computed by the same rules (exposed for tests).
  bool happens_before(size_t a, size_t b) const;

  nlohmann::json to_json() const;
  std::string to_text() const;

 private:
  void build_order() const;
  std::vector<ScheduleStream> streams_;
  std::vector<ScheduleEvent> events_;
  std::vector<ScheduleEntry> entries_;
  std::vector<std::pair<int, std::string>> buffer_names_;
  // Vector clocks per entry (lazy): clock[e][s] = number of entries of stream s that
  // happen-before-or-equal entry e.
  mutable std::vector<std::vector<int>> clock_;
  mutable std::vector<int> seq_in_stream_;
  mutable std::vector<int> comp_of_entry_;  // clock component of each entry's stream
  mutable bool order_built_ = false;
};

}  // namespace sl
