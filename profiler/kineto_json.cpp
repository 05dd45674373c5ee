#include "profiler/kineto_json.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <concepts>
#include <tuple>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/gzip.h"
#include "core/error.h"
#include "profiler/export_fields.h"
#include "profiler/kineto_fields.h"
#include "profiler/trace_index.h"

namespace sl::prof {

namespace {

using kineto_fields::A;

// Value tags for Out::val: formats the C++ type alone does not say.
struct Micros {  // nanoseconds written as microseconds with three decimals
  Ns ns;
};
struct TimeOrNull {  // nanoseconds, kNoTime written as null
  Ns ns;
};

// A string literal as a template argument (JSON keys: escaping-free ASCII).
template <size_t N>
struct Lit {
  char s[N];
  constexpr Lit(const char (&v)[N]) { std::copy_n(v, N, s); }
  static constexpr size_t size = N - 1;
};

// `Prefix"Key": Suffix` as one constant array (no terminating NUL).
template <Lit Prefix, Lit Key, Lit Suffix = "">
struct Member {
  static constexpr std::array<char, Prefix.size + Key.size + 4 + Suffix.size> text = [] {
    std::array<char, Prefix.size + Key.size + 4 + Suffix.size> a{};
    size_t n = 0;
    for (size_t i = 0; i < Prefix.size; ++i) a[n++] = Prefix.s[i];
    a[n++] = '"';
    for (size_t i = 0; i < Key.size; ++i) a[n++] = Key.s[i];
    a[n++] = '"';
    a[n++] = ':';
    a[n++] = ' ';
    for (size_t i = 0; i < Suffix.size; ++i) a[n++] = Suffix.s[i];
    return a;
  }();
};

// `, "key": ` (or `, "args": {"key": ` for an event's first arg) for an arg of kineto_fields.h,
// as one constant array.
template <A K, bool First>
struct ArgMember {
  static constexpr std::string_view key = kineto_fields::name_of(K);
  static constexpr std::string_view prefix = First ? ", \"args\": {" : ", ";
  static constexpr std::array<char, prefix.size() + key.size() + 4> text = [] {
    std::array<char, prefix.size() + key.size() + 4> a{};
    size_t n = 0;
    for (char c : prefix) a[n++] = c;
    a[n++] = '"';
    for (char c : key) a[n++] = c;
    a[n++] = '"';
    a[n++] = ':';
    a[n++] = ' ';
    return a;
  }();
};

// A flat output buffer with hand-written formatting; flushed to the sink in large chunks.
class Out {
 public:
  explicit Out(std::function<void(const char*, size_t)> sink) : sink_(std::move(sink)), buf_(new char[kCap]) {}
  ~Out() = default;

