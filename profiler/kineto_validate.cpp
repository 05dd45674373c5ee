#include "profiler/kineto_validate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/kineto_json.h"

namespace sl::prof {

namespace {

using json = nlohmann::json;

struct Ctx {
  KinetoValidation& v;
  size_t max_errors;
  size_t dropped = 0;
  template <class... A>
  void err(const A&... a) {
    if (v.errors.size() >= max_errors) {
      ++dropped;
      return;
    }
    std::ostringstream os;
    (os << ... << a);
    v.errors.push_back(os.str());
  }
};

bool is_int(const json& j) { return j.is_number_integer() || j.is_number_unsigned(); }

int64_t to_ns(double us) { return int64_t(std::llround(us * 1000.0)); }

// Checks the textual form of every "ts" / "dur" value: -?digits.ddd
void check_time_format(std::string_view text, Ctx& c) {
  for (const char* key : {"\"ts\":", "\"dur\":"}) {
    size_t klen = std::strlen(key);
    size_t pos = 0, bad = 0;
    while ((pos = text.find(key, pos)) != std::string_view::npos) {
      size_t p = pos + klen;
      while (p < text.size() && (text[p] == ' ' || text[p] == '\t')) ++p;
      size_t b = p;
      if (p < text.size() && text[p] == '-') ++p;
      size_t d0 = p;
      while (p < text.size() && std::isdigit(static_cast<unsigned char>(text[p]))) ++p;
      bool ok = p > d0 && p < text.size() && text[p] == '.';
      if (ok) {
        size_t f0 = ++p;
        while (p < text.size() && std::isdigit(static_cast<unsigned char>(text[p]))) ++p;
        ok = (p - f0) == 3;
      }
      if (!ok && bad++ < 3) {
        size_t e = std::min(text.size(), b + 24);
        c.err("byte ", b, ": ", std::string_view(key).substr(1, klen - 3),
              " must be microseconds with exactly three decimals, found '",
              std::string(text.substr(b, e - b)).substr(0, std::string(text.substr(b, e - b)).find_first_of(",}")), "'");
      }
      pos = p;
    }
  }
}

struct SliceRec {
  int64_t s, e;
  size_t index;
  std::string cat;
};

}  // namespace

std::string KinetoValidation::report() const {
  if (errors.empty()) {
    std::ostringstream os;
    os << "valid: " << events << " events (" << slices << " slices, " << flows << " flow events, " << counters
       << " counter samples, " << metadata << " metadata)";
    return os.str();
  }
  std::string r;
  for (const auto& e : errors) r += e + "\n";
  return r;
}

KinetoValidation validate_kineto_json(std::string_view text, size_t max_errors) {
  KinetoValidation v;
  Ctx c{v, max_errors};
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    c.err("not valid JSON at byte ", e.byte, ": ", e.what());
    return v;
  }
  if (!doc.is_object()) {
    c.err("top level must be an object");
    return v;
  }
  // ---- top level
  if (!doc.contains("schemaVersion") || !is_int(doc["schemaVersion"])) c.err("top level: schemaVersion (integer) missing");
  if (!doc.contains("deviceProperties") || !doc["deviceProperties"].is_array())
    c.err("top level: deviceProperties (array) missing");
  if (!doc.contains("distributedInfo") || !doc["distributedInfo"].is_object() ||
      !doc["distributedInfo"].contains("rank") || !is_int(doc["distributedInfo"]["rank"]))
    c.err("top level: distributedInfo {\"rank\": N} missing");
  else {
    static const std::regex rank_re("\"rank\":\\s+(\\d+)");
    std::string head(text.substr(0, std::min<size_t>(text.size(), 1 << 20)));
    if (!std::regex_search(head, rank_re))
      c.err("distributedInfo: HTA finds the rank with the regex \"rank\":\\s+(\\d+) (a space after the colon)");
  }
  if (!doc.contains("baseTimeNanoseconds") || !is_int(doc["baseTimeNanoseconds"]))
    c.err("top level: baseTimeNanoseconds (integer) missing");
  if (!doc.contains("displayTimeUnit") || !doc["displayTimeUnit"].is_string())
    c.err("top level: displayTimeUnit (string) missing");
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    c.err("top level: traceEvents (array) missing");
    return v;
  }
  check_time_format(text, c);

  static const std::set<std::string> cats = {"kernel",         "gpu_memcpy",      "gpu_memset",
                                             "cuda_runtime",   "cuda_driver",     "cuda_sync",
                                             "gpu_user_annotation", "user_annotation", "cpu_op",
                                             "python_function", "overhead",       "Trace"};
  static const std::regex versioned(".*_v[0-9]+$");

  std::map<std::pair<int64_t, int64_t>, std::vector<SliceRec>> tracks;
  std::set<std::pair<int64_t, int64_t>> kernel_tracks, sync_tracks, gpu_tracks;
  std::set<int64_t> pids_with_slices;
  std::set<std::pair<int64_t, int64_t>> named_threads;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  std::set<int64_t> named_processes;
  struct FlowEnd {
    size_t index;
    int64_t pid, tid, ts;
    bool has_bp_e;
  };
  std::map<int64_t, std::vector<FlowEnd>> starts, finishes;

  const json& evs = doc["traceEvents"];
  v.events = evs.size();
  for (size_t i = 0; i < evs.size(); ++i) {
    const json& e = evs[i];
    if (!e.is_object()) {
      c.err("event ", i, ": not an object");
      continue;
    }
    if (!e.contains("ph") || !e["ph"].is_string()) {
      c.err("event ", i, ": ph missing");
      continue;
    }
    std::string ph = e["ph"];
    auto get_int = [&](const char* k, int64_t& out) {
      if (!e.contains(k) || !is_int(e[k])) {
        c.err("event ", i, " (ph ", ph, "): ", k, " must be an integer");
        return false;
      }
      out = e[k].get<int64_t>();
      return true;
    };
    auto get_ts = [&](const char* k, int64_t& out) {
      if (!e.contains(k) || !e[k].is_number()) {
        c.err("event ", i, " (ph ", ph, "): ", k, " (number, us) missing");
        return false;
      }
      double us = e[k].get<double>();
      if (std::fabs(us) > 1e13) {
        c.err("event ", i, ": ", k, " = ", us, " us looks absolute; ts must be relative to baseTimeNanoseconds");
        return false;
      }
      out = to_ns(us);
      return true;
    };
    if (ph == "X") {
      v.slices++;
      int64_t pid = 0, tid = 0, ts = 0, dur = 0;
      if (!e.contains("cat") || !e["cat"].is_string() || !cats.count(e["cat"].get<std::string>())) {
        c.err("event ", i, ": unknown or missing cat ", e.contains("cat") ? e["cat"].dump() : "");
        continue;
      }
      std::string cat = e["cat"];
      if (!e.contains("name") || !e["name"].is_string() || e["name"].get<std::string>().empty())
        c.err("event ", i, " (", cat, "): name missing");
      if (!get_int("pid", pid) || !get_int("tid", tid) || !get_ts("ts", ts) || !get_ts("dur", dur)) continue;
      if (dur < 0) c.err("event ", i, " (", cat, "): negative dur");
      std::string name = e.value("name", "");
      const json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : nullptr;
      auto need_args = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
          if (!args || !args->contains(k)) c.err("event ", i, " (", cat, " '", name, "'): args.\"", k, "\" missing");
      };
      bool gpu_op = cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset";
      if (gpu_op) {
        need_args({"stream", "correlation", "device", "context"});
        if (cat == "kernel") need_args({"grid", "block", "registers per thread", "shared memory"});
        else need_args({"bytes", "memory bandwidth (GB/s)"});
        if (args && args->contains("device") && is_int((*args)["device"]) && (*args)["device"].get<int64_t>() != pid)
          c.err("event ", i, " (", cat, "): pid ", pid, " != args.device ", (*args)["device"].dump());
        if (args && args->contains("stream") && is_int((*args)["stream"]) &&
            ((*args)["stream"].get<int64_t>() & kTidStreamMask) != (tid & kTidStreamMask))
          c.err("event ", i, " (", cat, "): tid ", tid, " is not the track of args.stream ", (*args)["stream"].dump());
        if (cat == "kernel") kernel_tracks.insert({pid, tid});
        gpu_tracks.insert({pid, tid});
      }
      if (cat == "cuda_sync") {
        sync_tracks.insert({pid, tid});
        gpu_tracks.insert({pid, tid});
        need_args({"cuda_sync_kind", "stream", "correlation", "device", "context"});
      }
      if (cat == "gpu_user_annotation") gpu_tracks.insert({pid, tid});
      if (cat == "cuda_runtime" || cat == "cuda_driver") {
        need_args({"cbid", "correlation"});
        if (std::regex_match(name, versioned))
          c.err("event ", i, " (", cat, "): runtime name '", name, "' keeps CUPTI's version suffix");
      }
      pids_with_slices.insert(pid);
      tracks[{pid, tid}].push_back({ts, ts + std::max<int64_t>(dur, 0), i, cat});
    } else if (ph == "s" || ph == "f") {
      v.flows++;
      int64_t id = 0, pid = 0, tid = 0, ts = 0;
      if (!get_int("id", id) || !get_int("pid", pid) || !get_int("tid", tid) || !get_ts("ts", ts)) continue;
      if (e.value("cat", "") != "ac2g" || e.value("name", "") != "ac2g")
        c.err("event ", i, ": flow cat and name must be \"ac2g\"");
      bool bp = e.contains("bp") && e["bp"] == "e";
      (ph == "s" ? starts : finishes)[id].push_back({i, pid, tid, ts, bp});
    } else if (ph == "C") {
      v.counters++;
      int64_t pid = 0, ts = 0;
      if (!get_int("pid", pid) || !get_ts("ts", ts)) continue;
      if (!e.contains("name") || !e["name"].is_string()) c.err("event ", i, ": counter name missing");
      if (!e.contains("args") || !e["args"].is_object() || e["args"].empty())
        c.err("event ", i, ": counter args missing");
      else
        for (auto& [k, val] : e["args"].items())
          if (!val.is_number()) c.err("event ", i, ": counter arg '", k, "' is not a number");
    } else if (ph == "M") {
      v.metadata++;
      int64_t pid = 0, tid = 0;
      if (!get_int("pid", pid) || !get_int("tid", tid)) continue;
      std::string name = e.value("name", "");
      const json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : nullptr;
      if (name == "process_name") {
        if (!args || !args->contains("name") || !(*args)["name"].is_string())
          c.err("event ", i, ": process_name without args.name");
        named_processes.insert(pid);
      } else if (name == "thread_name") {
        if (!args || !args->contains("name") || !(*args)["name"].is_string())
          c.err("event ", i, ": thread_name without args.name");
        else
          thread_names[{pid, tid}] = (*args)["name"];
        named_threads.insert({pid, tid});
      }
    } else if (ph == "i" || ph == "I") {
      int64_t ts = 0;
      get_ts("ts", ts);
    } else {
      c.err("event ", i, ": unexpected ph '", ph, "'");
    }
  }

  // ---- nesting per track.
  for (auto& [key, sl] : tracks) {
    std::sort(sl.begin(), sl.end(), [](const SliceRec& a, const SliceRec& b) { return a.s < b.s || (a.s == b.s && a.e > b.e); });
    std::vector<const SliceRec*> stack;
    for (const auto& s : sl) {
      while (!stack.empty() && stack.back()->e <= s.s) stack.pop_back();
      if (!stack.empty() && s.e > stack.back()->e)
        c.err("track pid ", key.first, " tid ", key.second, ": event ", s.index, " (", s.cat, ") [", s.s, ", ", s.e,
              ") ns crosses event ", stack.back()->index, " (", stack.back()->cat, ") [", stack.back()->s, ", ",
              stack.back()->e, "): slices on one track must nest");
      stack.push_back(&s);
    }
  }
  for (const auto& t : sync_tracks)
    if (kernel_tracks.count(t)) c.err("track pid ", t.first, " tid ", t.second, ": cuda_sync slices share a kernel track");

  // ---- flows.
  // Tracks are sorted by (start, longer first) now.
  auto slice_at = [&](int64_t pid, int64_t tid, int64_t ts, bool starting, std::initializer_list<const char*> want) {
    auto it = tracks.find({pid, tid});
    if (it == tracks.end()) return false;
    const auto& sl = it->second;
    auto cat_ok = [&](const SliceRec& s) {
      for (const char* w : want)
        if (s.cat == w) return true;
      return false;
    };
    // First slice starting after ts; candidates are before it.
    auto hi = std::upper_bound(sl.begin(), sl.end(), ts, [](int64_t v, const SliceRec& s) { return v < s.s; });
    int steps = 0;
    for (auto p = hi; p != sl.begin() && steps < 256; ++steps) {
      --p;
      if (!cat_ok(*p)) continue;
      if (starting ? p->s == ts : (p->s <= ts && ts <= p->e)) return true;
      if (starting && p->s < ts) break;
    }
    return false;
  };
  for (const auto& [id, ss] : starts) {
    if (ss.size() > 1) c.err("flow id ", id, ": ", ss.size(), " starts (ids must be unique)");
    auto f = finishes.find(id);
    if (f == finishes.end()) {
      c.err("flow id ", id, ": start (event ", ss[0].index, ") without a finish");
      continue;
    }
    if (f->second.size() != 1) c.err("flow id ", id, ": ", f->second.size(), " finishes (a flow cannot fork)");
    const FlowEnd& fe = f->second[0];
    if (!fe.has_bp_e) c.err("flow id ", id, ": finish (event ", fe.index, ") without \"bp\": \"e\"");
    if (!slice_at(ss[0].pid, ss[0].tid, ss[0].ts, false, {"cuda_runtime", "cuda_driver"}))
      c.err("flow id ", id, ": start (event ", ss[0].index, ") is not inside a runtime / driver slice of its track");
    if (!slice_at(fe.pid, fe.tid, fe.ts, true, {"kernel", "gpu_memcpy", "gpu_memset"}))
      c.err("flow id ", id, ": finish (event ", fe.index, ") does not bind to the start of a GPU op on its track");
  }
  for (const auto& [id, fs] : finishes)
    if (!starts.count(id)) c.err("flow id ", id, ": finish (event ", fs[0].index, ") without a start");

  // ---- metadata.
  for (int64_t pid : pids_with_slices)
    if (!named_processes.count(pid)) c.err("pid ", pid, ": no process_name metadata");
  for (const auto& t : gpu_tracks) {
    auto it = thread_names.find(t);
    if (it == thread_names.end())
      c.err("GPU track pid ", t.first, " tid ", t.second, ": no thread_name metadata");
    else if (it->second.rfind("stream ", 0) != 0)
      c.err("GPU track pid ", t.first, " tid ", t.second, ": thread_name '", it->second, "' does not start with \"stream \"");
  }
  if (c.dropped) v.errors.push_back("... and " + std::to_string(c.dropped) + " more errors");
  return v;
}

KinetoValidation validate_kineto_file(const std::string& path, size_t max_errors) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open '", path, "' for reading");
  std::ostringstream ss;
  ss << f.rdbuf();
  return validate_kineto_json(ss.str(), max_errors);
}

}  // namespace sl::prof
