// CUPTI activity records -> the trace model. A pure decoder: no CUPTI calls, no CUDA calls, so
// tests feed it record structs they build themselves (tests/cpu/test_cupti_decode.cpp).
//
// Order-agnostic: records arrive out of order across buffers; NVTX marker starts / ends are
// matched by id and MEMORY2 allocations / releases by address in finish(), whatever the order.
// All kernels of one CUDA-graph launch share one correlation id; they stay separate kernels with
// that id (the analysis and the exporters correlate one launch to many GPU ops).
//
// Quality accounting (RecordCounts): records with a zero timestamp are dropped and counted;
// end < start is counted (the record is kept, the analysis treats it as zero length); records of
// unknown kinds, null kernel names, KIND_KERNEL records (serializing; never enabled) and marker
// ends without a start are counted as invalid / unknown. Records that started before the
// measured window (the warm-up) are discarded and counted.
#pragma once
#include <cupti.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "profiler/trace.h"

namespace sl::prof {

struct DecodeOptions {
  uint32_t pid = 0;              // this process (GPU records carry no process id)
  Ns window_start = kNoTime;     // records starting before this are warm-up: discarded
  bool demangle = true;          // kernel names arrive mangled
  // Name of a runtime / driver callback id (the session passes cuptiGetCallbackName; tests a
  // table). Returning nullptr gives "cudaRuntime_cbid<N>" / "cuDriver_cbid<N>".
  const char* (*api_name)(ApiKind kind, uint32_t cbid) = nullptr;
  // Runtime calls not worth a record (cudaGetDevice, cudaGetLastError, ...), by name without the
  // _vNNNN suffix; dropped when decoded (the session also disables them at the source).
  bool filter_noisy_api = true;
};

// Runtime API names streamlab never records (queries that cost nothing and flood the timeline).
const std::vector<std::string>& noisy_runtime_api_names();

class CuptiDecoder {
 public:
  CuptiDecoder(Trace& t, DecodeOptions o);

  // Decodes one record (any kind). Not thread-safe: the session serializes calls.
  void decode(const CUpti_Activity* record);
  // Decodes every record of a completed buffer, iterating with `next` (the session passes
  // cuptiActivityGetNextRecord; tests can pass their own iterator).
  using NextRecordFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);
  size_t decode_buffer(uint8_t* buffer, size_t valid_size, NextRecordFn next);

  // Resource callbacks (the session calls these with cuptiGetTimestamp()).
  void on_context_created(uint32_t context, uint32_t device, Ns ts);
  void on_context_destroyed(uint32_t context, Ns ts);
  void on_stream_created(uint32_t context, uint32_t stream, Ns ts);
  void on_stream_destroyed(uint32_t context, uint32_t stream, Ns ts);
  void add_dropped(uint64_t n) { t_.counts.dropped += n; }

  // Pairs markers and allocations, closes what is still open, finalizes the trace.
  void finish(Ns window_end = kNoTime);

  const RecordCounts& counts() const { return t_.counts; }

 private:
  bool discard_warmup(Ns start);
  bool check_times(Ns start, Ns end);  // false: drop the record
  StrId kernel_name(const char* name);
  StrId api_name(ApiKind kind, uint32_t cbid);
  Stream& stream(uint32_t context, uint32_t id);

  void kernel(const CUpti_ActivityKernel10& k);
  void memcpy(const CUpti_ActivityMemcpy6& m);
  void memset(const CUpti_ActivityMemset4& m);
  void api(const CUpti_ActivityAPI& a, ApiKind kind);
  void sync(const CUpti_ActivitySynchronization2& s);
  void cuda_event(const CUpti_ActivityCudaEvent2& e);
  void memory(const CUpti_ActivityMemory4& m);
  void marker(const CUpti_ActivityMarker2& m);
  void marker_data(const CUpti_ActivityMarkerData2& m);
  void name(const CUpti_ActivityName& n);
  void overhead(const CUpti_ActivityOverhead3& o);
  void context(const CUpti_ActivityContext3& c);
  void device(const CUpti_ActivityDevice5& d);
  void stream_record(const CUpti_ActivityStream& s);

  Trace& t_;
  DecodeOptions o_;
  std::unordered_map<const char*, StrId> name_cache_;           // CUPTI-owned name pointers
  std::unordered_map<uint64_t, StrId> api_cache_;               // (kind, cbid) -> name; kNoId = filtered
  std::unordered_set<std::string> noisy_;
  struct MarkerEnd {
    Ns ts;
    uint32_t pid, tid;
  };
  struct MarkerStart {
    Ns ts;
    StrId name, domain;
    uint32_t pid, tid;
  };
  std::unordered_map<uint32_t, MarkerStart> open_markers_;
  std::unordered_map<uint32_t, MarkerEnd> early_ends_;          // end arrived before its start
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> marker_data_;  // id -> (color, category)
  std::unordered_map<uint32_t, size_t> closed_markers_;         // id -> index in Trace::nvtx
  struct MemRec {
    Ns ts;
    uint64_t address, bytes;
    uint32_t correlation, context, stream, pid;
    uint16_t device;
    MemoryKind kind;
    bool release, pool;
  };
  std::vector<MemRec> memory_;
  std::unordered_map<uint64_t, std::string> stream_names_;      // (context, stream) -> NVTX name
};

}  // namespace sl::prof
