// The written file loaded back and checked before it is put in place (SavedFileCheck in
// fold/fold.h): a fold is verified in memory, but users run the file, through a loader that
// compiles its code again (torch.jit.load) or reads its program (torch.export.load).
#include <torch/csrc/jit/serialization/import.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/interpreter/export_interpreter.h"
#include "fold_internal.h"

namespace foldnorm::fold_detail {
namespace {

/// The line of a loader's message that says why: TorchScript's compile errors quote the source
/// around the cause ("forward(...):\nExpected a value of type ..."), so the first line that
/// reads as a sentence about types or values wins; else the first non-empty line.
std::string reasonLine(const std::string& message) {
  std::istringstream in(message);
  std::string line, first;
  while (std::getline(in, line)) {
    auto begin = line.find_first_not_of(" \t~^");
    if (begin == std::string::npos) continue;
    line = line.substr(begin);
    if (first.empty()) first = line;
    for (const char* cue : {"Expected ", "expected ", "Unknown ", "unknown ", "not defined", "RuntimeError", "error:"})
      if (line.find(cue) != std::string::npos) return line;
  }
  return first.empty() ? message : first;
}

bool sameBits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  auto x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == y.nbytes() && (x.nbytes() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0);
}

/// Every tensor attribute by dotted path with its owner and slot name.
struct Slot {
  jit::Module owner;
  std::string name;
  at::Tensor tensor;
};
std::map<std::string, Slot> tensorSlots(const jit::Module& root) {
  std::map<std::string, Slot> out;
  for (const auto& m : root.named_modules())
    for (const auto& a : m.value.named_attributes(/*recurse=*/false))
      if (a.value.isTensor())
        out.emplace(m.name.empty() ? a.name : m.name + "." + a.name, Slot{m.value, a.name, a.value.toTensor()});
  return out;
}

double worstRelative(const std::vector<at::Tensor>& reference, const std::vector<at::Tensor>& got) {
  if (reference.size() != got.size())
    throw Error("the written file returns " + std::to_string(got.size()) + " output tensor(s) where the verified fold "
                "returned " + std::to_string(reference.size()));
  double worst = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    if (reference[i].sizes() != got[i].sizes())
      throw Error("the written file's output " + std::to_string(i) + " has another shape than the verified fold's");
    if (!reference[i].is_floating_point()) {
      if (!reference[i].equal(got[i].to(reference[i].scalar_type())))
        return std::numeric_limits<double>::infinity();
      continue;
    }
    auto r = reference[i].to(at::kDouble), g = got[i].detach().to(at::kCPU).to(at::kDouble);
    const double scale = std::max(r.abs().max().item<double>(), 1e-30);
    const double err = (g - r).abs().max().item<double>() / scale;
    if (std::isnan(err)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace

SavedFileCheck checkSavedTorchScript(const std::string& path, const FoldedModel& folded, const VerificationRuns& runs,
                                     const ProgressFn& progress) {
  auto say = [&](const std::string& m) { if (progress) progress(m); };
  SavedFileCheck check;
  check.loader = "torch::jit::load";
  check.tolerance32 = runs.tolerance;
  say("loading the written file back (torch::jit::load)");
  jit::Module reloaded;
  try {
    reloaded = jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    throw Error("the folded file does not load back with torch::jit::load (as torch.jit.load would refuse it): " +
                reasonLine(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw Error(std::string("the folded file does not load back with torch::jit::load: ") + reasonLine(e.what()));
  }
  // Bit for bit the verified tensors; the reloaded copy then reads them (one copy of the model
  // stays resident, not two).
  auto verified = tensorSlots(folded.torch->module);
  for (auto& [name, slot] : tensorSlots(reloaded)) {
    auto it = verified.find(name);
    if (it == verified.end())
      throw Error("the folded file holds a tensor '" + name + "' that the verified fold does not");
    if (!slot.tensor.defined() || !it->second.tensor.defined()) continue;
    if (!sameBits(slot.tensor.detach(), it->second.tensor.detach()))
      throw Error("the folded file's tensor '" + name + "' is not the verified fold's (its bits differ)");
    slot.owner._ivalue()->setAttr(slot.name, it->second.tensor);
    ++check.tensors;
  }
  const RetargetOptions float64{at::kDouble, c10::Device(c10::kCPU)};
  auto graph64 = convertedReads(reloaded, inlinedForward(reloaded), float64);
  for (std::size_t r = 0; r < runs.inputSets.size(); ++r) {
    say("checking the written file on input set " + std::to_string(r + 1) + "/" + std::to_string(runs.inputSets.size()));
    // Its own forward, as a user calls it: the code the loader compiled, method calls included.
    std::vector<c10::IValue> in;
    for (const auto& t : runs.inputSets[r]) in.emplace_back(t);
    std::vector<at::Tensor> out32;
    {
      at::NoGradGuard noGrad;
      out32 = outputTensors(reloaded.forward(in));
    }
    // Verified on a GPU: the reference is the folded model's run on the CPU (another device
    // rounds differently), made here.
    const auto reference = runs.device.is_cuda() ? runGraph(folded.torch->module, folded.torch->graph, runs.inputSets[r])
                                                 : runs.folded.at(r);
    check.worstRelative32 = std::max(check.worstRelative32, worstRelative(reference, out32));
    auto out64 = runGraph(reloaded, graph64, retargetInputs(runs.inputSets[r], float64));
    check.worstRelativeSaved64 = std::max(check.worstRelativeSaved64, worstRelative(runs.original64.at(r), out64));
    ++check.runs;
  }
  if (!(check.worstRelative32 <= check.tolerance32))
    throw Error(strf("the folded file loads but its forward does not compute the verified fold: relative error %.3e > "
                     "%.0e", check.worstRelative32, check.tolerance32));
  check.ran = true;
  return check;
}

SavedFileCheck checkSavedExport(const std::string& path, const FoldedExport& folded, const VerificationRuns& runs) {
  auto say = [&](const std::string& m) { if (runs.progress) runs.progress(m); };
  SavedFileCheck check;
  check.loader = "the .pt2 reader";
  check.tolerance32 = runs.tolerance;
  say("reading the written archive back");
  nlohmann::json program;
  {
    // The archive's bytes live only in this scope: the runs below read the verified tensors.
    ExportArchive archive;
    try {
      archive = readExportArchive(path);
    } catch (const std::exception& e) {
      throw Error(std::string("the folded archive does not read back: ") + reasonLine(e.what()));
    }
    if (archive.tensors.size() != folded.state.size())
      throw Error("the folded archive holds " + std::to_string(archive.tensors.size()) + " tensors where the verified "
                  "fold has " + std::to_string(folded.state.size()));
    for (const auto& t : archive.tensors) {
      auto it = folded.state.find(t.name);
      if (it == folded.state.end())
        throw Error("the folded archive holds a tensor '" + t.name + "' that the verified fold does not");
      if (!sameBits(t.tensor, it->second.detach().to(at::kCPU)))
        throw Error("the folded archive's tensor '" + t.name + "' is not the verified fold's (its bits differ)");
      ++check.tensors;
    }
    program = std::move(archive.program);
  }
  const c10::Device cpu(c10::kCPU);
  ExportInterpreter own(program, folded.state, {std::nullopt, cpu});
  ExportInterpreter own64(program, folded.state, {at::kDouble, cpu});
  for (std::size_t r = 0; r < runs.inputSets.size(); ++r) {
    say("checking the written archive on input set " + std::to_string(r + 1) + "/" + std::to_string(runs.inputSets.size()));
    auto out = own.run(runs.inputSets[r]);
    if (runs.device.is_cuda()) {
      ExportInterpreter verified(folded.program, folded.state, {std::nullopt, cpu});
      check.worstRelative32 = std::max(check.worstRelative32, worstRelative(verified.run(runs.inputSets[r]), out));
    } else {
      check.worstRelative32 = std::max(check.worstRelative32, worstRelative(runs.folded.at(r), out));
    }
    check.worstRelativeSaved64 =
        std::max(check.worstRelativeSaved64, worstRelative(runs.original64.at(r), own64.run(runs.inputSets[r])));
    ++check.runs;
  }
  if (!(check.worstRelative32 <= check.tolerance32))
    throw Error(strf("the folded archive reads back but its program does not compute the verified fold: relative "
                     "error %.3e > %.0e", check.worstRelative32, check.tolerance32));
  check.ran = true;
  return check;
}

}  // namespace foldnorm::fold_detail
