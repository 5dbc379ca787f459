// How scene roles look: names, fills, borders and shapes (shared by the Graphviz files and the
// GUI), the legend's entries, and the colours in ImGui's byte order.
#include <cctype>
#include <set>

#include "foldnorm/render/scene.h"

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
    case NodeRole::AbsorbedScale: return "absorbed-scale";
    case NodeRole::InsertedCentering: return "inserted-centering";
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
  static const RoleStyle kScale{"#c6dbef", "#2166ac", "invtrapezium", "per-channel scale absorbed (scaled centering)"};
  static const RoleStyle kInserted{"#c7eae5", "#01665e", "cds", "centering inserted after it"};
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
    case NodeRole::AbsorbedScale: return kScale;
    case NodeRole::InsertedCentering: return kInserted;
    case NodeRole::ModuleAllFoldable: return kModAll;
    case NodeRole::ModuleSomeFoldable: return kModSome;
    case NodeRole::ModuleNoneFoldable: return kModNone;
    case NodeRole::Module: return kModule;
  }
  return kPlain;
}

std::vector<NodeRole> legendEntries(const Scene& scene) {
  static const NodeRole kOrder[] = {NodeRole::FoldableLayerNorm, NodeRole::BlockedLayerNorm, NodeRole::Leaf,
                                    NodeRole::AbsorbedScale, NodeRole::InsertedCentering, NodeRole::Breaker, NodeRole::UnsafeConsumer, NodeRole::ModuleAllFoldable,
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

}  // namespace foldnorm::render
