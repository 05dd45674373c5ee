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
#include "core/gzip.h"
#include "profiler/kineto_fields.h"
#include "profiler/kineto_json.h"

namespace sl::prof {

namespace {

// An event's own keys, as the loaders name them (kineto_fields.h).
constexpr const char* kPh = kineto_fields::kFieldNames[kineto_fields::F_PH];
constexpr const char* kCat = kineto_fields::kFieldNames[kineto_fields::F_CAT];
constexpr const char* kName = kineto_fields::kFieldNames[kineto_fields::F_NAME];
constexpr const char* kTs = kineto_fields::kFieldNames[kineto_fields::F_TS];
constexpr const char* kDur = kineto_fields::kFieldNames[kineto_fields::F_DUR];
constexpr const char* kPid = kineto_fields::kFieldNames[kineto_fields::F_PID];
constexpr const char* kTid = kineto_fields::kFieldNames[kineto_fields::F_TID];

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

using TrackKey = std::pair<int64_t, int64_t>;  // (pid, tid)

struct FlowEnd {
  size_t index;
  int64_t pid, tid, ts;
  bool has_bp_e;
};

// What the pass over traceEvents gathers for the checks that span events.
struct Scan {
  std::map<TrackKey, std::vector<SliceRec>> tracks;
  std::set<TrackKey> kernel_tracks, sync_tracks, gpu_tracks;
  std::set<int64_t> pids_with_slices, named_processes;
  std::map<TrackKey, std::string> thread_names;
  std::map<int64_t, std::vector<FlowEnd>> starts, finishes;
};

// ---- each deviceProperties entry: every key of kineto_fields::kDeviceProperties, of its type
// (a string for strings, an integer for the rest).
void check_device_properties(const json& devices, Ctx& c) {
  for (size_t i = 0; i < devices.size(); ++i) {
    const json& d = devices[i];
    if (!d.is_object()) {
      c.err("deviceProperties[", i, "]: not an object");
      continue;
    }
    kineto_fields::for_each_field(kineto_fields::kDeviceProperties, [&](const auto& k) {
      using T = std::remove_cvref_t<decltype(Device{}.*k.member)>;
      constexpr bool text = std::is_same_v<T, std::string>;
      if (!d.contains(k.name) || (text ? !d[k.name].is_string() : !is_int(d[k.name])))
        c.err("deviceProperties[", i, "]: \"", k.name, "\" (", text ? "string" : "integer", ") missing");
    });
  }
}

// ---- the top level (docs/traces.md 3.1). False when there are no events to check.
bool check_top_level(const json& doc, std::string_view text, Ctx& c) {
  if (!doc.contains("schemaVersion") || !is_int(doc["schemaVersion"])) c.err("top level: schemaVersion (integer) missing");
  if (!doc.contains("deviceProperties") || !doc["deviceProperties"].is_array())
    c.err("top level: deviceProperties (array) missing");
  else
    check_device_properties(doc["deviceProperties"], c);
  if (!doc.contains("distributedInfo") || !doc["distributedInfo"].is_object() ||
      !doc["distributedInfo"].contains("rank") || !is_int(doc["distributedInfo"]["rank"]))
    c.err("top level: distributedInfo {\"rank\": N} missing");
  else {
    static const std::regex rank_re("\"rank\":\\s+(\\d+)");
    std::string head(text.substr(0, std::min<size_t>(text.size(), 1 << 20)));
    if (!std::regex_search(head, rank_re))
      c.err("distributedInfo: HTA finds the rank with the regex \"rank\":\\s+(\\d+) (a space after the colon)");
    const json& di = doc["distributedInfo"];
    if (di.contains("world_size")) {
      if (!is_int(di["world_size"]) || di["world_size"].get<int64_t>() < 1)
        c.err("distributedInfo: world_size must be a positive integer");
      else if (di["rank"].get<int64_t>() < 0 || di["rank"].get<int64_t>() >= di["world_size"].get<int64_t>())
        c.err("distributedInfo: rank outside 0..world_size - 1");
    }
  }
  if (!doc.contains("baseTimeNanoseconds") || !is_int(doc["baseTimeNanoseconds"]))
    c.err("top level: baseTimeNanoseconds (integer) missing");
  if (!doc.contains("displayTimeUnit") || !doc["displayTimeUnit"].is_string())
    c.err("top level: displayTimeUnit (string) missing");
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    c.err("top level: traceEvents (array) missing");
    return false;
  }
  return true;
}

// ---- the args of one slice against its record's table (kineto_fields.h): Kineto's args
// present, and every arg the loaders read of the type and in the range they accept (outside it
// the record would be dropped on load).
class ArgCheck {
 public:
  ArgCheck(const json* args, size_t index, const std::string& cat, const std::string& name, Ctx& c)
      : args_(args), i_(index), cat_(cat), name_(name), c_(c) {}

