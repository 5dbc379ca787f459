// The graph canvas: Graphviz positions (layout_task.h), drawn with ImGui's draw list. Pan by
// dragging, zoom with the wheel around the cursor, click a box to inspect it, double-click a
// block to expand or collapse it. Only what intersects the visible rectangle is drawn, and
// labels only where they are legible, so a frame costs what is on screen, not the graph size.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "app.h"
#include "layout_task.h"
#include "palette.h"

namespace foldnorm::gui {
namespace {

constexpr float kMinZoom = 0.01f;
constexpr float kMaxZoom = 6.0f;
// Box titles are drawn at kTitlePt * zoom pixels (Graphviz sized the boxes for 10 pt titles);
// text under kLegiblePx is not drawn, so "labelsDrawn" counts labels a person can read.
constexpr float kTitlePt = 11.0f;
constexpr float kLegiblePx = 9.0f;
constexpr float kLegibleZoom = kLegiblePx / kTitlePt;
// Semantic zoom: a collapsed block that fills this share of the canvas opens in place.
constexpr float kOpenOnZoomShare = 0.45f;

struct View {
  ImVec2 origin;  // screen position of the canvas' top-left
  ImVec2 size;
  const CanvasCamera* camera;
  ImVec2 toScreen(ImVec2 p) const {
    return ImVec2(origin.x + size.x * 0.5f + (p.x - camera->center.x) * camera->zoom,
                  origin.y + size.y * 0.5f + (p.y - camera->center.y) * camera->zoom);
  }
  ImVec2 toLayout(ImVec2 s) const {
    return ImVec2(camera->center.x + (s.x - origin.x - size.x * 0.5f) / camera->zoom,
                  camera->center.y + (s.y - origin.y - size.y * 0.5f) / camera->zoom);
  }
  // The visible rectangle in layout coordinates, for culling.
  ImVec2 visibleMin() const { return toLayout(origin); }
  ImVec2 visibleMax() const { return toLayout(ImVec2(origin.x + size.x, origin.y + size.y)); }
};

bool overlaps(ImVec2 amin, ImVec2 amax, ImVec2 bmin, ImVec2 bmax) {
  return amin.x <= bmax.x && amax.x >= bmin.x && amin.y <= bmax.y && amax.y >= bmin.y;
}

ImU32 textOn(ImU32 fill) {
  const float r = (fill & 0xff) / 255.0f, g = ((fill >> 8) & 0xff) / 255.0f,
              b = ((fill >> 16) & 0xff) / 255.0f;
  return 0.299f * r + 0.587f * g + 0.114f * b > 0.55f ? IM_COL32(20, 20, 20, 255)
                                                      : IM_COL32(240, 240, 240, 255);
}

float fitZoom(ImVec2 min, ImVec2 max, ImVec2 canvas) {
  const float w = std::max(1.0f, max.x - min.x), h = std::max(1.0f, max.y - min.y);
  return std::min(canvas.x / w, canvas.y / h) * 0.92f;
}

void fit(CanvasCamera& camera, ImVec2 min, ImVec2 max, ImVec2 canvas, float maxZoom) {
  camera.zoom = std::clamp(fitZoom(min, max, canvas), kMinZoom, maxZoom);
  camera.center = ImVec2((min.x + max.x) * 0.5f, (min.y + max.y) * 0.5f);
}

// Fits the box, but never below legibility: a box too big to read whole is shown from its
// top-left (where the stream starts) at the smallest legible zoom instead.
void fitLegible(CanvasCamera& camera, ImVec2 min, ImVec2 max, ImVec2 canvas, float maxZoom) {
  fit(camera, min, max, canvas, maxZoom);
  if (camera.zoom >= kLegibleZoom) return;
  camera.zoom = kLegibleZoom;
  const float halfW = canvas.x * 0.5f / camera.zoom, halfH = canvas.y * 0.5f / camera.zoom;
  if (max.x - min.x > 2 * halfW) camera.center.x = min.x + halfW * 0.96f;
  if (max.y - min.y > 2 * halfH) camera.center.y = min.y + halfH * 0.96f;
}

// The strongest highlight role among a collapsed block's members.
Role blockRole(const Highlight& h, const CanvasNode& n) {
  Role best = Role::None;
  for (NodeId m : n.members) {
    const Role r = h.role(m);
    if (r == Role::SelectedLn) return r;
    if (r != Role::None && (best == Role::None || r == Role::Breaker || r == Role::Consumer)) best = r;
  }
  return best;
}

void applyCameraRequests(UiState& ui, const View& view) {
  CanvasScene& scene = ui.scene;
  CanvasCamera& cam = ui.camera;
  if (scene.empty()) return;
  if (cam.fitRequested) {
    // The whole graph if it reads at that zoom; otherwise the stream: the blocks' summary boxes
    // and the LayerNorms (mask and position plumbing of traced models can be most of the boxes).
    fit(cam, ImVec2(0, 0), scene.size, view.size, 1.5f);
    if (cam.zoom < kLegibleZoom) {
      ImVec2 lo(FLT_MAX, FLT_MAX), hi(-FLT_MAX, -FLT_MAX);
      for (const CanvasNode& n : scene.nodes) {
        const bool lnNode = n.role == render::NodeRole::FoldableLayerNorm ||
                            n.role == render::NodeRole::BlockedLayerNorm;
        if (n.blocks.empty() && !lnNode) continue;
        lo = ImVec2(std::min(lo.x, n.min.x), std::min(lo.y, n.min.y));
        hi = ImVec2(std::max(hi.x, n.max.x), std::max(hi.y, n.max.y));
      }
      if (lo.x <= hi.x) fitLegible(cam, lo, hi, view.size, 1.5f);
      else fitLegible(cam, ImVec2(0, 0), scene.size, view.size, 1.5f);
    }
    cam.fitRequested = false;
  }
  if (cam.centerOnBlock >= 0) {
    for (const auto& c : scene.clusters) {
      if (c.block == cam.centerOnBlock) {
        fit(cam, c.min, c.max, view.size, 1.2f);
        cam.centerOnBlock = -1;
        break;
      }
    }
    if (!scene.expanded.count(cam.centerOnBlock)) cam.centerOnBlock = -1;  // collapsed meanwhile
  }
  if (cam.centerOn != kNone) {
    const int i = scene.canvasIndexOf(cam.centerOn);
    if (i >= 0) {
      const CanvasNode& n = scene.nodes[i];
      cam.center = ImVec2((n.min.x + n.max.x) * 0.5f, (n.min.y + n.max.y) * 0.5f);
      // Readable, but keep some context around the node.
      cam.zoom = std::clamp(cam.zoom, 1.3f, 2.0f);
      // A selected LN: frame its whole explanation (the boxes holding its marked nodes, collapsed
      // ones included) when that stays legible; otherwise the LN and the other end of its path
      // (breaker or consumer) if both fit legibly; otherwise the LN alone, its path leaving the view.
      // 0.8 of the canvas: the legend and the verdict caption cover its top corners.
      auto legibleBox = [&](ImVec2 lo, ImVec2 hi) {
        const float z = fitZoom(lo, hi, ImVec2(view.size.x * 0.8f, view.size.y * 0.8f));
        if (z < kLegibleZoom) return false;
        cam.zoom = std::min(z, 1.5f);
        cam.center = ImVec2((lo.x + hi.x) * 0.5f, (lo.y + hi.y) * 0.5f);
        return true;
      };
      bool framed = false;
      const int j = cam.alsoShow != kNone ? scene.canvasIndexOf(cam.alsoShow) : -1;
      if (ui.highlight.ln == cam.centerOn) {
        ImVec2 lo = n.min, hi = n.max;
        for (NodeId m : ui.highlight.nodes) {
          const int k = scene.canvasIndexOf(m);
          if (k < 0) continue;
          const CanvasNode& b = scene.nodes[k];
          lo = ImVec2(std::min(lo.x, b.min.x), std::min(lo.y, b.min.y));
          hi = ImVec2(std::max(hi.x, b.max.x), std::max(hi.y, b.max.y));
        }
        framed = legibleBox(lo, hi);
        if (!framed) {
          // Too big to read whole: at the smallest legible zoom, move from the LN towards the
          // middle of its explanation as far as the LN stays in view, so as much of the story as
          // fits is on screen (the breaker's side, or the leaves upstream).
          cam.zoom = kLegibleZoom;
          const ImVec2 half(view.size.x * 0.5f / cam.zoom, view.size.y * 0.5f / cam.zoom);
          const ImVec2 want((lo.x + hi.x) * 0.5f, (lo.y + hi.y) * 0.5f);
          const ImVec2 ln((n.min.x + n.max.x) * 0.5f, (n.min.y + n.max.y) * 0.5f);
          cam.center = ImVec2(std::clamp(want.x, ln.x - half.x * 0.7f, ln.x + half.x * 0.7f),
                              std::clamp(want.y, ln.y - half.y * 0.7f, ln.y + half.y * 0.7f));
          framed = j < 0 || j == i;  // a breaker or consumer may still fit beside it
        }
      }
      if (!framed && j >= 0 && j != i) {
        const CanvasNode& m = scene.nodes[j];
        legibleBox(ImVec2(std::min(n.min.x, m.min.x), std::min(n.min.y, m.min.y)),
                   ImVec2(std::max(n.max.x, m.max.x), std::max(n.max.y, m.max.y)));
      }
    }
    cam.centerOn = kNone;
    cam.alsoShow = kNone;
  }
}

void drawArrow(ImDrawList* dl, ImVec2 from, ImVec2 tip, ImU32 colour, float size) {
  ImVec2 d(tip.x - from.x, tip.y - from.y);
  const float len = std::sqrt(d.x * d.x + d.y * d.y);
  if (len < 1e-3f) return;
  d = ImVec2(d.x / len, d.y / len);
  const ImVec2 n(-d.y, d.x);
  const ImVec2 base(tip.x - d.x * size, tip.y - d.y * size);
  dl->AddTriangleFilled(tip, ImVec2(base.x + n.x * size * 0.45f, base.y + n.y * size * 0.45f),
                        ImVec2(base.x - n.x * size * 0.45f, base.y - n.y * size * 0.45f), colour);
}

void drawLegend(ImDrawList* dl, ImVec2 at, const UiState& ui) {
  struct Entry { ImU32 colour; const char* text; bool outline; };
  std::vector<Entry> entries;
  if (ui.showFolded) {  // the fold's marks, one entry per kind (render/folded_view.h)
    for (const auto& k : render::foldedMarkKinds()) {
      entries.push_back({render::toImGuiColour(render::roleStyle(k.role).fill), k.line, false});
    }
  }
  for (render::NodeRole role : render::legendEntries(*ui.scene.shown)) {
    if (ui.showFolded && (role == render::NodeRole::FoldableLayerNorm ||
                          role == render::NodeRole::BlockedLayerNorm || role == render::NodeRole::Leaf)) {
      continue;
    }
    const auto& style = render::roleStyle(role);
    entries.push_back({render::toImGuiColour(style.fill), style.legend, false});
  }
  if (ui.selectedLn >= 0) {
    for (Role r : {Role::MeanZero, Role::Leaf, Role::BreakPath, Role::Breaker, Role::ShiftPath,
                   Role::Consumer}) {
      entries.push_back({palette::roleColour(r), toString(r), true});
    }
  }
  const float line = ImGui::GetTextLineHeight() + 2;
  float width = 0;
  for (const auto& e : entries) width = std::max(width, ImGui::CalcTextSize(e.text).x);
  const ImVec2 max(at.x + width + 34, at.y + line * entries.size() + 8);
  dl->AddRectFilled(at, max, IM_COL32(20, 22, 26, 220), 4.0f);
  float y = at.y + 4;
  for (const auto& e : entries) {
    const ImVec2 a(at.x + 6, y + 2), b(at.x + 22, y + line - 4);
    if (e.outline) dl->AddRect(a, b, e.colour, 2.0f, 0, 2.5f);
    else dl->AddRectFilled(a, b, e.colour, 2.0f);
    dl->AddText(ImVec2(at.x + 28, y), IM_COL32(220, 220, 220, 255), e.text);
    y += line;
  }
}

// The selected LN's verdict over the canvas, so the picture explains itself in a screenshot.
void drawCaption(ImDrawList* dl, const UiState& ui, const View& view) {
  const LayerNormVerdict& v = ui.model->analysis.layerNorms[ui.selectedLn];
  const std::string title = (v.info.modulePath.empty() ? std::string("(top level)") : v.info.modulePath);
  const std::string text = verdictSentence(v);
  const float wrap = std::min(view.size.x * 0.6f, 720.0f);
  const ImVec2 ts = ImGui::CalcTextSize(text.c_str(), nullptr, false, wrap);
  const ImVec2 tt = ImGui::CalcTextSize(title.c_str());
  const float w = std::max(ts.x, tt.x) + 20, hgt = ts.y + tt.y + 16;
  const ImVec2 a(view.origin.x + view.size.x - w - 10, view.origin.y + 8);
  dl->AddRectFilled(a, ImVec2(a.x + w, a.y + hgt), IM_COL32(20, 22, 26, 230), 4.0f);
  dl->AddRectFilled(a, ImVec2(a.x + 5, a.y + hgt),
                    v.foldable ? palette::kLnFoldable : palette::kLnNotFoldable, 2.0f);
  dl->AddText(ImVec2(a.x + 12, a.y + 6), IM_COL32(255, 255, 255, 255), title.c_str());
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(a.x + 12, a.y + 10 + tt.y),
              ImGui::ColorConvertFloat4ToU32(v.foldable ? palette::kFoldableText
                                                        : palette::kNotFoldableText),
              text.c_str(), nullptr, wrap);
}

// What the folded canvas shows, over it, so its screenshot says it is not the original.
void drawFoldedCaption(ImDrawList* dl, const UiState& ui, const View& view) {
  const std::string text = ui.scene.shown ? ui.scene.shown->title : std::string("folded graph");
  const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
  const ImVec2 a(view.origin.x + view.size.x - ts.x - 30, view.origin.y + 8);
  dl->AddRectFilled(a, ImVec2(a.x + ts.x + 20, a.y + ts.y + 12), IM_COL32(20, 22, 26, 230), 4.0f);
  dl->AddRectFilled(a, ImVec2(a.x + 5, a.y + ts.y + 12), palette::kLnFoldable, 2.0f);
  dl->AddText(ImVec2(a.x + 12, a.y + 6), IM_COL32(255, 255, 255, 255), text.c_str());
}

void drawMinimap(ImDrawList* dl, UiState& ui, const View& view) {
  const CanvasScene& scene = ui.scene;
  if (scene.size.x <= 0 || scene.size.y <= 0) return;
  const float maxSide = std::min(220.0f, std::min(view.size.x, view.size.y) * 0.35f);
  const float scale = maxSide / std::max(scene.size.x, scene.size.y);
  const ImVec2 mapSize(scene.size.x * scale, scene.size.y * scale);
  const ImVec2 at(view.origin.x + view.size.x - mapSize.x - 10,
                  view.origin.y + view.size.y - mapSize.y - 10);
  const ImVec2 end(at.x + mapSize.x, at.y + mapSize.y);
  dl->AddRectFilled(ImVec2(at.x - 4, at.y - 4), ImVec2(end.x + 4, end.y + 4),
                    IM_COL32(15, 16, 19, 230), 3.0f);
  auto M = [&](ImVec2 p) { return ImVec2(at.x + p.x * scale, at.y + p.y * scale); };
  for (const auto& n : scene.nodes) {
    ImVec2 a = M(n.min), b = M(n.max);
    b = ImVec2(std::max(b.x, a.x + 1.5f), std::max(b.y, a.y + 1.5f));
    const Role r = n.block >= 0 ? blockRole(ui.highlight, n) : ui.highlight.role(n.node);
    dl->AddRectFilled(a, b, r != Role::None ? palette::roleColour(r) : n.fill);
  }
  // The visible part, clipped to the map: zoomed out past the graph, the view is bigger than
  // the map and its frame would be drawn over the canvas around it.
  const ImVec2 vmin = M(view.visibleMin()), vmax = M(view.visibleMax());
  dl->AddRect(ImVec2(std::clamp(vmin.x, at.x, end.x), std::clamp(vmin.y, at.y, end.y)),
              ImVec2(std::clamp(vmax.x, at.x, end.x), std::clamp(vmax.y, at.y, end.y)),
              IM_COL32(255, 255, 255, 200), 0, 0, 1.5f);
  // Click or drag in the minimap to move there.
  ImGui::SetCursorScreenPos(at);
  ImGui::InvisibleButton("##minimap", mapSize);
  if (ImGui::IsItemActive()) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    ui.camera.center = ImVec2((m.x - at.x) / scale, (m.y - at.y) / scale);
  }
}