  void flush() {
    if (n_) sink_(buf_.get(), n_);
    n_ = 0;
  }
  void need(size_t k) {
    if (n_ + k > kCap) flush();
  }
  void raw(const char* s, size_t len) {
    if (len > kCap / 2) {
      flush();
      sink_(s, len);
      return;
    }
    need(len);
    std::memcpy(buf_.get() + n_, s, len);
    n_ += len;
  }
  void raw(std::string_view s) { raw(s.data(), s.size()); }
  // String literals: the length is a compile-time constant, so the copy is inlined.
  template <size_t N>
  void lit(const char (&s)[N]) {
    need(N - 1);
    std::memcpy(buf_.get() + n_, s, N - 1);
    n_ += N - 1;
  }
  void ch(char c) {
    need(1);
    buf_[n_++] = c;
  }
  // Integers through a two-digit table (most values written are small ids and counts).
  static char* utoa(char* out, uint64_t v) {
    static constexpr char d2[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char tmp[24];
    char* e = tmp + sizeof tmp;
    char* p = e;
    while (v >= 100) {
      unsigned i = unsigned(v % 100) * 2;
      v /= 100;
      p -= 2;
      p[0] = d2[i];
      p[1] = d2[i + 1];
    }
    if (v >= 10) {
      p -= 2;
      p[0] = d2[v * 2];
      p[1] = d2[v * 2 + 1];
    } else {
      *--p = char('0' + v);
    }
    size_t n = size_t(e - p);
    std::memcpy(out, p, n);
    return out + n;
  }
  void i64(int64_t v) {
    need(24);
    char* p = buf_.get() + n_;
    if (v < 0) {
      *p++ = '-';
      p = utoa(p, uint64_t(0) - uint64_t(v));
    } else {
      p = utoa(p, uint64_t(v));
    }
    n_ = size_t(p - buf_.get());
  }
  void u64(uint64_t v) {
    need(24);
    n_ = size_t(utoa(buf_.get() + n_, v) - buf_.get());
  }
  void dbl(double v) {
    if (!std::isfinite(v)) {
      lit("0");
      return;
    }
    need(32);
    auto r = std::to_chars(buf_.get() + n_, buf_.get() + n_ + 32, v);
    n_ = size_t(r.ptr - buf_.get());
  }
  // Nanoseconds as microseconds with exactly three decimals.
  void us3(Ns ns) {
    need(28);
    char* p = buf_.get() + n_;
    if (ns < 0) {
      *p++ = '-';
      ns = -ns;
    }
    p = utoa(p, uint64_t(ns / 1000));
    int frac = int(ns % 1000);
    *p++ = '.';
    *p++ = char('0' + frac / 100);
    *p++ = char('0' + (frac / 10) % 10);
    *p++ = char('0' + frac % 10);
    n_ = size_t(p - buf_.get());
  }
  // A JSON string literal with escaping.
  void str(std::string_view s) {
    need(s.size() + 2);
    if (s.size() + 2 > kCap / 2) {
      std::string e = escape(s);
      raw(e);
      return;
    }
    char* p = buf_.get() + n_;
    *p++ = '"';
    for (unsigned char c : s) {
      if (c == '"' || c == '\\' || c < 0x20) {
        n_ = size_t(p - buf_.get());
        need(8);
        p = buf_.get() + n_;
        *p++ = '\\';
        switch (c) {
          case '"': *p++ = '"'; break;
          case '\\': *p++ = '\\'; break;
          case '\n': *p++ = 'n'; break;
          case '\t': *p++ = 't'; break;
          case '\r': *p++ = 'r'; break;
          default: {
            static const char* hex = "0123456789abcdef";
            *p++ = 'u';
            *p++ = '0';
            *p++ = '0';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
          }
        }
        n_ = size_t(p - buf_.get());
        need(s.size() + 2);  // conservative: keep room for the rest
        p = buf_.get() + n_;
      } else {
        *p++ = char(c);
      }
    }
    *p++ = '"';
    n_ = size_t(p - buf_.get());
  }
  static std::string escape(std::string_view s) {
    std::string o = "\"";
    for (unsigned char c : s) {
      if (c == '"')
        o += "\\\"";
      else if (c == '\\')
        o += "\\\\";
      else if (c < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", c);
        o += b;
      } else
        o += char(c);
    }
    return o + "\"";
  }
  void time_or_null(Ns v) {
    if (v == kNoTime)
      lit("null");
    else
      i64(v);
  }

  // ---- Fields: one call writes a key and its value, the value's C++ type choosing the format.
  // The key is a template argument, so `, "key": ` is one compile-time string (see Member) and
  // costs what a single lit() does: out_.arg<"bytes">(m.bytes).
  template <size_t N>
  void bytes(const std::array<char, N>& a) {
    need(N);
    std::memcpy(buf_.get() + n_, a.data(), N);
    n_ += N;
  }
  // `"key": ` with a key known only at run time (metadata, the counts table).
  void member(std::string_view key) {
    ch('"');
    raw(key);
    lit("\": ");
  }
  void val(std::string_view s) { str(s); }
  void val(double v) { dbl(v); }
  void val(Micros v) { us3(v.ns); }
  void val(TimeOrNull v) { time_or_null(v.ns); }
  template <std::integral T>
  void val(T v) {
    if constexpr (std::is_signed_v<T>)
      i64(v);
    else
      u64(v);
  }
  // `, "key": value`: a member after the first.
  template <Lit Key, class T>
  void arg(const T& v) {
    bytes(Member<", ", Key>::text);
    val(v);
  }
  // `{"key": value`: an object's first member.
  template <Lit Key, class T>
  void open(const T& v) {
    bytes(Member<"{", Key>::text);
    val(v);
  }
  // `, "args": {"key": value`: an event's args, opened with their first member.
  template <Lit Key, class T>
  void args(const T& v) {
    bytes(Member<", \"args\": {", Key>::text);
    val(v);
  }
  // An arg by its key in kineto_fields.h (First: the event's first arg, opening "args").
  template <A K, bool First = false, class T>
  void karg(const T& v) {
    bytes(ArgMember<K, First>::text);
    val(v);
  }
  template <A K, bool First = false, class... V>
  void karg_row(const V&... v) {
    bytes(ArgMember<K, First>::text);
    ch('[');
    items(v...);
    ch(']');
  }
  // `[a,b,...]`: a compact array (the streamlab block's rows, grid and block sizes).
  template <class... V>
  void row(const V&... v) {
    ch('[');
    items(v...);
    ch(']');
  }
  // `, "key": [a,b,...]`
  template <Lit Key, class... V>
  void arg_row(const V&... v) {
    bytes(Member<", ", Key, "[">::text);
    items(v...);
    ch(']');
  }
  // `a,b,...`
  template <class V0, class... V>
  void items(const V0& v0, const V&... v) {
    val(v0);
    ((ch(','), val(v)), ...);
  }

 private:
  static constexpr size_t kCap = size_t(8) << 20;
  std::function<void(const char*, size_t)> sink_;
  std::unique_ptr<char[]> buf_;
  size_t n_ = 0;
};

inline Ns eff_end(Ns s, Ns e) { return e < s ? s : e; }

uint32_t track_id(uint32_t id, uint32_t kind_bits, int lane) {
  return (id & kTidStreamMask) | kind_bits | (uint32_t(lane) << kTidLaneShift);
}

struct TrackKey {
  uint32_t pid, tid;
  bool operator<(const TrackKey& o) const { return pid < o.pid || (pid == o.pid && tid < o.tid); }
};

class Emitter {
 public:
  Emitter(const Trace& t, const KinetoOptions& o, Out& out) : t_(t), o_(o), out_(out), launches_(t) {
    base_ = t.base_time == kNoTime ? 0 : t.base_time;
  }

  size_t run() {
    header();
    cpu_lanes();
    gpu_ops();
    if (o_.syncs) syncs();
    if (o_.gpu_annotations) gpu_annotations();
    cpu_events();
    if (o_.counters) counters();
    metadata();
    trailer();
    out_.flush();
    return events_;
  }

 private:
  Ns rel(Ns t) const { return t - base_; }

  void sep() {
    if (first_event_) {
      first_event_ = false;
      out_.lit("\n");
    } else {
      out_.lit(",\n");
    }
    ++events_;
  }

  // Writes each item with `write`: `first` before the first one, `sep` before each later one.
  template <size_t F, size_t S, class Items, class Write>
  void list(const Items& items, const char (&first)[F], const char (&sep)[S], Write&& write) {
    bool is_first = true;
    for (const auto& x : items) {
      if (is_first)
        out_.lit(first);
      else
        out_.lit(sep);
      is_first = false;
      write(x);
    }
  }

