// foldnorm fold-checkpoint SRC_DIR -o OUT_DIR [--plan PLAN.json] [--dry-run] [--json]
//
// Folds a Hugging Face safetensors checkpoint too big to load (issue 29): the plan over parameter
// names comes from --plan, or from a small capture of SRC_DIR's architecture made by the Python
// package (`python -m foldnorm.checkpoint plan`) through the Python this build was configured with.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"
#include "foldnorm/checkpoint/fold_checkpoint.h"
#include "foldnorm/common/error.h"

#ifndef FOLDNORM_PYTHON_PATH
#define FOLDNORM_PYTHON_PATH "python3"
#endif
#ifndef FOLDNORM_PYTHON_PACKAGE
#define FOLDNORM_PYTHON_PACKAGE ""
#endif

extern char** environ;

namespace foldnorm::cli {
namespace {

volatile std::sig_atomic_t gInterrupted = 0;
extern "C" void onSignal(int) { gInterrupted = 1; }

/// SIGINT and SIGTERM set a flag the fold polls (it then removes its partial output and fails);
/// the previous handlers come back when the fold is over.
struct InterruptGuard {
  struct sigaction oldInt {}, oldTerm {};
  InterruptGuard() {
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &oldInt);
    sigaction(SIGTERM, &sa, &oldTerm);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &oldInt, nullptr);
    sigaction(SIGTERM, &oldTerm, nullptr);
  }
};

/// Runs the small capture in Python; returns the plan's path (a temporary file) or throws
/// foldnorm::Error with Python's one-line reason.
std::string capturePlan(const std::string& src, const std::string& planPath) {
  const std::string python = FOLDNORM_PYTHON_PATH, package = FOLDNORM_PYTHON_PACKAGE;
  std::cerr << "[foldnorm] no --plan: planning on a small capture of " << src << "'s architecture with "
            << python << " -m foldnorm.checkpoint plan\n";
  std::string pythonPath = package;
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonPath += std::string(":") + old;
  std::vector<std::string> args = {python, "-m", "foldnorm.checkpoint", "plan", src, "-o", planPath};
  // Python's stderr goes to a file: its progress lines are passed on, and a failure becomes one
  // line (its own "foldnorm: error:" line, or its last line) instead of a traceback.
  const std::string log = planPath + ".stderr";
  const pid_t pid = ::fork();
  if (pid < 0) throw Error("cannot start " + python + " for the small capture");
  if (pid == 0) {
    if (!package.empty()) ::setenv("PYTHONPATH", pythonPath.c_str(), 1);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execve(python.c_str(), argv.data(), environ);
    std::fprintf(stderr, "foldnorm: error: cannot run %s: %s (give the plan with --plan)\n", python.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream in(log);
  std::string line, error, last;
  while (std::getline(in, line)) {
    if (line.rfind("[foldnorm]", 0) == 0) std::cerr << line << "\n";
    else if (line.rfind("foldnorm: error: ", 0) == 0) error = line.substr(17);
    if (!line.empty() && line.find_first_not_of(' ') != std::string::npos) last = line;
  }
  in.close();
  std::remove(log.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return planPath;
  if (!error.empty()) throw Error(error);
  throw Error("the small capture (" + python + " -m foldnorm.checkpoint plan) failed: " +
              (last.empty() ? std::string("no message") : last) + " (make the plan elsewhere and give it with --plan)");
}

struct Options {
  std::string src, out, plan;
  bool dryRun = false, json = false;
};

void setup(CLI::App& app, int& exitCode) {
  auto opts = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("fold-checkpoint",
                                 "Fold a Hugging Face safetensors checkpoint shard by shard in bounded memory, "
                                 "with a plan made on a small capture of its architecture");
  cmd->add_option("src", opts->src, "Checkpoint folder (config.json and model.safetensors[.index.json] + shards)")->required();
  cmd->add_option("-o,--out", opts->out, "New folder for the folded checkpoint (must not exist)");
  cmd->add_option("--plan", opts->plan, "Plan JSON (python -m foldnorm.checkpoint plan SRC -o PLAN.json); "
                                        "default: made now from SRC's config by the Python package");
  cmd->add_flag("--dry-run", opts->dryRun, "Check the plan against the index and show what would change; read no weights");
  cmd->add_flag("--json", opts->json, "Print the result as JSON (schema foldnorm-fold-checkpoint/1)");
  cmd->callback([opts, &exitCode] {
    if (opts->out.empty() && !opts->dryRun) throw Error("fold-checkpoint needs -o OUT_DIR (or --dry-run)");
    if (!std::filesystem::is_directory(opts->src))
      throw Error(opts->src + " is not a folder (a Hugging Face checkpoint folder is expected)");
    if (!opts->dryRun) checkpoint::checkOutputFolder(opts->src, opts->out);  // before the capture's minute
    std::string planPath = opts->plan, temporary;
    if (planPath.empty()) {
      char name[] = "/tmp/foldnorm-plan-XXXXXX";
      const int fd = ::mkstemp(name);
      if (fd < 0) throw Error("cannot make a temporary file for the plan");
      ::close(fd);
      temporary = name;
      try {
        planPath = capturePlan(opts->src, temporary);
      } catch (...) {
        std::remove(temporary.c_str());
        throw;
      }
    }
    checkpoint::CheckpointPlan plan;
    try {
      plan = checkpoint::readPlan(planPath);
    } catch (...) {
      if (!temporary.empty()) std::remove(temporary.c_str());
      throw;
    }
    if (!temporary.empty()) std::remove(temporary.c_str());
    checkpoint::FoldCheckpointOptions fo;
    fo.dryRun = opts->dryRun;
    fo.progress = [](const std::string& line) { std::cerr << "[foldnorm] " << line << "\n"; };
    fo.interrupted = [] { return gInterrupted != 0; };
    InterruptGuard guard;
    const auto result = checkpoint::foldCheckpoint(opts->src, opts->out, plan, fo);
    if (opts->json) std::cout << result.dump(2) << "\n";
    else std::cout << checkpoint::resultText(result);
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("fold-checkpoint", setup);

}  // namespace
}  // namespace foldnorm::cli
