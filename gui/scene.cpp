#include "scene.h"

#include "highlight.h"

#include <algorithm>
#include <map>

namespace foldnorm::gui {

std::vector<int> topLevelBlocks(const render::Scene& scene) {
  std::vector<int> top(scene.clusters.size(), -1);
  for (std::size_t c = 0; c < scene.clusters.size(); ++c) {
    int k = static_cast<int>(c);
    while (scene.clusters[k].parent >= 0) k = scene.clusters[k].parent;
    top[c] = k;
  }
  return top;
}

std::string shortBlockName(const std::string& path, std::size_t shared) {
  // Drop the leading components every block shares but the last of them: "h.3" for
  // "transformer.h.3" among "transformer.h.*", "encoder.layers.0" beside "decoder.layers.*".
  std::size_t start = 0;
  for (std::size_t k = 1; k < shared; ++k) {
    const auto dot = path.find('.', start);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return path.substr(start);
}

std::size_t sharedComponents(const render::Scene& full) {
  std::vector<std::string> common;
  bool first = true;
  for (const auto& c : full.clusters) {
    if (c.parent >= 0) continue;
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (true) {
      const auto dot = c.modulePath.find('.', start);
      parts.push_back(c.modulePath.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    parts.pop_back();  // a block's own index is never shared
    if (first) common = parts;
    std::size_t k = 0;
    while (k < common.size() && k < parts.size() && common[k] == parts[k]) ++k;
    common.resize(k);
    first = false;
  }
  return common.size();
}

std::vector<std::string> blockSignatures(const render::Scene& full) {
  const std::vector<int> top = topLevelBlocks(full);
  std::vector<std::string> sig(full.clusters.size());
  std::vector<int> localIndex(full.nodes.size(), -1);
  std::vector<int> count(full.clusters.size(), 0);
  for (std::size_t c = 0; c < full.clusters.size(); ++c) {
    if (top[c] != static_cast<int>(c)) continue;
    const std::string& path = full.clusters[c].modulePath;
    const auto dot = path.rfind('.');
    sig[c] = "parent " + (dot == std::string::npos ? std::string() : path.substr(0, dot)) + "\n";
  }
  for (std::size_t i = 0; i < full.nodes.size(); ++i) {
    const render::SceneNode& n = full.nodes[i];
    if (n.cluster < 0) continue;
    const int b = top[n.cluster];
    localIndex[i] = count[b]++;
    // The nested cluster's path relative to the block, so h.0.attn and h.1.attn agree.
    const std::string& nested = full.clusters[n.cluster].modulePath;
    std::string& out = sig[b];
    out += std::to_string(static_cast<int>(n.role)) + "|" + nested.substr(std::min(nested.size(), full.clusters[b].modulePath.size())) + "|" + n.title;
    // Lines can name a parameter by its full path ("weight: ...h.3.attn.out_proj.weight"): the
    // block's own path is taken out so that repeats compare equal.
    const std::string own = full.clusters[b].modulePath + ".";
    for (std::string l : n.lines) {
      for (auto at = l.find(own); at != std::string::npos; at = l.find(own, at)) l.erase(at, own.size());
      out += "|" + l;
    }
    out += "\n";
  }
  for (const render::SceneEdge& e : full.edges) {
    const render::SceneNode& a = full.nodes[e.from];
    const render::SceneNode& z = full.nodes[e.to];
    if (a.cluster < 0 || z.cluster < 0 || top[a.cluster] != top[z.cluster]) continue;
    sig[top[a.cluster]] += std::to_string(localIndex[e.from]) + ">" + std::to_string(localIndex[e.to]) + " ";
  }
  return sig;
}

std::vector<int> blocksAlongStream(const render::Scene& full) {
  // Cluster order is the order the scene met the blocks' nodes, and a block's first node can be
  // an early helper (a mask, a position op), so blocks are ordered by their median node.
  const std::vector<int> top = topLevelBlocks(full);
  std::map<int, std::vector<std::size_t>> nodesOf;
  for (std::size_t i = 0; i < full.nodes.size(); ++i) {
    if (full.nodes[i].cluster >= 0) nodesOf[top[full.nodes[i].cluster]].push_back(i);
  }
  std::vector<std::pair<std::size_t, int>> keyed;
  for (const auto& [block, nodes] : nodesOf) keyed.emplace_back(nodes[nodes.size() / 2], block);
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> order;
  for (const auto& [key, block] : keyed) order.push_back(block);
  return order;
}

std::vector<std::vector<int>> repeatedRuns(const render::Scene& full, const std::set<int>& expanded,
                                           const std::set<int>& ungrouped) {
  const std::vector<std::string> sig = blockSignatures(full);
  std::vector<std::vector<int>> runs;
  std::vector<int> run;
  auto flush = [&] {
    if (run.size() >= 2) runs.push_back(run);
    run.clear();
  };
  for (int b : blocksAlongStream(full)) {
    if (expanded.count(b) || ungrouped.count(b)) {
      flush();
      continue;
    }
    if (!run.empty() && sig[run.back()] != sig[b]) flush();
    run.push_back(b);
  }
  flush();
  return runs;
}

CollapsedScene collapseBlocks(const render::Scene& full, const std::set<int>& expanded,
                              const std::vector<std::vector<int>>& runs) {
  const std::vector<int> top = topLevelBlocks(full);
  CollapsedScene out;
  render::Scene& shown = out.scene;
  shown.title = full.title;
  shown.legend = false;

  std::vector<int> newCluster(full.clusters.size(), -1);
  for (std::size_t c = 0; c < full.clusters.size(); ++c) {
    if (!expanded.count(top[c])) continue;
    newCluster[c] = static_cast<int>(shown.clusters.size());
    shown.clusters.push_back(full.clusters[c]);
    out.blockOfShownCluster.push_back(static_cast<int>(c));
  }
  for (auto& c : shown.clusters) c.parent = c.parent >= 0 ? newCluster[c.parent] : -1;

  // The box each collapsed block goes to: its run's first block, or itself.
  std::map<int, int> boxOf;
  for (const auto& run : runs)
    for (int b : run) boxOf[b] = run.front();
  auto boxFor = [&](int block) {
    auto it = boxOf.find(block);
    return it == boxOf.end() ? block : it->second;
  };
  auto runOf = [&](int box) {
    for (const auto& run : runs)
      if (run.front() == box) return run;
    return std::vector<int>{box};
  };

  // Which LNs of a block fold and which are kept, by their path in the block ("ln_1"); taken
  // from the first block of a box (the blocks of a group are identical, verdicts included).
  std::map<int, std::pair<std::vector<std::string>, std::vector<std::string>>> lnNames;
  for (const render::SceneNode& n : full.nodes) {
    if (n.cluster < 0) continue;
    const bool fold = n.role == render::NodeRole::FoldableLayerNorm;
    if (!fold && n.role != render::NodeRole::BlockedLayerNorm) continue;
    const std::string name = n.lines.empty() ? n.title : n.lines.front();
    auto& names = lnNames[top[n.cluster]];
    (fold ? names.first : names.second).push_back(name);
  }
  auto nameList = [](const char* what, const std::vector<std::string>& names) {
    constexpr std::size_t kShown = 3;
    std::string text = what;
    for (std::size_t i = 0; i < names.size() && i < kShown; ++i) text += (i ? ", " : " ") + names[i];
    if (names.size() > kShown) text += " +" + std::to_string(names.size() - kShown);
    return text;
  };

  const std::size_t shared = sharedComponents(full);
  std::vector<std::size_t> newNode(full.nodes.size());
  std::map<int, std::size_t> blockNode;  // box (first block) -> its Module node
  for (std::size_t i = 0; i < full.nodes.size(); ++i) {
    const render::SceneNode& n = full.nodes[i];
    const int block = n.cluster >= 0 ? top[n.cluster] : -1;
    if (block < 0 || expanded.count(block)) {
      newNode[i] = shown.nodes.size();
      shown.nodes.push_back(n);
      shown.nodes.back().cluster = n.cluster >= 0 ? newCluster[n.cluster] : -1;
      out.blocksOfNode.emplace_back();
      continue;
    }
    const int box = boxFor(block);
    auto it = blockNode.find(box);
    if (it == blockNode.end()) {
      const std::vector<int> blocks = runOf(box);
      const render::SceneCluster& first = full.clusters[blocks.front()];
      const render::SceneCluster& last = full.clusters[blocks.back()];
      render::SceneNode m;
      m.id = "block" + std::to_string(box);
      for (int b : blocks) {
        m.layerNorms += full.clusters[b].layerNorms;
        m.foldableLayerNorms += full.clusters[b].foldableLayerNorms;
      }
      m.role = render::moduleRole(m.layerNorms, m.foldableLayerNorms);
      const std::string name = first.modulePath.empty() ? first.label : shortBlockName(first.modulePath, shared);
      m.title = blocks.size() == 1 ? name
                                   : name + "-" + shortBlockName(last.modulePath, shared) + " x" +
                                         std::to_string(blocks.size());
      if (m.layerNorms > 0) {
        m.title += ": " + render::foldableCountText(m.layerNorms, m.foldableLayerNorms);
      }
      m.modulePath = first.modulePath;
      if (auto names = lnNames.find(blocks.front()); names != lnNames.end()) {
        if (!names->second.first.empty()) m.lines.push_back(nameList("fold:", names->second.first));
        if (!names->second.second.empty()) m.lines.push_back(nameList("keep:", names->second.second));
      }
      m.tooltip = blocks.size() == 1 ? first.modulePath + "\ndouble-click to expand"
                                     : std::to_string(blocks.size()) + " identical blocks, " +
                                           first.modulePath + " to " + last.modulePath +
                                           " (same ops, same verdicts)\ndouble-click to show each";
      it = blockNode.emplace(box, shown.nodes.size()).first;
      shown.nodes.push_back(std::move(m));
      out.blocksOfNode.push_back(blocks);
    }
    render::SceneNode& m = shown.nodes[it->second];
    if (n.graphNode != kNone) m.members.push_back(n.graphNode);
    m.members.insert(m.members.end(), n.members.begin(), n.members.end());
    newNode[i] = it->second;
  }
  for (auto& [box, index] : blockNode) {
    render::SceneNode& m = shown.nodes[index];
    const std::size_t blocks = out.blocksOfNode[index].size();
    m.lines.push_back((blocks > 1 ? std::to_string(blocks) + " blocks, " : std::string()) +
                      std::to_string(m.members.size() / blocks) + " ops" + (blocks > 1 ? " each" : ""));
  }

  std::map<std::pair<std::size_t, std::size_t>, std::size_t> seen;
  for (const render::SceneEdge& e : full.edges) {
    const std::size_t from = newNode[e.from], to = newNode[e.to];
    if (from == to) continue;
    const NodeId a = full.nodes[e.from].graphNode, z = full.nodes[e.to].graphNode;
    auto [it, added] = seen.emplace(std::make_pair(from, to), shown.edges.size());
    if (added) {
      render::SceneEdge edge = e;
      edge.from = from;
      edge.to = to;
      // Shapes stay on the nodes; edge labels would make dot's ranks taller and its work slower.
      edge.label.clear();
      edge.onPath = false;
      shown.edges.push_back(std::move(edge));
      out.edgeMembers.emplace_back();
    }
    if (a != kNone && z != kNone) out.edgeMembers[it->second].emplace_back(a, z);
  }
  return out;
}

namespace {

ImVec2 toVec(render::Point p) { return ImVec2(static_cast<float>(p.x), static_cast<float>(p.y)); }

}  // namespace

int CanvasScene::canvasIndexOf(NodeId n) const {
  auto it = indexOfNode.find(n);
  if (it != indexOfNode.end()) return it->second;
  if (n < blockOfNode.size() && blockOfNode[n] >= 0) {
    auto b = indexOfBlock.find(blockOfNode[n]);
    if (b != indexOfBlock.end()) return b->second;
  }
  return -1;
}

CanvasScene toCanvasScene(const render::Scene& full, const CollapsedScene& collapsed,
                          const render::SceneLayout& layout, std::size_t graphNodes) {
  const render::Scene& shown = collapsed.scene;
  CanvasScene cs;
  cs.size = ImVec2(static_cast<float>(layout.width), static_cast<float>(layout.height));
  const std::vector<int> top = topLevelBlocks(full);
  cs.blockOfNode.assign(graphNodes, -1);
  for (const auto& n : full.nodes) {
    if (n.graphNode != kNone && n.graphNode < graphNodes && n.cluster >= 0) {
      cs.blockOfNode[n.graphNode] = top[n.cluster];
    }
  }
  cs.nodes.reserve(layout.nodes.size());
  for (const render::NodeLayout& l : layout.nodes) {
    const render::SceneNode& s = shown.nodes[l.node];
    CanvasNode n;
    n.node = s.graphNode;
    n.role = s.role;
    n.title = s.title;
    n.lines = s.lines;
    n.tooltip = s.tooltip;
    n.min = toVec(l.box.min);
    n.max = toVec(l.box.max);
    const render::RoleStyle& style = render::roleStyle(s.role);
    n.fill = render::toImGuiColour(style.fill);
    n.border = render::toImGuiColour(style.border);
    if (!collapsed.blocksOfNode[l.node].empty()) {
      n.blocks = collapsed.blocksOfNode[l.node];
      n.block = n.blocks.front();
      n.layerNorms = s.layerNorms;
      n.foldable = s.foldableLayerNorms;
      n.members = s.members;
      for (int b : n.blocks) cs.indexOfBlock[b] = static_cast<int>(cs.nodes.size());
    } else if (n.node != kNone) {
      cs.indexOfNode[n.node] = static_cast<int>(cs.nodes.size());
    }
    cs.nodes.push_back(std::move(n));
  }
  for (const render::EdgeLayout& l : layout.edges) {
    const render::SceneEdge& s = shown.edges[l.edge];
    CanvasEdge e;
    e.from = static_cast<int>(s.from);
    e.to = static_cast<int>(s.to);
    for (const auto& p : l.points) e.points.push_back(toVec(p));
    e.hasArrow = l.hasArrow;
    e.arrowTip = toVec(l.arrowTip);
    e.members = collapsed.edgeMembers[l.edge];
    if (e.points.empty()) continue;
    e.min = e.max = e.points.front();
    auto grow = [&](ImVec2 p) {
      e.min = ImVec2(std::min(e.min.x, p.x), std::min(e.min.y, p.y));
      e.max = ImVec2(std::max(e.max.x, p.x), std::max(e.max.y, p.y));
    };
    for (const auto& p : e.points) grow(p);
    if (e.hasArrow) grow(e.arrowTip);
    cs.edges.push_back(std::move(e));
  }
  for (const render::ClusterLayout& l : layout.clusters) {
    const render::SceneCluster& s = shown.clusters[l.cluster];
    CanvasCluster c;
    c.block = collapsed.blockOfShownCluster[l.cluster];
    c.label = s.label;
    c.min = toVec(l.box.min);
    c.max = toVec(l.box.max);
    c.topLevel = s.parent < 0;
    cs.clusters.push_back(std::move(c));
  }
  cs.shownEdgeMembers = collapsed.edgeMembers;
  cs.layoutMilliseconds = layout.milliseconds;
  return cs;
}

}  // namespace foldnorm::gui

namespace foldnorm::gui {

render::Scene sceneForExport(const CanvasScene& canvas, const Highlight& h, const std::string& caption) {
  render::Scene scene = *canvas.shown;
  scene.legend = true;
  if (!caption.empty()) scene.title += (scene.title.empty() ? "" : ": ") + caption;
  if (h.ln == kNone) return scene;
  for (std::size_t i = 0; i < scene.nodes.size() && i < canvas.nodes.size(); ++i) {
    render::SceneNode& n = scene.nodes[i];
    const CanvasNode& c = canvas.nodes[i];
    Role role = Role::None;
    if (!c.blocks.empty()) {
      for (NodeId m : c.members) role = std::max(role, h.role(m));
    } else {
      role = h.role(c.node);
    }
    switch (role) {
      case Role::None:
        n.role = render::NodeRole::Plain;  // dimmed: not part of the explanation
        break;
      case Role::Leaf:
        if (c.blocks.empty()) n.role = render::NodeRole::Leaf;
        n.onPath = true;
        break;
      case Role::Breaker:
        if (c.blocks.empty()) n.role = render::NodeRole::Breaker;
        n.breaker = true;
        break;
      case Role::Consumer:
        if (c.blocks.empty()) n.role = render::NodeRole::UnsafeConsumer;
        n.onPath = true;
        break;
      case Role::SelectedLn:
        break;  // keeps its verdict colour
      default:
        n.onPath = true;
        if (c.blocks.empty() && n.role != render::NodeRole::Input) n.role = render::NodeRole::Plain;
    }
  }
  for (std::size_t e = 0; e < scene.edges.size() && e < canvas.shownEdgeMembers.size(); ++e) {
    for (const auto& [from, to] : canvas.shownEdgeMembers[e]) {
      if (h.hasEdge(from, to)) scene.edges[e].onPath = true;
    }
  }
  return scene;
}

}  // namespace foldnorm::gui
