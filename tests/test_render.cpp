// Rendering: the scene's verdict roles, the DOT text (nodes, colours, clusters, legend), the
// ln: view, --collapse, the layout read back for the GUI, and real PNG/SVG files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "foldnorm/common/error.h"
#include "foldnorm/render/layout.h"
#include "foldnorm/render/render.h"
#include "helpers.h"

using namespace foldnorm;
using namespace foldnorm::render;
using foldnorm::test::analyzeIr;
namespace fs = std::filesystem;

namespace {

struct Rendered {
  test::Analyzed a;
  Scene scene;

  const SceneNode& node(const std::string& opKind, const std::string& module) const {
    for (const auto& n : scene.nodes)
      if (n.graphNode != kNone && a.model.graph.node(n.graphNode).kind == opKind && n.modulePath == module) return n;
    FAIL("no scene node " << opKind << " @ " << module);
    throw std::logic_error("unreachable");
  }
  /// The one node of this op kind (gelu and add have no parameters, so their module is inferred).
  const SceneNode& only(const std::string& opKind) const {
    const SceneNode* found = nullptr;
    for (const auto& n : scene.nodes)
      if (n.graphNode != kNone && a.model.graph.node(n.graphNode).kind == opKind) {
        REQUIRE(found == nullptr);
        found = &n;
      }
    REQUIRE(found != nullptr);
    return *found;
  }
  const SceneNode& named(const std::string& title) const {
    for (const auto& n : scene.nodes)
      if (n.title == title) return n;
    FAIL("no scene node titled " << title);
    throw std::logic_error("unreachable");
  }
  std::vector<std::string> opKinds() const {
    std::vector<std::string> out;
    for (const auto& n : scene.nodes) out.push_back(n.graphNode != kNone ? a.model.graph.node(n.graphNode).kind : n.title);
    std::sort(out.begin(), out.end());
    return out;
  }
};

Rendered renderThreeBlocks(const SceneOptions& options = {}) {
  Rendered r{analyzeIr(test::threeBlocks()), {}};
  // The scene is only as right as the verdicts it draws: pin them first.
  REQUIRE(r.a.result.layerNorms.size() == 3);
  REQUIRE(r.a.ln(0).foldable);
  REQUIRE(r.a.ln(1).reason == VerdictReason::Breaker);
  REQUIRE(r.a.ln(2).reason == VerdictReason::UnsafeShift);
  r.scene = buildScene(r.a.model.graph, r.a.result, options, "three.pt");
  return r;
}

/// The DOT attribute list of the node with id `id` ("n12 [label=<...>, fillcolor=...]").
std::string dotNode(const std::string& dot, const std::string& id) {
  std::smatch m;
  std::regex re("\\n\\s*" + id + "\\s*\\[([^;]*)\\];");
  if (!std::regex_search(dot, m, re)) return {};
  return m[1];
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("the scene gives each LN, leaf, breaker and unsafe consumer its role", "[render]") {
  auto r = renderThreeBlocks();
  CHECK(r.node("aten::layer_norm", "h.0.ln").role == NodeRole::FoldableLayerNorm);
  CHECK(r.node("aten::layer_norm", "h.1.ln").role == NodeRole::BlockedLayerNorm);
  CHECK(r.node("aten::layer_norm", "h.2.ln").role == NodeRole::BlockedLayerNorm);
  CHECK(r.node("aten::linear", "h.0.fc").role == NodeRole::Leaf);  // centered by the fold
  CHECK(r.node("aten::linear", "h.1.fc").role == NodeRole::Plain);  // its LN does not fold
  CHECK(r.only("aten::gelu").role ==
        NodeRole::Breaker);
  CHECK(r.named("output 0.1").role == NodeRole::UnsafeConsumer);  // sees h.2.fc's shift
  CHECK(r.named("output 0.0").role == NodeRole::Output);

  SECTION("labels carry op, verdict, module path relative to the block, shape and parameters") {
    const auto& ln = r.node("aten::layer_norm", "h.1.ln");
    CHECK(ln.title == "layer_norm  NOT foldable");
    CHECK(std::find(ln.lines.begin(), ln.lines.end(), "ln") != ln.lines.end());
    CHECK(std::find(ln.lines.begin(), ln.lines.end(), "[2, 3, 8]") != ln.lines.end());
    CHECK(std::find(ln.lines.begin(), ln.lines.end(), "(breaker)") != ln.lines.end());
    const auto& fc = r.node("aten::linear", "h.0.fc");
    CHECK(std::find(fc.lines.begin(), fc.lines.end(), "weight [8, 8]") != fc.lines.end());
    CHECK_THAT(fc.tooltip, Catch::Contains("centered by the fold"));
  }
  SECTION("the paths LN -> breaker and leaf -> unsafe consumer are marked, nothing else") {
    CHECK(r.only("aten::add").onPath);  // h.1.ln <- add <- gelu
    CHECK(r.node("aten::linear", "h.2.fc").onPath);                          // leaf -> output 0.1
    CHECK_FALSE(r.node("aten::linear", "h.1.fc").onPath);
    auto onPath = std::count_if(r.scene.edges.begin(), r.scene.edges.end(), [](const auto& e) { return e.onPath; });
    CHECK(onPath == 3);  // gelu -> add -> ln, fc -> output 0.1
  }
  SECTION("one cluster per block, with its LN summary") {
    std::vector<std::string> labels;
    for (const auto& c : r.scene.clusters) labels.push_back(c.label);
    CHECK(labels == std::vector<std::string>{"h.0  (1/1 LNs foldable)", "h.1  (0/1 LNs foldable)",
                                             "h.2  (0/1 LNs foldable)"});
    const auto& c = r.scene.clusters.at(r.node("aten::linear", "h.1.fc").cluster);
    CHECK(c.modulePath == "h.1");
  }
}

TEST_CASE("a parameter added directly is marked as a leaf on the op that reads it", "[render]") {
  // ln(fc(x) + pos): pos is centred like fc's weight, but its read is plumbing, hidden from the
  // view; the add, which shows pos among its parameters, carries the mark.
  const std::string ir =
      "graph(%x : Tensor, %fc__weight : Tensor, %fc__bias : Tensor, %pos : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
      "  %one : int = prim::Constant[value=1]()\n"
      "  %y : Tensor = aten::linear(%x, %fc__weight, %fc__bias)\n"
      "  %r : Tensor = aten::add(%y, %pos, %one)\n" +
      test::layerNorm("r", "z", 8) + "  return (%z)\n";
  Rendered r{analyzeIr({ir, {parseInputSpec("2x3x8")},
                        {{"fc__weight", parseInputSpec("8x8")}, {"fc__bias", parseInputSpec("8")},
                         {"pos", parseInputSpec("3x8")}, {"ln_w", parseInputSpec("8")}, {"ln_b", parseInputSpec("8")}}}),
             {}};
  REQUIRE(r.a.result.layerNorms.size() == 1);
  REQUIRE(r.a.ln(0).foldable);
  REQUIRE(r.a.planFor("pos") != nullptr);
  r.scene = buildScene(r.a.model.graph, r.a.result, {}, "pos.pt");
  const auto& add = r.only("aten::add");
  CHECK(add.role == NodeRole::Leaf);
  CHECK(std::find(add.lines.begin(), add.lines.end(), "leaf: center") != add.lines.end());
  CHECK_THAT(add.tooltip, Catch::Contains("leaf (parameter pos), centered by the fold"));
  CHECK(r.only("aten::linear").role == NodeRole::Leaf);
}

TEST_CASE("the DOT text has the nodes, verdict colours, clusters and the legend", "[render]") {
  auto r = renderThreeBlocks();
  std::string dot = toDot(r.scene);
  for (const auto& n : r.scene.nodes) {
    INFO(n.id << " " << n.title);
    std::string attrs = dotNode(dot, n.id);
    REQUIRE_FALSE(attrs.empty());
    if (n.role != NodeRole::Plain) CHECK_THAT(attrs, Catch::Contains(roleStyle(n.role).fill));
  }
  CHECK_THAT(dotNode(dot, r.only("aten::gelu").id),
             Catch::Contains("shape=octagon"));
  CHECK_THAT(dot, Catch::Contains("subgraph cluster_0"));
  CHECK_THAT(dot, Catch::Contains("h.0  (1/1 LNs foldable)"));
  CHECK_THAT(dot, Catch::Contains(kPathColour));
  CHECK_THAT(dot, Catch::Contains("[2, 3, 8]"));  // edge labels

  SECTION("the legend lists the roles present, and --no-legend leaves it out") {
    std::string legend = dotNode(dot, "legend");
    REQUIRE_FALSE(legend.empty());
    CHECK_THAT(legend, Catch::Contains("LayerNorm, foldable"));
    CHECK_THAT(legend, Catch::Contains("breaks mean-zero"));
    CHECK_THAT(legend, Catch::Contains("sees a centering shift"));
    CHECK_THAT(legend, !Catch::Contains("module, all LNs foldable"));  // no collapsed module here
    r.scene.legend = false;
    CHECK(dotNode(toDot(r.scene), "legend").empty());
  }
  SECTION("without clusters there are no subgraphs") {
    SceneOptions o;
    o.clusters = false;
    CHECK_THAT(toDot(renderThreeBlocks(o).scene), !Catch::Contains("subgraph"));
  }
}

TEST_CASE("an ln: view shows only that LN's mean-zero graph", "[render]") {
  SECTION("a foldable LN: the LN and its leaf") {
    auto r = renderThreeBlocks(parseViewSpec("ln:h.0.ln"));
    CHECK(r.opKinds() == std::vector<std::string>{"aten::layer_norm", "aten::linear"});
    CHECK(r.node("aten::linear", "h.0.fc").role == NodeRole::Leaf);
    CHECK_THAT(r.scene.title, Catch::Contains("mean-zero graph of h.0.ln"));
  }
  SECTION("a broken LN: the LN, the path back, and the breaker; not the mean-zero branch") {
    auto r = renderThreeBlocks(parseViewSpec("ln:h.1.ln"));
    CHECK(r.opKinds() == std::vector<std::string>{"aten::add", "aten::gelu", "aten::layer_norm"});
    CHECK(r.only("aten::gelu").role == NodeRole::Breaker);
    CHECK(std::all_of(r.scene.edges.begin(), r.scene.edges.end(), [](const auto& e) { return e.onPath; }));
  }
  SECTION("an unsafe LN: the LN, its leaf, and the shift path to the output that sees it") {
    auto r = renderThreeBlocks(parseViewSpec("ln:h.2.ln"));
    CHECK(r.opKinds() == std::vector<std::string>{"aten::layer_norm", "aten::linear", "output 0.1"});
    CHECK(r.named("output 0.1").role == NodeRole::UnsafeConsumer);
  }
  SECTION("an unknown path is an error that lists the valid ones") {
    Rendered r{analyzeIr(test::threeBlocks()), {}};
    CHECK_THROWS_WITH(buildScene(r.a.model.graph, r.a.result, parseViewSpec("ln:h.9.ln")),
                      Catch::Contains("h.9.ln") && Catch::Contains("h.0.ln, h.1.ln, h.2.ln"));
  }
  SECTION("view specs other than dataflow, full and ln:PATH are errors") {
    CHECK_THROWS_AS(parseViewSpec("ln:"), Error);
    CHECK_THROWS_WITH(parseViewSpec("fancy"), Catch::Contains("dataflow, full or ln:PATH"));
    CHECK(parseViewSpec("full").view == ViewKind::Full);
  }
}

TEST_CASE("collapse (--collapse) folds whole modules into one node with an LN summary", "[render]") {
  SceneOptions o;
  o.collapseDepth = 2;  // h.0, h.1, h.2
  auto r = renderThreeBlocks(o);
  auto module = [&](const std::string& path) -> const SceneNode& {
    for (const auto& n : r.scene.nodes)
      if (n.modulePath == path && n.graphNode == kNone) return n;
    FAIL("no module node " << path);
    throw std::logic_error("unreachable");
  };
  CHECK(module("h.0").role == NodeRole::ModuleAllFoldable);
  CHECK(module("h.1").role == NodeRole::ModuleNoneFoldable);
  CHECK(module("h.0").lines.at(0) == "1/1 LNs foldable");
  CHECK(module("h.1").lines.at(0) == "0/1 LNs foldable");
  CHECK(module("h.0").members.size() == 2);  // linear, layer_norm
  for (const auto& e : r.scene.edges) CHECK(e.from != e.to);
  // One edge per pair of nodes.
  std::set<std::pair<std::size_t, std::size_t>> pairs;
  for (const auto& e : r.scene.edges) CHECK(pairs.insert({e.from, e.to}).second);
  CHECK(r.scene.clusters.empty());  // the blocks are nodes now
  CHECK_THAT(dotNode(toDot(r.scene), module("h.0").id), Catch::Contains("1/1 LNs foldable"));
}

TEST_CASE("a collapsed module's verdict on its LNs is decided and worded in one place", "[render]") {
  // What the modules view and the GUI's collapsed blocks both show.
  CHECK(moduleRole(0, 0) == NodeRole::Module);
  CHECK(moduleRole(2, 2) == NodeRole::ModuleAllFoldable);
  CHECK(moduleRole(3, 1) == NodeRole::ModuleSomeFoldable);
  CHECK(moduleRole(2, 0) == NodeRole::ModuleNoneFoldable);
  CHECK(foldableCountText(0, 0) == "no LayerNorm");
  CHECK(foldableCountText(3, 1) == "1/3 LNs foldable");
}

TEST_CASE("the layout for the GUI is in points, y down, with nodes inside their clusters", "[render]") {
  auto r = renderThreeBlocks();
  auto layout = layoutScene(r.scene);
  REQUIRE(layout.nodes.size() == r.scene.nodes.size());
  REQUIRE(layout.edges.size() == r.scene.edges.size());
  REQUIRE(layout.clusters.size() == r.scene.clusters.size());
  CHECK(layout.width > 0);
  CHECK(layout.height > 0);
  for (const auto& n : layout.nodes) {
    CHECK(n.width > 10);  // points, not inches
    CHECK(n.box.min.x >= -0.5);
    CHECK(n.box.min.y >= -0.5);
    CHECK(n.box.max.x <= layout.width + 0.5);
    CHECK(n.box.max.y <= layout.height + 0.5);
    int c = r.scene.nodes[n.node].cluster;
    if (c < 0) continue;
    const auto& box = layout.clusters[c].box;
    CHECK(box.min.x <= n.box.min.x);
    CHECK(box.min.y <= n.box.min.y);
    CHECK(box.max.x >= n.box.max.x);
    CHECK(box.max.y >= n.box.max.y);
  }
  for (const auto& e : layout.edges) {
    const auto& se = r.scene.edges[e.edge];
    // Top to bottom: the producer sits above its consumer once y grows down.
    INFO(r.scene.nodes[se.from].id << " -> " << r.scene.nodes[se.to].id << " [" << se.label << "]: "
                                   << r.scene.nodes[se.from].title << " -> " << r.scene.nodes[se.to].title);
    CHECK(layout.nodes[se.from].center.y < layout.nodes[se.to].center.y);
    REQUIRE(e.points.size() >= 4);
    CHECK((e.points.size() - 1) % 3 == 0);
    CHECK(e.hasArrow);
    CHECK(e.hasLabel == !se.label.empty());
  }
}

TEST_CASE("PNG and SVG files are valid, written atomically, never over the model", "[render]") {
  auto r = renderThreeBlocks();
  test::ScratchDir dir("foldnorm-render");
  SECTION("PNG starts with the PNG signature") {
    auto png = dir.path / "three.png";
    auto bytes = renderToFile(r.scene, png.string());
    CHECK(bytes > 1000);
    std::string data = readFile(png);
    REQUIRE(data.size() == bytes);
    CHECK(data.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  }
  SECTION("SVG is an svg document with the node ids and no temporary file is left behind") {
    auto svg = dir.path / "three.svg";
    renderToFile(r.scene, svg.string());
    std::string data = readFile(svg);
    CHECK_THAT(data, Catch::Contains("<svg"));
    CHECK_THAT(data, Catch::Contains("h.0 &#160;(1/1 LNs foldable)"));
    std::size_t files = std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{});
    CHECK(files == 1);
  }
  SECTION("the model itself is refused, and its bytes are untouched") {
    auto model = dir.path / "model.dot";
    std::ofstream(model) << "not a picture";
    WriteOptions w;
    w.protectedPaths.push_back((dir.path / "." / "model.dot").string());
    CHECK_THROWS_WITH(renderToFile(r.scene, model.string(), w), Catch::Contains("refusing to overwrite"));
    CHECK(readFile(model) == "not a picture");
  }
  SECTION("an unknown extension is an error naming the valid ones") {
    CHECK_THROWS_WITH(renderToFile(r.scene, (dir.path / "x.jpeg").string()),
                      Catch::Contains(".jpeg") && Catch::Contains(".svg, .png, .pdf or .dot"));
    CHECK(formatFromPath("A.PNG") == ImageFormat::Png);
    CHECK(formatFromPath("a.gv") == ImageFormat::Dot);
  }
}