// What one frame's drawing passes share.
struct CanvasFrame {
  ImDrawList* dl;
  View view;
  ImVec2 vmin, vmax;
  float zoom, fontSize;
  bool labels, hovered;
  const Highlight* h;
};

void drawToolbar(App& app) {
  UiState& ui = app.ui;
  CanvasScene& scene = ui.scene;
  ImGui::SetCursorPos(ImVec2(8, ImGui::GetCursorPosY() + 4));
  if (ImGui::Button("Fit (F)")) ui.camera.fitRequested = true;
  ImGui::SameLine();
  if (scene.empty()) return;
  // Graphviz takes minutes past ~10,000 nodes: a big model is explored a block at a time.
  constexpr std::size_t kExpandAllLimit = 3000;
  const bool tooBig = ui.fullScene && ui.fullScene->nodes.size() > kExpandAllLimit;
  ImGui::BeginDisabled(tooBig);
  if (ImGui::Button("Expand all")) {
    std::set<int> all;
    for (int b : scene.blockOfNode) if (b >= 0) all.insert(b);
    startLayout(app, all);
  }
  ImGui::EndDisabled();
  if (tooBig && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
    ImGui::SetTooltip("%zu nodes: too many to lay out at once; double-click blocks to open them",
                      ui.fullScene->nodes.size());
  }
  ImGui::SameLine();
  if (ImGui::Button("Collapse all")) collapseAll(app);
  ImGui::SameLine();
  if (ImGui::Checkbox("Group repeats", &ui.groupRepeats)) startLayout(app, scene.expanded);
  if (ImGui::IsItemHovered()) {
    ImGui::SetTooltip("identical blocks in a row (same ops, same verdicts) as one box \"x12\"");
  }
  ImGui::SameLine();
  ImGui::TextDisabled("zoom %.0f%%   %s", ui.camera.zoom * 100, scene.summary.c_str());
}

