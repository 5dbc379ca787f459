#include "scene.h"

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

render::Scene collapseBlocks(const render::Scene& full, const std::set<int>& expanded,
                             std::vector<int>* blockOfShownCluster) {
  const std::vector<int> top = topLevelBlocks(full);
  render::Scene shown;
  shown.title = full.title;
  shown.legend = false;
  blockOfShownCluster->clear();

  std::vector<int> newCluster(full.clusters.size(), -1);
  for (std::size_t c = 0; c < full.clusters.size(); ++c) {
    if (!expanded.count(top[c])) continue;
    newCluster[c] = static_cast<int>(shown.clusters.size());
    shown.clusters.push_back(full.clusters[c]);
    blockOfShownCluster->push_back(static_cast<int>(c));
  }
  for (auto& c : shown.clusters) c.parent = c.parent >= 0 ? newCluster[c.parent] : -1;

  std::vector<std::size_t> newNode(full.nodes.size());
  std::map<int, std::size_t> blockNode;  // collapsed block -> its Module node
  for (std::size_t i = 0; i < full.nodes.size(); ++i) {
    const render::SceneNode& n = full.nodes[i];
    const int block = n.cluster >= 0 ? top[n.cluster] : -1;
    if (block < 0 || expanded.count(block)) {
      newNode[i] = shown.nodes.size();
      shown.nodes.push_back(n);
      shown.nodes.back().cluster = n.cluster >= 0 ? newCluster[n.cluster] : -1;
      continue;
    }
    auto it = blockNode.find(block);
    if (it == blockNode.end()) {
      const render::SceneCluster& c = full.clusters[block];
      render::SceneNode m;
      m.id = "block" + std::to_string(block);
      m.role = c.layerNorms == 0                        ? render::NodeRole::Module
               : c.foldableLayerNorms == c.layerNorms ? render::NodeRole::ModuleAllFoldable
               : c.foldableLayerNorms > 0             ? render::NodeRole::ModuleSomeFoldable
                                                      : render::NodeRole::ModuleNoneFoldable;
      m.title = c.modulePath.empty() ? c.label : c.modulePath;
      m.modulePath = c.modulePath;
      m.layerNorms = c.layerNorms;
      m.foldableLayerNorms = c.foldableLayerNorms;
      if (c.layerNorms > 0) {
        m.lines.push_back(std::to_string(c.foldableLayerNorms) + "/" +
                          std::to_string(c.layerNorms) + " LNs foldable");
      }
      m.tooltip = c.label + "\ndouble-click to expand";
      it = blockNode.emplace(block, shown.nodes.size()).first;
      shown.nodes.push_back(std::move(m));
    }
    render::SceneNode& m = shown.nodes[it->second];
    if (n.graphNode != kNone) m.members.push_back(n.graphNode);
    m.members.insert(m.members.end(), n.members.begin(), n.members.end());
    newNode[i] = it->second;
  }
  for (auto& [block, index] : blockNode) {
    shown.nodes[index].lines.push_back(std::to_string(shown.nodes[index].members.size()) + " ops");
  }

  std::set<std::pair<std::size_t, std::size_t>> seen;
  for (const render::SceneEdge& e : full.edges) {
    const std::size_t from = newNode[e.from], to = newNode[e.to];
    if (from == to || !seen.insert({from, to}).second) continue;
    render::SceneEdge edge = e;
    edge.from = from;
    edge.to = to;
    // Shapes stay on the nodes; edge labels would make dot's ranks taller and its work slower.
    edge.label.clear();
    edge.onPath = false;
    shown.edges.push_back(std::move(edge));
  }
  return shown;
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

CanvasScene toCanvasScene(const render::Scene& full, const render::Scene& shown,
                          const std::vector<int>& blockOfShownCluster,
                          const render::SceneLayout& layout, std::size_t graphNodes) {
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
    if (s.id.compare(0, 5, "block") == 0) {
      n.block = std::stoi(s.id.substr(5));  // "block<k>", made by collapseBlocks
      n.layerNorms = s.layerNorms;
      n.foldable = s.foldableLayerNorms;
      n.members = s.members;
      cs.indexOfBlock[n.block] = static_cast<int>(cs.nodes.size());
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
    c.block = blockOfShownCluster[l.cluster];
    c.label = s.label;
    c.min = toVec(l.box.min);
    c.max = toVec(l.box.max);
    c.topLevel = s.parent < 0;
    cs.clusters.push_back(std::move(c));
  }
  cs.layoutMilliseconds = layout.milliseconds;
  return cs;
}

}  // namespace foldnorm::gui
