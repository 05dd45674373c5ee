#include "ui/timeline_model.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "ui/intervals.h"

namespace sl::ui {

const char* to_string(ItemKind k) {
  switch (k) {
    case ItemKind::Kernel: return "kernel";
    case ItemKind::Memcpy: return "memcpy";
    case ItemKind::Memset: return "memset";
    case ItemKind::Nvtx: return "NVTX range";
    case ItemKind::Api: return "CUDA API call";
  }
  return "?";
}

std::vector<Row> assign_rows(std::vector<Item> items) {
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  std::vector<Row> rows;
  for (const Item& it : items) {
    auto row = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.items.back().end <= it.start; });
    if (row == rows.end()) row = rows.emplace(rows.end());
    row->items.push_back(it);
  }
  return rows;
}

size_t first_ending_after(const Row& row, Ns t) {
  auto it = std::upper_bound(row.items.begin(), row.items.end(), t, [](Ns v, const Item& i) { return v < i.end; });
  return size_t(it - row.items.begin());
}

const Item* item_at(const Row& row, Ns t) {
  const size_t i = first_ending_after(row, t);
  if (i < row.items.size() && row.items[i].start <= t) return &row.items[i];
  return nullptr;
}

namespace {

// The busy time of a track: the union of its items (items of different rows may overlap).
Ns busy_time(const std::vector<Row>& rows) {
  std::vector<std::pair<Ns, Ns>> iv;
  for (const Row& r : rows)
    for (const Item& i : r.items) iv.emplace_back(i.start, i.end);
  return union_length(std::move(iv));
}

Track make_track(TrackKind kind, uint32_t id, uint32_t pid, std::string label, std::vector<Item> items) {
  Track t;
  t.kind = kind;
  t.id = id;
  t.pid = pid;
  t.label = std::move(label);
  t.items = items.size();
  t.rows = assign_rows(std::move(items));
  t.busy = busy_time(t.rows);
  return t;
}

// Trace::stream_label of a stream the program did not name: "stream <id>".
bool unnamed_stream(const std::string& label) {
  return label.size() > 7 && label.rfind("stream ", 0) == 0 &&
         std::all_of(label.begin() + 7, label.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

int standard_role_rank(const std::string& role) {
  static const char* const kRanked[] = {"main", "aux0", "aux1", "aux2", "shared_expert"};
  for (int i = 0; i < 5; ++i)
    if (role == kRanked[i]) return i;
  return unnamed_stream(role) ? 6 : 5;
}

TimelineModel build_timeline(const prof::Trace& trace, const TimelineOptions& opts) {
  TimelineModel m;
  // Every record passes here. On an absolute clock (CUPTI's, or Unix time: past 1e15 ns) a
  // zero start is a missing timestamp, left off; ends before starts are clamped (rows rely on
  // ends being ordered like starts).
  const bool absolute_clock = trace.last_time() != prof::kNoTime && trace.last_time() > Ns(1'000'000'000'000'000);
  auto add = [&](std::vector<Item>& to, Ns start, Ns end, prof::StrId name, uint32_t index, ItemKind kind) {
    if (absolute_clock && start <= 0) {
      ++m.invalid_items;
      return;
    }
    to.push_back({start, end == prof::kNoTime || end < start ? start : end, name, index, kind});
  };
  // GPU work by stream (std::map: tracks in stream id order).
  std::map<uint32_t, std::vector<Item>> by_stream;
  for (uint32_t i = 0; i < trace.kernels.size(); ++i) {
    const auto& k = trace.kernels[i];
    add(by_stream[k.stream], k.start, k.end, k.name, i, ItemKind::Kernel);
  }
  const prof::StrId memcpy_name = 0, memset_name = 0;  // named at draw time from their record
  for (uint32_t i = 0; i < trace.memcpys.size(); ++i) {
    const auto& c = trace.memcpys[i];
    add(by_stream[c.stream], c.start, c.end, memcpy_name, i, ItemKind::Memcpy);
  }
  for (uint32_t i = 0; i < trace.memsets.size(); ++i) {
    const auto& s = trace.memsets[i];
    add(by_stream[s.stream], s.start, s.end, memset_name, i, ItemKind::Memset);
  }
  for (auto it = by_stream.begin(); it != by_stream.end();)  // streams whose records were all invalid
    it = it->second.empty() ? by_stream.erase(it) : std::next(it);
  if (!opts.group_streams_by_role) {
    for (auto& [stream, items] : by_stream) {
      std::string label = trace.stream_label(stream);
      if (label != "stream " + std::to_string(stream)) label += " (stream " + std::to_string(stream) + ")";
      m.tracks.push_back(make_track(TrackKind::GpuStream, stream, 0, std::move(label), std::move(items)));
      m.tracks.back().streams = {stream};
    }
  } else {
    // Roles in the order of their first stream id; unnamed streams keep a track each.
    std::vector<std::string> order;
    std::map<std::string, std::pair<std::vector<uint32_t>, std::vector<Item>>> by_role;
    for (auto& [stream, items] : by_stream) {
      const std::string label = trace.stream_label(stream);
      const std::string role = label == "stream " + std::to_string(stream) ? label : prof::stream_role(label);
      auto [it, fresh] = by_role.try_emplace(role);
      if (fresh) order.push_back(role);
      it->second.first.push_back(stream);
      it->second.second.insert(it->second.second.end(), items.begin(), items.end());
    }
    if (opts.standard_role_order)  // stable: unnamed streams stay in stream id order
      std::stable_sort(order.begin(), order.end(), [](const std::string& x, const std::string& y) {
        const int rx = standard_role_rank(x), ry = standard_role_rank(y);
        return rx != ry ? rx < ry : rx == 5 && x < y;
      });
    for (const std::string& role : order) {
      auto& [streams, items] = by_role[role];
      const std::string label =
          streams.size() == 1 ? trace.stream_label(streams[0]) : role + " (" + std::to_string(streams.size()) + " streams)";
      m.tracks.push_back(make_track(TrackKind::GpuStream, streams[0], 0, label, std::move(items)));
      m.tracks.back().streams = streams;
    }
  }
  // Host threads: NVTX, then API calls, per (pid, tid).
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Item>> nvtx, api;
  for (uint32_t i = 0; i < trace.nvtx.size(); ++i) {  // an unclosed range shows as a mark
    const auto& r = trace.nvtx[i];
    add(nvtx[{r.pid, r.tid}], r.start, r.end, r.name, i, ItemKind::Nvtx);
  }
  for (uint32_t i = 0; i < trace.api_calls.size(); ++i) {
    const auto& a = trace.api_calls[i];
    add(api[{a.pid, a.tid}], a.start, a.end, a.name, i, ItemKind::Api);
  }
  auto thread_name = [&](uint32_t pid, uint32_t tid) {
    for (const auto& th : trace.threads)
      if (th.pid == pid && th.tid == tid && !th.name.empty()) return th.name;
    return "thread " + std::to_string(tid);
  };
  for (auto* threads : {&nvtx, &api})
    for (auto it = threads->begin(); it != threads->end();) it = it->second.empty() ? threads->erase(it) : std::next(it);
  for (auto& [key, items] : nvtx)
    m.tracks.push_back(make_track(TrackKind::HostNvtx, key.second, key.first, thread_name(key.first, key.second) + ": NVTX",
                                  std::move(items)));
  for (auto& [key, items] : api)
    m.tracks.push_back(make_track(TrackKind::HostApi, key.second, key.first,
                                  thread_name(key.first, key.second) + ": CUDA API", std::move(items)));
  m.streams_busy = streams_busy(trace);
  m.memory = memory_allocated(trace);
  bool any = false;
  for (const Track& t : m.tracks) {
    m.items += t.items;
    for (const Row& r : t.rows) {
      if (r.items.empty()) continue;
      const Ns s = r.items.front().start, e = r.items.back().end;
      m.begin = any ? std::min(m.begin, s) : s;
      m.end = any ? std::max(m.end, e) : e;
      any = true;
    }
  }
  return m;
}

}  // namespace sl::ui
