// importExport (read the archive, import the program, the input specs from its example inputs) and
// isExportFile, the content test importModel (src/import/import_model.cpp) picks the reader by.
#include <fstream>

#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "program.h"

namespace foldnorm {
namespace {

/// One spec per tensor user input: the example's shape and dtype (integers drawn from the
/// example's range, so token ids stay valid for the embedding table).
std::vector<InputSpec> specsFromExample(const Graph& g, const ExportArchive& archive, const std::string& path) {
  std::vector<InputSpec> specs;
  std::vector<ValueId> inputs;
  for (auto v : g.modelInputs())
    if (g.value(v).kind == ValueKind::Tensor) inputs.push_back(v);
  if (archive.hasExampleInputs && archive.exampleInputs.size() != inputs.size())
    throw Error("'" + path + "': its example inputs hold " + std::to_string(archive.exampleInputs.size()) +
                " tensors for a program of " + std::to_string(inputs.size()) + " tensor inputs (a damaged archive?)");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    InputSpec s;
    if (archive.hasExampleInputs) {
      const auto& t = archive.exampleInputs[i];
      s.shape = t.sizes().vec();
      s.dtype = dtypeName(t.scalar_type());
      if (!t.is_floating_point() && t.scalar_type() != at::kBool && t.numel() > 0) {
        s.low = static_cast<double>(t.min().item<int64_t>());
        s.high = static_cast<double>(t.max().item<int64_t>() + 1);
      }
    } else if (const auto& info = g.value(inputs[i]).tensor) {
      s.shape = info->shape;
      s.dtype = info->dtype;
    } else {
      throw Error("'" + path + "': input '" + g.value(inputs[i]).name + "' has neither an example nor a recorded shape");
    }
    specs.push_back(s);
  }
  return specs;
}

/// A user's specs must ask for the shapes the program was exported with: its sizes are those.
void checkUserSpecs(const Graph& g, const std::vector<InputSpec>& given, const std::vector<InputSpec>& recorded) {
  if (given.size() != recorded.size())
    throw Error("the program takes " + std::to_string(recorded.size()) + " tensor inputs, the input specs give " +
                std::to_string(given.size()));
  for (std::size_t i = 0; i < given.size(); ++i)
    if (given[i].shape != recorded[i].shape || given[i].dtype != recorded[i].dtype)
      throw Error("input spec " + std::to_string(i + 1) + " (" + given[i].toString() +
                  ") does not match the shape the program was exported with (" + formatShape(recorded[i].shape) +
                  " " + recorded[i].dtype + "): a .pt2 program's sizes are its example's");
  (void)g;
}

}  // namespace

ImportedModel importExport(const std::string& path, const ImportOptions& options) {
  if (options.progress) options.progress("loading " + path);
  auto archive = std::make_shared<ExportArchive>(readExportArchive(path));
  if (options.progress) options.progress("importing the exported program");
  ImportedModel result;
  result.path = path;
  auto model = std::make_shared<ExportModel>();
  model->archive = archive;
  export_detail::ProgramImporter(*archive, result.graph, *model).run();
  auto recorded = specsFromExample(result.graph, *archive, path);
  if (options.inputs.empty()) {
    result.inputSpecs = recorded;
    result.specFromModel = true;
  } else {
    checkUserSpecs(result.graph, options.inputs, recorded);
    result.inputSpecs = options.inputs;
  }
  result.exported = model;
  return result;
}

bool isExportFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  const auto size = static_cast<std::size_t>(in.tellg());
  // The root folder is in the first local header, every entry name in the central directory at
  // the end: the head and the last few MB say it without reading the weights.
  const std::size_t head = std::min<std::size_t>(size, 4096), tail = std::min<std::size_t>(size, 8u << 20);
  std::string bytes(head, '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(head));
  if (tail > head) {
    std::string end(tail, '\0');
    in.seekg(static_cast<std::streamoff>(size - tail));
    in.read(end.data(), static_cast<std::streamsize>(tail));
    bytes += end;
  }
  return in.good() && looksLikeExportArchive(bytes);
}

}  // namespace foldnorm
