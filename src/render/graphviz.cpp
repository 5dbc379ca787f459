#include "graphviz.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "foldnorm/common/error.h"

namespace foldnorm::render::detail {

namespace {

// Graphviz reports errors through a global hook; collect them for the exception message.
std::string& lastErrors() {
  static std::string errors;
  return errors;
}

int collectError(char* message) {
  if (message) lastErrors() += message;
  return 0;
}

struct ContextOwner {
  GVC_t* gvc = nullptr;
  ContextOwner() {
    agseterr(AGERR);  // warnings (e.g. "scaling a huge PNG down") are not errors for us
    agseterrf(collectError);
    gvc = gvContext();
  }
  ~ContextOwner() {
    if (gvc) gvFreeContext(gvc);
  }
};

std::string takeErrors() {
  std::string e = std::move(lastErrors());
  lastErrors().clear();
  while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
  return e;
}

std::string escapeHtml(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// cgraph takes char* everywhere but copies what it keeps.
char* mut(const char* s) { return const_cast<char*>(s); }

void set(void* object, const char* name, const std::string& value) {
  agsafeset(object, mut(name), mut(value.c_str()), mut(""));
}

void setHtml(Agraph_t* g, void* object, const char* name, const std::string& html) {
  char* label = agstrdup_html(g, mut(html.c_str()));
  agsafeset(object, mut(name), label, mut(""));
  agstrfree(g, label);
}

std::string nodeLabel(const SceneNode& n) {
  std::string html = "<B>" + escapeHtml(n.title) + "</B>";
  if (!n.lines.empty()) {
    html += "<BR/><FONT POINT-SIZE=\"8\" COLOR=\"#303030\">";
    for (std::size_t i = 0; i < n.lines.size(); ++i) html += (i ? "<BR/>" : "") + escapeHtml(n.lines[i]);
    html += "</FONT>";
  }
  return html;
}

std::string legendLabel(const Scene& scene) {
  std::string rows;
  auto row = [&](const char* fill, const std::string& text) {
    rows += "<TR><TD BGCOLOR=\"" + std::string(fill) + "\" WIDTH=\"22\"> </TD><TD ALIGN=\"LEFT\">" +
            escapeHtml(text) + "</TD></TR>";
  };
  for (auto role : legendEntries(scene)) {
    const auto& st = roleStyle(role);
    std::string shape = st.shape;
    row(st.fill, std::string(st.legend) + (shape == "box" || shape == "box3d" ? "" : " (" + shape + ")"));
  }
  bool anyPath = false;
  for (const auto& e : scene.edges) anyPath = anyPath || e.onPath;
  if (anyPath) row(kPathColour, "verdict path: LN to breaker, or centered leaf to the op that sees its shift");
  row("#ffffff", "edge labels: tensor shapes");
  return "<TABLE BORDER=\"1\" COLOR=\"#8c8c8c\" CELLBORDER=\"0\" CELLSPACING=\"2\" CELLPADDING=\"3\">"
         "<TR><TD COLSPAN=\"2\" ALIGN=\"LEFT\"><B>Legend</B></TD></TR>" +
         rows + "</TABLE>";
}

}  // namespace

std::mutex& graphvizLock() {
  static std::mutex m;
  return m;
}

GVC_t* graphvizContext() {
  static ContextOwner owner;
  if (!owner.gvc) throw Error("Graphviz could not be initialised (gvContext failed)");
  return owner.gvc;
}

GvGraph::GvGraph(const Scene& scene, bool legend) {
  graphvizContext();  // installs the error hook before anything can fail
  graph_ = agopen(mut("foldnorm"), Agdirected, nullptr);
  if (!graph_) throw Error("Graphviz could not create a graph: " + takeErrors());
  Agraph_t* g = graph_;
  // Defaults first: per-object attributes then only say what differs (smaller DOT, faster).
  agattr(g, AGRAPH, mut("rankdir"), mut("TB"));
  // Rank globally, not cluster by cluster: an op outside a block that sits between two of its
  // nodes (block linear -> residual add -> block LN) otherwise lands on the block's rank, and
  // Graphviz 2.42 double-frees while routing such labelled flat edges.
  agattr(g, AGRAPH, mut("newrank"), mut("true"));
  agattr(g, AGRAPH, mut("fontname"), mut("Helvetica"));
  agattr(g, AGRAPH, mut("fontsize"), mut("10"));
  agattr(g, AGRAPH, mut("nodesep"), mut("0.18"));
  agattr(g, AGRAPH, mut("ranksep"), mut("0.28"));
  agattr(g, AGRAPH, mut("bgcolor"), mut("white"));
  agattr(g, AGRAPH, mut("pad"), mut("0.2"));
  agattr(g, AGRAPH, mut("labeljust"), mut("l"));
  // Declared empty on the root (which is not a box); every cluster sets them.
  agattr(g, AGRAPH, mut("style"), mut(""));
  agattr(g, AGRAPH, mut("color"), mut(""));
  agattr(g, AGRAPH, mut("fillcolor"), mut(""));
  agattr(g, AGRAPH, mut("label"), mut(""));
  agattr(g, AGNODE, mut("shape"), mut("box"));
  agattr(g, AGNODE, mut("style"), mut("rounded,filled"));
  agattr(g, AGNODE, mut("fontname"), mut("Helvetica"));
  agattr(g, AGNODE, mut("fontsize"), mut("10"));
  agattr(g, AGNODE, mut("margin"), mut("0.08,0.03"));
  agattr(g, AGNODE, mut("height"), mut("0.3"));
  agattr(g, AGNODE, mut("fillcolor"), mut(roleStyle(NodeRole::Plain).fill));
  agattr(g, AGNODE, mut("color"), mut(roleStyle(NodeRole::Plain).border));
  agattr(g, AGNODE, mut("penwidth"), mut("1"));
  agattr(g, AGEDGE, mut("fontname"), mut("Helvetica"));
  agattr(g, AGEDGE, mut("fontsize"), mut("7"));
  agattr(g, AGEDGE, mut("fontcolor"), mut("#606060"));
  agattr(g, AGEDGE, mut("color"), mut("#808080"));
  agattr(g, AGEDGE, mut("arrowsize"), mut("0.6"));
  agattr(g, AGEDGE, mut("penwidth"), mut("1"));
  if (!scene.title.empty()) {
    set(g, "label", scene.title);
    set(g, "labelloc", "t");
    set(g, "fontsize", "12");
  }

  // Clusters: parents come before children in Scene::clusters.
  clusters_.resize(scene.clusters.size(), nullptr);
  std::vector<int> depth(scene.clusters.size(), 0);
  for (std::size_t i = 0; i < scene.clusters.size(); ++i) {
    const auto& c = scene.clusters[i];
    Agraph_t* parent = c.parent >= 0 ? clusters_.at(c.parent) : g;
    depth[i] = c.parent >= 0 ? depth[c.parent] + 1 : 0;
    Agraph_t* sg = agsubg(parent, mut(c.id.c_str()), 1);
    set(sg, "label", c.label);
    set(sg, "fontsize", "10");
    set(sg, "style", "rounded,filled");
    set(sg, "color", "#bdbdbd");
    set(sg, "fillcolor", depth[i] % 2 == 1 ? "#ffffff" : "#f4f4f4");
    clusters_[i] = sg;
  }

  nodes_.reserve(scene.nodes.size());
  for (const auto& n : scene.nodes) {
    Agraph_t* home = n.cluster >= 0 ? clusters_.at(n.cluster) : g;
    Agnode_t* an = agnode(home, mut(n.id.c_str()), 1);
    const auto& st = roleStyle(n.role);
    setHtml(g, an, "label", nodeLabel(n));
    if (std::string(st.shape) != "box") set(an, "shape", st.shape);
    if (n.role != NodeRole::Plain) {
      set(an, "fillcolor", st.fill);
      set(an, "color", st.border);
      set(an, "penwidth", "1.5");
    }
    if (n.breaker && n.role != NodeRole::Breaker) {
      set(an, "color", roleStyle(NodeRole::Breaker).border);
      set(an, "penwidth", "3");
    } else if (n.onPath && n.role == NodeRole::Plain) {
      set(an, "color", kPathColour);
      set(an, "penwidth", "2");
    }
    if (!n.tooltip.empty()) set(an, "tooltip", n.tooltip);
    nodes_.push_back(an);
  }

  edges_.reserve(scene.edges.size());
  for (const auto& e : scene.edges) {
    Agedge_t* ae = agedge(g, nodes_.at(e.from), nodes_.at(e.to), nullptr, 1);
    if (!e.label.empty()) set(ae, "label", e.label);
    if (e.onPath) {
      set(ae, "color", kPathColour);
      set(ae, "fontcolor", kPathColour);
      set(ae, "penwidth", "2.2");
    }
    edges_.push_back(ae);
  }

  if (legend) {
    Agnode_t* ln = agnode(g, mut("legend"), 1);
    set(ln, "shape", "plain");
    set(ln, "style", "");
    set(ln, "fontsize", "9");
    setHtml(g, ln, "label", legendLabel(scene));
  }
}

GvGraph::~GvGraph() {
  if (!graph_) return;
  if (laidOut_) gvFreeLayout(graphvizContext(), graph_);
  agclose(graph_);
}

void GvGraph::layout() {
  if (laidOut_) return;
  takeErrors();
  if (gvLayout(graphvizContext(), graph_, "dot") != 0)
    throw Error("Graphviz dot layout failed: " + takeErrors());
  laidOut_ = true;
}

std::string GvGraph::dot() const {
  char* buffer = nullptr;
  std::size_t size = 0;
  FILE* stream = open_memstream(&buffer, &size);
  if (!stream) throw Error("cannot allocate memory for the DOT text");
  int rc = agwrite(graph_, stream);
  std::fclose(stream);
  std::unique_ptr<char, decltype(&std::free)> owned(buffer, &std::free);
  if (rc != 0) throw Error("Graphviz could not write DOT: " + takeErrors());
  return std::string(buffer, size);
}

std::string GvGraph::render(const char* format) {
  layout();
  char* data = nullptr;
  unsigned int length = 0;
  takeErrors();
  if (gvRenderData(graphvizContext(), graph_, format, &data, &length) != 0 || !data) {
    if (data) gvFreeRenderData(data);
    throw Error(std::string("Graphviz could not render ") + format + ": " + takeErrors());
  }
  std::string bytes(data, length);
  gvFreeRenderData(data);
  return bytes;
}

}  // namespace foldnorm::render::detail
