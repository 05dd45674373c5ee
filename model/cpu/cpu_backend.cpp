// CpuBackend: memory, streams and events (labels), initialisation, and the small token ops
// (embed, argmax, gather_rows, shift_tokens).
#include <cstdlib>
#include <cstring>

#include "core/bf16.h"
#include "core/host_memory.h"
#include "core/rng.h"
#include "model/cpu/cpu_backend.h"

#include <cstdio>
#include "core/communicator.h"
#include "core/fp8.h"
#include "model/cpu/cpu_backend_impl.h"
#include "model/kv_fp8_entry.h"

namespace sl {

using namespace cpu;

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

CpuBackend::~CpuBackend() {
  for (Buffer& b : buffers_) std::free(b.data);
}

// ---------------------------------------------------------------- memory

Tensor CpuBackend::alloc(const std::string& name, DType dtype, Shape shape, AllocKind kind) {
  for (int i = 0; i < shape.n; ++i)
    SL_CHECK(shape[i] >= 0, "alloc '", name, "': negative dimension in shape ", shape.str());
  const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  // 64-byte alignment (a cache line, and any SIMD width); at least one line so that even a
  // zero-element tensor has a distinct non-null address. aligned_alloc wants a multiple.
  const size_t padded = ((bytes ? bytes : 1) + 63) / 64 * 64;
  void* data = std::aligned_alloc(64, padded);
  SL_CHECK(data != nullptr, "alloc '", name, "': out of host memory for ", padded, " bytes (shape ", shape.str(),
           " ", dtype_name(dtype), ")");
  std::memset(data, 0, padded);

  Buffer b;
  b.data = data;
  b.bytes = bytes;
  b.name = name;
  b.kind = kind;
  buffers_.push_back(std::move(b));
  bytes_by_kind_[size_t(kind)] += bytes;
  total_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, total_bytes_);  // nothing is ever freed: peak == total

  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.shape = shape;
  t.buffer = int(buffers_.size()) - 1;
  return t;
}

std::string CpuBackend::buffer_name(int buffer) const {
  SL_CHECK(buffer >= 0 && size_t(buffer) < buffers_.size(), "buffer_name: no buffer with id ", buffer, " (",
           buffers_.size(), " allocated)");
  return buffers_[size_t(buffer)].name;
}

void CpuBackend::upload(Stream s, const Tensor& dst, const void* host, size_t bytes) {
  check_stream("upload", s);
  check_present("upload", "dst", dst);
  SL_CHECK(bytes <= dst.bytes(), "upload: ", bytes, " bytes do not fit dst ", describe(dst), " (", dst.bytes(),
           " bytes)");
  if (bytes) std::memcpy(dst.data, host, bytes);
}

void CpuBackend::download(void* host, const Tensor& src, size_t bytes) {
  check_present("download", "src", src);
  SL_CHECK(bytes <= src.bytes(), "download: ", bytes, " bytes requested from src ", describe(src), " (", src.bytes(),
           " bytes)");
  if (bytes) std::memcpy(host, src.data, bytes);
}

MemoryStats CpuBackend::memory() const {
  MemoryStats m;
  m.weights_bytes = bytes_by_kind_[size_t(AllocKind::Weight)];
  m.activations_bytes = total_bytes_ - m.weights_bytes;
  m.peak_bytes = peak_bytes_;
  m.library_bytes = 0;
  return m;
}

size_t CpuBackend::available_bytes() const { return host_memory_available(); }

// ---------------------------------------------------------------- streams and events
// Ops run in program order, so streams and events carry no behaviour; they are still
// validated so that a schedule bug (an unknown or destroyed stream) fails here too.

Stream CpuBackend::create_stream(const std::string& name, int priority) {
  stream_names_.push_back(name);
  Stream s{int(stream_names_.size()) - 1};
  live_streams_.insert(s.id);
  return s;
}

void CpuBackend::destroy_stream(Stream s) {
  SL_CHECK(s.id != 0, "destroy_stream: the main stream (0) cannot be destroyed");
  check_stream("destroy_stream", s);
  live_streams_.erase(s.id);
}

Event CpuBackend::create_event(const std::string& name) {
  event_names_.push_back(name);
  return Event{int(event_names_.size()) - 1};
}

void CpuBackend::record(Event e, Stream s) {
  check_event("record", e);
  check_stream("record", s);
}

void CpuBackend::wait(Stream s, Event e) {
  check_stream("wait", s);
  check_event("wait", e);
}

void CpuBackend::check_stream(const char* op, Stream s) const {
  SL_CHECK(live_streams_.count(s.id), op, ": stream ", s.id, " does not exist (never created or destroyed)");
}

