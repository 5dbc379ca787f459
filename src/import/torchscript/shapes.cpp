// The example inputs checked against the model, and concrete shapes recorded by one run.
#include <algorithm>
#include <functional>

#include "foldnorm/common/error.h"
#include "steps.h"

namespace foldnorm::torchscript {

namespace jit = torch::jit;

void checkInputSpecs(const Graph& g, const std::vector<InputSpec>& specs) {
  auto modelInputs = g.modelInputs();
  for (std::size_t i = 0; i < modelInputs.size(); ++i) {
    const auto& v = g.value(modelInputs[i]);
    if (v.kind != ValueKind::Tensor)
      throw Error("model input " + std::to_string(i + 1) + " ('" + v.name + "') is of type " +
                  v.typeName + "; foldnorm feeds tensors only");
  }
  if (specs.empty() && !modelInputs.empty())
    throw Error("no input spec: the model carries none (extra file " +
                std::string(kInputSpecExtraFile) + "); give one --input per model input (" +
                std::to_string(modelInputs.size()) + "), e.g. --input 2x16:int64[0,1000)");
  if (specs.size() != modelInputs.size()) {
    std::string names;
    for (auto v : modelInputs) names += (names.empty() ? "" : ", ") + g.value(v).name;
    throw Error("the model takes " + std::to_string(modelInputs.size()) + " input(s) (" + names +
                ") but " + std::to_string(specs.size()) + " input spec(s) were given");
  }
}

void recordShapes(Graph& g, TorchModel& tm, const std::vector<InputSpec>& specs) {
  auto copy = tm.graph->copy();
  std::vector<jit::Value*> copied;  // ValueId -> value of copy
  copied.reserve(g.valueCount());
  for (auto* v : copy->inputs()) copied.push_back(v);
  for (auto* node : copy->nodes())
    for (auto* v : node->outputs()) copied.push_back(v);
  if (copied.size() != g.valueCount()) throw std::logic_error("graph copy changed its values");
  std::vector<ValueId> recorded;
  std::vector<jit::Value*> outs;
  for (ValueId id = 0; id < g.valueCount(); ++id)
    if (g.value(id).kind == ValueKind::Tensor) {
      recorded.push_back(id);
      outs.push_back(copied[id]);
    }
  auto* tuple = copy->insertNode(copy->createTuple(outs));
  while (!copy->outputs().empty()) copy->eraseOutput(0);
  copy->registerOutput(tuple->output());
  std::vector<at::Tensor> values;
  try {
    values = runGraph(tm.module, copy, tm.exampleInputs);
  } catch (const std::exception& e) {  // c10::Error, and JITException (a runtime_error)
    std::string spec;
    for (auto& s : specs) spec += (spec.empty() ? "" : " ") + s.toString();
    const auto* c10Error = dynamic_cast<const c10::Error*>(&e);
    std::string what = c10Error ? c10Error->what_without_backtrace() : e.what();
    const auto cause = errorCause(what);
    // A device the machine lacks is not a bad input spec (a trace names its device in constants;
    // those naming CUDA are retargeted to the CPU at the import, inlinedForward: this is another).
    for (const char* device : {"NVIDIA driver", "CUDA", "cuda", "device"})
      if (cause.find(device) != std::string::npos)
        throw Error("running the model on the example inputs failed on the CPU: " + cause);
    throw Error("running the model on the example inputs failed; does the input spec (" + spec +
                ") match the model? " + cause);
  }
  if (values.size() != recorded.size()) throw std::logic_error("shape recording lost values");
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    const auto& t = values[i];
    if (!t.defined()) continue;
    g.value(recorded[i]).tensor = TensorInfo{t.sizes().vec(), dtypeName(t.scalar_type())};
  }
  for (auto out : g.modelOutputs()) {
    // Outputs are tensors or tuples/lists built in the graph; flatten like runGraph does.
    std::function<void(ValueId)> collect = [&](ValueId v) {
      const auto& val = g.value(v);
      if (val.kind == ValueKind::Tensor) {
        auto pos = std::find(recorded.begin(), recorded.end(), v) - recorded.begin();
        tm.exampleOutputs.push_back(values.at(pos));
      } else if (val.producer != kNone) {
        const auto& p = g.node(val.producer);
        if (p.kind == "prim::TupleConstruct" || p.kind == "prim::ListConstruct")
          for (auto in : p.inputs) collect(in);
      }
    };
    collect(out);
  }
}

}  // namespace foldnorm::torchscript
