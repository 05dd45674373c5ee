// CheckBackend: every op on a reference and a device-under-test backend, outputs compared and
// resynchronised after each op (see model/check_backend.h for why).
#include "model/check_backend.h"

#include "core/communicator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>

#include "core/bf16.h"
#include "core/error.h"
#include "model/kv_fp8_entry.h"
#include "model/op_checks.h"
#include "model/op_io.h"

namespace sl {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16; }

double load(const void* raw, DType t, size_t i) {
  switch (t) {
    case DType::F32: {
      float v;
      std::memcpy(&v, static_cast<const char*>(raw) + 4 * i, 4);
      return v;
    }
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, static_cast<const char*>(raw) + 2 * i, 2);
      return bf16_to_float(v);
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, static_cast<const char*>(raw) + 4 * i, 4);
      return v;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, static_cast<const char*>(raw) + 8 * i, 8);
      return double(v);
    }
    case DType::U8:
      return static_cast<const uint8_t*>(raw)[i];
  }
  return 0;
}

std::vector<double> to_double(const std::vector<char>& raw, DType t) {
  const size_t n = raw.size() / dtype_size(t);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = load(raw.data(), t, i);
  return v;
}

// n elements of dtype `from` -> dtype `to` (exact between bf16 and f32 in that direction; f32
// -> bf16 rounds to nearest even like the devices do).
std::vector<char> convert(const void* src, DType from, DType to, size_t n) {
  std::vector<char> out(n * dtype_size(to));
  if (from == to) {
    if (n) std::memcpy(out.data(), src, out.size());
    return out;
  }
  for (size_t i = 0; i < n; ++i) {
    const double v = load(src, from, i);
    char* dst = out.data() + i * dtype_size(to);
    switch (to) {
      case DType::F32: {
        const float f = float(v);
        std::memcpy(dst, &f, 4);
        break;
      }
      case DType::BF16: {
        const uint16_t h = float_to_bf16(float(v));
        std::memcpy(dst, &h, 2);
        break;
      }
      case DType::I32: {
        const int32_t x = int32_t(std::llround(v));
        std::memcpy(dst, &x, 4);
        break;
      }
      case DType::I64: {
        const int64_t x = int64_t(std::llround(v));
        std::memcpy(dst, &x, 8);
        break;
      }
      case DType::U8:
        *reinterpret_cast<uint8_t*>(dst) = uint8_t(std::llround(v));
        break;
    }
  }
  return out;
}

// Equal for the purpose of "did this element change": NaN equals NaN.
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