void CpuBackend::check_event(const char* op, Event e) const {
  SL_CHECK(e.id >= 0 && size_t(e.id) < event_names_.size(), op, ": event ", e.id, " does not exist");
}

// ---------------------------------------------------------------- initialisation

void CpuBackend::init_uniform(Stream s, const Tensor& t, uint64_t seed, uint64_t key, float scale, float offset) {
  check_stream("init_uniform", s);
  check_present("init_uniform", "t", t);
  const int64_t n = t.numel();
  // Two separate float operations (no fused multiply-add) so that every backend rounds the
  // same way.
  if (t.dtype == DType::F32) {
    float* p = t.ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      float scaled = scale * uniform_pm1(seed, key, uint64_t(i));
      p[i] = scaled + offset;
    }
  } else if (t.dtype == DType::BF16) {
    uint16_t* p = t.ptr<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      float scaled = scale * uniform_pm1(seed, key, uint64_t(i));
      p[i] = float_to_bf16(scaled + offset);
    }
  } else {
    fail("init_uniform: t is ", describe(t), ", expected f32 or bf16");
  }
}

void CpuBackend::fill(Stream s, const Tensor& t, float value) {
  check_stream("fill", s);
  check_present("fill", "t", t);
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::F32: std::fill_n(t.ptr<float>(), n, value); break;
    case DType::BF16: std::fill_n(t.ptr<uint16_t>(), n, float_to_bf16(value)); break;
    case DType::I32: std::fill_n(t.ptr<int32_t>(), n, int32_t(value)); break;
    default: fail("fill: t is ", describe(t), ", expected f32, bf16 or i32");
  }
}

void CpuBackend::round_fp8_blocks(Stream s, const Tensor& t, int64_t cols, int64_t block, const Tensor& pos,
                                  const Tensor& seq, int ratio) {
  const char* op = "round_fp8_blocks";
  check_stream(op, s);
  const checks::RoundFp8Dims d = checks::validate_round_fp8_blocks<OpRules>(t, cols, block, pos, seq, ratio);
  const int64_t D = d.D;
  // The rows to round: all, or the cache entries this step's tokens completed.
  std::vector<int64_t> rows;
  if (pos.empty()) {
    for (int64_t r = 0; r < d.rows; ++r) rows.push_back(r);
  } else {
    for (int64_t i = 0; i < d.T; ++i) {
      const int32_t p = pos.ptr<int32_t>()[i], b = seq.ptr<int32_t>()[i];
      if (p < 0 || (int64_t(p) + 1) % ratio != 0) continue;
      const int64_t j = p / ratio;
      SL_CHECK(b >= 0 && b < d.B && j < d.n, op, ": token ", i, " (seq ", b, ", pos ", p, ", ratio ", ratio,
               ") completes entry ", j, " outside t ", describe(t));
      rows.push_back(b * d.n + j);
    }
  }
  const bool bf = t.dtype == DType::BF16;
  std::vector<float> v(static_cast<size_t>(block));
  std::vector<uint8_t> codes(static_cast<size_t>(block));
  for (int64_t r : rows) {
    // The rest of the row (the rope dims) as the cache keeps it: bf16 (already so in a bf16 t).
    if (!bf)
      for (int64_t c = cols; c < D; ++c) t.ptr<float>()[r * D + c] = round_bf16(t.ptr<float>()[r * D + c]);
    for (int64_t c0 = 0; c0 < cols; c0 += block) {
      const int64_t o = r * D + c0;
      for (int64_t i = 0; i < block; ++i)
        v[size_t(i)] = bf ? bf16_to_float(t.ptr<uint16_t>()[o + i]) : t.ptr<float>()[o + i];
      // The block as a packed cache would store it, read back.
      const float sc = kvfp8::scale_from_code(pack_fp8_block(codes.data(), v.data(), block));
      for (int64_t i = 0; i < block; ++i) {
        const float q = lowp::e4m3_to_float(codes[size_t(i)]) * sc;
        if (bf)
          t.ptr<uint16_t>()[o + i] = float_to_bf16(q);
        else
          t.ptr<float>()[o + i] = q;
      }
    }
  }
}

