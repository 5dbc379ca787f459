// findLayerNorms on a layer_norm node with fewer operands than aten::layer_norm has (a
// hand-edited or corrupted graph): one clear foldnorm::Error, never std::out_of_range.
#include <catch2/catch.hpp>

#include "foldnorm/common/error.h"
#include "foldnorm/graph/summary.h"

using namespace foldnorm;

TEST_CASE("a layer_norm with fewer than 5 operands is refused with a foldnorm::Error", "[graph][summary]") {
  for (std::size_t operands = 0; operands < 5; ++operands) {
    INFO(operands << " operands");
    Graph g;
    auto param = g.addNode("prim::Param");
    g.setGraphInputNode(param);
    auto x = g.addOutput(param, "x", ValueKind::Tensor);
    g.value(x).tensor = TensorInfo{{2, 8}, "float32"};
    auto shape = g.addOutput(g.addNode("prim::Constant"), "shape", ValueKind::IntList);
    g.value(shape).constant = ConstantValue(std::vector<int64_t>{8});
    auto ln = g.addNode("aten::layer_norm");
    std::vector<ValueId> ins{x, shape, x, x};
    for (std::size_t i = 0; i < operands; ++i) g.addInput(ln, ins.at(i));
    g.addOutput(ln, "y", ValueKind::Tensor);
    try {
      findLayerNorms(g);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("operands") != std::string::npos);
    }
  }
}
