// importModel (import/import.h): the one entry that picks the reader by the file's content. It
// calls both readers, so it is built with them (src/CMakeLists.txt), not with the torch-free rest
// of src/import/.
#include "foldnorm/import/import.h"

#include "foldnorm/import/export.h"
#include "foldnorm/import/torchscript.h"

namespace foldnorm {

ImportedModel importModel(const std::string& path, const ImportOptions& options) {
  // A file named .pt2 is said to be a bad torch.export archive when it is none, whatever it holds.
  const bool named = path.size() > 4 && path.compare(path.size() - 4, 4, ".pt2") == 0;
  return named || isExportFile(path) ? importExport(path, options) : importTorchScript(path, options);
}

}  // namespace foldnorm
