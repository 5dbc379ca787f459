// What the TorchScript fold and the torch.export (.pt2) fold share: centering a tensor as a
// ParameterPlan says, and comparing original and folded outputs into the same report structs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <string>
#include <vector>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/fold/fold.h"

namespace torch::jit {
struct Graph;
struct Value;
}  // namespace torch::jit

namespace foldnorm {

/// The scale of a scaled centering (CenterAction::scale) as a tensor of the axis' length. Scales
/// are never centered themselves (the analysis refuses that), so this is the model's own value.
using ScaleLookup = std::function<at::Tensor(ParamId)>;

/// `t` centered by `actions` in order (each: subtract the mean along `axis`, within `groups`
/// equal groups; a scaled one: x[c] -= mean_k(s_k x[k]) / s_c), computed in float64 and returned
/// in t's dtype, contiguous. The one home of the centering arithmetic for both folds; without
/// `scaleOf` a scaled action is refused in one line. Computed a few rows at a time (slices
/// along a dim no action centres along, about 16 MiB of float64 each): the float64 temporaries
/// of one slice, not of the whole tensor.
at::Tensor centeredCopy(const at::Tensor& t, const std::vector<CenterAction>& actions,
                        const ScaleLookup& scaleOf = {});

/// The scale each action reads (scaleOf(action.scale)), undefined where it is unscaled;
/// refused in one line, as centeredCopy refuses, when a scaled action meets no `scaleOf`.
std::vector<at::Tensor> centeringScales(const std::vector<CenterAction>& actions, const ScaleLookup& scaleOf);

/// Inserts into `graph`, at its insert point, the value `t` centred by `actions` in float64,
/// unrounded (what centeredCopy computes before it rounds to t's dtype), computed each time the
/// graph runs by foldnorm_check::centered64 (an op only verification graphs call). `t` and
/// the `scales` (centeringScales) enter as constants sharing their storage: a float64 plan
/// checked this way holds no float64 copy of what the fold centres, only the one tensor a
/// reader needs while it reads it.
torch::jit::Value* insertCentered64(torch::jit::Graph& graph, const at::Tensor& t,
                                    const std::vector<CenterAction>& actions, const std::vector<at::Tensor>& scales);

/// What both folds' verifications start from: `verification` marked as run on options.device
/// (with the model's dtype and the saved-file bound for it, from `analysis`' plan), that device, and the input sets: `examples` (when given), then
/// options.randomInputs sets drawn from the model's input spec (one drawn at options.seed when
/// that makes none). SettingError("device") when CUDA is asked for and absent.
struct VerificationSetup {
  Verification verification;
  c10::Device device{c10::kCPU};
  std::vector<std::vector<at::Tensor>> inputSets;
};

/// What a verification ran, kept (on the CPU) for the check of the written file: per input set,
/// the folded model's outputs in its own dtype and the original's outputs in float64.
struct VerificationRuns {
  c10::Device device{c10::kCPU};   // where the folded outputs were computed
  std::vector<std::vector<at::Tensor>> inputSets, folded, original64;
  /// Relative tolerance of the reloaded file's forward against `folded`: float32's 1e-5, scaled
  /// for 16-bit dtypes as the saved-file bound is (savedBoundFor).
  double tolerance = 1e-5;
  ProgressFn progress;             // the fold's, for the reload step's lines
};
/// The dtype the plan's centered parameters are saved in: the coarsest floating dtype among them
/// (bfloat16 over float16 over float32 over float64), "float32" when the plan centers nothing.
std::string plannedWeightDtype(const Graph& graph, const AnalysisResult& analysis);

/// The saved file's float64 bound for weights of `dtype`: `float32Bound` for float32 and float64
/// weights, scaled by the unit roundoff of a 16-bit dtype against float32's 2^-24 (float16 2^-11:
/// x 8192; bfloat16 2^-8: x 65536), since each centered weight is rounded to that dtype.
double savedBoundFor(double float32Bound, const std::string& dtype);

VerificationSetup startVerification(const ImportedModel& model, const AnalysisResult& analysis,
                                    const std::vector<at::Tensor>* examples, const FoldOptions& options);

/// Records a centered parameter (and its untie, with the bytes copied) in `report`.
void reportCentered(FoldReport& report, const std::string& path, const ParameterPlan& plan);

/// Records a LayerNorm the fold leaves as it is, with the analysis' one-line reason.
void reportKept(FoldReport& report, const LayerNormVerdict& verdict);

/// True for an output whose last axis can be read as predictions (argmax over > 1 entries).
bool hasPredictions(const at::Tensor& t);

/// The check of `output` in `dtype`, made (with `shapeOf`'s shape and dtype) on first use.
OutputCheck& outputCheckFor(std::vector<OutputCheck>& checks, const std::string& dtype, std::size_t output,
                            const at::Tensor& shapeOf);

/// Folds one run's outputs into `checks` (one OutputCheck per dtype and output index; maxima
/// over runs). Throws std::logic_error when the output counts differ.
void compareOutputs(const std::vector<at::Tensor>& original, const std::vector<at::Tensor>& folded,
                    const std::string& dtype, std::vector<OutputCheck>& checks);

/// Sets the verdicts of `v` from its checks: float64 within `float64Tolerance`, the saved file
/// in float64 within `savedFloat64Bound` (checks of dtype "saved-float64", where there are any),
/// worst errors, predictions unchanged and flipped rows in the model's dtype.
void summarizeChecks(Verification& v, double float64Tolerance, double savedFloat64Bound);

}  // namespace foldnorm
