#include "foldnorm/render/layout.h"

#include <chrono>

#include "graphviz.h"

namespace foldnorm::render {

SceneLayout layoutScene(const Scene& scene) {
  auto started = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(detail::graphvizLock());
  detail::GvGraph gv(scene, /*legend=*/false);
  gv.layout();

  // Graphviz: points, origin bottom-left, y up; node sizes in inches. Ours: points, y down.
  constexpr double kPointsPerInch = 72.0;
  const boxf bb = GD_bb(gv.graph());
  auto flip = [&](pointf p) { return Point{p.x - bb.LL.x, bb.UR.y - p.y}; };

  SceneLayout out;
  out.width = bb.UR.x - bb.LL.x;
  out.height = bb.UR.y - bb.LL.y;

  out.nodes.reserve(scene.nodes.size());
  for (std::size_t i = 0; i < scene.nodes.size(); ++i) {
    Agnode_t* n = gv.node(i);
    NodeLayout nl;
    nl.node = i;
    nl.center = flip(ND_coord(n));
    nl.width = ND_width(n) * kPointsPerInch;
    nl.height = ND_height(n) * kPointsPerInch;
    nl.box.min = {nl.center.x - nl.width / 2, nl.center.y - nl.height / 2};
    nl.box.max = {nl.center.x + nl.width / 2, nl.center.y + nl.height / 2};
    out.nodes.push_back(nl);
  }

  out.edges.reserve(scene.edges.size());
  for (std::size_t i = 0; i < scene.edges.size(); ++i) {
    Agedge_t* e = gv.edge(i);
    EdgeLayout el;
    el.edge = i;
    if (const splines* spl = ED_spl(e)) {
      for (int b = 0; b < spl->size; ++b) {
        const bezier& bz = spl->list[b];
        for (int k = 0; k < bz.size; ++k) el.points.push_back(flip(bz.list[k]));
        if (bz.eflag) {
          el.hasArrow = true;
          el.arrowTip = flip(bz.ep);
        }
      }
    }
    if (const textlabel_t* label = ED_label(e); label && label->set) {
      el.hasLabel = true;
      el.labelCenter = flip(label->pos);
    }
    out.edges.push_back(std::move(el));
  }

  out.clusters.reserve(scene.clusters.size());
  for (std::size_t i = 0; i < scene.clusters.size(); ++i) {
    Agraph_t* sg = gv.cluster(i);
    const boxf cb = GD_bb(sg);
    ClusterLayout cl;
    cl.cluster = i;
    // Flipping swaps which corner is the top-left.
    cl.box.min = flip(pointf{cb.LL.x, cb.UR.y});
    cl.box.max = flip(pointf{cb.UR.x, cb.LL.y});
    if (const textlabel_t* label = GD_label(sg)) cl.labelCenter = flip(label->pos);
    out.clusters.push_back(cl);
  }
  out.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace foldnorm::render