  // One device as a JSON object of a device table's keys (kineto_fields.h), in its order.
  template <class Table>
  void device_object(const Device& d, const Table& table) {
    const char* sep = "{";
    kineto_fields::for_each_field(table, [&](const auto& k) {
      out_.raw(sep, std::strlen(sep));
      out_.member(k.name);
      out_.val(d.*k.member);
      sep = ", ";
    });
    out_.lit("}");
  }

  void header() {
    out_.lit("{\n\"schemaVersion\": 1,\n\"deviceProperties\": [");
    list(t_.devices, "\n", ",\n", [&](const Device& d) { device_object(d, kineto_fields::kDeviceProperties); });
    // HTA finds the rank with the regex "rank":\s+(\d+): a space after the colon.
    out_.lit("\n],\n\"distributedInfo\": {\"rank\": ");
    out_.i64(o_.rank >= 0 ? o_.rank : std::max(t_.rank, 0));
    const int world = o_.world_size > 0 ? o_.world_size : t_.world_size;
    if (world > 0) {
      out_.lit(", \"world_size\": ");
      out_.i64(world);
    }
    out_.lit("},\n\"baseTimeNanoseconds\": ");
    out_.i64(base_);
    out_.lit(",\n\"displayTimeUnit\": \"ms\",\n\"traceEvents\": [");
  }

  // ---- CPU tracks: API calls and NVTX ranges merged in (start, -end) order; lanes per thread.
  void cpu_lanes() {
    api_lane_.assign(t_.api_calls.size(), 0);
    nvtx_lane_.assign(t_.nvtx.size(), 0);
    std::unordered_map<uint64_t, LaneAssigner> lanes;
    size_t a = 0, n = 0;
    const size_t na = t_.api_calls.size(), nn = t_.nvtx.size();
    while (a < na || n < nn) {
      bool take_api;
      if (a >= na)
        take_api = false;
      else if (n >= nn)
        take_api = true;
      else {
        const auto& x = t_.api_calls[a];
        const auto& y = t_.nvtx[n];
        take_api = x.start < y.start || (x.start == y.start && eff_end(x.start, x.end) > eff_end(y.start, y.end));
      }
      if (take_api) {
        const auto& x = t_.api_calls[a];
        api_lane_[a++] = uint8_t(std::min(63, lanes[(uint64_t(x.pid) << 32) | x.tid].assign(x.start, eff_end(x.start, x.end))));
      } else {
        const auto& y = t_.nvtx[n];
        if (y.kind == NvtxKind::Mark) {
          ++n;
          continue;
        }
        nvtx_lane_[n++] = uint8_t(std::min(63, lanes[(uint64_t(y.pid) << 32) | y.tid].assign(y.start, eff_end(y.start, y.end))));
      }
    }
  }

  // ---- GPU ops: kernels, memcpys, memsets merged in (start, -end) order; lanes per stream.
  void gpu_ops() {
    std::unordered_map<uint64_t, LaneAssigner> lanes;
    size_t a = 0, b = 0, c = 0;
    const size_t na = t_.kernels.size(), nb = t_.memcpys.size(), nc = t_.memsets.size();
    auto before = [](Ns s1, Ns e1, Ns s2, Ns e2) { return s1 < s2 || (s1 == s2 && e1 > e2); };
    max_corr_ = 0;
    for (const auto& x : t_.api_calls) max_corr_ = std::max(max_corr_, x.correlation);
    next_flow_ = launches_.single_process() ? uint64_t(max_corr_) + 1 : 1;
    while (a < na || b < nb || c < nc) {
      int pick = -1;
      Ns ps = 0, pe = 0;
      auto consider = [&](int which, Ns s, Ns e) {
        if (pick < 0 || before(s, e, ps, pe)) {
          pick = which;
          ps = s;
          pe = e;
        }
      };
      if (a < na) consider(0, t_.kernels[a].start, eff_end(t_.kernels[a].start, t_.kernels[a].end));
      if (b < nb) consider(1, t_.memcpys[b].start, eff_end(t_.memcpys[b].start, t_.memcpys[b].end));
      if (c < nc) consider(2, t_.memsets[c].start, eff_end(t_.memsets[c].start, t_.memsets[c].end));
      if (pick == 0) {
        const Kernel& k = t_.kernels[a++];
        int lane = lanes[(uint64_t(k.device) << 32) | (k.stream & kTidStreamMask)].assign(ps, pe);
        kernel(k, track_id(k.stream, 0, std::min(lane, 63)));
      } else if (pick == 1) {
        const Memcpy& m = t_.memcpys[b++];
        int lane = lanes[(uint64_t(m.device) << 32) | (m.stream & kTidStreamMask)].assign(ps, pe);
        memcpy(m, track_id(m.stream, 0, std::min(lane, 63)));
      } else {
        const Memset& m = t_.memsets[c++];
        int lane = lanes[(uint64_t(m.device) << 32) | (m.stream & kTidStreamMask)].assign(ps, pe);
        memset(m, track_id(m.stream, 0, std::min(lane, 63)));
      }
    }
  }

  void use_track(uint32_t pid, uint32_t tid, bool gpu) {
    TrackKey& last = gpu ? last_gpu_ : last_cpu_;
    if (last.pid == pid && last.tid == tid) return;
    last = {pid, tid};
    (gpu ? gpu_track_set_ : cpu_track_set_).insert(last);
  }

  void slice_head(const char* cat, size_t cat_len, std::string_view name, uint32_t pid, uint32_t tid, Ns start,
                  Ns end) {
    sep();
    out_.lit("{\"ph\": \"X\", \"cat\": \"");
    out_.raw(cat, cat_len);
    out_.bytes(Member<"\", ", "name">::text);  // closes cat
    out_.val(name);
    out_.arg<"pid">(pid);
    out_.arg<"tid">(tid);
    out_.arg<"ts">(Micros{rel(start)});
    out_.arg<"dur">(Micros{eff_end(start, end) - start});
  }

