// The scene builder: picks the view (dataflow, full, or one LN's explanation), puts the
// verdicts on its nodes and makes one scene node per view node. scene_modules.cpp folds modules
// and groups clusters, scene_style.cpp owns the roles' looks.
#include "foldnorm/render/scene.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "foldnorm/analysis/explain.h"
#include "foldnorm/common/error.h"
#include "scene_modules.h"

namespace foldnorm::render {

SceneOptions parseViewSpec(const std::string& spec) {
  SceneOptions o;
  if (spec == "dataflow" || spec.empty()) {
    o.view = ViewKind::Dataflow;
  } else if (spec == "full") {
    o.view = ViewKind::Full;
  } else if (spec.rfind("ln:", 0) == 0 && spec.size() > 3) {
    o.view = ViewKind::LayerNorm;
    o.layerNorm = spec.substr(3);
  } else {
    throw Error("unknown view '" + spec + "': the views are dataflow, full or ln:PATH (PATH = a LayerNorm's "
                "module path)");
  }
  return o;
}

std::vector<std::string> layerNormNames(const AnalysisResult& analysis) {
  std::map<std::string, int> count;
  for (const auto& v : analysis.layerNorms) ++count[v.info.modulePath];
  std::map<std::string, int> seen;
  std::vector<std::string> names;
  for (const auto& v : analysis.layerNorms) {
    std::string base = v.info.modulePath.empty() ? "<top>" : v.info.modulePath;
    int k = seen[v.info.modulePath]++;
    names.push_back(count[v.info.modulePath] > 1 ? base + "#" + std::to_string(k) : base);
  }
  return names;
}

namespace {

std::string shortOp(const std::string& kind) {
  auto colon = kind.rfind("::");
  return colon == std::string::npos ? kind : kind.substr(colon + 2);
}

/// Per view node: role and flags, before they become scene nodes.
struct Marks {
  NodeRole role = NodeRole::Plain;
  bool onPath = false;
  bool breaker = false;
  bool unsafeConsumer = false;
  bool leaf = false;
  bool insertedAfter = false;      // the fold inserts x - mean(x) after this node
  std::vector<std::string> notes;  // verdict text for the tooltip
};

int rank(NodeRole r) {
  switch (r) {
    case NodeRole::FoldableLayerNorm:
    case NodeRole::BlockedLayerNorm: return 5;
    case NodeRole::Breaker: return 4;
    case NodeRole::UnsafeConsumer: return 3;
    case NodeRole::Leaf:
    case NodeRole::AbsorbedScale:
    case NodeRole::InsertedCentering: return 2;
    default: return 0;
  }
}

void raise(Marks& m, NodeRole r) {
  if (rank(r) > rank(m.role)) m.role = r;
}

class SceneBuilder {
 public:
  SceneBuilder(const Graph& g, const AnalysisResult& a, const SceneOptions& o) : g_(g), a_(a), o_(o) {}

  Scene build(const std::string& modelName) {
    DataflowViewOptions vo;
    vo.hidePlumbing = o_.view != ViewKind::Full;
    view_ = buildDataflowView(g_, vo);
    marks_.assign(view_.nodes().size(), Marks{});
    std::string viewName = o_.view == ViewKind::Full ? "full graph" : "dataflow view";
    if (o_.view == ViewKind::LayerNorm) {
      auto names = layerNormNames(a_);
      auto it = std::find(names.begin(), names.end(), o_.layerNorm);
      if (it == names.end()) {
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        throw Error("no LayerNorm '" + o_.layerNorm + "' in this model; valid ln: paths: " +
                    (list.empty() ? "(none: the model has no aten::layer_norm)" : list));
      }
      std::size_t index = static_cast<std::size_t>(it - names.begin());
      const LnExplanation explanation = explainLayerNorm(g_, a_, index);
      view_ = view_.induced(explanationNodes(explanation));
      marks_.assign(view_.nodes().size(), Marks{});
      markVerdict(a_.layerNorms[index], /*ownLeaves=*/true);
      markExplanationLeaves(explanation);
      const auto& verdict = a_.layerNorms[index];
      viewName = "mean-zero graph of " + o_.layerNorm + ": " +
                 (verdict.foldable ? std::string("foldable")
                                   : std::string("NOT foldable (") + toString(verdict.reason) + ")");
    } else {
      for (const auto& v : a_.layerNorms) markVerdict(v, false);
      for (auto l : a_.centeredLeaves) markLeaf(a_.leaves.at(l), "centered by the fold");
    }
    Scene scene = makeScene();
    if (o_.collapseDepth > 0) scene = detail::collapseModules(std::move(scene), o_.collapseDepth, lines_);
    detail::assignClusters(scene, g_, a_, o_.clusters, lines_);
    scene.legend = o_.legend;
    scene.title = (modelName.empty() ? std::string() : modelName + ": ") + viewName;
    if (o_.view != ViewKind::LayerNorm)
      scene.title += ", " + std::to_string(a_.foldableCount()) + "/" + std::to_string(a_.layerNorms.size()) +
                     " LNs foldable";
    return scene;
  }