  template <class Table>
  void check(const Table& table) {
    kineto_fields::for_each_field(table, [&](const auto& f) { field(f); });
  }

 private:
  const json* find(kineto_fields::A key) const {
    if (!args_) return nullptr;
    auto it = args_->find(std::string(kineto_fields::name_of(key)));
    return it == args_->end() ? nullptr : &*it;
  }
  template <class... A>
  void err(kineto_fields::A key, const A&... a) {
    c_.err("event ", i_, " (", cat_, " '", name_, "'): args.\"", kineto_fields::name_of(key), "\"", a...);
  }
  void missing(kineto_fields::A key) { err(key, " missing"); }

  template <class Rec, class T>
  void field(const kineto_fields::IntArg<Rec, T>& f) {
    using kineto_fields::Coding;
    const json* v = find(f.key);
    if (!v) {
      if (f.kineto) missing(f.key);
      return;
    }
    if (!is_int(*v)) return err(f.key, " must be an integer, found ", v->dump());
    if (f.coding == Coding::NsOrNone) return;
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
      return err(f.key, " = ", v->dump(), " outside ", f.lo, "..", f.hi);
    const int64_t x = v->get<int64_t>();
    const bool none = x == -1 && (f.coding == Coding::NoneIsMinus1 || f.absent == kineto_fields::kAbsentKeeps);
    if (!none && (x < f.lo || x > f.hi)) err(f.key, " = ", x, " outside ", f.lo, "..", f.hi);
  }

  template <class Rec>
  void field(const kineto_fields::SpecialArg<Rec>& f) {
    using kineto_fields::Shape;
    const json* v = find(f.key);
    if (!v) {
      if (f.kineto) missing(f.key);
      return;
    }
    switch (f.shape) {
      case Shape::Integer:
        if (!is_int(*v)) err(f.key, " must be an integer, found ", v->dump());
        break;
      case Shape::Number:
        if (!v->is_number()) err(f.key, " must be a number, found ", v->dump());
        break;
      case Shape::String:
        if (!v->is_string()) err(f.key, " must be a string, found ", v->dump());
        break;
      case Shape::NumberOrString:
        if (!v->is_number() && !v->is_string()) err(f.key, " must be a number or a string, found ", v->dump());
        break;
      case Shape::Dim3: {
        bool ok = v->is_array() && v->size() == 3;
        for (size_t d = 0; ok && d < 3; ++d)
          ok = is_int((*v)[d]) && (*v)[d].get<int64_t>() >= 0 && (*v)[d].get<int64_t>() <= 0xFFFFFFFFll;
        if (!ok) err(f.key, " must be an array of 3 integers in 0..4294967295, found ", v->dump());
        break;
      }
    }
  }

