// The model handle (include/foldnorm/fold/model.h) and its two implementations: TorchScript
// (fold.h) and torch.export (fold_export.h). The only place outside the importers and the
// per-format folds that asks which format an ImportedModel is: formatOf, once per handle.
#include "foldnorm/fold/model.h"

#include <stdexcept>

#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm {

/// What differs between the formats, each answered once.
class ModelFormat {
 public:
  virtual ~ModelFormat() = default;
  virtual const char* name() const = 0;
  virtual const char* foldedExtension() const = 0;
  virtual const char* loader() const = 0;
  virtual RmsOp defaultRmsOp() const = 0;
  virtual nlohmann::json fileInfo(const ImportedModel& model) const = 0;
  virtual void releaseFileBytes(const ImportedModel& model) const = 0;
  virtual ModelFold fold(const ImportedModel& model, const AnalysisResult& analysis,
                         const FoldOptions& options) const = 0;
  virtual Verification verify(const ImportedModel& model, const AnalysisResult& analysis, const ModelFold& fold,
                              const FoldOptions& options) const = 0;
  virtual SavedFileCheck save(const ImportedModel& model, const ModelFold& fold, const std::string& outPath) const = 0;
};

namespace {

/// The format's own fold out of a ModelFold; a fold of the other format is a caller's bug.
template <typename Folded>
const Folded& partOf(const ModelFold& fold, const char* format) {
  const auto* part = std::get_if<std::shared_ptr<const Folded>>(&fold.parts());
  if (!part || !*part) throw std::logic_error(std::string("model handle: a fold that is not a ") + format + " fold");
  return **part;
}

class TorchScriptFormat final : public ModelFormat {
 public:
  const char* name() const override { return "torchscript"; }
  const char* foldedExtension() const override { return ".pt"; }
  const char* loader() const override { return "torch.jit.load"; }
  RmsOp defaultRmsOp() const override { return RmsOp::Foldnorm; }
  nlohmann::json fileInfo(const ImportedModel&) const override { return nlohmann::json::object(); }
  void releaseFileBytes(const ImportedModel& model) const override {
    if (model.torch->makeCopy) model.torch->archive.reset();
  }
  ModelFold fold(const ImportedModel& model, const AnalysisResult& analysis,
                 const FoldOptions& options) const override {
    return ModelFold(std::make_shared<const FoldedModel>(foldModel(model, analysis, options)));
  }
  Verification verify(const ImportedModel& model, const AnalysisResult& analysis, const ModelFold& fold,
                      const FoldOptions& options) const override {
    return verifyFold(model, analysis, partOf<FoldedModel>(fold, name()), options);
  }
  SavedFileCheck save(const ImportedModel& model, const ModelFold& fold, const std::string& outPath) const override {
    return saveFolded(partOf<FoldedModel>(fold, name()), model, outPath);
  }
};

class ExportFormat final : public ModelFormat {
 public:
  const char* name() const override { return "pt2"; }
  const char* foldedExtension() const override { return ".pt2"; }
  const char* loader() const override { return "torch.export.load"; }
  // Portable: the folded archive loads with torch.export.load and nothing else.
  RmsOp defaultRmsOp() const override { return RmsOp::Aten; }
  nlohmann::json fileInfo(const ImportedModel& model) const override {
    const ExportArchive& a = *model.exported->archive;
    return {{"export",
             {{"torch_version", a.torchVersion},
              {"schema_version", std::to_string(a.schemaMajor) + "." + std::to_string(a.schemaMinor)},
              {"dialect", a.dialects.empty() ? std::string("?") : a.dialects.front()},
              {"aten_opset", a.atenOpset},
              {"archive_version", a.archiveVersion}}}};
  }
  void releaseFileBytes(const ImportedModel&) const override {}  // the fold copies records from them
  ModelFold fold(const ImportedModel& model, const AnalysisResult& analysis,
                 const FoldOptions& options) const override {
    return ModelFold(std::make_shared<const FoldedExport>(foldExport(model, analysis, options)));
  }
  Verification verify(const ImportedModel& model, const AnalysisResult& analysis, const ModelFold& fold,
                      const FoldOptions& options) const override {
    return verifyExportFold(model, analysis, partOf<FoldedExport>(fold, name()), options);
  }
  SavedFileCheck save(const ImportedModel& model, const ModelFold& fold, const std::string& outPath) const override {
    return saveFoldedExport(partOf<FoldedExport>(fold, name()), model, outPath);
  }
};

const ModelFormat& formatOf(const ImportedModel& model) {
  static const TorchScriptFormat torchscript;
  static const ExportFormat exported;
  if (model.exported && model.exported->archive) return exported;
  if (model.torch) return torchscript;
  throw std::logic_error("model handle: '" + model.path + "' holds neither a TorchScript module nor a .pt2 program");
}

bool endsWith(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

const FoldReport& ModelFold::report() const {
  return std::visit([](const auto& part) -> const FoldReport& { return part->report; }, parts_);
}

Model Model::open(const std::string& path, const ImportOptions& options) {
  return Model(std::make_shared<const ImportedModel>(importModel(path, options)));
}

Model::Model(std::shared_ptr<const ImportedModel> imported)
    : imported_(std::move(imported)), format_(&formatOf(*imported_)) {}

Model Model::borrow(const ImportedModel& imported) {
  return Model(std::shared_ptr<const ImportedModel>(std::shared_ptr<const ImportedModel>(), &imported));
}

const char* Model::format() const { return format_->name(); }
const char* Model::foldedExtension() const { return format_->foldedExtension(); }
const char* Model::loader() const { return format_->loader(); }
RmsOp Model::defaultRmsOp() const { return format_->defaultRmsOp(); }
nlohmann::json Model::fileInfo() const { return format_->fileInfo(*imported_); }

std::string Model::fileInfoLine() const {
  const auto info = fileInfo();
  if (!info.contains("export")) return "";
  const auto& v = info.at("export");
  return "torch.export program: written by torch " + v.at("torch_version").get<std::string>() + ", export schema " +
         v.at("schema_version").get<std::string>() + ", IR dialect " + v.at("dialect").get<std::string>() +
         ", aten opset " + std::to_string(v.at("aten_opset").get<int64_t>());
}

void Model::checkOutput(const std::string& outPath) const {
  checkOutputPath(path(), outPath);
  checkFoldedOutputKind(*imported_, outPath);
}

void Model::releaseFileBytes() const { format_->releaseFileBytes(*imported_); }

ModelFold Model::fold(const AnalysisResult& analysis, const FoldOptions& options) const {
  return format_->fold(*imported_, analysis, options);
}

Verification Model::verify(const AnalysisResult& analysis, const ModelFold& fold, const FoldOptions& options) const {
  return format_->verify(*imported_, analysis, fold, options);
}

SavedFileCheck Model::save(const ModelFold& fold, const std::string& outPath) const {
  return format_->save(*imported_, fold, outPath);
}

Model Model::reopen(const std::string& path, const ProgressFn& progress) const {
  ImportOptions options;
  options.inputs = inputSpecs();
  options.progress = progress;
  return open(path, options);
}

RmsOp rmsOpFor(const ImportedModel& model, const FoldOptions& options) {
  return options.rmsOp ? *options.rmsOp : formatOf(model).defaultRmsOp();
}

void checkFoldedOutputKind(const ImportedModel& model, const std::string& outPath) {
  const std::string ending = formatOf(model).foldedExtension();
  if (ending == ".pt2" && !endsWith(outPath, ".pt2"))
    throw Error("output '" + outPath + "': a .pt2 (torch.export) model folds into a .pt2, and torch.export.load "
                "wants that ending: choose an output ending in .pt2");
  if (ending != ".pt2" && endsWith(outPath, ".pt2"))
    throw Error("output '" + outPath + "': a TorchScript model folds into a TorchScript file, which a .pt2 "
                "ending would have read as a torch.export archive: choose an output ending in .pt");
}

}  // namespace foldnorm