 private:
  // ---- verdicts onto view nodes ----

  /// View nodes showing the nodes of a path, in order. A hidden node on the path (the graph's
  /// input or return node, a tuple/list bundle) maps to the neighbour of the previous view node
  /// whose edge runs through it: so a shift that reaches the return through a TupleConstruct
  /// ends at the model output node, not at the op that produced the value.
  void pathToView(const std::vector<NodeId>& path, std::vector<ViewIndex>& out) const {
    for (auto n : path) {
      ViewIndex v = view_.indexOf(n);
      if (v == kNone && !out.empty()) {
        auto passes = [&](const ViewEdge& e, ViewIndex other, bool forward) {
          auto kind = view_.node(other).kind;
          if (forward && n == g_.returnNode()) return kind == ViewNode::Kind::ModelOutput;
          if (!forward && n == g_.graphInputNode()) return kind == ViewNode::Kind::ModelInput;
          return std::find(e.through.begin(), e.through.end(), n) != e.through.end();
        };
        for (auto e : view_.outEdges(out.back()))
          if (passes(view_.edge(e), view_.edge(e).to, true)) { v = view_.edge(e).to; break; }
        if (v == kNone)
          for (auto e : view_.inEdges(out.back()))
            if (passes(view_.edge(e), view_.edge(e).from, false)) { v = view_.edge(e).from; break; }
      }
      if (v != kNone && (out.empty() || out.back() != v)) out.push_back(v);
    }
  }

  void markPath(const std::vector<NodeId>& path) {
    std::vector<ViewIndex> nodes;
    pathToView(path, nodes);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      marks_[nodes[i]].onPath = true;
      if (i + 1 < nodes.size()) {
        pathPairs_.insert({nodes[i], nodes[i + 1]});
        pathPairs_.insert({nodes[i + 1], nodes[i]});
      }
    }
  }

  /// The last view node of a path (where the path's end node is shown).
  /// kNone when the path's last node has no view node of its own.
  ViewIndex pathEnd(const std::vector<NodeId>& path) const {
    if (path.empty()) return kNone;
    std::vector<ViewIndex> all, head;
    pathToView(path, all);
    pathToView(std::vector<NodeId>(path.begin(), path.end() - 1), head);
    return all.size() > head.size() ? all.back() : kNone;
  }

  void markLeaf(const Leaf& leaf, const std::string& why) {
    ViewIndex v = view_.indexOf(leaf.node);
    if (v == kNone && leaf.kind == LeafKind::Parameter && leaf.output != kNone) {
      // A parameter read directly (x + pos): its read is plumbing, hidden; the op that shows the
      // parameter among its own ("pos: pos [8, 32]") is where the centering is marked.
      for (const auto& use : g_.value(leaf.output).uses)
        if (ViewIndex u = view_.indexOf(use.node); u != kNone) {
          raise(marks_[u], NodeRole::Leaf);
          marks_[u].leaf = true;
          const ParamId param = g_.value(leaf.output).param;
          marks_[u].notes.push_back("leaf (parameter " + (param == kNone ? std::string("read here") : g_.parameter(param).path) +
                                    "), " + why);
        }
      return;
    }
    if (v == kNone) return;
    if (leaf.kind == LeafKind::InsertedCentering) {
      raise(marks_[v], NodeRole::InsertedCentering);
      marks_[v].insertedAfter = true;
      marks_[v].notes.push_back("x - mean(x) along " + toString(leaf.axes) + " inserted after it, " + why);
      return;
    }
    if (ViewIndex s = leaf.scaleNode == kNone ? kNone : view_.indexOf(leaf.scaleNode); s != kNone) {
      raise(marks_[s], NodeRole::AbsorbedScale);
      marks_[s].notes.push_back("scale " + g_.parameter(leaf.scale).path + " absorbed by centering the scaled map, " + why);
    }
    raise(marks_[v], NodeRole::Leaf);
    marks_[v].leaf = true;
    marks_[v].notes.push_back("leaf (" + std::string(toString(leaf.kind)) + "), " + why);
  }

