// One handle for a model of either format: what the CLI, bench, GUI and Python bindings do with
// a model, so that none of them asks which format it is.
//
//   Model::open("gpt2.pt" | "gpt2.pt2")      the importer picked by content (importModel)
//     .graph(), .inputSpecs()                 what the analysis reads (the same Graph for both)
//     .fold(analysis, options) -> ModelFold   apply the plan to a copy, verify (float32, float64)
//     .verify(analysis, fold, options)        verify a fold again
//     .save(fold, out)                        atomic, loaded back and checked (SavedFileCheck)
//     .reopen(out)                            a fresh model from a written file, with these specs
//
// Two implementations, chosen once when the handle is made (src/fold/model.cpp): TorchScript
// (foldModel/saveFolded, fold.h) and torch.export (foldExport/saveFoldedExport, fold_export.h).
// Each also owns what differs between the formats as data: the file ending a fold is written
// with, the RMS op a fold writes unless told (foldnorm::rms_norm for a .pt, the portable
// aten::rms_norm for a .pt2, which torch.export.load reads without our library), the loader a
// user reads the folded file with. Torch-free: the GUI includes it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "foldnorm/fold/fold.h"
#include "foldnorm/import/import.h"

namespace foldnorm {

struct FoldedExport;  // fold/fold_export.h
class ModelFormat;    // the two implementations (src/fold/model.cpp)

/// A fold of a Model (the plan applied to a copy, verified unless told not to). The format's own
/// fold is `parts()`, a variant of the two: code that is itself per format (the bench's two
/// timers) takes its alternative with std::visit, so a new format fails to compile there.
class ModelFold {
 public:
  using Parts = std::variant<std::shared_ptr<const FoldedModel>, std::shared_ptr<const FoldedExport>>;
  explicit ModelFold(Parts parts) : parts_(std::move(parts)) {}
  const FoldReport& report() const;
  const Parts& parts() const { return parts_; }

 private:
  Parts parts_;
};

class Model {
 public:
  /// Imports `path` by content (importModel: a torch.export archive or TorchScript). Throws
  /// foldnorm::Error for every user-caused problem.
  static Model open(const std::string& path, const ImportOptions& options = {});
  /// A handle over a model imported elsewhere (shared).
  explicit Model(std::shared_ptr<const ImportedModel> imported);
  /// A handle over a model someone else owns and keeps alive while the handle is used.
  static Model borrow(const ImportedModel& imported);

  const ImportedModel& imported() const { return *imported_; }
  const std::shared_ptr<const ImportedModel>& shared() const { return imported_; }
  const Graph& graph() const { return imported_->graph; }
  const std::string& path() const { return imported_->path; }
  const std::vector<InputSpec>& inputSpecs() const { return imported_->inputSpecs; }

  /// "torchscript" | "pt2" (the Python package's Analysis.format()).
  const char* format() const;
  /// The ending a fold of this model is written with: ".pt" | ".pt2".
  const char* foldedExtension() const;
  /// How a user loads the folded file: "torch.jit.load" | "torch.export.load".
  const char* loader() const;
  /// The RMS op a fold writes where FoldOptions::rmsOp is unset (the one place that decides it).
  RmsOp defaultRmsOp() const;
  /// What the file says about itself beyond its graph, as JSON keys for `foldnorm inspect`: a
  /// .pt2's writer ({"export": {torch_version, schema_version, dialect, aten_opset,
  /// archive_version}}), nothing for TorchScript.
  nlohmann::json fileInfo() const;
  /// fileInfo() as one line of text ("" when there is none).
  std::string fileInfoLine() const;

  /// Refuses (foldnorm::Error, one line) an output that is the input, cannot be written, or whose
  /// ending does not match this model's fold (checkOutputPath + checkFoldedOutputKind).
  void checkOutput(const std::string& outPath) const;
  /// Frees the file's bytes that the import keeps for fresh copies, where copies can be made
  /// without them (a TorchScript import reloads the file); a fold or a bench owning the model
  /// no longer needs them.
  void releaseFileBytes() const;

  /// The plan applied to a copy of the model (never this one) and verified unless
  /// options.verify is false; options.rmsOp unset: defaultRmsOp().
  ModelFold fold(const AnalysisResult& analysis, const FoldOptions& options = {}) const;
  /// Verifies `fold` (made from this model by `analysis` with `options`) again.
  Verification verify(const AnalysisResult& analysis, const ModelFold& fold, const FoldOptions& options = {}) const;
  /// Writes `fold` to `outPath` atomically; a verified fold's file is loaded back and checked
  /// before the rename (saveFolded, saveFoldedExport). Throws foldnorm::Error, the output removed.
  SavedFileCheck save(const ModelFold& fold, const std::string& outPath) const;
  /// A fresh model read from `path` (a fold of this one, written by save), its shapes recorded
  /// with this model's input specs.
  Model reopen(const std::string& path, const ProgressFn& progress = {}) const;

 private:
  std::shared_ptr<const ImportedModel> imported_;
  const ModelFormat* format_;
};

/// The RMS op a fold of `model` writes: options.rmsOp, or the format's default where unset.
RmsOp rmsOpFor(const ImportedModel& model, const FoldOptions& options);

}  // namespace foldnorm
