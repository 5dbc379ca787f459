// Graphviz layout of a Scene, read back for drawing it yourself (the GUI, with ImGui).
//
// The same code lays out the files `foldnorm render` writes, so what the GUI shows and what its
// export button writes agree. Usage:
//
//   #include "foldnorm/render/layout.h"
//   using namespace foldnorm::render;
//   Scene scene = buildScene(graph, analysis, SceneOptions{});      // or parseViewSpec("ln:h.0.ln_1")
//   SceneLayout layout = layoutScene(scene);                          // slow part: run off the UI thread
//   ImDrawList* dl = ImGui::GetWindowDrawList();
//   auto P = [&](Point p) { return ImVec2(origin.x + p.x * zoom, origin.y + p.y * zoom); };
//   for (const auto& c : layout.clusters) dl->AddRect(P(c.box.min), P(c.box.max), grey);
//   for (const auto& e : layout.edges)       // cubic Bezier pieces: p0, c1, c2, p1, c1, c2, p2 ...
//     for (std::size_t i = 0; i + 3 < e.points.size(); i += 3)
//       dl->AddBezierCubic(P(e.points[i]), P(e.points[i+1]), P(e.points[i+2]), P(e.points[i+3]), col, 1.f);
//   for (const auto& n : layout.nodes) {     // n.node indexes scene.nodes
//     const auto& style = roleStyle(scene.nodes[n.node].role);
//     dl->AddRectFilled(P(n.box.min), P(n.box.max), toImGuiColour(style.fill));
//   }
//   // renderToFile(scene, "out.svg") (render.h) writes the same picture as a file.
//
// Units and axes: points (1/72 inch, Graphviz's unit; node sizes are converted from its inches),
// origin at the top-left of the drawing, y growing DOWN (Graphviz's y grows up; we flip it), so
// screen pixels = points * zoom. Node sizes come from Graphviz's own text metrics (its default
// font at 10 pt for titles); a GUI font of similar size fits inside.
// Graphviz keeps global state: all layout and rendering calls are serialised by a mutex inside
// this library, so calling from a worker thread is safe, just not parallel.
#pragma once

#include <string>
#include <vector>

#include "foldnorm/render/scene.h"

namespace foldnorm::render {

struct Point {
  double x = 0;
  double y = 0;
};

struct Box {
  Point min;  // top-left
  Point max;  // bottom-right
};

struct NodeLayout {
  std::size_t node = 0;  // index into Scene::nodes
  Point center;
  double width = 0;      // points
  double height = 0;
  Box box;               // center +- size/2
};

struct EdgeLayout {
  std::size_t edge = 0;        // index into Scene::edges
  std::vector<Point> points;   // cubic Bezier control points: 1 + 3k of them, tail to head
  bool hasArrow = false;       // the arrowhead goes from points.back() to arrowTip
  Point arrowTip;
  bool hasLabel = false;
  Point labelCenter;           // the shape label's centre
};

struct ClusterLayout {
  std::size_t cluster = 0;     // index into Scene::clusters
  Box box;
  Point labelCenter;           // its label (module path), at the top of the box
};

struct SceneLayout {
  double width = 0;            // drawing size in points
  double height = 0;
  std::vector<NodeLayout> nodes;        // one per scene node, same order
  std::vector<EdgeLayout> edges;        // one per scene edge, same order
  std::vector<ClusterLayout> clusters;  // one per scene cluster, same order
  double milliseconds = 0;     // time spent in Graphviz (build + dot layout)
};

/// Lays out with Graphviz dot (top to bottom). The legend is not laid out (draw your own from
/// legendEntries()). Throws foldnorm::Error when Graphviz fails.
SceneLayout layoutScene(const Scene& scene);

}  // namespace foldnorm::render