std::string index_str(const Shape& s, int64_t flat) {
  if (flat < 0 || s.n == 0) return "-";
  std::array<int64_t, kMaxDims> idx{};
  for (int i = s.n - 1; i >= 0; --i) {
    const int64_t d = std::max<int64_t>(s.d[i], 1);
    idx[i] = flat % d;
    flat /= d;
  }
  std::string out = "[";
  for (int i = 0; i < s.n; ++i) out += (i ? ", " : "") + std::to_string(idx[i]);
  return out + "]";
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A packed FP8 cache (model/kv_fp8_entry.h) whose outputs are compared by the values its entries
// decode to rather than byte for byte. Each side quantises its own floats as it writes an entry:
// compressor_pool pools, normalises and rotates in its own arithmetic (fp32 on the ref, bf16
// inputs on a CUDA dut), and swa_insert's keys differ as soon as the two sides' floats do (under
// Sync::DecisionsToDut they run free), so a value may land one e4m3 step away, or a block's amax
// on the other side of a power of two (its scale a factor 2 apart, the codes to match): different
// bytes, the same values within the float tolerance.
struct PackedEntries {
  int64_t values = 0;  // per entry; 0: not such an output (compared as it is)
  int64_t nope = 0;    // > 0: KV entries with that many e4m3 values; 0: indexer keys
  int64_t bytes = 0;   // per entry
};

// The rules the check backend reads an op's arguments by (the wrapper's tensors: the dut's dtypes,
// either float; packed caches taken, as the op already ran on both sides).
using ArgRules =
    checks::Rules<checks::Presence::DataOrZeroSize, checks::Floats::F32OrBF16, checks::Floats::F32OrBF16, true>;

// The packed cache an op writes: its output's name and layout, as the op's validator decides it
// (model/op_checks.h: one place for the rule). swa_insert's cache holds KV entries of
// d = k.dim(1) values; compressor_pool's entries KV entries or indexer keys of d values. Every
// other op, and every float cache, writes none.
struct PackedWrite {
  const char* output = nullptr;
  PackedEntries layout;
};
template <class... A>
PackedWrite packed_write(const char*, const A&...) {
  return {};
}
// swa_insert's arguments (or another op's with the same types).
PackedWrite packed_write(const char* op, const Tensor& cache, const Tensor& tags, const Tensor& k, const Tensor& pos,
                         const Tensor& seq) {
  if (std::strcmp(op, "swa_insert") != 0 || cache.dtype != DType::U8) return {};
  const checks::SwaInsertDims d = checks::validate_swa_insert<ArgRules>(cache, tags, k, pos, seq);
  return {"cache", {d.d, d.nope, cache.dim(2)}};
}
// compressor_pool's arguments (or another op's with the same types).
PackedWrite packed_write(const char* op, const Tensor& entries, const Tensor& state_u, const Tensor& state_g,
                         const Tensor& state_tags, const Tensor& norm_w, const Tensor& table, const Tensor& pos,
                         const Tensor& seq, int ratio, bool overlap, float) {
  if (std::strcmp(op, "compressor_pool") != 0 || entries.dtype != DType::U8) return {};
  const checks::CompressorPoolDims d = checks::validate_compressor_pool<ArgRules>(
      entries, state_u, state_g, state_tags, norm_w, table, pos, seq, ratio, overlap);
  return {"entries", {d.d, d.nope, entries.dim(2)}};
}

// The entries of a packed view (its bytes, as fetched into doubles) decoded to their values.
std::vector<double> decode_entries(const double* bytes, int64_t n, const PackedEntries& p) {
  const int64_t rows = n / p.bytes;
  std::vector<uint8_t> entry(size_t(p.bytes));
  std::vector<float> values(size_t(p.values));
  std::vector<double> out;
  out.reserve(size_t(rows * p.values));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < p.bytes; ++i) entry[size_t(i)] = uint8_t(bytes[r * p.bytes + i]);
    kvfp8::decode_entry(entry.data(), p.values, p.nope, values.data());
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

// Where decoded value `i` (counted over the view) starts in the packed view: its e4m3 code, or its
// bf16 rope value, so that a record's index points into the tensor the record names.
int64_t value_byte(int64_t i, const PackedEntries& p) {
  const int64_t row = i / p.values, k = i % p.values;
  const bool rope = p.nope > 0 && k >= p.nope;
  return row * p.bytes + (rope ? kvfp8::kv_rope_offset(p.nope) + 2 * (k - p.nope) : k);
}

std::string packed_note(const PackedEntries& p) {
  const std::string what = p.nope > 0 ? "KV entries of " + std::to_string(p.values) + " values (" +
                                            std::to_string(p.nope) + " e4m3, " + std::to_string(p.values - p.nope) +
                                            " bf16)"
                                      : "indexer keys of " + std::to_string(p.values) + " e4m3 values";
  return "packed FP8 " + what + " compared by decoded value (index: the value's first byte)";
}

// One output argument of an op call.
struct Output {
  const char* name;
  const Tensor* t;
  bool selection = false;  // ids chosen by top-k over scores: may differ on near ties
  PackedEntries packed;    // values > 0: a packed FP8 cache compared by decoded value
};

class CheckBackend final : public Backend {
 public:
  CheckBackend(Backend& ref, Backend& dut, CheckOptions opt) : ref_(ref), dut_(dut), opt_(opt) {
    SL_CHECK(&ref != &dut, "check backend: ref and dut must be two backend instances");
    streams_[0] = {Stream{}, Stream{}};
  }

  const std::vector<CheckRecord>& records() const { return records_; }

  std::string name() const override { return "check(" + ref_.name() + " vs " + dut_.name() + ")"; }
  // Both halves would need a rank of their own in the group (each all-reduce runs twice): a model
  // split over ranks is not checked op by op.
  void set_communicator(Communicator* c) override {
    SL_CHECK(!c || c->world() == 1, "check backend: a model split over ", c ? c->world() : 1,
             " ranks cannot be checked op by op (each op runs on two backends, each all-reduce would too)");
    Backend::set_communicator(c);
  }
  DType act_dtype() const override { return dut_.act_dtype(); }
  DType weight_dtype() const override { return dut_.weight_dtype(); }
  // Packed only when both sides read them (each op runs on both).
  bool packed_kv_caches() const override { return ref_.packed_kv_caches() && dut_.packed_kv_caches(); }

  // ---------------------------------------------------------------- memory
  Tensor alloc(const std::string& name, DType dtype, Shape shape, AllocKind kind) override {
    Buf b;
    b.name = name;
    b.dut = dut_.alloc(name, dtype, shape, kind);
    b.ref = ref_.alloc(name, ref_dtype(dtype), shape, kind);
    Tensor t = b.dut;
    t.buffer = int(bufs_.size());
    bufs_.push_back(std::move(b));
    return t;
  }
  std::string buffer_name(int buffer) const override {
    SL_CHECK(buffer >= 0 && size_t(buffer) < bufs_.size(), "check backend: buffer_name: no buffer with id ", buffer,
             " (", bufs_.size(), " allocated)");
    return bufs_[size_t(buffer)].name;
  }
  void upload(Stream s, const Tensor& dst, const void* host, size_t bytes) override {
    const Tensor r = on_ref(dst, "upload", "dst"), d = on_dut(dst, "upload", "dst");
    if (dst.buffer >= 0) packed_layouts_.erase(dst.buffer);  // bytes from the host: no known layout
    dut_.upload(dut_stream(s), d, host, bytes);
    if (r.dtype == d.dtype) {
      ref_.upload(ref_stream(s), r, host, bytes);
      return;
    }
    const size_t es = dtype_size(d.dtype);
    SL_CHECK(bytes % es == 0, "check backend: upload of ", bytes, " bytes to '", buffer_name(dst.buffer),
             "' is not a whole number of ", dtype_name(d.dtype), " elements");
    const std::vector<char> conv = convert(host, d.dtype, r.dtype, bytes / es);
    ref_.upload(ref_stream(s), r, conv.data(), conv.size());
    ref_.synchronize();  // `conv` dies here
  }
  void download(void* host, const Tensor& src, size_t bytes) override {
    dut_.download(host, on_dut(src, "download", "src"), bytes);
  }
  MemoryStats memory() const override { return dut_.memory(); }

  // ---------------------------------------------------------------- streams and events
  Stream create_stream(const std::string& name, int priority) override {
    const Stream r = ref_.create_stream(name, priority), d = dut_.create_stream(name, priority);
    const Stream s{next_stream_++};
    streams_[s.id] = {r, d};
    return s;
  }
  Stream create_pool_stream(const std::string& name, int priority) override {
    const Stream r = ref_.create_pool_stream(name, priority), d = dut_.create_pool_stream(name, priority);
    const Stream s{next_stream_++};
    streams_[s.id] = {r, d};
    return s;
  }
  void claim_stream(Stream s, const std::string& roles) override {
    const auto it = find_stream(s, "claim_stream");
    ref_.claim_stream(it->second.first, roles);
    dut_.claim_stream(it->second.second, roles);
  }
  void destroy_stream(Stream s) override {
    const auto it = find_stream(s, "destroy_stream");
    ref_.destroy_stream(it->second.first);
    dut_.destroy_stream(it->second.second);
    streams_.erase(it);
  }
  Event create_event(const std::string& name) override {
    events_.push_back({ref_.create_event(name), dut_.create_event(name)});
    return Event{int(events_.size()) - 1};
  }
  void record(Event e, Stream s) override {
    ref_.record(event(e, "record").first, ref_stream(s));
    dut_.record(event(e, "record").second, dut_stream(s));
  }
  void wait(Stream s, Event e) override {
    ref_.wait(ref_stream(s), event(e, "wait").first);
    dut_.wait(dut_stream(s), event(e, "wait").second);
  }
  void synchronize() override {
    ref_.synchronize();
    dut_.synchronize();
  }
  void graph_begin_capture(int) override {
    fail(
        "check backend: CUDA graph capture is not supported (every op downloads its outputs to compare them); "
        "run without --graph");
  }
  GraphStats graph_end_capture(int) override { fail("check backend: CUDA graph capture is not supported"); }
  void graph_replay(int) override { fail("check backend: CUDA graph replay is not supported"); }
  void range_push(const char* name) override {
    if (ranges_.empty()) ++top_count_[name];
    ranges_.emplace_back(name);
    ref_.range_push(name);
    dut_.range_push(name);
  }
  void range_pop() override {
    // No throw here: scopes pop while unwinding from a stop_at_first_failure error.
    if (!ranges_.empty()) ranges_.pop_back();
    ref_.range_pop();
    dut_.range_pop();
  }

  // ---------------------------------------------------------------- ops
  // Every op (model/ops.def): run on the ref, then on the dut, each with its own view of every
  // tensor argument; then its results (model/op_io.h: out, inout, selection) are compared and
  // resynchronised (a packed cache: by the layout packed_write reads from the op's arguments).
  // Scratch outputs (the MoE workspace, gemm_swiglu's g and u) are each backend's own business
  // and are not compared.
#define SL_OP(name, params, args, ...)                                                         \
  void name(Stream s, SL_UNPAREN params) override {                                           \
    /* the lambda's parameter names may not be any op parameter's (x, w...) */                \
    both(#name, s, [&](Backend& side_be, Stream side_stream, Side side_of) {                   \
      on_side(side_be, side_stream, side_of, &Backend::name, SL_UNPAREN args);                \
    });                                                                                        \
    OpIo io;                                                                                   \
    describe_##name(io, SL_UNPAREN args);                                                      \
    check(#name, io, packed_write(#name, SL_UNPAREN args));                                    \
  }
#include "model/ops.def"
#undef SL_OP

  size_t moe_workspace_bytes(int64_t tokens, int k, int D, int F, int E) const override {
    return std::max(ref_.moe_workspace_bytes(tokens, k, D, F, E), dut_.moe_workspace_bytes(tokens, k, D, F, E));
  }

 private:
  // One allocation: the whole buffer on each side (with that side's own buffer id).
  struct Buf {
    std::string name;
    Tensor ref, dut;
  };
  enum class Side { Ref, Dut };

  DType ref_dtype(DType d) const {
    if (d == dut_.act_dtype()) return ref_.act_dtype();
    if (d == dut_.weight_dtype()) return ref_.weight_dtype();
    return d;
  }

  const Buf& buf_of(const Tensor& t, const char* op, const char* arg) const {
    SL_CHECK(t.buffer >= 0 && size_t(t.buffer) < bufs_.size(), "check backend: ", op, ": ", arg, " (buffer id ",
             t.buffer, ") was not allocated by this check backend");
    return bufs_[size_t(t.buffer)];
  }
  // Element offset of a view within its buffer (views move the data pointer by whole elements).
  int64_t offset_of(const Tensor& t, const Buf& b, const char* op, const char* arg) const {
    SL_CHECK(t.dtype == b.dut.dtype, "check backend: ", op, ": ", arg, " is ", dtype_name(t.dtype), " but its buffer '",
             b.name, "' is ", dtype_name(b.dut.dtype));
    int64_t off = 0;
    if (b.dut.data == nullptr) {
      SL_CHECK(t.data == nullptr, "check backend: ", op, ": ", arg, " points into the empty buffer '", b.name, "'");
    } else {
      const ptrdiff_t d = static_cast<const char*>(t.data) - static_cast<const char*>(b.dut.data);
      const ptrdiff_t es = ptrdiff_t(dtype_size(t.dtype));
      SL_CHECK(d >= 0 && d % es == 0, "check backend: ", op, ": ", arg, " does not point at an element of buffer '",
               b.name, "' (byte offset ", d, ")");
      off = d / es;
    }
    SL_CHECK(off + t.numel() <= b.dut.numel(), "check backend: ", op, ": ", arg, " ", t.shape.str(), " at element ",
             off, " runs past the end of buffer '", b.name, "' ", b.dut.shape.str());
    return off;
  }
  Tensor on_dut(const Tensor& t, const char* op, const char* arg) const {
    if (t.buffer < 0) {
      SL_CHECK(t.data == nullptr, "check backend: ", op, ": ", arg, " has data but no buffer id");
      return t;  // an absent optional argument
    }
    const Buf& b = buf_of(t, op, arg);
    offset_of(t, b, op, arg);
    Tensor d = t;
    d.buffer = b.dut.buffer;
    return d;
  }
  Tensor on_ref(const Tensor& t, const char* op, const char* arg) const {
    if (t.buffer < 0) {
      SL_CHECK(t.data == nullptr, "check backend: ", op, ": ", arg, " has data but no buffer id");
      return t;
    }
    const Buf& b = buf_of(t, op, arg);
    const int64_t off = offset_of(t, b, op, arg);
    Tensor r = t;
    r.dtype = b.ref.dtype;
    r.buffer = b.ref.buffer;
    r.data = b.ref.data ? static_cast<char*>(b.ref.data) + size_t(off) * dtype_size(b.ref.dtype) : nullptr;
    return r;
  }
  // Arguments inside an op call: errors name the op (the backends name the argument).
  Tensor side(Side x, const Tensor& t) const {
    return x == Side::Ref ? on_ref(t, cur_op_, "an argument") : on_dut(t, cur_op_, "an argument");
  }

  std::map<int, std::pair<Stream, Stream>>::iterator find_stream(Stream s, const char* op) {
    const auto it = streams_.find(s.id);
    SL_CHECK(it != streams_.end(), "check backend: ", op, ": stream ", s.id,
             " does not exist (never created or destroyed)");
    return it;
  }
  Stream ref_stream(Stream s) { return find_stream(s, "stream mapping")->second.first; }
  Stream dut_stream(Stream s) { return find_stream(s, "stream mapping")->second.second; }
  const std::pair<Event, Event>& event(Event e, const char* op) const {
    SL_CHECK(e.id >= 0 && size_t(e.id) < events_.size(), "check backend: ", op, ": event ", e.id, " does not exist");
    return events_[size_t(e.id)];
  }

  // Calls `op` on one side: each tensor argument becomes that side's view of it, every other
  // argument passes as it is.
  template <class T>
  static const T& side_arg(const CheckBackend&, Side, const T& v) {
    return v;
  }
  static Tensor side_arg(const CheckBackend& self, Side x, const Tensor& t) { return self.side(x, t); }
  template <class... P, class... A>
  void on_side(Backend& be, Stream st, Side x, void (Backend::*op)(Stream, P...), const A&... args) const {
    (be.*op)(st, side_arg(*this, x, args)...);
  }

  // The op on the ref, then on the dut.
  void both(const char* op, Stream s, const std::function<void(Backend&, Stream, Side)>& call) {
    cur_op_ = op;
    call(ref_, ref_stream(s), Side::Ref);
    call(dut_, dut_stream(s), Side::Dut);
  }

  std::string path() const {
    std::string p;
    for (size_t i = 0; i < ranges_.size(); ++i) {
      if (i) p += "/";
      p += ranges_[i];
      if (i == 0) p += "#" + std::to_string(top_count_.at(ranges_[0]));
    }
    return p;
  }

  // Both sides' whole buffer of one output, as doubles, and the dut's raw bytes.
  struct Fetched {
    const Buf* buf = nullptr;
    int64_t off = 0;
    std::vector<char> dut_raw;
    std::vector<double> ref, dut;
  };
  Fetched fetch(const Output& o, const char* op) {
    Fetched f;
    f.buf = &buf_of(*o.t, op, o.name);
    f.off = offset_of(*o.t, *f.buf, op, o.name);
    std::vector<char> ref_raw(f.buf->ref.bytes());
    f.dut_raw.resize(f.buf->dut.bytes());
    if (!ref_raw.empty()) ref_.download(ref_raw.data(), f.buf->ref, ref_raw.size());
    if (!f.dut_raw.empty()) dut_.download(f.dut_raw.data(), f.buf->dut, f.dut_raw.size());
    f.ref = to_double(ref_raw, f.buf->ref.dtype);
    f.dut = to_double(f.dut_raw, f.buf->dut.dtype);
    return f;
  }

  static void compare_float(CheckRecord& r, const double* ref, const double* dut, int64_t n, int64_t row,
                            const std::vector<char>* skip_row) {
    double num = 0, den = 0;
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) {
      if (skip_row && (*skip_row)[size_t(i / row)]) continue;
      const double a = ref[i], b = dut[i];
      if (!std::isfinite(a) || !std::isfinite(b)) {
        if (same(a, b)) continue;
        bad = true;
        if (r.max_abs != INFINITY) r.max_abs_index = i;
        r.max_abs = INFINITY;
        continue;
      }
      const double d = std::fabs(b - a);
      num += d * d;
      den += a * a;
      if (d > r.max_abs) r.max_abs = d, r.max_abs_index = i;
    }
    r.rel_err = bad ? INFINITY : den > 0 ? std::sqrt(num / den) : num > 0 ? INFINITY : 0.0;
  }

  // Packed FP8 entries (n bytes of the view) by the values they decode to, as compare_float
  // compares floats.
  // Fails on a value more than one e4m3 step from the ref's, not on the relative error: each side
  // quantizes its own floats, so near a rounding boundary a value lands a step away (up to 1/8 of
  // its binade: a few per cent of relative error over an entry that both sides computed well).
  static void compare_packed(CheckRecord& r, const double* ref, const double* dut, int64_t n, const PackedEntries& p) {
    const std::vector<double> a = decode_entries(ref, n, p), b = decode_entries(dut, n, p);
    compare_float(r, a.data(), b.data(), int64_t(a.size()), p.values, nullptr);
    if (r.max_abs_index >= 0) r.max_abs_index = value_byte(r.max_abs_index, p);
    r.note = packed_note(p);
    const int64_t beyond = values_beyond_one_step(a, b, p);
    r.failed = std::isinf(r.rel_err) || beyond > 0;
    if (beyond > 0)
      r.note += "; " + std::to_string(beyond) + " of " + std::to_string(a.size()) +
                " values more than one e4m3 step from the reference";
  }

  // How many decoded values differ by more than one e4m3 step. A step is 1/8 of the larger value's
  // binade (a block whose amax crosses a power of two is scaled 2x apart on the two sides, its
  // values then a step of the coarser grid apart), and at least the block's subnormal spacing,
  // scale * 2^-9 (the scale from the larger side's block amax, as the packer picks it). The rope
  // values (bf16 on both sides) are held to the same bound, which their bf16 rounding is far inside.
  static int64_t values_beyond_one_step(const std::vector<double>& a, const std::vector<double>& b,
                                        const PackedEntries& p) {
    int64_t beyond = 0;
    const int64_t rows = int64_t(a.size()) / p.values;
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t base = row * p.values, fp8 = p.nope > 0 ? p.nope : p.values;
      const int64_t block = p.nope > 0 ? kvfp8::kBlock : p.values;
      for (int64_t b0 = 0; b0 < p.values; b0 += block) {
        const int64_t end = std::min(p.values, b0 + block);
        double amax = 0;
        for (int64_t i = b0; i < end; ++i)
          amax = std::max({amax, std::fabs(a[size_t(base + i)]), std::fabs(b[size_t(base + i)])});
        const double sub = b0 < fp8 ? double(kvfp8::scale_from_code(kvfp8::block_scale_code(float(amax)))) / 512 : 0;
        for (int64_t i = b0; i < end; ++i) {
          const double x = a[size_t(base + i)], y = b[size_t(base + i)];
          if (!std::isfinite(x) || !std::isfinite(y)) continue;  // compare_float's business
          const double m = std::max(std::fabs(x), std::fabs(y));
          const double step = m > 0 ? std::max(std::ldexp(1.0, std::ilogb(m) - 3), sub) : sub;
          beyond += std::fabs(x - y) > step;
        }
      }
    }
    return beyond;
  }

  // Per row: ids the dut chose that the ref did not (multiset difference).
  static void compare_selection(CheckRecord& r, const double* ref, const double* dut, int64_t n, int64_t row,
                                std::vector<char>* differs) {
    int64_t rows_diff = 0;
    for (int64_t s = 0; s * row < n; ++s) {
      std::vector<double> a(ref + s * row, ref + s * row + row), b(dut + s * row, dut + s * row + row);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      std::vector<double> extra;
      std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(extra));
      if (!extra.empty()) {
        if (r.max_abs_index < 0) r.max_abs_index = s * row;
        r.mismatches += int64_t(extra.size());
        ++rows_diff;
        if (differs) (*differs)[size_t(s)] = 1;
      }
    }
    if (rows_diff) r.note = std::to_string(rows_diff) + " of " + std::to_string(row ? n / row : 0) + " rows differ";
  }

  // route: the dut's weights reordered to the ref's id order (a near tie may swap two slots);
  // rows whose id sets differ are left out.
  static std::vector<double> align_route_weights(const double* ref_ids, const double* dut_ids, const double* dut_w,
                                                 int64_t n, int64_t k) {
    std::vector<double> out(dut_w, dut_w + n);
    for (int64_t t = 0; t * k < n; ++t) {
      std::vector<char> used(size_t(k), 0);
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j)
          if (!used[size_t(j)] && dut_ids[t * k + j] == ref_ids[t * k + i]) {
            used[size_t(j)] = 1;
            out[size_t(t * k + i)] = dut_w[t * k + j];
            break;
          }
    }
    return out;
  }

  // How output `a` of `op` is compared as a packed cache (values 0: as it is), and what the
  // buffer's layout is known to be from now on. swa_insert and compressor_pool name the layout of
  // the packed cache they write (`written`); the buffer keeps it. cache_rollback's entries (an
  // inout, its untouched rows each side's own) are decoded by the layout their buffer was last
  // written with; a packed buffer no such op wrote stays exact bytes (cache_rollback does not
  // tell how many values an entry holds). Any other write (another op's output, an upload)
  // forgets the layout: the buffer is something else now.
  PackedEntries packed_layout(const char* op, const OpIo::Arg& a, const PackedWrite& written) {
    const Tensor& t = *a.tensor;
    if (t.dtype != DType::U8 || t.buffer < 0) return {};
    if (written.output && std::strcmp(a.name, written.output) == 0) {
      packed_layouts_[t.buffer] = written.layout;
      return written.layout;
    }
    const auto it = packed_layouts_.find(t.buffer);
    if (it == packed_layouts_.end()) return {};
    const PackedEntries& p = it->second;
    if (std::strcmp(op, "cache_rollback") == 0 && std::strcmp(a.name, "entries") == 0) {
      const bool whole_entries = t.ndim() == 3 && t.dim(2) == p.bytes &&
                                 offset_of(t, buf_of(t, op, a.name), op, a.name) % p.bytes == 0;
      return whole_entries ? p : PackedEntries{};
    }
    packed_layouts_.erase(it);
    return {};
  }

  // After an op: compare each output on both sides, record, then copy the dut's values into
  // the ref so that the next op starts from identical inputs.
  void check(const char* op, const OpIo& io, const PackedWrite& written) {
    std::vector<Output> outputs;
    for (const OpIo::Arg& a : io)
      if (OpIo::result(a.role))
        outputs.push_back({a.name, a.tensor, a.role == OpRole::Selection, packed_layout(op, a, written)});
    // init_uniform makes both sides hold the dut's (e.g. bf16-exact) weights; whether its
    // rounding is recorded is an option.
    const bool record = std::strcmp(op, "init_uniform") != 0 || opt_.record_init;
    const int64_t seq = seq_++;
    const std::string where = path();
    std::vector<Fetched> got;
    for (const Output& o : outputs) got.push_back(fetch(o, op));

    std::vector<char> route_rows_differ;  // route: rows whose ids differ (ids come first)
    std::vector<CheckRecord> recs;
    size_t i = 0;
    for (const Output& o : outputs) {
      const Fetched& f = got[i++];
      const Tensor& t = *o.t;
      CheckRecord r;
      r.seq = seq;
      r.path = where;
      r.op = op;
      r.output = o.name;
      r.shape = t.shape;
      r.ref_dtype = f.buf->ref.dtype;
      r.dut_dtype = f.buf->dut.dtype;
      r.numel = t.numel();
      const int64_t n = r.numel, row = std::max<int64_t>(t.ndim() ? t.dim(-1) : 1, 1);
      const double* rv = f.ref.data() + f.off;
      const double* dv = f.dut.data() + f.off;
      if (o.selection) {
        r.kind = CheckRecord::Kind::Selection;
        std::vector<char> differs(size_t(n / row + 1), 0);
        compare_selection(r, rv, dv, n, row, &differs);
        if (std::string(op) == "route") route_rows_differ = differs;
      } else if (o.packed.values > 0) {
        r.kind = CheckRecord::Kind::Float;
        compare_packed(r, rv, dv, n, o.packed);  // sets failed: one e4m3 step, not the tolerance
      } else if (is_float(t.dtype)) {
        r.kind = CheckRecord::Kind::Float;
        if (std::string(op) == "route" && !route_rows_differ.empty()) {
          const Fetched& ids = got[0];
          const std::vector<double> aligned =
              align_route_weights(ids.ref.data() + ids.off, ids.dut.data() + ids.off, dv, n, row);
          compare_float(r, rv, aligned.data(), n, row, &route_rows_differ);
          int64_t left_out = 0;
          for (int64_t s = 0; s < n / row; ++s) left_out += route_rows_differ[size_t(s)];
          if (left_out) r.note = std::to_string(left_out) + " rows left out: their ids differ";
        } else {
          compare_float(r, rv, dv, n, row, nullptr);
        }
        r.failed = !(r.rel_err <= opt_.tolerance);
      } else {
        r.kind = CheckRecord::Kind::Int;
        for (int64_t e = 0; e < n; ++e)
          if (!same(rv[e], dv[e])) {
            if (r.mismatches++ == 0) r.max_abs_index = e;
          }
        r.failed = r.mismatches > 0;
      }
      recs.push_back(r);
    }

    // Outside the views: nothing may have changed. Several outputs may share one buffer.
    std::map<const Buf*, std::vector<std::pair<int64_t, int64_t>>> views;
    i = 0;
    for (const Output& o : outputs) {
      const Fetched& f = got[i++];
      views[f.buf].push_back({f.off, f.off + o.t->numel()});
    }
    std::map<const Buf*, bool> seen;
    i = 0;
    for (const Output& o : outputs) {
      const Fetched& f = got[i++];
      if (seen[f.buf]) continue;
      seen[f.buf] = true;
      CheckRecord r;
      r.seq = seq;
      r.path = where;
      r.op = op;
      r.output = std::string(o.name) + " (outside the view; buffer '" + f.buf->name + "')";
      r.shape = f.buf->dut.shape;
      r.ref_dtype = f.buf->ref.dtype;
      r.dut_dtype = f.buf->dut.dtype;
      r.kind = CheckRecord::Kind::OutsideView;
      const auto& vs = views[f.buf];
      for (int64_t e = 0; e < int64_t(f.ref.size()); ++e) {
        bool inside = false;
        for (const auto& v : vs) inside = inside || (e >= v.first && e < v.second);
        if (inside) continue;
        ++r.numel;
        if (same(f.ref[size_t(e)], f.dut[size_t(e)])) continue;
        if (r.mismatches++ == 0) r.max_abs_index = e;
        r.max_abs = std::max(r.max_abs, std::fabs(f.dut[size_t(e)] - f.ref[size_t(e)]));
      }
      if (r.mismatches) {
        r.failed = true;
        recs.push_back(r);
      }
    }

    if (opt_.sync == CheckOptions::Sync::DecisionsToDut && std::string(op) != "init_uniform") {
      // Discrete outputs: the ref's values into the dut. A route whose ids differ also hands
      // over its weights (they belong to the ids).
      bool ids_differ = false;
      size_t j = 0;
      for (const Output& o : outputs) {
        const Fetched& f = got[j++];
        // Packed caches compared by value are float results: each side keeps its own.
        const bool discrete = !is_float(o.t->dtype) && o.packed.values == 0;
        if (!discrete && !(std::string(op) == "route" && ids_differ)) continue;
        bool differ = false;
        for (size_t e = 0; e < f.ref.size() && !differ; ++e) differ = !same(f.ref[e], f.dut[e]);
        if (!differ) continue;
        if (discrete) ids_differ = true;
        std::vector<char> ref_raw(f.buf->ref.bytes());
        ref_.download(ref_raw.data(), f.buf->ref, ref_raw.size());
        const std::vector<char> conv = convert(ref_raw.data(), f.buf->ref.dtype, f.buf->dut.dtype, f.ref.size());
        dut_.upload(Stream{}, f.buf->dut, conv.data(), conv.size());
        dut_.synchronize();  // `conv` dies here
      }
      got.clear();
    }

    // Resync: the dut's whole buffer into the ref, converted to the ref's dtype.
    for (const Fetched& f : got) {
      bool differ = false;
      for (size_t e = 0; e < f.ref.size() && !differ; ++e) differ = !same(f.ref[e], f.dut[e]);
      if (!differ) continue;
      const std::vector<char> conv = convert(f.dut_raw.data(), f.buf->dut.dtype, f.buf->ref.dtype, f.dut.size());
      ref_.upload(Stream{}, f.buf->ref, conv.data(), conv.size());
      ref_.synchronize();  // `conv` dies here
    }

    if (!record) return;
    const CheckRecord* first_failed = nullptr;
    for (CheckRecord& r : recs) {
      const bool show =
          opt_.print == CheckOptions::Print::All || (opt_.print == CheckOptions::Print::Failures && r.failed);
      if (show && opt_.log) std::fprintf(opt_.log, "check: %s%s\n", r.failed ? "FAIL " : "", r.describe().c_str());
      records_.push_back(std::move(r));
      if (records_.back().failed && !first_failed) first_failed = &records_.back();
    }
    if (opt_.log) std::fflush(opt_.log);
    if (first_failed && opt_.stop_at_first_failure) fail("check backend: first failure: ", first_failed->describe());
  }

  Backend& ref_;
  Backend& dut_;
  CheckOptions opt_;
  std::vector<Buf> bufs_;
  std::map<int, std::pair<Stream, Stream>> streams_;  // wrapper stream id -> (ref, dut)
  int next_stream_ = 1;
  std::vector<std::pair<Event, Event>> events_;
  std::vector<std::string> ranges_;
  std::map<std::string, int> top_count_;  // occurrences of each outermost range ("decode" = step number)
  std::vector<CheckRecord> records_;
  // Packed FP8 caches by buffer id: the layout swa_insert / compressor_pool last wrote (packed_layout).
  std::map<int, PackedEntries> packed_layouts_;
  int64_t seq_ = 0;
  const char* cur_op_ = "";
};

}  // namespace

