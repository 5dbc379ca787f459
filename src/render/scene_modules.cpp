#include "scene_modules.h"

#include <cctype>
#include <set>

namespace foldnorm::render::detail {
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

/// "transformer.h.0" is a prefix of "transformer.h.0.attn" (and "" of everything).
bool isPrefixOf(const std::string& prefix, const std::string& path) {
  return prefix.empty() || path == prefix ||
         (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 && path[prefix.size()] == '.');
}

/// Path relative to the enclosing cluster's module ("attn.c_attn" inside "transformer.h.0").
std::string relativePath(const std::string& path, const std::string& clusterPath) {
  if (!clusterPath.empty() && path.size() > clusterPath.size() && isPrefixOf(clusterPath, path))
    return path.substr(clusterPath.size() + 1);
  return path;
}

}  // namespace

Scene collapseModules(Scene in, int depth, PendingLines& lines) {
  Scene out;
  std::vector<std::size_t> map(in.nodes.size());
  std::map<std::string, std::size_t> moduleNode;
  PendingLines kept;
  for (std::size_t i = 0; i < in.nodes.size(); ++i) {
    auto& n = in.nodes[i];
    auto parts = splitPath(n.modulePath);
    if (parts.size() < static_cast<std::size_t>(depth)) {
      map[i] = out.nodes.size();
      if (lines.shape.count(i)) kept.shape[out.nodes.size()] = lines.shape[i];
      if (lines.params.count(i)) kept.params[out.nodes.size()] = lines.params[i];
      out.nodes.push_back(std::move(n));
      continue;
    }
    std::string key = joinPrefix(parts, depth);
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
    m.role = moduleRole(m.layerNorms, m.foldableLayerNorms);
    m.lines.push_back(foldableCountText(m.layerNorms, m.foldableLayerNorms));
    m.lines.push_back(std::to_string(m.members.size()) + " ops" + (m.breaker ? ", has a breaker" : ""));
    m.tooltip = "module " + key + ": " + m.lines[0] + ", " + m.lines[1];
  }
  lines = std::move(kept);
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

void assignClusters(Scene& s, const Graph& g, const AnalysisResult& a, bool clusters, const PendingLines& lines) {
  // Module paths of the whole graph, so a block is a cluster in every view of the model.
  std::set<std::string> paths;
  for (const auto& n : g.nodes())
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
  if (clusters) {
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
    for (const auto& v : a.layerNorms)
      for (auto& c : s.clusters)
        if (isPrefixOf(c.modulePath, v.info.modulePath) && v.info.modulePath != c.modulePath) {
          ++c.layerNorms;
          if (v.foldable) ++c.foldableLayerNorms;
        }
    for (auto& c : s.clusters) {
      c.label = c.modulePath;
      if (c.layerNorms) c.label += "  (" + foldableCountText(c.layerNorms, c.foldableLayerNorms) + ")";
    }
  }
  for (std::size_t i = 0; i < s.nodes.size(); ++i) {
    auto& n = s.nodes[i];
    if (n.graphNode == kNone) continue;  // inputs, outputs, modules: labelled already
    std::string clusterPath = n.cluster >= 0 ? s.clusters[n.cluster].modulePath : std::string();
    std::string rel = relativePath(n.modulePath, clusterPath);
    std::vector<std::string> out;
    if (!rel.empty() && n.modulePath != clusterPath) out.push_back(rel);
    if (auto it = lines.shape.find(i); it != lines.shape.end()) out.push_back(it->second);
    if (auto it = lines.params.find(i); it != lines.params.end()) out.insert(out.end(), it->second.begin(), it->second.end());
    out.insert(out.end(), n.lines.begin(), n.lines.end());
    n.lines = std::move(out);
  }
}

}  // namespace foldnorm::render::detail

namespace foldnorm::render {

NodeRole moduleRole(int layerNorms, int foldable) {
  if (layerNorms == 0) return NodeRole::Module;
  if (foldable == layerNorms) return NodeRole::ModuleAllFoldable;
  return foldable > 0 ? NodeRole::ModuleSomeFoldable : NodeRole::ModuleNoneFoldable;
}

std::string foldableCountText(int layerNorms, int foldable) {
  if (layerNorms == 0) return "no LayerNorm";
  return std::to_string(foldable) + "/" + std::to_string(layerNorms) + " LNs foldable";
}

}  // namespace foldnorm::render
