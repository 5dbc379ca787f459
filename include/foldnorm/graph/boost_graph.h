// The Boost.Graph storage behind foldnorm::Graph, for code that wants Boost's algorithms
// (topological sort, filtered views, BFS). Everything else uses graph.h only.
#pragma once

#include <boost/graph/adjacency_list.hpp>

#include "foldnorm/graph/graph.h"

namespace foldnorm {

/// Vertex bundle: the node id (equal to the vertex index; kept for filtered views).
struct NodeVertex {
  NodeId node = kNone;
};

/// Edge bundle: one edge per use of a value, from its producer to the consumer.
struct UseEdge {
  ValueId value = kNone;
  std::size_t slot = 0;  // consumer input index
};

using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS,
                                         NodeVertex, UseEdge>;
using BoostVertex = boost::graph_traits<BoostGraph>::vertex_descriptor;
using BoostEdge = boost::graph_traits<BoostGraph>::edge_descriptor;

struct Graph::Storage {
  BoostGraph graph;
};

}  // namespace foldnorm