  void markVerdict(const LayerNormVerdict& verdict, bool ownLeaves) {
    ViewIndex ln = view_.indexOf(verdict.info.node);
    if (ln != kNone) {
      raise(marks_[ln], verdict.foldable ? NodeRole::FoldableLayerNorm : NodeRole::BlockedLayerNorm);
      marks_[ln].notes.push_back(verdict.foldable ? "foldable" : "not foldable: " + verdict.explanation);
    }
    if (ownLeaves)
      for (auto l : verdict.leaves) markLeaf(a_.leaves.at(l), "needed by this LN");
    if (verdict.foldable) return;
    switch (verdict.reason) {
      case VerdictReason::Breaker: {
        markPath(verdict.path);
        ViewIndex b = view_.indexOf(verdict.breaker);
        if (b == kNone && !verdict.path.empty() && verdict.path.back() == verdict.breaker) b = pathEnd(verdict.path);
        if (b != kNone) {
          raise(marks_[b], NodeRole::Breaker);
          marks_[b].breaker = true;
          marks_[b].notes.push_back("breaks mean-zero for the LN at " + verdict.info.modulePath);
        }
        break;
      }
      case VerdictReason::UnsafeShift: {
        markPath(verdict.path);
        ViewIndex c = pathEnd(verdict.path);
        if (c != kNone) {
          raise(marks_[c], NodeRole::UnsafeConsumer);
          marks_[c].unsafeConsumer = true;
          marks_[c].notes.push_back("sees the centering shift that blocks the LN at " + verdict.info.modulePath);
        }
        // The unsafe leaf starts the (marked) path; it is a "leaf to center" only in the ln: view.
        if (verdict.unsafeLeaf != kNone && !ownLeaves)
          if (ViewIndex l = view_.indexOf(a_.leaves.at(verdict.unsafeLeaf).node); l != kNone)
            marks_[l].notes.push_back("leaf that may not be centered: its shift reaches " +
                                      g_.describeNode(verdict.consumer));
        break;
      }
      case VerdictReason::SharedParameter:
      case VerdictReason::ParameterConflict: {
        if (verdict.sharedParameter == kNone) break;
        for (auto read : g_.parameter(verdict.sharedParameter).reads)
          for (const auto& use : g_.value(read).uses) {
            ViewIndex c = view_.indexOf(use.node);
            if (c == kNone) continue;
            marks_[c].notes.push_back("reads " + g_.parameter(verdict.sharedParameter).path + ", which the LN at " +
                                      verdict.info.modulePath + " would center");
          }
        break;
      }
      default: break;
    }
  }

  // ---- the ln: view ----

  /// The view nodes of the LN's explanation: its marked ops, the model inputs it reached, and
  /// where its verdict path ends at the graph's input or return node, the input/output shown there.
  std::vector<bool> explanationNodes(const LnExplanation& e) const {
    std::vector<bool> keep(view_.nodes().size(), false);
    for (ViewIndex i = 0; i < view_.nodes().size(); ++i) {
      const auto& n = view_.node(i);
      if (n.kind == ViewNode::Kind::Op) keep[i] = e.marked(n.node);
      else if (n.kind == ViewNode::Kind::ModelInput)
        keep[i] = std::find(e.modelInputs.begin(), e.modelInputs.end(), n.value) != e.modelInputs.end();
    }
    std::vector<ViewIndex> pathNodes;
    pathToView(e.path, pathNodes);
    for (auto i : pathNodes) keep[i] = true;
    return keep;
  }

  /// Roles the verdict marks do not give: the ops between a leaf's weight and the leaf itself.
  void markExplanationLeaves(const LnExplanation& e) {
    for (ViewIndex i = 0; i < view_.nodes().size(); ++i)
      if (view_.node(i).kind == ViewNode::Kind::Op && e.role(view_.node(i).node) == ExplanationRole::Leaf) {
        raise(marks_[i], NodeRole::Leaf);
        marks_[i].leaf = true;
      }
  }

  // ---- scene nodes ----

