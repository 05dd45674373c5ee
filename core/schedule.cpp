#include "core/schedule.h"

#include <algorithm>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace sl {

void Schedule::name_buffer(int id, const std::string& name) { buffer_names_.emplace_back(id, name); }

void Schedule::op(int stream, std::string name, std::string scope, std::vector<int> reads, std::vector<int> writes) {
  entries_.push_back({ScheduleEntry::Op, stream, -1, std::move(name), std::move(scope), std::move(reads),
                      std::move(writes)});
  order_built_ = false;
}

void Schedule::record(int event, int stream, std::string scope) {
  entries_.push_back({ScheduleEntry::Record, stream, event, "record", std::move(scope), {}, {}});
  order_built_ = false;
}

void Schedule::wait(int stream, int event, std::string scope) {
  entries_.push_back({ScheduleEntry::Wait, stream, event, "wait", std::move(scope), {}, {}});
  order_built_ = false;
}

std::string Schedule::buffer_name(int id) const {
  for (auto it = buffer_names_.rbegin(); it != buffer_names_.rend(); ++it)
    if (it->first == id) return it->second;
  return "buffer" + std::to_string(id);
}

std::string Schedule::stream_name(int id) const {
  for (const auto& s : streams_)
    if (s.id == id) return s.name;
  return "stream" + std::to_string(id);
}

std::string Schedule::event_name(int id) const {
  for (const auto& e : events_)
    if (e.id == id) return e.name;
  return "event" + std::to_string(id);
}

// Vector clocks over streams, in program order (the order the host enqueued the work):
// an entry on stream s advances s's own component; a record snapshots the clock into the
// event; a wait joins the event's last snapshot into the waiting stream's clock. A wait on an
// event never recorded is a no-op, as in CUDA.
void Schedule::build_order() const {
  if (order_built_) return;
  std::map<int, int> index;  // stream id -> component
  for (const auto& e : entries_)
    if (!index.count(e.stream)) {
      int n = int(index.size());
      index[e.stream] = n;
    }
  const size_t n = index.size();
  std::vector<std::vector<int>> current(n, std::vector<int>(n, 0));
  std::map<int, std::vector<int>> event_clock;
  clock_.assign(entries_.size(), {});
  seq_in_stream_.assign(entries_.size(), 0);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    const int s = index[e.stream];
    auto& c = current[s];
    if (e.kind == ScheduleEntry::Wait) {
      auto it = event_clock.find(e.event);
      if (it != event_clock.end())
        for (size_t k = 0; k < n; ++k) c[k] = std::max(c[k], it->second[k]);
    }
    c[s] += 1;
    seq_in_stream_[i] = c[s];
    clock_[i] = c;
    if (e.kind == ScheduleEntry::Record) event_clock[e.event] = c;
  }
  comp_of_entry_.assign(entries_.size(), 0);
  for (size_t i = 0; i < entries_.size(); ++i) comp_of_entry_[i] = index[entries_[i].stream];
  order_built_ = true;
}

bool Schedule::happens_before(size_t a, size_t b) const {
  build_order();
  SL_CHECK(a < entries_.size() && b < entries_.size(), "Schedule::happens_before: entry out of range");
  if (a == b) return false;
  const int s = comp_of_entry_[a];
  return clock_[b][s] >= seq_in_stream_[a] && a < b;
}

std::vector<std::string> Schedule::hazards() const {
  build_order();
  struct Access {
    int last_write = -1;
    std::vector<int> reads_since;  // reads after last_write
  };
  std::map<int, Access> buf;
  std::vector<std::string> out;
  auto check = [&](int a, int b, int buffer, const char* kind) {
    if (a < 0 || entries_[a].stream == entries_[b].stream) return;
    if (!happens_before(size_t(a), size_t(b))) {
      std::ostringstream os;
      os << kind << " on " << buffer_name(buffer) << ": '" << entries_[a].name << "' (" << entries_[a].scope << ", "
         << stream_name(entries_[a].stream) << ") is not ordered before '" << entries_[b].name << "' ("
         << entries_[b].scope << ", " << stream_name(entries_[b].stream) << ")";
      out.push_back(os.str());
    }
  };
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    if (e.kind != ScheduleEntry::Op) continue;
    for (int r : e.reads) {
      auto& acc = buf[r];
      check(acc.last_write, int(i), r, "read-after-write");
    }
    for (int w : e.writes) {
      auto& acc = buf[w];
      check(acc.last_write, int(i), w, "write-after-write");
      for (int r : acc.reads_since) check(r, int(i), w, "write-after-read");
    }
    for (int r : e.reads) {
      bool also_written = std::find(e.writes.begin(), e.writes.end(), r) != e.writes.end();
      if (!also_written) buf[r].reads_since.push_back(int(i));
    }
    for (int w : e.writes) {
      buf[w].last_write = int(i);
      buf[w].reads_since.clear();
    }
  }
  return out;
}

nlohmann::json Schedule::to_json() const {
  nlohmann::json j;
  j["streams"] = nlohmann::json::array();
  for (const auto& s : streams_)
    j["streams"].push_back({{"id", s.id}, {"name", s.name}, {"owner", s.owner}, {"priority", s.priority}});
  j["events"] = nlohmann::json::array();
  for (const auto& e : events_) j["events"].push_back({{"id", e.id}, {"name", e.name}, {"owner", e.owner}});
  j["entries"] = nlohmann::json::array();
  for (const auto& e : entries_) {
    nlohmann::json x;
    x["kind"] = e.kind == ScheduleEntry::Op ? "op" : e.kind == ScheduleEntry::Record ? "record" : "wait";
    x["stream"] = stream_name(e.stream);
    x["scope"] = e.scope;
    if (e.kind == ScheduleEntry::Op) {
      x["name"] = e.name;
      auto names = [&](const std::vector<int>& ids) {
        nlohmann::json a = nlohmann::json::array();
        for (int id : ids) a.push_back(buffer_name(id));
        return a;
      };
      x["reads"] = names(e.reads);
      x["writes"] = names(e.writes);
    } else {
      x["event"] = event_name(e.event);
    }
    j["entries"].push_back(std::move(x));
  }
  return j;
}

std::string Schedule::to_text() const {
  std::ostringstream os;
  os << "streams (" << streams_.size() << "):\n";
  for (const auto& s : streams_)
    os << "  " << s.id << "  " << s.name << "  owner=" << s.owner << "  priority=" << s.priority << "\n";
  os << "events: " << events_.size() << "\n";
  for (const auto& e : entries_) {
    os << "  [" << stream_name(e.stream) << "] " << e.scope << "  ";
    if (e.kind == ScheduleEntry::Op) {
      os << e.name << "  reads:";
      for (int r : e.reads) os << " " << buffer_name(r);
      os << "  writes:";
      for (int w : e.writes) os << " " << buffer_name(w);
    } else {
      os << (e.kind == ScheduleEntry::Record ? "record " : "wait ") << event_name(e.event);
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace sl