/// The whole canvas is one button: drag pans, the wheel zooms around the cursor (and opens a
/// collapsed block zoomed into). Returns whether the canvas is hovered.
bool handleCanvasInput(App& app, const View& view, ImVec2 origin, ImVec2 size) {
  UiState& ui = app.ui;
  ImGui::SetCursorScreenPos(origin);
  ImGui::InvisibleButton("##canvas", size,
                         ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight |
                             ImGuiButtonFlags_MouseButtonMiddle);
  const bool hovered = ImGui::IsItemHovered();
  const ImGuiIO& io = ImGui::GetIO();
  if (ImGui::IsItemActive() && (io.MouseDelta.x != 0 || io.MouseDelta.y != 0)) {
    ui.camera.center.x -= io.MouseDelta.x / ui.camera.zoom;
    ui.camera.center.y -= io.MouseDelta.y / ui.camera.zoom;
  }
  if (!hovered || io.MouseWheel == 0) return hovered;
  const ImVec2 before = view.toLayout(io.MousePos);
  ui.camera.zoom = std::clamp(ui.camera.zoom * std::pow(1.15f, io.MouseWheel), kMinZoom, kMaxZoom);
  const ImVec2 after = view.toLayout(io.MousePos);
  ui.camera.center.x += before.x - after.x;
  ui.camera.center.y += before.y - after.y;
  // Semantic zoom: zooming into a collapsed block opens it in place (once; the layout runs on
  // the worker and the picture stays until it is in).
  if (io.MouseWheel > 0 && app.layoutWorker.idle()) {
    for (const CanvasNode& n : ui.scene.nodes) {
      if (n.blocks.size() != 1 || after.x < n.min.x || after.x > n.max.x || after.y < n.min.y ||
          after.y > n.max.y) {
        continue;
      }
      const float share = std::max((n.max.x - n.min.x) * ui.camera.zoom / size.x,
                                   (n.max.y - n.min.y) * ui.camera.zoom / size.y);
      if (share >= kOpenOnZoomShare) toggleBlock(app, n.block, true);
      break;
    }
  }
  return hovered;
}