  const json* args_;
  size_t i_;
  const std::string& cat_;
  const std::string& name_;
  Ctx& c_;
};

// ---- one event of traceEvents: its own rules, and what it adds to the scan.
class EventCheck {
 public:
  EventCheck(const json& e, size_t index, std::string ph, Ctx& c, Scan& scan, KinetoValidation& v)
      : e_(e), i_(index), ph_(std::move(ph)), c_(c), scan_(scan), v_(v) {}

  void run() {
    if (ph_ == "X") slice();
    else if (ph_ == "s" || ph_ == "f") flow();
    else if (ph_ == "C") counter();
    else if (ph_ == "M") metadata();
    else if (ph_ == "i" || ph_ == "I") {
      int64_t ts = 0;
      get_ts(kTs, ts);
    } else {
      c_.err("event ", i_, ": unexpected ph '", ph_, "'");
    }
  }

 private:
  bool get_int(const char* k, int64_t& out) {
    if (!e_.contains(k) || !is_int(e_[k])) {
      c_.err("event ", i_, " (ph ", ph_, "): ", k, " must be an integer");
      return false;
    }
    out = e_[k].get<int64_t>();
    return true;
  }
  bool get_ts(const char* k, int64_t& out) {
    if (!e_.contains(k) || !e_[k].is_number()) {
      c_.err("event ", i_, " (ph ", ph_, "): ", k, " (number, us) missing");
      return false;
    }
    double us = e_[k].get<double>();
    if (std::fabs(us) > 1e13) {
      c_.err("event ", i_, ": ", k, " = ", us, " us looks absolute; ts must be relative to baseTimeNanoseconds");
      return false;
    }
    out = to_ns(us);
    return true;
  }
  const json* args() const { return e_.contains("args") && e_["args"].is_object() ? &e_["args"] : nullptr; }

  // A complete event: category, name, times; the args of the records the loaders read.
  void slice() {
    static const std::set<std::string> cats = {"kernel",         "gpu_memcpy",      "gpu_memset",
                                               "cuda_runtime",   "cuda_driver",     "cuda_sync",
                                               "gpu_user_annotation", "user_annotation", "cpu_op",
                                               "python_function", "overhead",       "Trace"};
    v_.slices++;
    int64_t pid = 0, tid = 0, ts = 0, dur = 0;
    if (!e_.contains(kCat) || !e_[kCat].is_string() || !cats.count(e_[kCat].get<std::string>())) {
      c_.err("event ", i_, ": unknown or missing cat ", e_.contains(kCat) ? e_[kCat].dump() : "");
      return;
    }
    const std::string cat = e_[kCat];
    // An empty name is a name (the loaders keep it, Perfetto and HTA read it); a missing one is not.
    if (!e_.contains(kName) || !e_[kName].is_string()) c_.err("event ", i_, " (", cat, "): name missing");
    if (!get_int(kPid, pid) || !get_int(kTid, tid) || !get_ts(kTs, ts) || !get_ts(kDur, dur)) return;
    if (dur < 0) c_.err("event ", i_, " (", cat, "): negative dur");
    const std::string name = e_.value(kName, "");
    ArgCheck a(args(), i_, cat, name, c_);
    if (cat == "kernel") a.check(kineto_fields::kKernelArgs);
    else if (cat == "gpu_memcpy") a.check(kineto_fields::kMemcpyArgs);
    else if (cat == "gpu_memset") a.check(kineto_fields::kMemsetArgs);
    else if (cat == "cuda_sync") a.check(kineto_fields::kSyncArgs);
    else if (cat == "cuda_runtime" || cat == "cuda_driver") a.check(kineto_fields::kApiCallArgs);
    else if (cat == "user_annotation") a.check(kineto_fields::kNvtxArgs);
    const bool gpu_op = cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset";
    if (gpu_op) gpu_op_track(cat, pid, tid);
    if (cat == "cuda_sync") {
      scan_.sync_tracks.insert({pid, tid});
      scan_.gpu_tracks.insert({pid, tid});
    }
    if (cat == "gpu_user_annotation") scan_.gpu_tracks.insert({pid, tid});
    if (cat == "cuda_runtime" || cat == "cuda_driver") {
      static const std::regex versioned(".*_v[0-9]+$");
      if (std::regex_match(name, versioned))
        c_.err("event ", i_, " (", cat, "): runtime name '", name, "' keeps CUPTI's version suffix");
    }
    scan_.pids_with_slices.insert(pid);
    scan_.tracks[{pid, tid}].push_back({ts, ts + std::max<int64_t>(dur, 0), i_, cat});
  }