  void flow(uint32_t pid, uint32_t corr, uint32_t dev, uint32_t gpu_tid, Ns op_start) {
    if (!o_.flows) return;
    uint32_t ai = launches_.find(pid, corr);
    if (ai == kNoId) return;
    const ApiCall& a = t_.api_calls[ai];
    uint64_t id;
    if (launches_.single_process() && !flow_used(corr)) {
      id = corr;
    } else {
      id = next_flow_++;
    }
    flow_point("{\"ph\": \"s\", \"id\": ", id, a.pid, track_id(a.tid, 0, api_lane_[ai]), a.start);
    out_.lit(", \"cat\": \"ac2g\", \"name\": \"ac2g\"}");
    flow_point("{\"ph\": \"f\", \"id\": ", id, dev, gpu_tid, op_start);
    out_.lit(", \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}");
  }

  // One end of a flow, up to its ts: `{"ph": "s", "id": ` / `{"ph": "f", "id": ` then the id,
  // pid, tid, ts.
  template <size_t N>
  void flow_point(const char (&head)[N], uint64_t id, uint32_t pid, uint32_t tid, Ns ts) {
    sep();
    out_.lit(head);
    out_.val(id);
    out_.arg<"pid">(pid);
    out_.arg<"tid">(tid);
    out_.arg<"ts">(Micros{rel(ts)});
  }

  // Whether a flow already used this correlation id as its id (graph launches: many ops).
  bool flow_used(uint32_t corr) {
    if (corr < 64 * 1024 * 1024) {
      if (corr >= used_.size()) used_.resize(std::max<size_t>(corr + 1, used_.size() * 2), false);
      bool u = used_[corr];
      used_[corr] = true;
      return u;
    }
    return !used_big_.insert(corr).second;
  }

  // Writes the args of `Table` (kineto_fields.h) for r, in table order: integer args by the
  // table, the others by special.template operator()<key, first>() (first: the event's first
  // arg, which opens "args"). Does not close "args".
  template <const auto& Table, class Rec, class Special>
  void write_args(const Rec& r, Special&& special) {
    kineto_fields::for_each_field_t<Table>([&]<auto F, size_t I>() {
      if constexpr (kineto_fields::is_special_v<decltype(F)>) {
        special.template operator()<F.key, I == 0>();
      } else if constexpr (F.written == kineto_fields::Written::ByWriter) {
        special.template operator()<F.key, I == 0>();
      } else {
        if (kineto_fields::written(F, r)) int_arg<F, I == 0>(r);
      }
    });
  }
  template <auto F, bool First, class Rec>
  void int_arg(const Rec& r) {
    using kineto_fields::Coding;
    using T = std::remove_cvref_t<decltype(r.*F.member)>;
    if constexpr (F.coding == Coding::NoneIsMinus1 || F.coding == Coding::WrittenMinus1) {
      if (r.*F.member == T(F.none)) return out_.karg<F.key, First>(int64_t(-1));
    }
    if constexpr (std::is_enum_v<T>) out_.karg<F.key, First>(std::underlying_type_t<T>(r.*F.member));
    else out_.karg<F.key, First>(r.*F.member);
  }

  // The args copies and sets end with: then the flow.
  template <class Op>
  void gpu_op_end(const Op& m, uint32_t tid) {
    out_.lit("}}");
    flow(m.pid, m.correlation, m.device, tid, m.start);
  }

  // `, "memory bandwidth (GB/s)": ` bytes per ns, or "N/A" for a zero-length op.
  void bandwidth(uint64_t bytes, Ns start, Ns end) {
    out_.bytes(ArgMember<A::Bandwidth, false>::text);
    Ns dur = eff_end(start, end) - start;
    if (dur > 0)
      out_.dbl(double(bytes) / double(dur));
    else
      out_.lit("\"N/A\"");
  }

  // Kineto's occupancy figures, from the device's SM count and warp size (none without them).
  template <A key>
  void occupancy(const Kernel& k) {
    const Device* d = device(k.device);
    if (!d || d->sm_count <= 0) return;
    double blocks = double(k.grid[0]) * k.grid[1] * k.grid[2];
    double bps = blocks / d->sm_count;
    if constexpr (key == A::BlocksPerSm) {
      out_.karg<A::BlocksPerSm>(bps);
    } else {
      double wpb = std::ceil(double(k.block[0]) * k.block[1] * k.block[2] / double(d->warp_size > 0 ? d->warp_size : 32));
      out_.karg<A::WarpsPerSm>(bps * wpb);
    }
  }

  void kernel(const Kernel& k, uint32_t tid) {
    use_track(k.device, tid, true);
    slice_head("kernel", 6, t_.str(k.name), k.device, tid, k.start, k.end);
    write_args<kineto_fields::kKernelArgs>(k, [&]<A key, bool first>() {
      if constexpr (key == A::Queued) {
        out_.bytes(ArgMember<A::Queued, first>::text);
        if (k.queued == kNoTime)
          out_.lit("0");
        else
          out_.i64(k.queued / 1000);  // Kineto: absolute microseconds
      } else if constexpr (key == A::Smem) {
        out_.karg<A::Smem>(uint64_t(k.static_smem) + k.dynamic_smem);
      } else if constexpr (key == A::BlocksPerSm || key == A::WarpsPerSm) {
        occupancy<key>(k);
      } else if constexpr (key == A::Grid) {
        out_.karg_row<A::Grid>(k.grid[0], k.grid[1], k.grid[2]);
      } else if constexpr (key == A::Block) {
        out_.karg_row<A::Block>(k.block[0], k.block[1], k.block[2]);
      } else if constexpr (key == A::GraphId) {  // with the graph node id, when either is set
        if (k.graph_node_id != 0 || k.graph_id != 0) {
          out_.karg<A::GraphId>(k.graph_id);
          out_.karg<A::GraphNodeId>(k.graph_node_id);
        }
      } else if constexpr (key == A::StaticSmem) {  // streamlab's: exact values for the round trip
        out_.karg<A::StaticSmem>(k.static_smem);
      } else if constexpr (key == A::DynamicSmem) {
        out_.karg<A::DynamicSmem>(k.dynamic_smem);
      }
    });
    out_.lit("}}");
    flow(k.pid, k.correlation, k.device, tid, k.start);
  }