bool mouseIn(ImVec2 a, ImVec2 b) {
  const ImVec2 m = ImGui::GetIO().MousePos;
  return m.x >= a.x && m.x <= b.x && m.y >= a.y && m.y <= b.y;
}

/// Clusters: frames with the module path, only while they are large enough to read. Returns the
/// hovered top-level cluster (-1: none).
int drawClusters(UiState& ui, const CanvasFrame& f) {
  int hoveredCluster = -1;
  for (std::size_t i = 0; i < ui.scene.clusters.size(); ++i) {
    const CanvasCluster& c = ui.scene.clusters[i];
    if (!overlaps(c.min, c.max, f.vmin, f.vmax)) continue;
    const ImVec2 a = f.view.toScreen(c.min), b = f.view.toScreen(c.max);
    f.dl->AddRectFilled(a, b, palette::kClusterFill, 4.0f);
    f.dl->AddRect(a, b, palette::kClusterFrame, 4.0f, 0, 1.0f);
    if (f.labels || (b.x - a.x) > 120) {
      f.dl->AddText(ImVec2(a.x + 6, a.y + 3), palette::kClusterText, c.label.c_str());
    }
    if (f.hovered && c.topLevel && mouseIn(a, b)) hoveredCluster = static_cast<int>(i);
    ++ui.record.clustersDrawn;
  }
  return hoveredCluster;
}