  // A GPU op lies on its device's process and its stream's track.
  void gpu_op_track(const std::string& cat, int64_t pid, int64_t tid) {
    const json* a = args();
    if (a && a->contains("device") && is_int((*a)["device"]) && (*a)["device"].get<int64_t>() != pid)
      c_.err("event ", i_, " (", cat, "): pid ", pid, " != args.device ", (*a)["device"].dump());
    if (a && a->contains("stream") && is_int((*a)["stream"]) &&
        ((*a)["stream"].get<int64_t>() & kTidStreamMask) != (tid & kTidStreamMask))
      c_.err("event ", i_, " (", cat, "): tid ", tid, " is not the track of args.stream ", (*a)["stream"].dump());
    if (cat == "kernel") scan_.kernel_tracks.insert({pid, tid});
    scan_.gpu_tracks.insert({pid, tid});
  }

  void flow() {
    v_.flows++;
    int64_t id = 0, pid = 0, tid = 0, ts = 0;
    if (!get_int("id", id) || !get_int(kPid, pid) || !get_int(kTid, tid) || !get_ts(kTs, ts)) return;
    if (e_.value(kCat, "") != "ac2g" || e_.value(kName, "") != "ac2g")
      c_.err("event ", i_, ": flow cat and name must be \"ac2g\"");
    bool bp = e_.contains("bp") && e_["bp"] == "e";
    (ph_ == "s" ? scan_.starts : scan_.finishes)[id].push_back({i_, pid, tid, ts, bp});
  }

  void counter() {
    v_.counters++;
    int64_t pid = 0, ts = 0;
    if (!get_int(kPid, pid) || !get_ts(kTs, ts)) return;
    if (!e_.contains(kName) || !e_[kName].is_string()) c_.err("event ", i_, ": counter name missing");
    if (!e_.contains("args") || !e_["args"].is_object() || e_["args"].empty())
      c_.err("event ", i_, ": counter args missing");
    else
      for (auto& [k, val] : e_["args"].items())
        if (!val.is_number()) c_.err("event ", i_, ": counter arg '", k, "' is not a number");
  }

  void metadata() {
    v_.metadata++;
    int64_t pid = 0, tid = 0;
    if (!get_int(kPid, pid) || !get_int(kTid, tid)) return;
    const std::string name = e_.value(kName, "");
    const json* a = args();
    const bool named = a && a->contains("name") && (*a)["name"].is_string();
    if (name == "process_name") {
      if (!named) c_.err("event ", i_, ": process_name without args.name");
      scan_.named_processes.insert(pid);
    } else if (name == "thread_name") {
      if (!named) c_.err("event ", i_, ": thread_name without args.name");
      else scan_.thread_names[{pid, tid}] = (*a)["name"];
    }
  }