  void memcpy(const Memcpy& m, uint32_t tid) {
    use_track(m.device, tid, true);
    std::string name = memcpy_display_name(m.kind, m.src_kind, m.dst_kind);
    slice_head("gpu_memcpy", 10, name, m.device, tid, m.start, m.end);
    write_args<kineto_fields::kMemcpyArgs>(m, [&]<A key, bool>() {
      if constexpr (key == A::Bandwidth) bandwidth(m.bytes, m.start, m.end);
    });
    gpu_op_end(m, tid);
  }

  void memset(const Memset& m, uint32_t tid) {
    use_track(m.device, tid, true);
    std::string name = memset_display_name(m.mem_kind);
    slice_head("gpu_memset", 10, name, m.device, tid, m.start, m.end);
    write_args<kineto_fields::kMemsetArgs>(m, [&]<A key, bool>() {
      if constexpr (key == A::Bandwidth) bandwidth(m.bytes, m.start, m.end);
    });
    gpu_op_end(m, tid);
  }

  // The record of an event last made before a wait (program order = correlation id), or null.
  const CudaEventRecord* event_source(uint32_t pid, uint32_t event, uint32_t corr) {
    if (event_index_.empty() && !t_.cuda_events.empty()) {
      for (const auto& e : t_.cuda_events) event_index_[(uint64_t(e.pid) << 32) | e.event].push_back(&e);
      for (auto& [k, v] : event_index_)
        std::sort(v.begin(), v.end(), [](auto x, auto y) { return x->correlation < y->correlation; });
    }
    auto it = event_index_.find((uint64_t(pid) << 32) | event);
    if (it == event_index_.end()) return nullptr;
    const CudaEventRecord* src = nullptr;
    for (auto r : it->second) {
      if (corr != 0 && r->correlation > corr) break;
      src = r;
    }
    return src;
  }

  // Kineto's wait_on_stream / wait_on_cuda_event_record_corr_id: the sync's own fields when it
  // carries them, else derived from the CUDA event records (HTA needs them to draw the
  // dependency). Derived values are marked "wait_on derived" so that loading the file back
  // leaves the fields as they were (lossless round trip).
  void event_wait_args(const Sync& s) {
    if (s.event_stream != kNoStream || s.event_record_correlation != 0) {
      out_.karg<A::WaitOnStream>(id_or_minus1(s.event_stream, kNoStream));
      out_.karg<A::WaitRecordCorr>(s.event_record_correlation);
    } else {
      const CudaEventRecord* src = event_source(s.pid, s.event, s.correlation);
      out_.karg<A::WaitOnStream>(src ? int64_t(src->stream) : int64_t(-1));
      out_.karg<A::WaitRecordCorr>(src ? int64_t(src->correlation) : int64_t(-1));
      out_.karg<A::WaitDerived>(1);
    }
    out_.karg<A::WaitEvent>(id_or_minus1(s.event, kNoId));
  }

  void syncs() {
    std::unordered_map<uint64_t, LaneAssigner> lanes;
    for (const Sync& s : t_.syncs) {
      Ns e = eff_end(s.start, s.end);
      int lane = lanes[(uint64_t(s.device) << 32) | (s.stream & kTidStreamMask)].assign(s.start, e);
      uint32_t tid = track_id(s.stream, kTidSyncBit, std::min(lane, 63));
      use_track(s.device, tid, true);
      slice_head("cuda_sync", 9, to_string(s.type), s.device, tid, s.start, s.end);
      write_args<kineto_fields::kSyncArgs>(s, [&]<A key, bool first>() {
        if constexpr (key == A::SyncKind) {
          out_.karg<A::SyncKind, first>(std::string_view(to_string(s.type)));
        } else if constexpr (key == A::WaitOnStream) {  // the wait_on group
          if (kineto_fields::writes_wait_args(s)) event_wait_args(s);
        }
      });
      out_.lit("}}");
    }
  }

