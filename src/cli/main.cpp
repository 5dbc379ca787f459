// foldnorm: find LayerNorms that fold into RMSNorm, explain, apply, verify, time.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "command.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"

namespace foldnorm::cli {

std::vector<CommandEntry>& commandRegistry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

void addInputOption(CLI::App& cmd, std::vector<std::string>& specs) {
  cmd.add_option("--input,-i", specs,
                 "Example input SHAPE:DTYPE[lo,hi), repeatable, e.g. 2x16:int64[0,50257) "
                 "(default: the spec embedded in the model)")
      ->take_all();
}

}  // namespace foldnorm::cli

namespace {
// An error is one line on the terminal: control characters that a message quotes from a damaged
// file (a carriage return read as a token, say) are written as escapes, not as line breaks.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "; ";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += ' ';
    else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
    else out += static_cast<char>(c);
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"foldnorm: find the LayerNorms of a traced PyTorch model that fold exactly into "
               "RMSNorm, explain why, apply the fold, verify it and time it."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "foldnorm 0.1.0");
  int exitCode = 0;
  auto& registry = foldnorm::cli::commandRegistry();
  std::sort(registry.begin(), registry.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& entry : registry) entry.setup(app, exitCode);
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(registry.begin(), registry.end(), [&](const auto& e) { return e.name == argv[1]; })) {
    std::string names;
    for (const auto& e : registry) names += (names.empty() ? "" : ", ") + e.name;
    std::cerr << "foldnorm: error: unknown command '" << argv[1] << "'; the commands are " << names
              << " (foldnorm --help)\n";
    return 106;  // CLI11's exit code for a missing or wrong subcommand
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const foldnorm::SettingError& e) {
    // The core names the setting; the command line spells it as its flag (rms_op -> --rms-op).
    std::string flag = e.setting();
    std::replace(flag.begin(), flag.end(), '_', '-');
    std::cerr << "foldnorm: error: --" << flag << ": " << printable(e.what()) << "\n";
    return 2;
  } catch (const foldnorm::Error& e) {
    std::cerr << "foldnorm: error: " << printable(e.what()) << "\n";
    return 2;
  } catch (const c10::Error& e) {
    // c10 errors carry a C++ backtrace, or the interpreter's frames before their cause.
    auto cause = foldnorm::errorCause(e.what_without_backtrace());
    std::cerr << "foldnorm: error: " << printable(cause.empty() ? "(LibTorch gave no message)" : cause) << "\n";
    return 2;
  } catch (const std::exception& e) {
    auto cause = foldnorm::errorCause(e.what());
    std::cerr << "foldnorm: error: " << printable(cause.empty() ? "(no message)" : cause) << "\n";
    return 2;
  }
  return exitCode;
}
