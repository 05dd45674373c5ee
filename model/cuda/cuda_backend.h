// The CUDA backend (sm_90): bf16 weights and activations, fp32 accumulation; cuBLAS for dense
// GEMMs, kernels of our own for the rest. Only compiled with STREAMLAB_CUDA.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "model/backend.h"

namespace sl {

struct CudaBackendOptions {
  int device = 0;
  // Device memory arena: > 0 = one cudaMalloc of this size up front (an allocation that does not
  // fit is an error); 0 = grow on demand in chunks of max(1 GiB, request). Either way everything
  // is allocated while the model is built; nothing is allocated inside a forward step.
  size_t arena_bytes = 0;
};

// True when a CUDA device is usable; otherwise *why says what is missing (e.g. "CUDA driver
// version is insufficient for CUDA runtime version": no GPU on this machine).
bool cuda_available(std::string* why);
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opt);

// ---------------------------------------------------------------- CUDA graphs
// Until backend.h has capture hooks: capture the work issued on stream `s` (and on every stream
// that joins it through an event recorded on it: the stream policy's fork/join) between
// cuda_capture_begin and cuda_capture_end into a CUDA graph, instantiate it, and replay it with
// cuda_graph_launch. Capture mode is thread-local. Ops never synchronise or allocate, so a whole
// step can be captured; every forked stream must have joined `s` again before the end. `be`
// must be the CUDA backend (sl::Error otherwise).
struct CudaGraphInfo {
  int id = -1;            // for cuda_graph_launch
  size_t nodes = 0;       // kernel, memset, memcpy, event nodes of the captured graph
  size_t edges = 0;       // dependency edges
  double capture_ms = 0;  // host time from begin to end of capture
  double instantiate_ms = 0;
};
bool is_cuda_backend(const Backend& be);
void cuda_capture_begin(Backend& be, Stream s);
CudaGraphInfo cuda_capture_end(Backend& be, Stream s);
void cuda_graph_launch(Backend& be, int graph, Stream s);

}  // namespace sl