/// Edges: splines, highlighted when on the selected LN's explanation.
void drawEdges(UiState& ui, const CanvasFrame& f) {
  const Highlight& h = *f.h;
  const float zoom = f.zoom;
  for (const CanvasEdge& e : ui.scene.edges) {
    if (!overlaps(e.min, e.max, f.vmin, f.vmax)) continue;
    // Marked when a dataflow edge it stands for is in the explanation (an edge into or out of a
    // collapsed box stands for several).
    const std::pair<NodeId, NodeId>* marked = nullptr;
    if (h.ln != kNone) {
      for (const auto& m : e.members) {
        if (h.hasEdge(m.first, m.second)) {
          marked = &m;
          break;
        }
      }
    }
    ImU32 colour = palette::kEdge;
    float thickness = std::clamp(zoom, 1.0f, 2.0f);
    if (marked) {
      const Role r = h.role(marked->second) == Role::SelectedLn ? h.role(marked->first)
                                                                 : h.role(marked->second);
      colour = palette::roleColour(r == Role::Leaf ? Role::MeanZero : r);
      thickness = std::clamp(3.0f * zoom, 2.5f, 5.0f);
    }
    if (zoom < 0.08f) {
      f.dl->AddLine(f.view.toScreen(e.points.front()), f.view.toScreen(e.points.back()), colour, thickness);
    } else {
      for (std::size_t i = 0; i + 3 < e.points.size(); i += 3) {
        f.dl->AddBezierCubic(f.view.toScreen(e.points[i]), f.view.toScreen(e.points[i + 1]),
                             f.view.toScreen(e.points[i + 2]), f.view.toScreen(e.points[i + 3]), colour,
                             thickness, zoom < 0.4f ? 6 : 0);
      }
    }
    if (e.hasArrow && zoom > 0.25f) {
      drawArrow(f.dl, f.view.toScreen(e.points.back()), f.view.toScreen(e.arrowTip), colour, 7.0f * zoom + 2);
    }
    ++ui.record.edgesDrawn;
  }
}