void CpuBackend::shard_routing(Stream s, const Tensor& ids_out, const Tensor& weights_out, const Tensor& ids,
                               const Tensor& weights, int64_t first, int64_t count) {
  check_stream("shard_routing", s);
  const auto [T, k] = checks::validate_shard_routing<OpRules>(ids_out, weights_out, ids, weights, first, count);
  const int32_t* id = ids.ptr<int32_t>();
  const float* w = weights.ptr<float>();
  int32_t* io = ids_out.ptr<int32_t>();
  float* wo = weights_out.ptr<float>();
  for (int64_t i = 0; i < T * k; ++i) {
    const bool mine = id[i] >= first && id[i] < first + count;
    io[i] = mine ? int32_t(id[i] - first) : 0;
    wo[i] = mine ? w[i] : 0.f;
  }
}

void CpuBackend::all_reduce_sum(Stream s, const Tensor& t) {
  check_stream("all_reduce_sum", s);
  const int64_t n = checks::validate_all_reduce_sum<OpRules>(t);
  Communicator* comm = communicator();
  if (!comm || comm->world() == 1 || n == 0) return;
  if (t.dtype == DType::F32) {
    comm->all_reduce_sum(t.ptr<float>(), size_t(n));
    return;
  }
  std::vector<float> v(static_cast<size_t>(n));
  uint16_t* p = t.ptr<uint16_t>();
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = bf16_to_float(p[i]);
  comm->all_reduce_sum(v.data(), size_t(n));
  for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(v[size_t(i)]);
}

void CpuBackend::copy(Stream s, const Tensor& dst, const Tensor& src) {
  check_stream("copy", s);
  check_present("copy", "dst", dst);
  check_present("copy", "src", src);
  SL_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(), "copy: dst ", describe(dst), " and src ",
           describe(src), " differ in dtype or element count");
  std::memmove(dst.data, src.data, src.bytes());  // views of one buffer may overlap
}

// ---------------------------------------------------------------- embedding, sampling

void CpuBackend::embed(Stream s, const Tensor& out, const Tensor& ids, const Tensor& table, const Tensor& pos,
                       bool zero_pos0) {
  const char* op = "embed";
  check_stream(op, s);
  const auto [T, V, D] = checks::validate_embed<OpRules>(out, ids, table, pos, zero_pos0);

  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    SL_CHECK(id[t] >= 0 && id[t] < V, op, ": token id ", id[t], " at row ", t, " outside the vocabulary [0, ", V,
             ") of table ", describe(table));
    float* dst = out.ptr<float>() + t * D;
    // vLLM's MTP zeroes the embedding of position-0 tokens (there is no previous hidden
    // state to pair them with); docs/model.md 7.
    if (zero_pos0 && pos.ptr<int32_t>()[t] == 0)
      std::fill_n(dst, D, 0.f);
    else
      std::memcpy(dst, table.ptr<float>() + int64_t(id[t]) * D, size_t(D) * sizeof(float));
  }
}

void CpuBackend::argmax(Stream s, const Tensor& out, const Tensor& logits) {
  const char* op = "argmax";
  check_stream(op, s);
  const auto [n, V] = checks::validate_argmax<OpRules>(out, logits);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = logits.ptr<float>() + r * V;
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (row[v] > row[best]) best = v;  // strict '>': the first (lowest) index wins a tie
    out.ptr<int32_t>()[r] = int32_t(best);
  }
}

void CpuBackend::gather_rows(Stream s, const Tensor& out, const Tensor& in, const Tensor& rows) {
  const char* op = "gather_rows";
  check_stream(op, s);
  const auto [n, m] = checks::validate_gather_rows<OpRules>(out, in, rows);
  const size_t row_bytes = m ? in.bytes() / size_t(m) : 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t r = rows.ptr<int32_t>()[i];
    SL_CHECK(r >= 0 && r < m, op, ": rows[", i, "] = ", r, " outside [0, ", m, ") of in ", describe(in));
    std::memcpy(static_cast<char*>(out.data) + size_t(i) * row_bytes,
                static_cast<const char*>(in.data) + size_t(r) * row_bytes, row_bytes);
  }
}

void CpuBackend::shift_tokens(Stream s, const Tensor& out, const Tensor& tokens, const Tensor& sampled) {
  const char* op = "shift_tokens";
  check_stream(op, s);
  const auto [B, n] = checks::validate_shift_tokens<OpRules>(out, tokens, sampled);
  const int64_t T0 = n / B;
  const int32_t* tok = tokens.ptr<int32_t>();
  int32_t* o = out.ptr<int32_t>();
  // Each MTP input pairs the hidden state at position p with the token at p+1; the last
  // token of a sequence pairs with the token the target model just sampled.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i + 1 < T0; ++i) o[b * T0 + i] = tok[b * T0 + i + 1];
    o[b * T0 + T0 - 1] = sampled.ptr<int32_t>()[b];
  }
}

}  // namespace sl