  // NVTX ranges projected onto the GPU: per range and stream, first start .. last end of the GPU
  // ops launched (by a call on the range's thread) while the range was open.
  void gpu_annotations() {
    if (t_.nvtx.empty()) return;
    const size_t na = t_.api_calls.size();
    // GPU ops grouped by launch call (counting sort by API index).
    struct Op {
      Ns s, e;
      uint32_t stream;
      uint16_t device;
    };
    std::vector<uint32_t> off(na + 1, 0);
    auto each_op = [&](auto&& f) {
      for (const auto& k : t_.kernels) f(k.pid, k.correlation, Op{k.start, eff_end(k.start, k.end), k.stream, k.device});
      for (const auto& m : t_.memcpys) f(m.pid, m.correlation, Op{m.start, eff_end(m.start, m.end), m.stream, m.device});
      for (const auto& m : t_.memsets) f(m.pid, m.correlation, Op{m.start, eff_end(m.start, m.end), m.stream, m.device});
    };
    std::vector<uint32_t> op_api;
    op_api.reserve(t_.kernels.size() + t_.memcpys.size() + t_.memsets.size());
    each_op([&](uint32_t pid, uint32_t corr, const Op&) {
      uint32_t ai = launches_.find(pid, corr);
      op_api.push_back(ai);
      if (ai != kNoId) off[ai + 1]++;
    });
    for (size_t i = 0; i < na; ++i) off[i + 1] += off[i];
    std::vector<Op> ops(off[na]);
    {
      std::vector<uint32_t> pos(off.begin(), off.end() - 1);
      size_t i = 0;
      each_op([&](uint32_t, uint32_t, const Op& op) {
        uint32_t ai = op_api[i++];
        if (ai != kNoId) ops[pos[ai]++] = op;
      });
    }
    std::vector<uint32_t>().swap(op_api);

    // Per range, a short list of (device, stream) projections (a range touches few streams).
    struct Proj {
      Ns s, e;
      uint32_t stream;
      uint16_t device;
      uint32_t next;  // next projection of the same range, or kNoId
    };
    std::vector<uint32_t> head(t_.nvtx.size(), kNoId);
    std::vector<Proj> pool;
    std::vector<uint32_t> touched;  // ranges with projections, in first-touch order
    std::unordered_map<uint64_t, std::vector<uint32_t>> open;  // (pid, tid) -> open ranges
    size_t n = 0;
    const size_t nn = t_.nvtx.size();
    for (size_t a = 0; a < na; ++a) {
      const ApiCall& call = t_.api_calls[a];
      while (n < nn && t_.nvtx[n].start <= call.start) {
        const NvtxRange& r = t_.nvtx[n];
        if (r.kind != NvtxKind::Mark) open[(uint64_t(r.pid) << 32) | r.tid].push_back(uint32_t(n));
        ++n;
      }
      if (off[a] == off[a + 1]) continue;
      auto it = open.find((uint64_t(call.pid) << 32) | call.tid);
      if (it == open.end()) continue;
      auto& st = it->second;
      st.erase(std::remove_if(st.begin(), st.end(), [&](uint32_t ri) { return eff_end(t_.nvtx[ri].start, t_.nvtx[ri].end) <= call.start; }),
               st.end());
      for (uint32_t ri : st)
        for (uint32_t oi = off[a]; oi < off[a + 1]; ++oi) {
          const Op& op = ops[oi];
          uint32_t p = head[ri];
          while (p != kNoId && (pool[p].stream != op.stream || pool[p].device != op.device)) p = pool[p].next;
          if (p == kNoId) {
            if (head[ri] == kNoId) touched.push_back(ri);
            pool.push_back({op.s, op.e, op.stream, op.device, head[ri]});
            head[ri] = uint32_t(pool.size() - 1);
          } else {
            pool[p].s = std::min(pool[p].s, op.s);
            pool[p].e = std::max(pool[p].e, op.e);
          }
        }
    }
    struct Slice {
      uint32_t device, stream, range;
      Ns s, e;
    };
    std::vector<Slice> slices;
    slices.reserve(pool.size());
    for (uint32_t ri : touched)
      for (uint32_t p = head[ri]; p != kNoId; p = pool[p].next)
        slices.push_back({pool[p].device, pool[p].stream, ri, pool[p].s, pool[p].e});
    std::sort(slices.begin(), slices.end(), [](const Slice& x, const Slice& y) {
      if (x.device != y.device) return x.device < y.device;
      if (x.stream != y.stream) return x.stream < y.stream;
      return x.s < y.s || (x.s == y.s && x.e > y.e);
    });
    std::unordered_map<uint64_t, LaneAssigner> lanes;
    for (const Slice& sl : slices) {
      int lane = lanes[(uint64_t(sl.device) << 32) | (sl.stream & kTidStreamMask)].assign(sl.s, sl.e);
      uint32_t tid = track_id(sl.stream, kTidAnnotationBit, std::min(lane, 63));
      use_track(sl.device, tid, true);
      const NvtxRange& r = t_.nvtx[sl.range];
      slice_head("gpu_user_annotation", 19, t_.str(r.name), sl.device, tid, sl.s, sl.e);
      out_.karg<A::ExternalId, true>(sl.range + 1);
      out_.lit("}}");
    }
  }

  void cpu_events() {
    for (size_t i = 0; i < t_.api_calls.size(); ++i) {
      const ApiCall& a = t_.api_calls[i];
      uint32_t tid = track_id(a.tid, 0, api_lane_[i]);
      use_track(a.pid, tid, false);
      bool drv = a.kind == ApiKind::Driver;
      slice_head(drv ? "cuda_driver" : "cuda_runtime", drv ? 11 : 12, strip_api_version(t_.str(a.name)), a.pid, tid,
                 a.start, a.end);
      write_args<kineto_fields::kApiCallArgs>(a, []<A, bool>() {});
      out_.lit("}}");
    }
    for (size_t i = 0; i < t_.nvtx.size(); ++i) {
      const NvtxRange& r = t_.nvtx[i];
      if (r.kind == NvtxKind::Mark) {
        uint32_t tid = track_id(r.tid, 0, 0);
        use_track(r.pid, tid, false);
        sep();
        out_.lit("{\"ph\": \"i\", \"s\": \"t\", \"cat\": \"user_annotation\", \"name\": ");
        out_.val(t_.str(r.name));
        out_.arg<"pid">(r.pid);
        out_.arg<"tid">(tid);
        out_.arg<"ts">(Micros{rel(r.start)});
      } else {
        uint32_t tid = track_id(r.tid, 0, nvtx_lane_[i]);
        use_track(r.pid, tid, false);
        slice_head("user_annotation", 15, t_.str(r.name), r.pid, tid, r.start, r.end);
      }
      write_args<kineto_fields::kNvtxArgs>(r, [&]<A key, bool first>() {
        if constexpr (key == A::ExternalId) {
          out_.karg<A::ExternalId, first>(i + 1);
        } else if constexpr (key == A::Domain) {
          if (r.domain) out_.karg<A::Domain>(t_.str(r.domain));
        } else if constexpr (key == A::EndThread) {
          if (r.end_tid != r.tid && r.end_tid != 0) out_.karg<A::EndThread>(r.end_tid);
        }
      });
      out_.lit("}}");
    }
  }

