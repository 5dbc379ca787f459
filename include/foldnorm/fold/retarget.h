// Retargeting a saved TorchScript model to another dtype or device, every method of it: what
// `module.to(torch.bfloat16)` in Python cannot do for a trace, which bakes its dtype and device
// into constants (`aten::to(x, 6)`, float32 tensor constants, `torch.device("cpu")`). The copy
// is written atomically, loaded back and run against the original on the example inputs.
#pragma once

#include <string>

#include "foldnorm/import/torchscript.h"

namespace foldnorm {

struct RetargetFileOptions {
  std::string dtype;            // "" (keep), float32, float64, float16, bfloat16
  std::string device = "cpu";   // cpu | cuda | cuda:N
  ProgressFn progress;
};

struct RetargetFileReport {
  std::string input, output, dtype, device;
  std::string tracedDevice;     // what the input's constants named
  int rewritten = 0;            // constants and uses rewritten, over every method
  bool tensorsMoved = true;     // false: a GPU target on a machine without one (constants only)
  bool ran = false;             // the written file was run against the original (needs a spec)
  int64_t outputs = 0;
  double worstRelative = 0;     // the copy's outputs against the original's (float32 run), relative
};

/// Loads `inputPath` (TorchScript), retargets every method and tensor (retargetModule), writes
/// `outputPath` atomically with the input's foldnorm extra files (input spec, fold report), loads
/// it back and, when the model carries an input spec and the target device is here, runs both
/// on the spec's example inputs. foldnorm::Error (one line) for a .pt2, an unknown dtype or
/// device, an output that is the input, or a copy that does not load or run.
RetargetFileReport retargetFile(const std::string& inputPath, const std::string& outputPath,
                                const RetargetFileOptions& options);

std::string toText(const RetargetFileReport& report);

}  // namespace foldnorm
