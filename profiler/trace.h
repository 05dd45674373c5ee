// The trace model: everything one traced window of a CUDA program did, on one clock.
//
// Generic: knows nothing of any model. Filled by the CUPTI decoder (profiler/cupti/), by the
// loaders (our Kineto-style JSON, PyTorch profiler JSON, our Nsight-layout SQLite) or by tests
// and benchmarks building synthetic traces. Read by the analysis and the exporters.
//
// Layout: one vector of small packed structs per event kind, names interned into one string
// table (StrId). Every event held costs at most 100 bytes (static_asserts below); a 10M-event
// trace fits in about 1 GB. All times are int64 nanoseconds on the CUPTI clock
// (cuptiGetTimestamp); kNoTime marks "unknown" / "never".
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sl::prof {

using Ns = int64_t;
using StrId = uint32_t;  // index into Trace::strings; 0 is the empty string

inline constexpr Ns kNoTime = std::numeric_limits<Ns>::min();
inline constexpr uint32_t kNoStream = 0xFFFFFFFFu;  // context / device scope (CUPTI's invalid value)
inline constexpr uint32_t kNoId = 0xFFFFFFFFu;

// What every loader (JSON, SQLite) accepts. Times: ns from the epoch or the base time, within
// +-2^62 (year 2116), so that spans and sums of a few such values stay inside int64. Durations:
// no GPU op or API call runs 11.6 days (1e12 us); a longer record is a corrupt value, rejected and
// counted (sums of them would overflow, and one would stretch the trace's span).
inline constexpr Ns kMaxTraceNs = Ns(1) << 62;
inline constexpr Ns kMaxDurationNs = Ns(1'000'000'000'000'000);

// Interned strings. Ids are dense and stable; lookups by content are O(1).
class StringTable {
 public:
  StringTable();
  StringTable(const StringTable& o);
  StringTable& operator=(const StringTable& o);
  StringTable(StringTable&&) noexcept = default;
  StringTable& operator=(StringTable&&) noexcept = default;

  StrId intern(std::string_view s);
  // Returns kNoId when the string was never interned.
  StrId find(std::string_view s) const;
  const std::string& str(StrId id) const { return strings_[id]; }
  size_t size() const { return strings_.size(); }
  size_t bytes() const;  // approximate memory held

 private:
  std::deque<std::string> strings_;  // deque: element addresses stay valid as it grows
  std::unordered_map<std::string_view, StrId> index_;
};

// CUPTI's numbering (CUpti_ActivityMemcpyKind), kept so decoding is a cast.
enum class MemcpyKind : uint8_t { Unknown = 0, HtoD = 1, DtoH = 2, HtoA = 3, AtoH = 4, AtoA = 5, AtoD = 6, DtoA = 7, DtoD = 8, HtoH = 9, PtoP = 10 };
// CUpti_ActivityMemoryKind.
enum class MemoryKind : uint8_t { Unknown = 0, Pageable = 1, Pinned = 2, Device = 3, Array = 4, Managed = 5, DeviceStatic = 6, ManagedStatic = 7 };
// CUpti_ActivitySynchronizationType.
enum class SyncType : uint8_t { Unknown = 0, EventSynchronize = 1, StreamWaitEvent = 2, StreamSynchronize = 3, ContextSynchronize = 4 };
enum class ApiKind : uint8_t { Runtime = 0, Driver = 1 };
enum class NvtxKind : uint8_t { PushPop = 0, StartEnd = 1, Mark = 2 };

const char* to_string(MemcpyKind k);   // "HtoD", ...
const char* to_string(MemoryKind k);   // "Pageable", "Device", ...
const char* to_string(SyncType k);     // "Event Sync", "Stream Wait Event", ...
// Kineto's wording for memcpy names: "Memcpy HtoD (Pageable -> Device)".
std::string memcpy_display_name(MemcpyKind kind, MemoryKind src, MemoryKind dst);
std::string memset_display_name(MemoryKind kind);  // "Memset (Device)"
// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel" (CUPTI's versioned callback names).
std::string_view strip_api_version(std::string_view name);

#pragma pack(push, 4)
struct Device {
  uint32_t id = 0;
  std::string name;
  std::string uuid;
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  int64_t total_memory = 0;
  int max_threads_per_block = 0, max_threads_per_sm = 0;
  int regs_per_block = 0, regs_per_sm = 0;
  int warp_size = 32;
  int64_t smem_per_block = 0, smem_per_sm = 0, smem_per_block_optin = 0;
  int64_t l2_cache_size = 0;
  int64_t clock_rate_khz = 0;
  int64_t memory_bandwidth = 0;  // bytes/s
};

struct Context {
  uint32_t id = 0;
  uint32_t device = 0;
  uint32_t pid = 0;
  uint32_t null_stream = kNoStream;
  Ns created = kNoTime, destroyed = kNoTime;
};

struct Stream {
  uint32_t id = 0;        // CUPTI stream id
  uint32_t context = 0;
  uint32_t device = 0;
  uint32_t pid = 0;
  int32_t priority = 0;   // lower = higher priority (CUDA convention)
  uint8_t flags = 0;      // 0 unknown, 1 default (blocking), 2 non-blocking
  uint8_t is_null = 0;    // the context's legacy default stream
  uint16_t pad = 0;
  StrId name = 0;         // from NVTX (nvtxNameCudaStream) or the program
  Ns created = kNoTime, destroyed = kNoTime;
};

struct Kernel {
  Ns start = 0, end = 0;
  Ns queued = kNoTime, submitted = kNoTime;  // latency timestamps, when enabled
  uint64_t graph_node_id = 0;
  StrId name = 0;
  uint32_t correlation = 0;
  uint32_t stream = 0;
  uint32_t context = 0;
  uint32_t graph_id = 0;
  uint32_t pid = 0;
  uint32_t grid[3] = {1, 1, 1};
  uint16_t block[3] = {1, 1, 1};
  uint16_t device = 0;
  uint16_t registers = 0;
  uint16_t launch_type = 0;  // CUpti_ActivityLaunchType
  uint32_t static_smem = 0, dynamic_smem = 0;
};

struct Memcpy {
  Ns start = 0, end = 0;
  uint64_t bytes = 0;
  uint64_t graph_node_id = 0;
  uint32_t correlation = 0;
  uint32_t stream = 0;
  uint32_t context = 0;
  uint32_t pid = 0;
  uint32_t graph_id = 0;
  uint16_t device = 0;
  MemcpyKind kind = MemcpyKind::Unknown;
  MemoryKind src_kind = MemoryKind::Unknown, dst_kind = MemoryKind::Unknown;
  uint8_t flags = 0;  // CUpti_ActivityFlag async bit etc.
  uint16_t pad = 0;
};

struct Memset {
  Ns start = 0, end = 0;
  uint64_t bytes = 0;
  uint64_t graph_node_id = 0;
  uint32_t value = 0;
  uint32_t correlation = 0;
  uint32_t stream = 0;
  uint32_t context = 0;
  uint32_t pid = 0;
  uint32_t graph_id = 0;
  uint16_t device = 0;
  MemoryKind mem_kind = MemoryKind::Unknown;
  uint8_t flags = 0;
};

// One runtime or driver API call, on the thread that made it.
struct ApiCall {
  Ns start = 0, end = 0;
  StrId name = 0;        // CUPTI's name, e.g. "cudaLaunchKernel_v7000"
  uint32_t cbid = 0;
  uint32_t correlation = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  int32_t return_value = 0;
  ApiKind kind = ApiKind::Runtime;
  uint8_t pad[3] = {0, 0, 0};
};

// A host-side wait (cudaStreamSynchronize, cudaEventSynchronize, ...) or a GPU-side
// stream-wait-event, as CUPTI's SYNCHRONIZATION records report them.
struct Sync {
  Ns start = 0, end = 0;
  uint32_t correlation = 0;
  uint32_t stream = kNoStream;  // the waiting stream (stream-wait-event, stream sync)
  uint32_t context = 0;
  uint32_t event = kNoId;  // CUDA event id for event syncs / waits
  uint32_t pid = 0;
  // Where the awaited event was recorded, when the source says so (Kineto writes them as
  // `wait_on_stream` and `wait_on_cuda_event_record_corr_id`; HTA reads them): the recording
  // stream and the correlation id of the cudaEventRecord call. They name a wait's producer
  // without the CUDA event records, which a PyTorch trace does not carry. kNoStream / 0: not
  // given (CUPTI's own records leave them out: use `event` and Trace::cuda_events then).
  uint32_t event_stream = kNoStream;
  uint32_t event_record_correlation = 0;
  uint16_t device = 0;
  SyncType type = SyncType::Unknown;
  uint8_t pad = 0;
};

// cudaEventRecord on a stream (CUPTI's CUDA_EVENT records). ts = device timestamp when known.
struct CudaEventRecord {
  Ns ts = kNoTime;
  uint32_t correlation = 0;
  uint32_t context = 0;
  uint32_t stream = 0;
  uint32_t event = 0;
  uint32_t pid = 0;
  uint16_t device = 0;
  uint16_t pad = 0;
};

struct NvtxRange {
  Ns start = 0, end = 0;  // end == start for marks
  StrId name = 0;
  StrId domain = 0;       // 0 = default domain
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t end_tid = 0;   // start/end ranges may end on another thread
  uint32_t color = 0;
  uint32_t category = 0;
  uint16_t depth = 0;     // push/pop nesting depth on its thread (0 = outermost)
  NvtxKind kind = NvtxKind::PushPop;
  uint8_t pad = 0;
};

// A device memory allocation (CUPTI MEMORY2 records): alloc time .. free time.
struct Allocation {
  uint64_t address = 0;
  uint64_t bytes = 0;
  Ns alloc = 0;
  Ns free = kNoTime;      // kNoTime: not freed inside the window
  uint32_t correlation = 0;
  uint32_t context = 0;
  uint32_t stream = kNoStream;
  uint32_t pid = 0;
  uint16_t device = 0;
  MemoryKind kind = MemoryKind::Device;
  uint8_t from_pool = 0;  // stream-ordered (cudaMallocAsync) pool
};

struct CounterSample {
  Ns ts = 0;
  double value = 0;
  StrId name = 0;
  uint32_t pid = 0;  // device id for device counters, process id for host counters
};

// CUPTI's own cost (OVERHEAD records).
struct Overhead {
  Ns start = 0, end = 0;
  uint32_t kind = 0;       // CUpti_ActivityOverheadKind
  uint32_t object_kind = 0;
  uint32_t object_id = 0;  // thread / device id
  uint32_t pid = 0;
};

struct Process {
  uint32_t pid = 0;
  std::string name;
};

struct Thread {
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string name;
};
#pragma pack(pop)

// The compactness contract (docs/traces.md 1): at most 100 bytes per event held.
static_assert(sizeof(Kernel) <= 100, "Kernel record must stay <= 100 bytes");
static_assert(sizeof(Memcpy) <= 100 && sizeof(Memset) <= 100, "memory op records must stay <= 100 bytes");
static_assert(sizeof(ApiCall) <= 100 && sizeof(Sync) <= 100 && sizeof(CudaEventRecord) <= 100,
              "API / sync / event records must stay <= 100 bytes");
static_assert(sizeof(NvtxRange) <= 100 && sizeof(Allocation) <= 100 && sizeof(CounterSample) <= 100 &&
                  sizeof(Overhead) <= 100,
              "NVTX / allocation / counter / overhead records must stay <= 100 bytes");

// A kind of record a trace loader refused or could not read unambiguously: a field outside the
// trace model's range (a stream id of 2^40, a timestamp of 1e308 us), a kernel written as a
// "B"/"E" pair, an API call repeating another's correlation id. The records are counted (and,
// unless only ambiguous, dropped) so that a report never rests silently on them.
struct LoadIssue {
  std::string what;         // where and what, without the value: "traceEvents: kernel args.\"stream\" outside
                            // 0..4294967294", "CUPTI_ACTIVITY_KIND_KERNEL: end < start"
  uint64_t records = 0;     // records with it
  uint64_t first = 0;       // the first one's index in "traceEvents", or its rowid in the table
                            // (kNoIndex: first_value says where it is)
  std::string first_value;  // the value it carried ("" when none applies)
};

inline constexpr uint64_t kNoIndex = ~uint64_t(0);

// Record quality counters. Any non-zero value in dropped / zero_timestamps / end_before_start /
// invalid_records / rejected_on_load makes a result suspect; the CLI says so and exits non-zero
// unless allowed.
struct RecordCounts {
  uint64_t dropped = 0;           // cuptiActivityGetNumDroppedRecords, summed over contexts
  uint64_t zero_timestamps = 0;   // records with start or end == 0
  uint64_t end_before_start = 0;  // records with end < start
  uint64_t overhead_records = 0;  // CUPTI OVERHEAD records seen
  uint64_t invalid_records = 0;   // other malformed records (bad kind, null name, ...)
  uint64_t unknown_kinds = 0;     // records of kinds the decoder does not use
  uint64_t warmup_discarded = 0;  // records dropped because they fell in the warm-up window
  uint64_t buffers = 0;           // CUPTI buffers completed
  uint64_t buffer_bytes = 0;      // bytes of records delivered
  uint64_t pool_exhausted = 0;    // buffer requests refused because the pool cap was reached
  uint64_t rejected_on_load = 0;  // records a trace loader dropped or found ambiguous (load_issues says why)
  std::vector<LoadIssue> load_issues;  // one per kind of problem, in the order first met

  bool clean() const {
    return dropped == 0 && zero_timestamps == 0 && end_before_start == 0 && invalid_records == 0 &&
           rejected_on_load == 0;
  }
  // Counts one record with `what` (first met at `where`, carrying `value`).
  void reject(std::string_view what, uint64_t where, std::string_view value);
  RecordCounts& operator+=(const RecordCounts& o);  // issues merged by `what`, the earlier first kept
};

// A trace's counts when the file gives them (our JSON's block, our SQLite's STREAMLAB_META): the
// file's (the recording's own), with at least as many end < start / zero-timestamp records as
// the load found, plus the records this load rejected.
RecordCounts counts_with_rejections(RecordCounts given, const RecordCounts& loaded);

// RecordCounts by name, in the order the exports write them (Kineto JSON "streamlab" -> "counts"
// {"<name>": N, ...}, SQLite STREAMLAB_META rows "count.<name>") and every reader, report and
// comparison of counts uses.
struct RecordCountField {
  const char* name;
  uint64_t RecordCounts::*member;
};
inline constexpr RecordCountField kRecordCountFields[] = {
    {"dropped", &RecordCounts::dropped},
    {"zero_timestamps", &RecordCounts::zero_timestamps},
    {"end_before_start", &RecordCounts::end_before_start},
    {"overhead_records", &RecordCounts::overhead_records},
    {"invalid_records", &RecordCounts::invalid_records},
    {"unknown_kinds", &RecordCounts::unknown_kinds},
    {"warmup_discarded", &RecordCounts::warmup_discarded},
    {"buffers", &RecordCounts::buffers},
    {"buffer_bytes", &RecordCounts::buffer_bytes},
    {"pool_exhausted", &RecordCounts::pool_exhausted},
    {"rejected_on_load", &RecordCounts::rejected_on_load},
};

struct Trace {
  StringTable strings;
  std::vector<Device> devices;
  std::vector<Context> contexts;
  std::vector<Stream> streams;
  std::vector<Kernel> kernels;
  std::vector<Memcpy> memcpys;
  std::vector<Memset> memsets;
  std::vector<ApiCall> api_calls;
  std::vector<Sync> syncs;
  std::vector<CudaEventRecord> cuda_events;
  std::vector<NvtxRange> nvtx;
  std::vector<Allocation> allocations;
  std::vector<CounterSample> counters;
  std::vector<Overhead> overheads;
  std::vector<Process> processes;
  std::vector<Thread> threads;
  RecordCounts counts;
  Ns base_time = kNoTime;          // time origin for exports; kNoTime: earliest event
  int64_t session_start_utc_ns = 0; // wall clock (Unix epoch ns) of base_time, when known
  std::map<std::string, std::string> metadata;  // free-form (tool, command line, policy, ...)
  // Which process of a multi-GPU job recorded it (Kineto's distributedInfo, as HTA reads it):
  // rank -1 and world_size 0 when the trace does not say.
  int rank = -1;
  int world_size = 0;

  StrId intern(std::string_view s) { return strings.intern(s); }
  const std::string& str(StrId id) const { return strings.str(id); }

  // Sorts every event vector by (start, longer first), fills NVTX push/pop depths, registers
  // streams / contexts / devices that events mention but no record declared, and sets
  // base_time when unset. Idempotent; loaders and the decoder call it last. `threads` > 1 sorts
  // on that many threads (the same order: ties keep their order either way).
  void finalize(unsigned threads = 1);

  size_t event_count() const;      // all timed events held
  size_t bytes_held() const;       // approximate memory of the trace
  Ns first_time() const;           // earliest start of any event (kNoTime when empty)
  Ns last_time() const;            // latest end of any event

  const Stream* find_stream(uint32_t id) const;
  Stream* find_stream(uint32_t id);
  const Device* find_device(uint32_t id) const;
  // Display name for a stream: its NVTX name, else "stream N".
  std::string stream_label(uint32_t id) const;
};

// What a loader checks once a trace is whole (after finalize): API calls of one process that
// repeat the correlation id of an earlier call of the same kind (runtime or driver). A GPU op
// is linked to one launch call by that id, so its launch delay would rest on a guess; they are
// counted as rejected (the first call keeps the id). Returns how many.
uint64_t reject_repeated_correlations(Trace& t);

// The role in a stream's label: the text after its last '.' ("L3.aux0" -> "aux0", "target.aux0"
// -> "aux0"); the whole label when it has no '.' or ends with one. Programs that name streams
// "<owner>.<role>" give streams of one job under different owners (per layer, per model) one
// role, which is what lines up across stream policies whose stream ids and owners differ.
std::string stream_role(const std::string& label);

// The first difference between two traces ("" when equal): every event field, strings by
// content. With `api_names_modulo_version`, runtime names compare after strip_api_version (the
// Kineto JSON writes names without CUPTI's _vNNNN suffix).
std::string first_difference(const Trace& a, const Trace& b, bool api_names_modulo_version = false);
// first_difference, then the string tables (the same string at the same id) and the metadata:
// what two loaders of one file must agree on exactly.
std::string first_difference_by_id(const Trace& a, const Trace& b);

}  // namespace sl::prof