/// A node's title and lines, centred in its box [a, b] (Graphviz's lines: a 10 pt title, then 8 pt
/// lines; ours are 11 and 9.35 px at zoom 1).
void drawNodeLabel(const CanvasNode& n, ImVec2 a, ImVec2 b, ImU32 text, const CanvasFrame& f) {
  ImFont* font = ImGui::GetFont();
  const float fontSize = f.fontSize;
  const ImVec4 clip(a.x + 2, a.y, b.x - 2, b.y);
  const float titleH = fontSize * 1.05f, lineH = fontSize * 0.85f * 1.05f;
  const float total = titleH + lineH * n.lines.size();
  float y = (a.y + b.y) * 0.5f - std::min(total, b.y - a.y) * 0.5f;
  auto centred = [&](const std::string& s, float sizePx, float height) {
    const ImVec2 ts = font->CalcTextSizeA(sizePx, FLT_MAX, 0, s.c_str());
    f.dl->AddText(font, sizePx, ImVec2((a.x + b.x - ts.x) * 0.5f, y), text, s.c_str(), nullptr, 0, &clip);
    y += height;
  };
  centred(n.title, fontSize, titleH);
  for (const auto& l : n.lines) {
    if (y + lineH > b.y + 1) break;
    centred(l, fontSize * 0.85f, lineH);
  }
}

