// The `streamlab` subcommands. Each lives in its own cmd_*.cpp and registers itself on the
// CLI11 app; main.cpp only builds the app and reports errors.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace sl::cli {

void add_run_command(CLI::App& app);       // cmd_run.cpp: run the model (prefill + decode + drafts)
void set_process_argv(char** argv);        // cmd_run.cpp: `run --trace` may re-execute itself
void add_schedule_command(CLI::App& app);  // cmd_schedule.cpp: print a policy's streams and fork/join structure
void add_check_races_command(CLI::App& app);  // cmd_check_races.cpp: the happens-before check of a policy's schedule
void add_analyze_command(CLI::App& app);   // cmd_analyze.cpp: analyse a trace file
void add_export_command(CLI::App& app);    // cmd_export.cpp: convert a trace to kineto / sqlite / csv
void add_view_command(CLI::App& app);      // cmd_view.cpp: the interactive timeline (ui/)
void add_measure_command(CLI::App& app);   // cmd_measure.cpp: one process's timed decode steps (compare's child)
void set_measure_argv(int argc, char** argv);
void add_compare_command(CLI::App& app);   // cmd_compare.cpp: the verdict on stream policies
void add_sweep_command(CLI::App& app);     // cmd_sweep.cpp: policies over a grid of settings, resumable
std::string version_text();                // version.cpp: `streamlab --version`

}  // namespace sl::cli
