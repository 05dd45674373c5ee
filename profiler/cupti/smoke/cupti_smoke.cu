// GPU smoke test of the CUPTI session, kept out of the CMake globs (a .cu file under
// profiler/cupti/smoke/): traces a fork/join workload on 3 aux streams with NVTX ranges, memcpy,
// memset, stream-ordered allocations and a CUDA graph; prints record counts and the analysis;
// writes <tag>.json (Kineto layout) and <tag>.sqlite (Nsight Systems layout) into $OUT.
// Build (after building sl_profiler with -DSTREAMLAB_CUDA=ON into build-cuda):
//   nvcc -O2 -std=c++20 -arch=sm_90 -I. profiler/cupti/smoke/cupti_smoke.cu build-cuda/libsl_profiler.a \
//        build-cuda/libsl_core.a -L/usr/local/cuda/lib64 -lcupti -lsqlite3 -o cupti_smoke
// Run on the GPU machine:
//   ./cupti_smoke plain
//   NVTX_INJECTION64_PATH=$(ldd ./cupti_smoke | awk '/libcupti/{print $3}') ./cupti_smoke nvtx
//   nsys stats -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum,cuda_gpu_trace $OUT/nvtx.sqlite
//   nsys analyze -r gpu_gaps $OUT/nvtx.sqlite
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include "profiler/analysis.h"
#include "profiler/cupti/cupti_session.h"
#include "profiler/kineto_json.h"
#include "profiler/kineto_validate.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/summary.h"
using namespace sl::prof;
__global__ void spin(long long cycles, float* out) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  if (threadIdx.x == 0 && out) out[blockIdx.x] += 1.0f;
}
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)
int main(int argc, char** argv) {
  std::string out = getenv("OUT") ? getenv("OUT") : ".";
  std::string tag = argc > 1 ? argv[1] : "run";
  auto& s = CuptiSession::instance();
  SessionState st = s.start();
  printf("[%s] session state %d: %s\n", tag.c_str(), int(st), s.message().c_str());
  printf("[%s] cupti library: %s\n", tag.c_str(), CuptiSession::cupti_library_path().c_str());
  float* buf; CK(cudaMalloc(&buf, 4096 * sizeof(float)));
  cudaStream_t main_s, aux[3];
  int lo, hi; CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CK(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking));
  nvtxNameCudaStreamA(main_s, "main");
  for (int i = 0; i < 3; ++i) { CK(cudaStreamCreateWithPriority(&aux[i], cudaStreamNonBlocking, hi)); nvtxNameCudaStreamA(aux[i], ("aux" + std::to_string(i)).c_str()); }
  cudaEvent_t fork[3], join[3];
  for (int i = 0; i < 3; ++i) { CK(cudaEventCreateWithFlags(&fork[i], cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming)); }
  for (int w = 0; w < 5; ++w) spin<<<132, 128, 0, main_s>>>(20000, buf);   // warm-up
  CK(cudaStreamSynchronize(main_s));
  if (st == SessionState::Tracing) s.begin_window();
  float* h; CK(cudaMallocHost(&h, 1 << 20));
  for (int step = 0; step < 3; ++step) {
    nvtxRangePushA("step");
    CK(cudaMemcpyAsync(buf, h, 4096 * sizeof(float), cudaMemcpyHostToDevice, main_s));
    for (int l = 0; l < 4; ++l) {
      nvtxRangePushA(("L" + std::to_string(l)).c_str());
      for (int i = 0; i < 3; ++i) { CK(cudaEventRecord(fork[i], main_s)); CK(cudaStreamWaitEvent(aux[i], fork[i], 0)); }
      for (int i = 0; i < 3; ++i) spin<<<16, 128, 0, aux[i]>>>(20000 + 10000 * i, buf + 1024);
      spin<<<100, 256, 0, main_s>>>(60000, buf);
      spin<<<100, 256, 0, main_s>>>(30000, buf);
      for (int i = 0; i < 3; ++i) { CK(cudaEventRecord(join[i], aux[i])); CK(cudaStreamWaitEvent(main_s, join[i], 0)); }
      nvtxRangePop();
    }
    CK(cudaMemsetAsync(buf, 0, 4096, main_s));
    void* p; CK(cudaMallocAsync(&p, 1 << 22, main_s)); CK(cudaFreeAsync(p, main_s));
    CK(cudaStreamSynchronize(main_s));
    nvtxRangePop();
  }
  // A CUDA graph: one launch, several kernels on two branches.
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(fork[0], main_s)); CK(cudaStreamWaitEvent(aux[0], fork[0], 0));
  spin<<<32, 128, 0, main_s>>>(40000, buf); spin<<<32, 128, 0, aux[0]>>>(40000, buf + 2048); spin<<<32, 128, 0, main_s>>>(10000, buf);
  CK(cudaEventRecord(join[0], aux[0])); CK(cudaStreamWaitEvent(main_s, join[0], 0));
  CK(cudaStreamEndCapture(main_s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  nvtxRangePushA("graph");
  for (int r = 0; r < 2; ++r) CK(cudaGraphLaunch(ge, main_s));
  nvtxRangePop();
  CK(cudaDeviceSynchronize());
  if (st != SessionState::Tracing) { printf("[%s] not tracing\n", tag.c_str()); return 0; }
  cudaStream_t tmp; CK(cudaStreamCreate(&tmp)); CK(cudaStreamDestroy(tmp));
  Trace t = s.end_window();
  printf("[%s] events %zu kernels %zu memcpy %zu memset %zu api %zu syncs %zu cuda_events %zu nvtx %zu allocs %zu overheads %zu streams %zu\n",
    tag.c_str(), t.event_count(), t.kernels.size(), t.memcpys.size(), t.memsets.size(), t.api_calls.size(), t.syncs.size(), t.cuda_events.size(), t.nvtx.size(), t.allocations.size(), t.overheads.size(), t.streams.size());
  printf("[%s] counts: dropped %lu zero %lu end<start %lu invalid %lu unknown %lu warmup %lu overhead %lu buffers %lu\n", tag.c_str(),
    (unsigned long)t.counts.dropped, (unsigned long)t.counts.zero_timestamps, (unsigned long)t.counts.end_before_start, (unsigned long)t.counts.invalid_records,
    (unsigned long)t.counts.unknown_kinds, (unsigned long)t.counts.warmup_discarded, (unsigned long)t.counts.overhead_records, (unsigned long)t.counts.buffers);
  for (auto& st2 : t.streams) printf("[%s] stream %u name '%s' prio %d created %lld destroyed %lld null %d\n", tag.c_str(), st2.id, t.str(st2.name).c_str(), st2.priority, (long long)(st2.created == kNoTime ? -1 : st2.created - t.base_time), (long long)(st2.destroyed == kNoTime ? -1 : st2.destroyed - t.base_time), st2.is_null);
  AnalysisOptions ao; ao.range = t.nvtx.empty() ? "" : "L1";
  AnalysisResult r = analyze(t, ao);
  printf("%s", analysis_to_text(r, 10).c_str());
  write_kineto_json_file(t, out + "/" + tag + ".json");
  write_nsys_sqlite(t, out + "/" + tag + ".sqlite");
  KinetoValidation v = validate_kineto_file(out + "/" + tag + ".json");
  printf("[%s] validator: %s\n", tag.c_str(), v.report().c_str());
  s.stop();
  return 0;
}