/// Nodes and collapsed blocks, with the selection's roles. Returns the hovered node (-1: none).
int drawNodes(UiState& ui, const CanvasFrame& f) {
  const Highlight& h = *f.h;
  int hoveredNode = -1;
  for (std::size_t i = 0; i < ui.scene.nodes.size(); ++i) {
    const CanvasNode& n = ui.scene.nodes[i];
    if (!overlaps(n.min, n.max, f.vmin, f.vmax)) continue;
    ImVec2 a = f.view.toScreen(n.min), b = f.view.toScreen(n.max);
    b = ImVec2(std::max(b.x, a.x + 2), std::max(b.y, a.y + 2));
    const Role role = n.block >= 0 ? blockRole(h, n) : h.role(n.node);
    const bool dimmed = h.ln != kNone && role == Role::None;
    ImU32 fill = n.fill;
    if (dimmed) fill = (fill & 0x00ffffff) | (110u << 24);  // the selection's story stands out
    const float rounding = std::min(6.0f, 4.0f * f.zoom);
    f.dl->AddRectFilled(a, b, fill, rounding);
    if (n.block >= 0 && n.layerNorms > 0) {
      // A collapsed block's bar: the share of its LNs that fold.
      const float frac = static_cast<float>(n.foldable) / n.layerNorms;
      const float barH = std::max(3.0f, (b.y - a.y) * 0.12f);
      const float split = a.x + (b.x - a.x) * frac;
      f.dl->AddRectFilled(ImVec2(a.x, b.y - barH), ImVec2(split, b.y), palette::kLnFoldable);
      f.dl->AddRectFilled(ImVec2(split, b.y - barH), b, palette::kLnNotFoldable);
    }
    if (role != Role::None) {
      f.dl->AddRect(ImVec2(a.x - 2, a.y - 2), ImVec2(b.x + 2, b.y + 2), palette::roleColour(role), rounding, 0,
                    std::clamp(3.0f * f.zoom, 2.0f, 4.0f));
    } else {
      f.dl->AddRect(a, b, dimmed ? (n.border & 0x00ffffff) | (110u << 24) : n.border, rounding, 0, 1.0f);
    }
    if (n.node != kNone && n.node == ui.selectedNode) {
      f.dl->AddRect(ImVec2(a.x - 5, a.y - 5), ImVec2(b.x + 5, b.y + 5), IM_COL32(255, 255, 255, 255),
                    rounding + 2, 0, 2.0f);
    }
    if (f.labels && b.y - a.y >= f.fontSize) {
      if (n.block >= 0) ++ui.record.blockLabelsDrawn;
      drawNodeLabel(n, a, b, dimmed ? IM_COL32(150, 150, 150, 255) : textOn(n.fill), f);
      ++ui.record.labelsDrawn;
    }
    if (f.hovered && mouseIn(a, b)) hoveredNode = static_cast<int>(i);
    ++ui.record.nodesDrawn;
    if (n.block >= 0) ++ui.record.blockBoxesDrawn;
  }
  return hoveredNode;
}