const char* check_kind_name(CheckRecord::Kind k) {
  switch (k) {
    case CheckRecord::Kind::Float:
      return "float";
    case CheckRecord::Kind::Int:
      return "int";
    case CheckRecord::Kind::Selection:
      return "selection";
    case CheckRecord::Kind::OutsideView:
      return "outside-view";
  }
  return "?";
}

std::string CheckRecord::where() const {
  std::string s = "#" + std::to_string(seq) + " " + (path.empty() ? "(no range)" : path) + " " + op + "." + output +
                  " " + shape.str() + " " + dtype_name(dut_dtype);
  if (ref_dtype != dut_dtype) s += std::string(" vs ") + dtype_name(ref_dtype);
  return s;
}

std::string CheckRecord::describe() const {
  std::string s = where() + ": ";
  switch (kind) {
    case Kind::Float:
      s += "rel err " + fmt("%.3e", rel_err) + ", max abs diff " + fmt("%.3e", max_abs);
      if (max_abs_index >= 0) s += " at " + index_str(shape, max_abs_index);
      break;
    case Kind::Int:
      s += std::to_string(mismatches) + " of " + std::to_string(numel) + " elements differ" +
           (mismatches ? " (first at " + index_str(shape, max_abs_index) + ")" : "");
      break;
    case Kind::Selection:
      s += std::to_string(mismatches) + " ids differ (near ties?)" +
           (mismatches ? " (first row at " + index_str(shape, max_abs_index) + ")" : "");
      break;
    case Kind::OutsideView:
      s += std::to_string(mismatches) + " of " + std::to_string(numel) +
           " elements outside the op's output changed (first at " + index_str(shape, max_abs_index) +
           ", max abs diff " + fmt("%.3e", max_abs) + ")";
      break;
  }
  if (!note.empty()) s += "; " + note;
  return s;
}

