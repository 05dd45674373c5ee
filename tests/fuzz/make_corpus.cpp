// Writes the fuzz targets' seed corpora with the project's own writers (built with the fuzz
// targets; scripts/fuzz.sh corpus runs it). Seeds are small, valid files plus a few near-valid
// ones (cut short, a field of the wrong type): the fuzzer mutates from there.
//
//   fuzz_make_corpus OUT_DIR     writes OUT_DIR/<target>/<seed> (replacing files of the same name)
#include <sqlite3.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "core/safetensors.h"
#include "model/config.h"
#include "profiler/kineto_json.h"
#include "profiler/nsys_sqlite.h"
#include "profiler/synthetic.h"

using namespace sl;
using namespace sl::prof;
namespace fs = std::filesystem;

namespace {

fs::path g_out;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_out / target);
  std::ofstream f(g_out / target / name, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) fail("cannot write ", (g_out / target / name).string());
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A small trace of the synthetic generator's shape (a step loop of layers on a few streams).
Trace small_synthetic(size_t events, uint32_t layers) {
  SyntheticOptions o;
  o.target_events = events;
  o.layers = layers;
  o.aux_streams = 2;
  return make_synthetic_trace(o);
}

void kineto_json() {
  const Trace sample = make_sample_trace();
  const Trace synth = small_synthetic(40, 2);
  put("kineto_json", "sample_ours.json", kineto_json_string(sample));
  put("kineto_json", "sample_pytorch.json", pytorch_profiler_json(sample));
  put("kineto_json", "synthetic_ours.json", kineto_json_string(synth));
  put("kineto_json", "synthetic_pytorch.json", pytorch_profiler_json(synth));
  KinetoOptions bare;
  bare.flows = bare.syncs = bare.gpu_annotations = bare.counters = false;
  put("kineto_json", "synthetic_ours_bare.json", kineto_json_string(synth, bare));
  // Near-valid: cut short in the events; a kernel whose stream is a string.
  const std::string s = pytorch_profiler_json(synth);
  put("kineto_json", "synthetic_pytorch_cut.json", s.substr(0, s.size() / 2));
  put("kineto_json", "minimal.json", R"({"traceEvents": []})");
  put("kineto_json", "one_kernel.json",
      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2,)"
      R"( "args": {"stream": "7", "device": 0, "correlation": 3, "grid": [1, 2, 3], "block": [32, 1, 1]}}],)"
      R"( "baseTimeNanoseconds": 1000})");
}

// SQLite pages of 512 bytes (the writer's default is 4 KiB: about one page per table).
std::string small_sqlite(const Trace& t, const fs::path& tmp) {
  write_nsys_sqlite(t, tmp.string());
  sqlite3* db = nullptr;
  if (sqlite3_open(tmp.c_str(), &db) != SQLITE_OK ||
      sqlite3_exec(db, "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;", nullptr, nullptr, nullptr) !=
          SQLITE_OK)
    fail("cannot shrink ", tmp.string(), ": ", sqlite3_errmsg(db));
  sqlite3_close(db);
  std::string bytes = slurp(tmp);
  fs::remove(tmp);
  return bytes;
}

void nsys_sqlite(const fs::path& tmp) {
  put("nsys_sqlite", "sample.sqlite", small_sqlite(make_sample_trace(), tmp));
  put("nsys_sqlite", "synthetic.sqlite", small_sqlite(small_synthetic(40, 2), tmp));
  Trace empty;
  empty.finalize();
  put("nsys_sqlite", "empty.sqlite", small_sqlite(empty, tmp));
}

void config() {
  for (const char* name : {"tiny", "tiny-clamp", "flash-2l"})
    put("config", std::string(name) + ".json", slurp(fs::path(STREAMLAB_SOURCE_DIR "/model/configs") / (std::string(name) + ".json")));
  ModelConfig c = load_config("tiny");
  put("config", "tiny_written.json", config_to_json(c).dump());
  // Near-valid: a count that breaks a constraint, a key of the wrong type.
  nlohmann::json j = config_to_json(c);
  j["num_hidden_layers"] = 5;
  put("config", "ratios_mismatch.json", j.dump(1));
  j = config_to_json(c);
  j["rope_scaling"]["factor"] = "16";
  put("config", "wrong_type.json", j.dump(1));
}

void safetensors(const fs::path& tmp) {
  auto write = [&](const std::string& name, auto&& fill) {
    SafetensorsWriter w(tmp.string());
    fill(w);
    w.finish();
    put("safetensors", name, slurp(tmp));
    fs::remove(tmp);
  };
  const float f[6] = {1, 2, 3, 4, 5, 6};
  const uint16_t bf[4] = {0x3f80, 0x4000, 0xbf80, 0};
  const int64_t i64[2] = {-1, 7};
  const uint8_t fp8[3] = {1, 2, 3};
  write("mixed.safetensors", [&](SafetensorsWriter& w) {
    w.add("w", StDType::F32, {2, 3}, f);
    w.add("b.bf16", StDType::BF16, {4}, bf);
    w.add("ids", StDType::I64, {2}, i64);
    w.add("scale", StDType::F8_E4M3, {3}, fp8);
    w.add("empty", StDType::F32, {0, 4}, f);
    w.set_metadata("note", "tiny");
  });
  write("scalar.safetensors", [&](SafetensorsWriter& w) { w.add("s", StDType::F32, {}, f); });
  write("none.safetensors", [&](SafetensorsWriter&) {});
  // Near-valid: the data section cut short.
  std::string cut = slurp(g_out / "safetensors" / "mixed.safetensors");
  put("safetensors", "mixed_cut.safetensors", cut.substr(0, cut.size() - 5));
}

void npy(const fs::path& tmp) {
  auto write = [&](const std::string& name, DType dt, std::vector<int64_t> shape, const void* data) {
    write_npy(tmp.string(), dt, shape, data);
    put("npy", name, slurp(tmp));
    fs::remove(tmp);
  };
  const float f[6] = {1, 2, 3, 4, 5, 6};
  const int32_t i32[4] = {1, -2, 3, 50000};
  const int64_t i64[3] = {7, -8, 1ll << 40};
  write("f32_2x3.npy", DType::F32, {2, 3}, f);
  write("i32_4.npy", DType::I32, {4}, i32);
  write("i64_1x3.npy", DType::I64, {1, 3}, i64);
  write("f32_scalar.npy", DType::F32, {}, f);
  write("i64_empty.npy", DType::I64, {0, 5}, i64);
  // Format 2.0 (4-byte header length), as NumPy writes for long headers.
  std::string hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }";
  hdr.append(63 - (12 + hdr.size()) % 64, ' ');  // magic + version + length + header: 64-aligned
  hdr.push_back('\n');
  std::string v2("\x93NUMPY\x02\x00", 8);
  v2 += std::string{char(hdr.size() & 0xff), char(hdr.size() >> 8), 0, 0};
  v2 += hdr;
  v2.append(reinterpret_cast<const char*>(i32), sizeof i32);
  put("npy", "i32_4_v2.npy", v2);
  // Near-valid: the data cut short.
  put("npy", "f32_2x3_cut.npy", slurp(g_out / "npy" / "f32_2x3.npy").substr(0, 128 + 20));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_corpus OUT_DIR\n");
    return 2;
  }
  try {
    g_out = argv[1];
    const fs::path tmp = fs::temp_directory_path() / ("streamlab-make-corpus-" + std::to_string(::getpid()));
    kineto_json();
    nsys_sqlite(tmp);
    config();
    safetensors(tmp);
    npy(tmp);
    std::printf("seed corpora written under %s\n", g_out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
