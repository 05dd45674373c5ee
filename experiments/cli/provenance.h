// Where a measurement was taken: GPU, driver, CUDA runtime, the commit the binary was built
// from, date, host, command line and the environment variables that change what a run measures
// (CUDA_DEVICE_MAX_CONNECTIONS, STREAMLAB_*). Every result streamlab writes carries this block.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace sl::cli {

// True when this build has CUDA and a usable GPU; otherwise false with the reason in *why.
bool gpu_present(std::string* why);

// The block; GPU fields are left out (and "gpu" says why) when no GPU is usable.
nlohmann::json provenance(const std::string& command_line);

// "a b c" from argv, each argument quoted when it holds a space or quote.
std::string command_line(int argc, char** argv);

// Now, UTC, as "2026-12-04T00:22:42Z" (the date of every result).
std::string utc_now();

// CUDA_DEVICE_MAX_CONNECTIONS as this process sees it ("" when unset).
std::string connections_setting();

}  // namespace sl::cli
