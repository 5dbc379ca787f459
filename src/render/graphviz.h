// Thin RAII owners of Graphviz's context and graph (private to foldnorm_render).
// Graphviz keeps global state (the plugin registry, the error hook, the string pool), so every
// use holds graphvizLock() for its whole duration.
#pragma once

#include <gvc.h>

#include <mutex>
#include <string>
#include <vector>

#include "foldnorm/render/scene.h"

namespace foldnorm::render::detail {

std::mutex& graphvizLock();

/// The one GVC_t of the process (plugins are loaded once; freed at exit).
GVC_t* graphvizContext();

/// An Agraph_t built from a Scene, closed (and its layout freed) on destruction.
class GvGraph {
 public:
  /// Builds the graph; `legend` adds the legend node (files), the GUI's layout leaves it out.
  GvGraph(const Scene& scene, bool legend);
  ~GvGraph();
  GvGraph(const GvGraph&) = delete;
  GvGraph& operator=(const GvGraph&) = delete;

  Agraph_t* graph() const { return graph_; }
  Agnode_t* node(std::size_t i) const { return nodes_.at(i); }
  Agedge_t* edge(std::size_t i) const { return edges_.at(i); }
  Agraph_t* cluster(std::size_t i) const { return clusters_.at(i); }

  /// Runs dot; throws foldnorm::Error on failure. Freed with the graph.
  void layout();
  /// DOT text of the graph as built (no layout attributes).
  std::string dot() const;
  /// Rendered bytes in a Graphviz output format ("svg", "png", "pdf"); lays out first if needed.
  std::string render(const char* format);

 private:
  Agraph_t* graph_ = nullptr;
  bool laidOut_ = false;
  std::vector<Agnode_t*> nodes_;
  std::vector<Agedge_t*> edges_;
  std::vector<Agraph_t*> clusters_;
};

}  // namespace foldnorm::render::detail