  const json& e_;
  size_t i_;
  std::string ph_;
  Ctx& c_;
  Scan& scan_;
  KinetoValidation& v_;
};

// ---- slices on one track nest; sync slices keep off kernel tracks. Sorts the tracks by
// (start, longer first), which check_flows relies on.
void check_nesting(Scan& scan, Ctx& c) {
  for (auto& [key, sl] : scan.tracks) {
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
  for (const auto& t : scan.sync_tracks)
    if (scan.kernel_tracks.count(t)) c.err("track pid ", t.first, " tid ", t.second, ": cuda_sync slices share a kernel track");
}

// Whether a slice of one of the categories `want` on track (pid, tid) holds ts (starting: starts
// at ts). The track is sorted (check_nesting).
bool slice_at(const Scan& scan, int64_t pid, int64_t tid, int64_t ts, bool starting,
              std::initializer_list<const char*> want) {
  auto it = scan.tracks.find({pid, tid});
  if (it == scan.tracks.end()) return false;
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
}

// ---- flows: paired one to one, from inside a launch call to a GPU op's start.
void check_flows(const Scan& scan, Ctx& c) {
  for (const auto& [id, ss] : scan.starts) {
    if (ss.size() > 1) c.err("flow id ", id, ": ", ss.size(), " starts (ids must be unique)");
    auto f = scan.finishes.find(id);
    if (f == scan.finishes.end()) {
      c.err("flow id ", id, ": start (event ", ss[0].index, ") without a finish");
      continue;
    }
    if (f->second.size() != 1) c.err("flow id ", id, ": ", f->second.size(), " finishes (a flow cannot fork)");
    const FlowEnd& fe = f->second[0];
    if (!fe.has_bp_e) c.err("flow id ", id, ": finish (event ", fe.index, ") without \"bp\": \"e\"");
    if (!slice_at(scan, ss[0].pid, ss[0].tid, ss[0].ts, false, {"cuda_runtime", "cuda_driver"}))
      c.err("flow id ", id, ": start (event ", ss[0].index, ") is not inside a runtime / driver slice of its track");
    if (!slice_at(scan, fe.pid, fe.tid, fe.ts, true, {"kernel", "gpu_memcpy", "gpu_memset"}))
      c.err("flow id ", id, ": finish (event ", fe.index, ") does not bind to the start of a GPU op on its track");
  }
  for (const auto& [id, fs] : scan.finishes)
    if (!scan.starts.count(id)) c.err("flow id ", id, ": finish (event ", fs[0].index, ") without a start");
}

// ---- metadata: every process with slices and every GPU track named ("stream ...").
void check_names(const Scan& scan, Ctx& c) {
  for (int64_t pid : scan.pids_with_slices)
    if (!scan.named_processes.count(pid)) c.err("pid ", pid, ": no process_name metadata");
  for (const auto& t : scan.gpu_tracks) {
    auto it = scan.thread_names.find(t);
    if (it == scan.thread_names.end())
      c.err("GPU track pid ", t.first, " tid ", t.second, ": no thread_name metadata");
    else if (it->second.rfind("stream ", 0) != 0)
      c.err("GPU track pid ", t.first, " tid ", t.second, ": thread_name '", it->second, "' does not start with \"stream \"");
  }
}

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
  if (!check_top_level(doc, text, c)) return v;
  check_time_format(text, c);

  Scan scan;
  const json& evs = doc["traceEvents"];
  v.events = evs.size();
  for (size_t i = 0; i < evs.size(); ++i) {
    const json& e = evs[i];
    if (!e.is_object()) {
      c.err("event ", i, ": not an object");
      continue;
    }
    if (!e.contains(kPh) || !e[kPh].is_string()) {
      c.err("event ", i, ": ph missing");
      continue;
    }
    EventCheck(e, i, e[kPh].get<std::string>(), c, scan, v).run();
  }
  check_nesting(scan, c);
  check_flows(scan, c);
  check_names(scan, c);
  if (c.dropped) v.errors.push_back("... and " + std::to_string(c.dropped) + " more errors");
  return v;
}

KinetoValidation validate_kineto_file(const std::string& path, size_t max_errors) {
  if (is_gzip_file(path)) return validate_kineto_json(gunzip_file(path), max_errors);
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open '", path, "' for reading");
  std::ostringstream ss;
  ss << f.rdbuf();
  return validate_kineto_json(ss.str(), max_errors);
}

}  // namespace sl::prof
