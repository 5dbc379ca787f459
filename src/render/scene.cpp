#include "foldnorm/render/scene.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <unordered_map>

#include "foldnorm/common/error.h"

namespace foldnorm::render {

const char* toString(NodeRole role) {
  switch (role) {
    case NodeRole::Plain: return "plain";
    case NodeRole::Input: return "input";
    case NodeRole::Output: return "output";
    case NodeRole::FoldableLayerNorm: return "foldable-ln";
    case NodeRole::BlockedLayerNorm: return "blocked-ln";
    case NodeRole::Leaf: return "leaf";
    case NodeRole::Breaker: return "breaker";
    case NodeRole::UnsafeConsumer: return "unsafe-consumer";
    case NodeRole::ModuleAllFoldable: return "module-all-foldable";
    case NodeRole::ModuleSomeFoldable: return "module-some-foldable";
    case NodeRole::ModuleNoneFoldable: return "module-none-foldable";
    case NodeRole::Module: return "module";
  }
  return "?";
}

const RoleStyle& roleStyle(NodeRole role) {
  // Light fills keep black text readable; hue pairs avoid red/green alone carrying meaning
  // (titles say "foldable" / "NOT foldable" and breakers/consumers have their own shapes).
  static const RoleStyle kPlain{"#ffffff", "#8c8c8c", "box", "other op"};
  static const RoleStyle kInput{"#e8e8e8", "#595959", "invhouse", "model input"};
  static const RoleStyle kOutput{"#e8e8e8", "#595959", "house", "model output"};
  static const RoleStyle kFoldable{"#a6dba0", "#1b7837", "box", "LayerNorm, foldable"};
  static const RoleStyle kBlocked{"#f4a582", "#b2182b", "box", "LayerNorm, NOT foldable"};
  static const RoleStyle kLeaf{"#92c5de", "#2166ac", "box", "leaf to center"};
  static const RoleStyle kBreaker{"#fdb863", "#b35806", "octagon", "breaks mean-zero"};
  static const RoleStyle kUnsafe{"#d8b4e2", "#762a83", "doubleoctagon", "sees a centering shift"};
  static const RoleStyle kModAll{"#d9f0d3", "#1b7837", "box3d", "module, all LNs foldable"};
  static const RoleStyle kModSome{"#fee090", "#8c6d1f", "box3d", "module, some LNs foldable"};
  static const RoleStyle kModNone{"#fddbc7", "#b2182b", "box3d", "module, no LN foldable"};
  static const RoleStyle kModule{"#f0f0f0", "#8c8c8c", "box3d", "module without LNs"};
  switch (role) {
    case NodeRole::Plain: return kPlain;
    case NodeRole::Input: return kInput;
    case NodeRole::Output: return kOutput;
    case NodeRole::FoldableLayerNorm: return kFoldable;
    case NodeRole::BlockedLayerNorm: return kBlocked;
    case NodeRole::Leaf: return kLeaf;
    case NodeRole::Breaker: return kBreaker;
    case NodeRole::UnsafeConsumer: return kUnsafe;
    case NodeRole::ModuleAllFoldable: return kModAll;
    case NodeRole::ModuleSomeFoldable: return kModSome;
    case NodeRole::ModuleNoneFoldable: return kModNone;
    case NodeRole::Module: return kModule;
  }
  return kPlain;
}

std::vector<NodeRole> legendEntries(const Scene& scene) {
  static const NodeRole kOrder[] = {NodeRole::FoldableLayerNorm, NodeRole::BlockedLayerNorm, NodeRole::Leaf,
                                    NodeRole::Breaker, NodeRole::UnsafeConsumer, NodeRole::ModuleAllFoldable,
                                    NodeRole::ModuleSomeFoldable, NodeRole::ModuleNoneFoldable, NodeRole::Module};
  std::set<NodeRole> present;
  for (const auto& n : scene.nodes) present.insert(n.role);
  std::vector<NodeRole> out;
  for (auto r : kOrder)
    if (present.count(r)) out.push_back(r);
  return out;
}

uint32_t toImGuiColour(const char* hex, uint8_t alpha) {
  auto nibble = [](char c) -> uint32_t {
    if (c >= '0' && c <= '9') return c - '0';
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return (c >= 'a' && c <= 'f') ? 10 + (c - 'a') : 0;
  };
  if (!hex || hex[0] != '#') return uint32_t{alpha} << 24;
  uint32_t r = nibble(hex[1]) * 16 + nibble(hex[2]);
  uint32_t g = nibble(hex[3]) * 16 + nibble(hex[4]);
  uint32_t b = nibble(hex[5]) * 16 + nibble(hex[6]);
  return (uint32_t{alpha} << 24) | (b << 16) | (g << 8) | r;
}

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
    throw Error("unknown view '" + spec + "': use dataflow, full or ln:PATH (PATH = a LayerNorm's module "
                "path, as `foldnorm analyze` lists them)");
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

std::vector<std::string> splitPath(const std::string& path) {
  std::vector<std::string> parts;
  if (path.empty()) return parts;
  std::size_t start = 0;
  while (true) {
    auto dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::string joinPrefix(const std::vector<std::string>& parts, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n && i < parts.size(); ++i) s += (i ? "." : "") + parts[i];
  return s;
}

/// "0", "12", "encoder_layer_3", "block2": an element of a ModuleList/Sequential.
bool isIndexed(const std::string& component) {
  return !component.empty() && std::isdigit(static_cast<unsigned char>(component.back()));
}

bool isPrefixOf(const std::string& prefix, const std::string& path) {
  return prefix.empty() || path == prefix ||
         (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 && path[prefix.size()] == '.');
}

std::string shortOp(const std::string& kind) {
  auto colon = kind.rfind("::");
  return colon == std::string::npos ? kind : kind.substr(colon + 2);
}

/// Path relative to the enclosing cluster's module ("attn.c_attn" inside "transformer.h.0").
std::string relativePath(const std::string& path, const std::string& clusterPath) {
  if (!clusterPath.empty() && path.size() > clusterPath.size() && isPrefixOf(clusterPath, path))
    return path.substr(clusterPath.size() + 1);
  return path;
}

/// Per view node: role and flags, before they become scene nodes.
struct Marks {
  NodeRole role = NodeRole::Plain;
  bool onPath = false;
  bool breaker = false;
  bool unsafeConsumer = false;
  bool leaf = false;
  std::vector<std::string> notes;  // verdict text for the tooltip
};

int rank(NodeRole r) {
  switch (r) {
    case NodeRole::FoldableLayerNorm:
    case NodeRole::BlockedLayerNorm: return 5;
    case NodeRole::Breaker: return 4;
    case NodeRole::UnsafeConsumer: return 3;
    case NodeRole::Leaf: return 2;
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
      view_ = view_.induced(meanZeroGraphOf(a_.layerNorms[index]));
      marks_.assign(view_.nodes().size(), Marks{});
      markVerdict(a_.layerNorms[index], /*ownLeaves=*/true);
      const auto& verdict = a_.layerNorms[index];
      viewName = "mean-zero graph of " + o_.layerNorm + ": " +
                 (verdict.foldable ? std::string("foldable")
                                   : std::string("NOT foldable (") + toString(verdict.reason) + ")");
    } else {
      for (const auto& v : a_.layerNorms) markVerdict(v, false);
      for (auto l : a_.centeredLeaves) markLeaf(a_.leaves.at(l), "centered by the fold");
    }
    Scene scene = makeScene();
    if (o_.collapseDepth > 0) scene = collapse(std::move(scene));
    assignClusters(scene);
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
    if (v == kNone) return;
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

  /// The LN, every value its input's fact came from back to its leaves or breaker, and the
  /// nodes of its verdict path (LN -> breaker, or leaf -> unsafe consumer).
  std::vector<bool> meanZeroGraphOf(const LayerNormVerdict& verdict) const {
    std::set<NodeId> keepNodes{verdict.info.node};
    std::set<ValueId> keepValues;
    ValueId start = g_.node(verdict.info.node).inputs.at(0);
    const MeanZeroFact& target = a_.facts.at(start);
    std::set<ValueId> leafOutputs;
    for (auto l : verdict.leaves) leafOutputs.insert(a_.leaves.at(l).output);
    auto relevant = [&](ValueId v) {
      const auto& f = a_.facts.at(v);
      if (target.isMeanZero())
        return f.isMeanZero() && !f.leaves.empty() &&
               std::includes(target.leaves.begin(), target.leaves.end(), f.leaves.begin(), f.leaves.end());
      if (target.state == MeanZeroFact::State::Broken)
        return f.state == MeanZeroFact::State::Broken && f.breaker == target.breaker;
      return false;
    };
    auto bundling = [&](ValueId v) {
      NodeId p = g_.value(v).producer;
      return p != kNone && !isVisibleInDataflow(g_, p) && p != g_.graphInputNode() &&
             (g_.value(v).kind == ValueKind::TensorList || g_.value(v).kind == ValueKind::Tuple ||
              g_.node(p).kind == "prim::ListUnpack" || g_.node(p).kind == "prim::TupleUnpack");
    };
    std::vector<ValueId> stack{start};
    while (!stack.empty()) {
      ValueId v = stack.back();
      stack.pop_back();
      if (!keepValues.insert(v).second) continue;
      NodeId p = g_.value(v).producer;
      if (p == kNone) continue;
      keepNodes.insert(p);
      if (leafOutputs.count(v) || p == target.breaker || p == g_.graphInputNode()) continue;
      for (auto w : g_.node(p).inputs)
        if (relevant(w) || bundling(w)) stack.push_back(w);
    }
    for (auto l : verdict.leaves) {
      keepNodes.insert(a_.leaves.at(l).node);
      keepNodes.insert(a_.leaves.at(l).chain.begin(), a_.leaves.at(l).chain.end());
    }
    keepNodes.insert(verdict.path.begin(), verdict.path.end());
    if (verdict.breaker != kNone) keepNodes.insert(verdict.breaker);

    std::vector<bool> keep(view_.nodes().size(), false);
    for (ViewIndex i = 0; i < view_.nodes().size(); ++i) {
      const auto& n = view_.node(i);
      if (n.kind == ViewNode::Kind::Op) keep[i] = keepNodes.count(n.node) > 0;
      else if (n.kind == ViewNode::Kind::ModelInput) keep[i] = keepValues.count(n.value) > 0;
    }
    // Path ends at the graph's input or return node: keep the input/output node shown for it.
    std::vector<ViewIndex> pathNodes;
    pathToView(verdict.path, pathNodes);
    for (auto i : pathNodes) keep[i] = true;
    return keep;
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
      // Module path (shortened to the cluster later), shape, parameters.
      if (vn.kind == ViewNode::Kind::Op && !vn.shape.empty()) shapeLine_[s.nodes.size()] = vn.shape;
      for (const auto& p : vn.parameters) {
        std::string line = p.path == vn.modulePath + "." + p.role ? p.role + " " + formatShape(p.shape) : p.text();
        paramLines_[s.nodes.size()].push_back(line);
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

  // ---- collapse ----

  Scene collapse(Scene in) {
    Scene out;
    std::vector<std::size_t> map(in.nodes.size());
    std::map<std::string, std::size_t> moduleNode;
    std::map<std::size_t, std::string> oldShape;
    std::map<std::size_t, std::vector<std::string>> oldParams;
    for (std::size_t i = 0; i < in.nodes.size(); ++i) {
      auto& n = in.nodes[i];
      auto parts = splitPath(n.modulePath);
      if (parts.size() < static_cast<std::size_t>(o_.collapseDepth)) {
        map[i] = out.nodes.size();
        if (shapeLine_.count(i)) oldShape[out.nodes.size()] = shapeLine_[i];
        if (paramLines_.count(i)) oldParams[out.nodes.size()] = paramLines_[i];
        out.nodes.push_back(std::move(n));
        continue;
      }
      std::string key = joinPrefix(parts, o_.collapseDepth);
      auto it = moduleNode.find(key);
      if (it == moduleNode.end()) {
        SceneNode m;
        m.id = "m" + std::to_string(moduleNode.size());
        m.role = NodeRole::Module;
        m.modulePath = key;
        m.title = key;
        it = moduleNode.emplace(key, out.nodes.size()).first;
        out.nodes.push_back(std::move(m));
      }
      auto& m = out.nodes[it->second];
      map[i] = it->second;
      if (n.graphNode != kNone) m.members.push_back(n.graphNode);
      m.onPath = m.onPath || n.onPath;
      m.breaker = m.breaker || n.breaker;
      if (n.role == NodeRole::FoldableLayerNorm || n.role == NodeRole::BlockedLayerNorm) {
        ++m.layerNorms;
        if (n.role == NodeRole::FoldableLayerNorm) ++m.foldableLayerNorms;
      }
    }
    for (auto& [key, index] : moduleNode) {
      auto& m = out.nodes[index];
      if (m.layerNorms == 0) m.role = NodeRole::Module;
      else if (m.foldableLayerNorms == m.layerNorms) m.role = NodeRole::ModuleAllFoldable;
      else if (m.foldableLayerNorms == 0) m.role = NodeRole::ModuleNoneFoldable;
      else m.role = NodeRole::ModuleSomeFoldable;
      m.lines.push_back(m.layerNorms ? std::to_string(m.foldableLayerNorms) + "/" + std::to_string(m.layerNorms) +
                                           " LNs foldable"
                                     : "no LayerNorm");
      m.lines.push_back(std::to_string(m.members.size()) + " ops" + (m.breaker ? ", has a breaker" : ""));
      m.tooltip = "module " + key + ": " + m.lines[0] + ", " + m.lines[1];
    }
    shapeLine_ = std::move(oldShape);
    paramLines_ = std::move(oldParams);
    // Contract edges; one edge per (from, to), labelled with the distinct shapes it carries.
    std::map<std::pair<std::size_t, std::size_t>, std::size_t> edgeIndex;
    for (const auto& e : in.edges) {
      auto key = std::make_pair(map[e.from], map[e.to]);
      if (key.first == key.second) continue;
      auto it = edgeIndex.find(key);
      if (it == edgeIndex.end()) {
        edgeIndex[key] = out.edges.size();
        out.edges.push_back(SceneEdge{key.first, key.second, e.label, e.onPath});
      } else {
        auto& se = out.edges[it->second];
        se.onPath = se.onPath || e.onPath;
        if (!e.label.empty() && se.label.find(e.label) == std::string::npos) se.label += "\n" + e.label;
      }
    }
    return out;
  }

  // ---- clusters and final labels ----

  void assignClusters(Scene& s) {
    // Module paths of the whole graph, so a block is a cluster in every view of the model.
    std::set<std::string> paths;
    for (const auto& n : g_.nodes())
      if (!n.modulePath.empty()) paths.insert(n.modulePath);
    auto hasDeeper = [&](const std::string& prefix) {
      auto it = paths.upper_bound(prefix);
      for (; it != paths.end() && it->compare(0, prefix.size(), prefix) == 0; ++it)
        if (it->size() > prefix.size() && (*it)[prefix.size()] == '.') return true;
      return false;
    };
    // Blocks: prefixes ending in an indexed component that contain deeper modules (or, for a
    // collapsed module node, that contain it).
    std::map<std::string, int> clusterOf;
    auto clusterChain = [&](const SceneNode& n) {
      std::vector<std::string> chain;
      auto parts = splitPath(n.modulePath);
      bool isModule = !n.members.empty() || n.role == NodeRole::Module;
      std::size_t limit = isModule ? parts.size() - 1 : parts.size();  // a module node is not its own cluster
      for (std::size_t k = 1; k <= limit && k <= parts.size(); ++k) {
        if (!isIndexed(parts[k - 1])) continue;
        std::string prefix = joinPrefix(parts, k);
        if (k < parts.size() || hasDeeper(prefix)) chain.push_back(prefix);
      }
      return chain;
    };
    if (o_.clusters) {
      for (auto& n : s.nodes) {
        if (n.modulePath.empty()) continue;
        int parent = -1;
        for (const auto& prefix : clusterChain(n)) {
          auto it = clusterOf.find(prefix);
          if (it == clusterOf.end()) {
            SceneCluster c;
            c.id = "cluster_" + std::to_string(s.clusters.size());
            c.modulePath = prefix;
            c.parent = parent;
            it = clusterOf.emplace(prefix, static_cast<int>(s.clusters.size())).first;
            s.clusters.push_back(std::move(c));
          }
          parent = it->second;
        }
        n.cluster = parent;
      }
      for (const auto& v : a_.layerNorms)
        for (auto& c : s.clusters)
          if (isPrefixOf(c.modulePath, v.info.modulePath) && v.info.modulePath != c.modulePath) {
            ++c.layerNorms;
            if (v.foldable) ++c.foldableLayerNorms;
          }
      for (auto& c : s.clusters) {
        c.label = c.modulePath;
        if (c.layerNorms)
          c.label += "  (" + std::to_string(c.foldableLayerNorms) + "/" + std::to_string(c.layerNorms) +
                     " LNs foldable)";
      }
    }
    for (std::size_t i = 0; i < s.nodes.size(); ++i) {
      auto& n = s.nodes[i];
      if (n.graphNode == kNone) continue;  // inputs, outputs, modules: labelled already
      std::string clusterPath = n.cluster >= 0 ? s.clusters[n.cluster].modulePath : std::string();
      std::string rel = relativePath(n.modulePath, clusterPath);
      std::vector<std::string> lines;
      if (!rel.empty() && n.modulePath != clusterPath) lines.push_back(rel);
      if (shapeLine_.count(i)) lines.push_back(shapeLine_[i]);
      for (const auto& p : paramLines_[i]) lines.push_back(p);
      lines.insert(lines.end(), n.lines.begin(), n.lines.end());
      n.lines = std::move(lines);
    }
  }

  const Graph& g_;
  const AnalysisResult& a_;
  const SceneOptions& o_;
  DataflowView view_;
  std::vector<Marks> marks_;
  std::set<std::pair<ViewIndex, ViewIndex>> pathPairs_;
  std::map<std::size_t, std::string> shapeLine_;                 // scene node -> its shape line
  std::map<std::size_t, std::vector<std::string>> paramLines_;   // scene node -> parameter lines
};

}  // namespace

Scene buildScene(const Graph& graph, const AnalysisResult& analysis, const SceneOptions& options,
                 const std::string& modelName) {
  if (options.collapseDepth < 0) throw Error("--collapse DEPTH must be 0 (off) or a positive module depth");
  return SceneBuilder(graph, analysis, options).build(modelName);
}

}  // namespace foldnorm::render
