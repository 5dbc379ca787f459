// The folded model as a Scene: the graph foldModel produced (re-imported from the folded file),
// with what the fold did marked on it: LayerNorms swapped for foldnorm::rms_norm, the kept
// LayerNorms, and the ops that read a parameter the plan changed (centered, untied).
//
// Every kind of mark is one row of foldedMarkKinds(): a plan entry kind the fold reports (a list
// of parameter paths, or an op the fold inserts) with the role and label line it gets (fused
// add + RMSNorm, aten::rms_norm and scale-absorbing centerings included). A new plan
// entry kind (an absorbed scale, an inserted centering) is one more row, plus the list it is
// matched against in FoldedMarks. Torch-free, like the rest of render.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/graph/graph.h"
#include "foldnorm/render/scene.h"

namespace foldnorm::render {

struct FoldedMarkKind {
  const char* kind;        // "centered": the key in FoldedMarks::parameters, or an op kind's name
  const char* op;          // match ops of this kind ("foldnorm::rms_norm"); nullptr: by parameter
  NodeRole role;           // fill on the folded canvas
  const char* line;        // label line added to the op ("centered", "RMSNorm (folded)")
  bool countsAsFolded;     // for the block summaries: a folded LN (true) or a kept one
  bool countsAsLayerNorm;  // counted in the summaries at all
  const char* source = nullptr;  // with `op`: only nodes whose source location starts with this
};

/// The rows, in order of strength (a node matching several keeps the first role, all lines).
const std::vector<FoldedMarkKind>& foldedMarkKinds();

/// What the fold reported, by kind: parameter paths (FoldReport::centered, ::untied, ...).
struct FoldedMarks {
  std::map<std::string, std::set<std::string>> parameters;
};

/// The marks of a fold made from `analysis` (of `original`), on the graph of the folded file:
/// "centered" the paths whose values the fold centered (a parameter centered in place with every
/// name tied to it, an attribute that got its own centered copy), "untied" the attributes the
/// fold added (the centered copies of parameters also read elsewhere, whose original paths keep
/// the original values and are not marked).
FoldedMarks foldedMarksFor(const Graph& original, const AnalysisResult& analysis, const Graph& folded);

/// `scene` (buildScene of the folded graph with an empty analysis: nothing in it has a verdict)
/// with the marks applied, clusters' LN summaries recounted from the marks (folded / all norms),
/// and a title saying what is shown. Returns the number of nodes marked per kind.
std::map<std::string, int> markFoldedScene(Scene& scene, const Graph& folded, const FoldedMarks& marks);

}  // namespace foldnorm::render
