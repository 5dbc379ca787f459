// Foldability table (issue: reproducible analyses, item 1): for every built-in zoo model, the
// torchvision models traced by tests/fixtures/make_models.py and the public-architecture corpus
// (tests/corpus, its traces named by its results), the LayerNorms, how many fold, why the others do
// not, the parameters the fold changes, the bytes untied, and the analysis time.
// Writes a Markdown page (default docs/foldability.md); progress on stderr.
//
//   build/bin/foldability_table --fixtures build/test-models --corpus build/corpus-results
//       --out docs/foldability.md
//
// Zoo models are built from their C++ definitions into a scratch folder (random weights, traced
// by LibTorch); verdicts depend on the architecture, not the weights. Published presets are used
// where their float32 weights stay under ~2 GB; bigger ones (Phi-2, TinyLlama) use the preset
// named in the table. The analysis time excludes the load and the shape-recording run.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "docs_output.h"
#include "foldnorm/analysis/timing.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"
#include "foldnorm/zoo/zoo.h"
#include "program_error.h"

namespace fs = std::filesystem;
using namespace foldnorm;

namespace {

struct Row {
  std::string model, source, preset;
  std::size_t nodes = 0, lns = 0, foldable = 0, parameters = 0;
  // LNs foldable under the paper's rules alone, with scale absorption too (no insertion), and
  // the scales absorbed and centerings inserted of the default analysis (both on: `foldable`).
  std::size_t paperFoldable = 0, scaleFoldable = 0, scalesAbsorbed = 0, insertions = 0;
  int64_t untieBytes = 0;
  double importSeconds = 0;
  AnalysisTiming timing;
  std::map<std::string, std::vector<std::string>> reasons;  // reason -> LN paths
  std::map<std::string, std::string> example;                // reason -> one explanation
};

std::string bytesText(int64_t b) {
  char buf[64];
  if (b == 0) return "0";
  if (b >= (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

Row analyse(const std::string& path, const std::string& name, const std::string& source,
            const std::string& preset, int reps) {
  Row r;
  r.model = name;
  r.source = source;
  r.preset = preset;
  ImportOptions io;
  io.progress = [&](const std::string& m) { std::cerr << "[" << name << "] " << m << "\n"; };
  auto t0 = std::chrono::steady_clock::now();
  auto model = importModel(path, io);
  r.importSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto result = analyzeFoldability(model.graph);
  r.timing = timeAnalysis(model.graph, {}, reps);
  r.nodes = model.graph.nodeCount();
  r.lns = result.layerNorms.size();
  r.foldable = result.foldableCount();
  AnalysisOptions paper;  // the paper's rules: neither fold beyond it (docs/method.md sections 7, 8)
  paper.scaleAbsorb = false;
  paper.insertCentering = false;
  r.paperFoldable = analyzeFoldability(model.graph, paper).foldableCount();
  AnalysisOptions scales = paper;
  scales.scaleAbsorb = true;
  r.scaleFoldable = analyzeFoldability(model.graph, scales).foldableCount();
  for (auto l : result.centeredLeaves) r.scalesAbsorbed += result.leaves[l].scale != kNone;
  for (const auto& ic : result.insertions) r.insertions += ic.inserted;
  r.parameters = result.plan.size();
  r.untieBytes = result.untieBytes();
  for (const auto& v : result.layerNorms) {
    if (v.foldable) continue;
    std::string reason = toString(v.reason);
    r.reasons[reason].push_back(v.info.modulePath);
    if (!r.example.count(reason)) r.example[reason] = v.info.modulePath + ": " + v.explanation;
  }
  std::cerr << "[" << name << "] " << r.foldable << "/" << r.lns << " foldable, analysis "
            << r.timing.medianMs << " ms\n";
  return r;
}

std::string escapeCell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

/// The corpus results (tests/corpus/build_corpus.py: <dir>/<env>/<name>.json) whose traces can be
/// analysed here. A model whose analysis crashed the CLI is listed apart, not loaded in-process.
struct CorpusEntry {
  std::string name, trace, source, family;
};

std::vector<CorpusEntry> corpusEntries(const std::string& dir, std::vector<std::string>* skipped) {
  std::vector<CorpusEntry> out;
  for (const char* env : {"main", "old"}) {
    auto folder = fs::path(dir) / env;
    if (!fs::is_directory(folder)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(folder))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f);
      auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) throw Error("corpus result " + f.string() + " is not JSON");
      if (j.contains("absent")) continue;
      std::string name = j.value("name", f.stem().string()) + (std::string(env) == "old" ? " (old)" : "");
      if (!j.contains("summary") || !j.contains("trace_file")) {
        auto failures = j.value("failures", std::vector<std::string>{});
        skipped->push_back(name + ": " + (failures.empty() ? "no analysis" : failures.front()));
        continue;
      }
      auto lib = j.value("library", "");
      auto versions = j.value("versions", nlohmann::json::object());
      std::string version = versions.contains(lib) ? versions[lib].get<std::string>() : "";
      out.push_back({name, j["trace_file"].get<std::string>(), lib + " " + version, j.value("family", "")});
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Regenerate the foldability table of the zoo and torchvision models"};
  std::string out = "docs/foldability.md";
  std::string fixtures, corpus;
  std::vector<std::string> zoo{"gpt2:small", "bert:base",   "opt:125m",   "opt350m:350m", "phi:tiny",
                               "llama:tiny", "vit:b_16",    "swin_t:t",   "convnext_t:t"};
  int reps = 11;
  app.add_option("--out", out, "Markdown file to write");
  app.add_option("--fixtures", fixtures,
                 "Folder of tests/fixtures/make_models.py (manifest.json; torchvision models)");
  app.add_option("--corpus", corpus, "Folder of tests/corpus/build_corpus.py's results (<env>/<name>.json)");
  app.add_option("--zoo", zoo, "Zoo models as NAME:PRESET")->take_all();
  app.add_option("--reps", reps, "Timed analysis runs per model")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  try {
    auto scratch = fs::temp_directory_path() / ("foldability-" + std::to_string(::getpid()));
    fs::create_directories(scratch);
    std::vector<Row> rows;
    for (const auto& spec : zoo) {
      auto colon = spec.find(':');
      std::string name = spec.substr(0, colon), preset = colon == std::string::npos ? "" : spec.substr(colon + 1);
      auto path = (scratch / (name + ".pt")).string();
      ZooBuildOptions o;
      o.preset = preset;
      o.progress = [&](const std::string& m) { std::cerr << "[" << name << "] zoo: " << m << "\n"; };
      buildZooModel(name, path, o);
      rows.push_back(analyse(path, name, "zoo (C++)", preset.empty() ? findZooModel(name).defaultPreset : preset, reps));
      std::remove(path.c_str());
    }
    if (!fixtures.empty()) {
      for (const char* name : {"vit", "swin_t", "convnext"}) {
        auto path = (fs::path(fixtures) / (std::string(name) + ".pt")).string();
        if (!fs::exists(path)) throw Error("no " + path + " (run tests/fixtures/make_models.py --out " + fixtures + ")");
        rows.push_back(analyse(path, name, "torchvision (Python trace)", "tiny config", reps));
      }
    }
    std::vector<std::string> skipped;
    if (!corpus.empty()) {
      auto entries = corpusEntries(corpus, &skipped);
      if (entries.empty()) throw Error("no analysable corpus results under " + corpus + " (run tests/corpus/build_corpus.py)");
      for (const auto& e : entries) {
        if (!fs::exists(e.trace)) throw Error("corpus trace " + e.trace + " is gone (rerun tests/corpus/build_corpus.py)");
        rows.push_back(analyse(e.trace, e.name, e.source, e.family, reps));
      }
    }
    ::rmdir(scratch.c_str());

    std::ostringstream md;
    md << "# Foldability of the zoo, torchvision and corpus models\n\n"
       << "Generated by `analyses/foldability_table.cpp`; do not edit by hand. Regenerate with\n\n"
       << "```\nbuild/bin/foldability_table --fixtures build/test-models --corpus build/corpus-results \\\n"
       << "    --out docs/foldability.md\n```\n\n"
       << "Verdicts come from the architecture (random weights). \"params\" is the number of parameters the\n"
       << "fold changes (centered, and untied where shared); analysis time is `analyzeFoldability` alone,\n"
       << "median (p10-p90) of " << reps << " runs after 2 warm-up runs, excluding the load and the\n"
       << "shape-recording run (import time is shown apart). Architectures and reasons: docs/architectures.md;\n"
       << "corpus models (preset: their family; \"(old)\": traced under the older libraries) and the oracle\n"
       << "that confirms each verdict: docs/corpus.md. Foldable LNs three ways: \"paper\" under the paper's\n"
       << "rules alone, \"+scales\" with per-channel scales absorbed too (method.md section 7), \"+insertion\"\n"
       << "with inserted centerings as well (section 8; the default analysis, whose verdicts the other\n"
       << "columns describe). \"scales\" is the number of scales absorbed and \"inserted\" the number of\n"
       << "centerings inserted by the default analysis (CLI: `--no-scale-absorb`, `--no-insert-centering`\n"
       << "turn them off).\n\n"
       << "| model | source | preset | graph nodes | LNs | paper | +scales | +insertion | scales | inserted | not foldable (reason: count) | params changed | untied | import s | analysis ms |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& r : rows) {
      std::string why;
      for (const auto& [reason, paths] : r.reasons) why += (why.empty() ? "" : ", ") + reason + ": " + std::to_string(paths.size());
      char t[96];
      std::snprintf(t, sizeof t, "%.2f (%.2f-%.2f)", r.timing.medianMs, r.timing.p10Ms, r.timing.p90Ms);
      char imp[32];
      std::snprintf(imp, sizeof imp, "%.1f", r.importSeconds);
      md << "| " << r.model << " | " << r.source << " | " << r.preset << " | " << r.nodes << " | " << r.lns << " | "
         << r.paperFoldable << " | " << r.scaleFoldable << " | " << r.foldable << " | " << r.scalesAbsorbed << " | "
         << r.insertions << " | "
         << (why.empty() ? "-" : why) << " | " << r.parameters << " | "
         << bytesText(r.untieBytes) << " | " << imp << " | " << t << " |\n";
    }
    if (!skipped.empty()) {
      md << "\nCorpus models not analysed here (see docs/corpus.md):\n\n";
      for (const auto& s : skipped) md << "- " << escapeCell(s) << "\n";
    }
    md << "\n## Why the others do not fold (one example per model and reason)\n\n";
    for (const auto& r : rows) {
      if (r.reasons.empty()) continue;
      md << "**" << r.model << "**\n\n";
      for (const auto& [reason, paths] : r.reasons) {
        md << "- " << reason << " (" << paths.size() << "): " << escapeCell(r.example.at(reason)) << "\n";
      }
      md << "\n";
    }
    foldnorm::analyses::writeAtomically(out, md.str());
    std::cout << md.str();
    std::cerr << "wrote " << out << "\n";
  } catch (const std::exception& e) {
    return foldnorm::analyses::reportFailure("foldability_table", e);
  }
  return 0;
}
