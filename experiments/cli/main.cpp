// streamlab: what do my streams actually buy me? Entry point; subcommands in cmd_*.cpp.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>

#include "core/error.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/number_checks.h"
#include "experiments/compare/child_process.h"

int main(int argc, char** argv) {
  // NVLink multicast (NVLS) stays off in NCCL unless the user asked for it: on shared hosts a
  // program using it can take the GPUs out of service, and a decode step's all-reduces are too
  // small to gain from it. Set here, before any thread exists (setenv is not thread-safe).
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  CLI::App app{"streamlab: DeepSeek V4 + MTP forward under CUPTI tracing, comparing CUDA stream policies"};
  app.set_version_flag("--version", std::function<std::string()>(sl::cli::version_text),
                       "print the version, commit and CUDA / CUPTI versions, and exit");
  app.require_subcommand(1);
  sl::cli::set_process_argv(argv);
  sl::cli::set_measure_argv(argc, argv);
  sl::cli::add_run_command(app);
  sl::cli::add_schedule_command(app);
  sl::cli::add_check_races_command(app);
  sl::cli::add_analyze_command(app);
  sl::cli::add_export_command(app);
  sl::cli::add_view_command(app);
  sl::cli::add_measure_command(app);
  sl::cli::add_compare_command(app);
  sl::cli::add_sweep_command(app);
  sl::cli::refuse_empty_values(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const sl::Error& e) {
    std::fprintf(stderr, "streamlab: error: %s\n", e.what());
    // compare and sweep stop in order on Ctrl-C / SIGTERM / SIGHUP: the status says which signal.
    const int sig = sl::compare::interrupt_signal();
    return sig ? 128 + sig : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streamlab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