std::unique_ptr<Backend> make_check_backend(Backend& ref, Backend& dut, CheckOptions options) {
  return std::make_unique<CheckBackend>(ref, dut, options);
}

const std::vector<CheckRecord>& check_records(const Backend& check) {
  const auto* c = dynamic_cast<const CheckBackend*>(&check);
  SL_CHECK(c != nullptr, "check_records: backend '", check.name(), "' is not a check backend (make_check_backend)");
  return c->records();
}

CheckSummary summarize_checks(const std::vector<CheckRecord>& records) {
  CheckSummary s;
  int64_t last_seq = -1;
  for (const CheckRecord& r : records) {
    if (r.seq != last_seq) ++s.op_calls, last_seq = r.seq;
    if (r.kind != CheckRecord::Kind::OutsideView) ++s.outputs;
    if (r.failed) {
      ++s.failures;
      if (!s.first_failure) s.first_failure = &r;
    }
    switch (r.kind) {
      case CheckRecord::Kind::Float:
        if (r.failed) ++s.float_failures;
        if (!s.worst || !(r.rel_err <= s.worst->rel_err)) s.worst = &r;
        break;
      case CheckRecord::Kind::Int:
        s.int_failures += r.failed;
        break;
      case CheckRecord::Kind::Selection:
        s.selection_diffs += r.mismatches > 0;
        break;
      case CheckRecord::Kind::OutsideView:
        ++s.outside_view;
        break;
    }
  }
  if (s.worst) s.worst_rel_err = s.worst->rel_err;
  return s;
}

