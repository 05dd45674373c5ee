// A backend that runs every op on two backends and compares them op by op on identical
// inputs: `ref` (the fp32 CPU reference) and `dut` (the device under test: CUDA bf16, or any
// other backend).
//
// Why: a whole-model comparison (logits) says that something diverged, not where, and every
// error compounds through the layers. Here each op's outputs are compared right after the op,
// and then the dut's values are copied into the ref's tensors ("resync"), so that the next op
// sees the same inputs on both sides. Every op is thereby tested in isolation at the model's
// real shapes and data, and the first op whose output is over the tolerance is the culprit
// (with its range path, e.g. "decode#1/draft0/mtp0.c4a/attn/sparse_attention").
//
// Mechanics: the wrapper hands out tensors that carry the dut's data pointer and the wrapper's
// own buffer id. Views (core/tensor.h view/prefix/rows) move the data pointer by whole
// elements, so any view translates to both sides through its buffer: element offset =
// (data - dut base) / dut element size. The wrapper reports the dut's dtypes; on the ref
// side the dut's activation / weight dtypes become the ref's (bf16 -> f32 on the CPU).
//
// Each output is compared over its whole buffer: the view the op was given is the record; any
// difference elsewhere in the buffer means one side wrote outside its output (reported as a
// failure of its own). Every op synchronises both backends, so stream races in the dut are
// hidden: when the full-model comparison fails but every op here passes, suspect missing
// event waits (or compare with --policy serial).
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/backend.h"

namespace sl {

struct CheckOptions {
  // A float output fails when sqrt(sum (d - r)^2 / sum r^2) exceeds this (or is not finite).
  double tolerance = 2e-2;
  // Throw sl::Error at the first failing output (the records up to it stay available).
  bool stop_at_first_failure = false;
  enum class Print { None, Failures, All };
  Print print = Print::None;  // what to print as the ops run
  FILE* log = stderr;
  // init_uniform runs on both sides and is compared like an op (a bf16 dut differs by its
  // rounding, ~1e-3); off = the dut's weights are copied to the ref without a record.
  bool record_init = true;
  // Which way values are copied after each op:
  //   DutToRef: the dut's outputs into the ref (every op tested in isolation; the default).
  //   DecisionsToDut: float outputs are not copied (each side keeps its own rounding, end to
  //     end, as a plain run would); discrete outputs (top-k selections, routing ids with their
  //     weights, argmax tokens, tags) are copied from the ref into the dut, so both sides take
  //     the same path through near ties that the two precisions may break differently. The
  //     model's final logits then measure the dut's accumulated numerical error alone.
  //     (Weights still go dut -> ref at init_uniform: both sides hold identical weights.
  //     Packed FP8 caches compared by decoded value count as float outputs here: not copied.)
  enum class Sync { DutToRef, DecisionsToDut };
  Sync sync = Sync::DutToRef;
};

// What one output of one op call looked like on both sides.
struct CheckRecord {
  // Float: relative error (packed FP8 caches too, over the values their bytes decode to, since
  // each side quantises its own floats: swa_insert's cache, compressor_pool's entries, and
  // cache_rollback's entries of a buffer one of those two wrote, which tells the layout; index
  // and shape name the bytes). Int: exact (argmax, tags, tokens, hash-routed ids, a packed
  // buffer of unknown layout): every mismatching element is a failure. Selection: indexer_topk
  // / route ids, which legitimately differ on near ties of scores computed in other precisions;
  // counted per row as ids the dut chose and the ref did not; never a failure. OutsideView: the op changed its output buffer outside the view it
  // was given (on either side): always a failure.
  enum class Kind { Float, Int, Selection, OutsideView };

  int64_t seq = 0;  // op call number, from 0 (both outputs of one call share it)
  // Range path at the call, the outermost range numbered: "decode#1/target/L0.sliding/attn/phase_a/wq_a".
  std::string path;
  std::string op;      // backend op: "gemm", "sparse_attention", ...
  std::string output;  // argument name per model/backend.h: "out", "y", "state_tags", ...
  Shape shape;
  DType ref_dtype = DType::F32, dut_dtype = DType::F32;
  Kind kind = Kind::Float;
  int64_t numel = 0;
  double rel_err = 0;          // Float
  double max_abs = 0;          // Float, OutsideView: max |dut - ref|
  int64_t mismatches = 0;      // Int, Selection, OutsideView: differing elements (Selection: ids)
  int64_t max_abs_index = -1;  // element of max_abs or of the first mismatch (OutsideView: in the buffer)
  std::string note;            // e.g. rows left out of route weights because their ids differ
  bool failed = false;         // judged with the options' tolerance

  std::string where() const;     // "#123 decode#1/.../wq_a gemm.out [2, 64] bf16 vs f32"
  std::string describe() const;  // where() plus the numbers
};

const char* check_kind_name(CheckRecord::Kind k);

// The wrapping backend. `ref` and `dut` must outlive it. Graph capture is refused (every op
// downloads its outputs).
std::unique_ptr<Backend> make_check_backend(Backend& ref, Backend& dut, CheckOptions options = {});

// The records of a backend made by make_check_backend (throws for any other backend).
const std::vector<CheckRecord>& check_records(const Backend& check);

// Summary of a list of records.
struct CheckSummary {
  int64_t op_calls = 0, outputs = 0;
  int64_t failures = 0;         // records with failed (Float over tolerance, Int, OutsideView)
  int64_t float_failures = 0;   // Float records over the tolerance
  int64_t int_failures = 0;     // Int records with mismatches
  int64_t outside_view = 0;     // OutsideView records
  int64_t selection_diffs = 0;  // Selection records with differing ids
  double worst_rel_err = 0;     // over Float records
  const CheckRecord* first_failure = nullptr;
  const CheckRecord* worst = nullptr;  // the Float record with the largest rel_err
};
CheckSummary summarize_checks(const std::vector<CheckRecord>& records);

// The report: summary, the first failure, every failure (up to max_failures lines), the
// selection differences, and the `worst` Float outputs by relative error.
void print_check_report(FILE* out, const std::vector<CheckRecord>& records, double tolerance, int worst = 20,
                        int max_failures = 50);

}  // namespace sl