  Scene makeScene() {
    Scene s;
    const auto names = layerNormNames(a_);
    std::unordered_map<NodeId, std::string> lnName;
    for (std::size_t i = 0; i < a_.layerNorms.size(); ++i) lnName[a_.layerNorms[i].info.node] = names[i];
    std::unordered_map<NodeId, const LayerNormVerdict*> verdictOf;
    for (const auto& v : a_.layerNorms) verdictOf[v.info.node] = &v;

    for (ViewIndex i = 0; i < view_.nodes().size(); ++i) {
      const auto& vn = view_.node(i);
      const auto& m = marks_[i];
      SceneNode n;
      n.role = m.role;
      n.onPath = m.onPath;
      n.breaker = m.breaker;
      n.modulePath = vn.modulePath;
      n.graphNode = vn.node;
      switch (vn.kind) {
        case ViewNode::Kind::ModelInput:
          n.id = "in" + std::to_string(i);
          if (n.role == NodeRole::Plain) n.role = NodeRole::Input;
          n.title = "input " + vn.name;
          n.tooltip = "model input " + vn.name + " " + g_.describeTensor(vn.value);
          if (!vn.shape.empty()) n.lines.push_back(vn.shape);
          break;
        case ViewNode::Kind::ModelOutput:
          n.id = "out" + std::to_string(i);
          if (n.role == NodeRole::Plain) n.role = NodeRole::Output;
          n.title = vn.name;
          n.tooltip = "model " + vn.name + " " + g_.describeTensor(vn.value);
          if (!vn.shape.empty()) n.lines.push_back(vn.shape);
          break;
        case ViewNode::Kind::Op:
          n.id = "n" + std::to_string(vn.node);
          n.title = shortOp(vn.opKind);
          n.tooltip = g_.describeNode(vn.node);
          if (vn.value != kNone) n.tooltip += " -> " + g_.describeTensor(vn.value);
          break;
      }
      if (auto it = verdictOf.find(vn.node); vn.kind == ViewNode::Kind::Op && it != verdictOf.end()) {
        const auto& v = *it->second;
        n.title += v.foldable ? "  foldable" : "  NOT foldable";
        if (!v.foldable) n.lines.push_back(std::string("(") + toString(v.reason) + ")");
      }
      if (m.breaker && n.role != NodeRole::Breaker) n.lines.push_back("breaks mean-zero");
      else if (n.role == NodeRole::Breaker) n.lines.push_back("breaks mean-zero");
      if (n.role == NodeRole::UnsafeConsumer) n.lines.push_back("sees a centering shift");
      if (n.role == NodeRole::Leaf) n.lines.push_back(o_.view == ViewKind::LayerNorm ? "leaf" : "leaf: center");
      if (n.role == NodeRole::AbsorbedScale) n.lines.push_back("scale absorbed");
      if (m.insertedAfter) n.lines.push_back("then x - mean(x) (inserted)");
      // Module path (shortened to the cluster later), shape, parameters.
      if (vn.kind == ViewNode::Kind::Op && !vn.shape.empty()) lines_.shape[s.nodes.size()] = vn.shape;
      for (const auto& p : vn.parameters) {
        std::string line = p.path == vn.modulePath + "." + p.role ? p.role + " " + formatShape(p.shape) : p.text();
        lines_.params[s.nodes.size()].push_back(line);
      }
      for (const auto& note : m.notes) n.tooltip += "\n" + note;
      s.nodes.push_back(std::move(n));
    }
    for (const auto& e : view_.edges()) {
      SceneEdge se;
      se.from = e.from;
      se.to = e.to;
      se.label = e.shape;
      se.onPath = pathPairs_.count({e.from, e.to}) > 0;
      s.edges.push_back(std::move(se));
    }
    return s;
  }

  const Graph& g_;
  const AnalysisResult& a_;
  const SceneOptions& o_;
  DataflowView view_;
  std::vector<Marks> marks_;
  std::set<std::pair<ViewIndex, ViewIndex>> pathPairs_;
  detail::PendingLines lines_;
};

}  // namespace

Scene buildScene(const Graph& graph, const AnalysisResult& analysis, const SceneOptions& options,
                 const std::string& modelName) {
  if (options.collapseDepth < 0) throw Error("the collapse depth must be 0 (off) or a positive module depth, not " +
                std::to_string(options.collapseDepth));
  return SceneBuilder(graph, analysis, options).build(modelName);
}

}  // namespace foldnorm::render