void print_check_report(FILE* out, const std::vector<CheckRecord>& records, double tolerance, int worst,
                        int max_failures) {
  const CheckSummary s = summarize_checks(records);
  std::fprintf(out,
               "check: %lld op calls, %lld outputs compared on identical inputs (tolerance %.1e): %lld failures "
               "(float over tolerance %lld, int mismatches %lld, writes outside the output %lld); %lld selection "
               "outputs differ (near ties, not failures); worst float rel err %.3e\n",
               (long long)s.op_calls, (long long)s.outputs, tolerance, (long long)s.failures,
               (long long)s.float_failures, (long long)s.int_failures, (long long)s.outside_view,
               (long long)s.selection_diffs, s.worst_rel_err);
  if (s.first_failure)
    std::fprintf(out, "FIRST FAILURE: %s\n", s.first_failure->describe().c_str());
  else
    std::fprintf(out, "no failure\n");
  if (s.failures) {
    std::fprintf(out, "failures (in call order):\n");
    int shown = 0;
    for (const CheckRecord& r : records)
      if (r.failed && shown++ < max_failures) std::fprintf(out, "  %s\n", r.describe().c_str());
    if (shown > max_failures) std::fprintf(out, "  ... and %d more\n", shown - max_failures);
  }
  if (s.selection_diffs) {
    std::fprintf(out, "selection differences (in call order):\n");
    int shown = 0;
    for (const CheckRecord& r : records)
      if (r.kind == CheckRecord::Kind::Selection && r.mismatches && shown++ < max_failures)
        std::fprintf(out, "  %s\n", r.describe().c_str());
    if (shown > max_failures) std::fprintf(out, "  ... and %d more\n", shown - max_failures);
  }
  // Initialisation is listed apart: on a bf16 dut its error is the weights' rounding (~1e-3),
  // which would crowd the ops out of the worst list.
  std::vector<const CheckRecord*> fl;
  int64_t inits = 0;
  double init_worst = 0;
  for (const CheckRecord& r : records) {
    if (r.kind != CheckRecord::Kind::Float) continue;
    if (r.op == "init_uniform" || r.op == "fill") {
      ++inits;
      init_worst = std::max(init_worst, std::isnan(r.rel_err) ? INFINITY : r.rel_err);
    } else {
      fl.push_back(&r);
    }
  }
  if (inits)
    std::fprintf(out, "initialisation (init_uniform, fill): %lld float tensors, worst rel err %.3e\n", (long long)inits,
                 init_worst);
  // NaN/inf first, then by relative error.
  std::stable_sort(fl.begin(), fl.end(), [](const CheckRecord* a, const CheckRecord* b) {
    const double x = std::isnan(a->rel_err) ? INFINITY : a->rel_err, y = std::isnan(b->rel_err) ? INFINITY : b->rel_err;
    return x > y;
  });
  if (worst > 0 && !fl.empty()) {
    std::fprintf(out, "worst %d float op outputs by relative error:\n", std::min<int>(worst, int(fl.size())));
    for (int i = 0; i < worst && i < int(fl.size()); ++i)
      std::fprintf(out, "  %s%s\n", fl[size_t(i)]->failed ? "FAIL " : "", fl[size_t(i)]->describe().c_str());
  }
  std::fflush(out);
}

}  // namespace sl
