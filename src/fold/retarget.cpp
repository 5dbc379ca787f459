// Retargeting a saved TorchScript model (see include/foldnorm/fold/retarget.h).
#include "foldnorm/fold/retarget.h"

#include <torch/csrc/jit/serialization/import.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/torch/torch_model.h"
#include "fold_internal.h"

namespace foldnorm {
namespace {

namespace jit = torch::jit;

std::optional<at::ScalarType> dtypeNamed(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name == "float32") return at::kFloat;
  if (name == "float64") return at::kDouble;
  if (name == "float16") return at::kHalf;
  if (name == "bfloat16") return at::kBFloat16;
  throw SettingError("dtype", "unknown dtype '" + name + "' (float32, float64, float16, bfloat16)");
}

std::vector<at::Tensor> run(jit::Module m, const std::vector<at::Tensor>& inputs) {
  at::NoGradGuard noGrad;
  std::vector<c10::IValue> in(inputs.begin(), inputs.end());
  return outputTensors(m.forward(in));
}

}  // namespace

RetargetFileReport retargetFile(const std::string& inputPath, const std::string& outputPath,
                                const RetargetFileOptions& options) {
  namespace fs = std::filesystem;
  auto say = [&](const std::string& m) { if (options.progress) options.progress(m); };
  RetargetFileReport r;
  r.input = inputPath;
  r.output = outputPath;
  const auto dtype = dtypeNamed(options.dtype);
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(options.device);
  } catch (const c10::Error&) {
    throw SettingError("device", "unknown device '" + options.device + "' (cpu, cuda, cuda:N)");
  }
  r.dtype = options.dtype.empty() ? "unchanged" : options.dtype;
  r.device = device.str();
  checkOutputPath(inputPath, outputPath);
  {
    std::ifstream in(inputPath, std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(in.gcount()));
    if (looksLikeExportArchive(head))
      throw Error("'" + inputPath + "' is a torch.export archive (.pt2): retarget takes TorchScript files; move an "
                  "exported program with torch.export.passes.move_to_device_pass");
  }
  jit::ExtraFilesMap extra{{kInputSpecExtraFile, ""}, {kFoldReportExtraFile, ""}};
  say("loading " + inputPath);
  jit::Module original, copy;
  try {
    original = jit::load(inputPath, c10::Device(c10::kCPU), extra);
    copy = jit::load(inputPath, c10::Device(c10::kCPU));  // types of its own: retargeted in place
  } catch (const c10::Error& e) {
    throw Error("cannot load '" + inputPath + "' as TorchScript: " + errorCause(e.what_without_backtrace()));
  }
  r.tracedDevice = tracedDevice(original);
  const bool here = device.is_cpu() || (device.is_cuda() && torch::cuda::is_available());
  r.tensorsMoved = here;
  say("retargeting every method to " + r.dtype + " on " + r.device);
  r.rewritten = retargetModule(copy, {dtype, device, /*moveTensors=*/here});

  const auto tmp = outputPath + ".tmp-" + std::to_string(::getpid());
  jit::ExtraFilesMap keep;
  for (const auto& [name, text] : extra)
    if (!text.empty()) keep[name] = text;
  try {
    copy.save(tmp, keep);
    say("loading the written copy back and running it");
    auto reloaded = jit::load(tmp, c10::Device(c10::kCPU));
    if (here && keep.count(kInputSpecExtraFile) > 0) {
      auto specs = inputSpecsFromJson(keep.at(kInputSpecExtraFile));
      auto inputs = makeInputs(specs, 0);
      // The original as foldnorm runs it: its device constants naming the CPU (a GPU trace's too).
      auto want = runGraph(original, inlinedForward(original), inputs);
      if (!device.is_cpu()) reloaded.to(device);
      auto got = run(reloaded, retargetInputs(inputs, {dtype, device}));
      if (got.size() != want.size()) throw Error("the copy returns another number of outputs than the original");
      for (std::size_t i = 0; i < want.size(); ++i) {
        if (!want[i].is_floating_point()) continue;
        auto w = want[i].to(at::kDouble), g = got[i].detach().to(at::kCPU).to(at::kDouble);
        const double err = (g - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-30);
        if (!std::isfinite(err)) throw Error("the copy's output " + std::to_string(i) + " is not finite");
        r.worstRelative = std::max(r.worstRelative, err);
      }
      r.outputs = static_cast<int64_t>(want.size());
      r.ran = true;
    }
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    throw Error("the retargeted copy failed (written, loaded back and run): " +
                errorCause(c10 ? c10->what_without_backtrace() : e.what()));
  }
  std::error_code ec;
  fs::rename(tmp, outputPath, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error("cannot move the output into place at '" + outputPath + "': " + ec.message());
  }
  return r;
}

std::string toText(const RetargetFileReport& r) {
  std::string out = fold_detail::strf("retargeted %s to %s on %s: %d constant(s) and dtype/device argument(s) rewritten "
                                      "in every method", r.input.c_str(), r.dtype.c_str(), r.device.c_str(), r.rewritten);
  out += r.tracedDevice != "cpu" ? " (the input named " + r.tracedDevice + ")\n" : "\n";
  if (!r.tensorsMoved)
    out += "  no " + r.device + " here: the tensors stay on the CPU; call .to(\"" + r.device +
           "\") after loading (the graphs already name it)\n";
  if (r.ran)
    out += fold_detail::strf("  the written copy, loaded back, against the original on the example inputs: worst relative "
                             "error %.2e over %lld output(s)\n", r.worstRelative, static_cast<long long>(r.outputs));
  else
    out += "  not run: " + std::string(r.tensorsMoved ? "the model carries no input spec" : "the device is not here") + "\n";
  out += "wrote " + r.output + "\n";
  return out;
}

}  // namespace foldnorm