  void counter(uint32_t pid, std::string_view name, Ns ts, std::string_view key, double v) {
    sep();
    out_.lit("{\"ph\": \"C\", \"name\": ");
    out_.val(name);
    out_.arg<"pid">(pid);
    out_.arg<"tid">(0u);
    out_.arg<"ts">(Micros{rel(ts)});
    out_.lit(", \"args\": {");
    out_.str(key);
    out_.lit(": ");
    out_.dbl(v);
    out_.lit("}}");
  }

  void counters() {
    // Live allocated bytes per device.
    std::map<uint32_t, std::vector<std::pair<Ns, int64_t>>> per_dev;
    for (const auto& a : t_.allocations) {
      if (a.alloc != kNoTime) per_dev[a.device].push_back({a.alloc, int64_t(a.bytes)});
      if (a.free != kNoTime && a.alloc != kNoTime) per_dev[a.device].push_back({a.free, -int64_t(a.bytes)});
    }
    for (auto& [dev, evs] : per_dev) {
      std::sort(evs.begin(), evs.end(), [](auto& x, auto& y) { return x.first < y.first || (x.first == y.first && x.second < y.second); });
      int64_t cur = 0;
      for (size_t i = 0; i < evs.size(); ++i) {
        cur += evs[i].second;
        if (i + 1 < evs.size() && evs[i + 1].first == evs[i].first) continue;
        gpu_pids_.insert(dev);
        counter(dev, "Allocated memory", evs[i].first, "bytes", double(cur));
      }
    }
    for (const auto& c : t_.counters) counter(c.pid, t_.str(c.name), c.ts, "value", c.value);
  }

  const Device* device(uint32_t id) {
    if (id < dev_cache_.size() && dev_cache_[id].first) return dev_cache_[id].second;
    const Device* d = t_.find_device(id);
    if (id < 1024) {
      if (dev_cache_.size() <= id) dev_cache_.resize(id + 1, {false, nullptr});
      dev_cache_[id] = {true, d};
    }
    return d;
  }

  void meta(const char* what, uint32_t pid, uint32_t tid, const char* key, const std::string& value, bool value_is_int) {
    sep();
    out_.lit("{\"name\": \"");
    out_.raw(what, std::strlen(what));
    out_.lit("\", \"ph\": \"M\", \"ts\": 0.000");
    out_.arg<"pid">(pid);
    out_.arg<"tid">(tid);
    out_.lit(", \"args\": {");
    out_.member(key);
    if (value_is_int)
      out_.raw(value);
    else
      out_.str(value);
    out_.lit("}}");
  }

  void metadata() {
    for (const auto& tk : gpu_track_set_) gpu_pids_.insert(tk.pid);
    for (uint32_t dev : gpu_pids_) {
      const Device* d = device(dev);
      meta("process_name", dev, 0, "name", "GPU " + std::to_string(dev), false);
      meta("process_labels", dev, 0, "labels", d && !d->name.empty() ? d->name : "GPU " + std::to_string(dev), false);
      meta("process_sort_index", dev, 0, "sort_index", std::to_string(0x1000000 + dev), true);
    }
    for (const auto& tk : gpu_track_set_) {
      uint32_t stream = tk.tid & kTidStreamMask;
      int lane = int(tk.tid >> kTidLaneShift);
      std::string name;
      if (stream == kTidStreamMask && (tk.tid & kTidSyncBit)) {
        name = "stream -1 sync (context / device)";
      } else {
        name = "stream " + std::to_string(stream);
        if (const Stream* s = t_.find_stream(stream); s && s->name) name += " (" + t_.str(s->name) + ")";
        if (tk.tid & kTidSyncBit) name += " sync";
        if (tk.tid & kTidAnnotationBit) name += " annotations";
      }
      if (lane) name += " lane " + std::to_string(lane);
      meta("thread_name", tk.pid, tk.tid, "name", name, false);
      int kind = (tk.tid & kTidSyncBit) ? 1 : (tk.tid & kTidAnnotationBit) ? 2 : 0;
      meta("thread_sort_index", tk.pid, tk.tid, "sort_index", std::to_string(int64_t(stream) * 256 + kind * 64 + lane), true);
    }
    std::set<uint32_t> pids;
    for (const auto& tk : cpu_track_set_) pids.insert(tk.pid);
    for (uint32_t pid : pids) {
      std::string pname;
      for (const auto& p : t_.processes)
        if (p.pid == pid) pname = p.name;
      meta("process_name", pid, 0, "name", pname.empty() ? "process " + std::to_string(pid) : pname, false);
      meta("process_sort_index", pid, 0, "sort_index", std::to_string(pid), true);
    }
    for (const auto& tk : cpu_track_set_) {
      uint32_t tid = tk.tid & kTidStreamMask;
      int lane = int(tk.tid >> kTidLaneShift);
      std::string name;
      for (const auto& th : t_.threads)
        if (th.pid == tk.pid && th.tid == tid) name = th.name;
      if (name.empty()) name = "thread " + std::to_string(tid);
      if (lane) name += " lane " + std::to_string(lane);
      meta("thread_name", tk.pid, tk.tid, "name", name, false);
    }
  }

  void counts_block(const RecordCounts& c) {
    list(kRecordCountFields, "{", ", ", [&](const RecordCountField& f) {
      out_.member(f.name);
      out_.u64(c.*f.member);
    });
    out_.lit("}");
  }

