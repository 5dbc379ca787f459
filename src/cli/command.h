// Subcommand registry: each cli/cmd_*.cpp registers itself; main.cpp knows none of them.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "foldnorm/analysis/analysis.h"

namespace foldnorm::cli {

/// Adds a subcommand to `app`; its callback sets `exitCode` (0 = success) or throws
/// foldnorm::Error for user errors.
using CommandSetup = std::function<void(CLI::App& app, int& exitCode)>;

struct CommandEntry {
  std::string name;
  CommandSetup setup;
};

std::vector<CommandEntry>& commandRegistry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, CommandSetup setup) {
    commandRegistry().push_back({std::move(name), std::move(setup)});
  }
};

/// Reads `--input SPEC` options (repeatable) into the vector; shared by every model command.
void addInputOption(CLI::App& cmd, std::vector<std::string>& specs);

/// analyzeFoldability, with the core's "no LayerNorm has module path X" spelled as the
/// `--only X` option that caused it (cmd_analyze.cpp; analyze and fold share it).
AnalysisResult analyzeWithOnlyOption(const Graph& graph, const AnalysisOptions& options);
/// --no-scale-absorb and --no-insert-centering (analyze and fold share them).
void addBeyondPaperFlags(CLI::App& cmd, bool& noScaleAbsorb, bool& noInsertCentering);

}  // namespace foldnorm::cli

#define FOLDNORM_CONCAT_INNER(a, b) a##b
#define FOLDNORM_CONCAT(a, b) FOLDNORM_CONCAT_INNER(a, b)
#define FOLDNORM_REGISTER_COMMAND(name, fn) \
  static ::foldnorm::cli::CommandRegistrar FOLDNORM_CONCAT(kRegistrar_, __LINE__)(name, fn)