/// What a click, double-click or hover does to what is under the cursor.
void interact(App& app, int hoveredNode, int hoveredCluster) {
  UiState& ui = app.ui;
  if (hoveredNode >= 0) {
    const CanvasNode& n = ui.scene.nodes[hoveredNode];
    if (!n.tooltip.empty() && !ImGui::IsMouseDragging(0)) ImGui::SetTooltip("%s", n.tooltip.c_str());
    if (ImGui::IsMouseDoubleClicked(0) && n.blocks.size() > 1) {
      ungroupBlocks(app, n.blocks);
    } else if (ImGui::IsMouseDoubleClicked(0) && n.block >= 0) {
      toggleBlock(app, n.block, true);
    } else if (ImGui::IsMouseReleased(0) && ImGui::GetIO().MouseDragMaxDistanceSqr[0] < 16.0f &&
               n.node != kNone && !ui.showFolded) {  // a click, not the end of a pan
      selectNode(app, n.node);
      if (const LayerNormVerdict* v = ui.model->analysis.verdictFor(n.node)) {
        const auto& lns = ui.model->analysis.layerNorms;
        selectLayerNorm(app, static_cast<int>(v - lns.data()), false);
      }
    }
  } else if (hoveredCluster >= 0 && ImGui::IsMouseDoubleClicked(0)) {
    toggleBlock(app, ui.scene.clusters[hoveredCluster].block, false);
  }
}

}  // namespace

void DrawCanvas(App& app) {
  UiState& ui = app.ui;
  ImGui::PushStyleVar(ImGuiStyleVar_WindowPadding, ImVec2(0, 0));
  const bool open = ImGui::Begin("Graph", nullptr,
                                 ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize |
                                     ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoScrollbar |
                                     ImGuiWindowFlags_NoScrollWithMouse |
                                     ImGuiWindowFlags_NoBringToFrontOnFocus);
  ImGui::PopStyleVar();
  if (!open) {
    ImGui::End();
    return;
  }
  recordPanel(ui, "Graph");
  drawToolbar(app);

  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const ImVec2 size(std::max(avail.x, 50.0f), std::max(avail.y, 50.0f));
  View view{origin, size, &ui.camera};
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(origin, ImVec2(origin.x + size.x, origin.y + size.y), palette::kCanvasBackground);

  if (ui.scene.empty()) {
    const char* text = ui.model ? "laying out the graph..." : ui.loadingPath.empty()
                                                                 ? "Open a model with Ctrl+O"
                                                                 : "loading the model...";
    const ImVec2 ts = ImGui::CalcTextSize(text);
    dl->AddText(ImVec2(origin.x + (size.x - ts.x) * 0.5f, origin.y + (size.y - ts.y) * 0.5f),
                IM_COL32(200, 200, 200, 255), text);
    ImGui::End();
    return;
  }

  applyCameraRequests(ui, view);
  const bool hovered = handleCanvasInput(app, view, origin, size);

  // The folded graph has node ids of its own: the original's selection does not apply to it.
  static const Highlight kNoHighlight;
  const float fontSize = kTitlePt * ui.camera.zoom;
  const CanvasFrame frame{dl, view, view.visibleMin(), view.visibleMax(), ui.camera.zoom,
                          fontSize, fontSize >= kLegiblePx, hovered, ui.showFolded ? &kNoHighlight : &ui.highlight};
  dl->PushClipRect(origin, ImVec2(origin.x + size.x, origin.y + size.y), true);
  const int hoveredCluster = drawClusters(ui, frame);
  drawEdges(ui, frame);
  const int hoveredNode = drawNodes(ui, frame);
  dl->PopClipRect();
  interact(app, hoveredNode, hoveredCluster);

  drawLegend(dl, ImVec2(origin.x + 8, origin.y + 8), ui);
  if (ui.showFolded) drawFoldedCaption(dl, ui, view);
  else if (ui.selectedLn >= 0) drawCaption(dl, ui, view);
  if (ui.showMinimap) drawMinimap(dl, ui, view);
  ImGui::End();
}

}  // namespace foldnorm::gui