  // One row of a block table: `[v,v,...]` in the columns' order and codings.
  template <class Columns, class Rec>
  void block_row(const Columns& columns, const Rec& r) {
    out_.ch('[');
    bool first = true;
    kineto_fields::for_each_field(columns, [&](const auto& col) {
      if (!first) out_.ch(',');
      first = false;
      block_value(col, r);
    });
    out_.ch(']');
  }
  template <class Rec, class T>
  void block_value(const kineto_fields::Column<Rec, T>& col, const Rec& r) {
    using kineto_fields::Col;
    const T& v = r.*col.member;
    if constexpr (std::is_same_v<T, std::string>) {
      out_.str(v);  // Col::Text
    } else if constexpr (std::is_enum_v<T>) {
      out_.val(std::underlying_type_t<T>(v));  // Col::Enum
    } else {
      switch (col.col) {
        case Col::TimeOrNull: out_.val(TimeOrNull{Ns(v)}); break;
        case Col::IdOrMinus1: out_.val(id_or_minus1(uint32_t(v), kNoStream)); break;
        case Col::Name: out_.str(t_.str(StrId(v))); break;
        default: out_.val(v);
      }
    }
  }

  void trailer() {
    out_.lit("\n]");
    if (o_.streamlab_block) {
      out_.lit(",\n\"streamlab\": {\"version\": 1");
      out_.arg<"base_time_ns">(base_);
      out_.arg<"session_start_utc_ns">(t_.session_start_utc_ns);
      out_.lit(",\n\"counts\": ");
      counts_block(t_.counts);
      out_.lit(",\n\"metadata\": {");
      list(t_.metadata, "", ", ", [&](const auto& kv) {
        out_.str(kv.first);
        out_.lit(": ");
        out_.str(kv.second);
      });
      out_.lit("},\n\"devices\": [");
      list(t_.devices, "", ", ", [&](const Device& d) { device_object(d, kineto_fields::kBlockDeviceKeys); });
      // The rest as compact rows, column by column as kineto_fields.h names them.
      out_.lit("]");
      kineto_fields::for_each_field(kineto_fields::kBlockTables, [&](const auto& table) {
        out_.lit(",\n\"");
        out_.raw(table.key, std::strlen(table.key));
        out_.lit("\": [");
        bool first = true;
        for (const auto& rec : t_.*table.rows) {
          if (!first) out_.raw(table.separator, std::strlen(table.separator));
          first = false;
          block_row(table.columns, rec);
        }
        out_.lit("]");
      });
      out_.lit("}");
    }
    out_.lit(",\n\"traceName\": \"streamlab\"\n}\n");
  }

  const Trace& t_;
  const KinetoOptions& o_;
  Out& out_;
  LaunchIndex launches_;
  Ns base_ = 0;
  bool first_event_ = true;
  size_t events_ = 0;
  std::vector<uint8_t> api_lane_, nvtx_lane_;
  uint32_t max_corr_ = 0;
  uint64_t next_flow_ = 1;
  std::vector<bool> used_;
  std::set<uint32_t> used_big_;
  TrackKey last_gpu_{0xFFFFFFFFu, 0xFFFFFFFFu}, last_cpu_{0xFFFFFFFFu, 0xFFFFFFFFu};  // cheap dedupe
  std::set<TrackKey> gpu_track_set_, cpu_track_set_;
  std::set<uint32_t> gpu_pids_;
  std::vector<std::pair<bool, const Device*>> dev_cache_;
  std::unordered_map<uint64_t, std::vector<const CudaEventRecord*>> event_index_;
};

// The trace's events, in pieces, to `sink`. Returns the number of trace events written.
size_t emit(const Trace& t, const KinetoOptions& opts, std::function<void(const char*, size_t)> sink) {
  Out out(std::move(sink));
  Emitter e(t, opts, out);
  return e.run();
}

}  // namespace

size_t write_kineto_json(const Trace& t, std::FILE* f, const KinetoOptions& opts) {
  bool failed = false;
  const size_t n = emit(t, opts, [&](const char* p, size_t k) {
    if (!failed && std::fwrite(p, 1, k, f) != k) failed = true;
  });
  if (failed) fail("writing the Kineto JSON trace failed: ", std::strerror(errno));
  return n;
}

size_t write_kineto_json(const Trace& t, std::ostream& os, const KinetoOptions& opts) {
  const size_t n = emit(t, opts, [&](const char* p, size_t k) { os.write(p, std::streamsize(k)); });
  if (!os) fail("writing the Kineto JSON trace to a stream failed");
  return n;
}

// Through a temporary file renamed into place on success (core/atomic_file.h): a killed or
// failing export leaves the old file or none, never half a trace.
// A name ending in ".gz" gets gzip-compressed JSON (what the loaders, Perfetto and HTA read as
// such; the traces of a compare run folder are kept so), written as it is produced.
size_t write_kineto_json_file(const Trace& t, const std::string& path, const KinetoOptions& opts) {
  AtomicFile out(path);
  size_t n;
  try {
    if (has_gz_suffix(path)) {
      GzipWriter z(out.file(), "gzip");  // (the caller's message names the file)
      n = emit(t, opts, [&](const char* p, size_t k) { z.write(p, k); });
      z.finish();
    } else {
      n = write_kineto_json(t, out.file(), opts);
    }
  } catch (const Error& e) {
    fail("'", path, "': ", e.what());
  }
  out.commit();
  return n;
}

std::string kineto_json_string(const Trace& t, const KinetoOptions& opts) {
  std::string s;
  emit(t, opts, [&](const char* p, size_t k) { s.append(p, k); });
  return s;
}

}  // namespace sl::prof
