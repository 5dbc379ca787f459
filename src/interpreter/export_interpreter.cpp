// The torch.export interpreter (see include/foldnorm/interpreter/export_interpreter.h): runs the
// steps export_compile.cpp made, a loop of boxed calls over numbered slots with no JSON or name
// look-ups; the benchmark times exactly that loop.
#include "foldnorm/interpreter/export_interpreter.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DefaultDtype.h>

#include <nlohmann/json.hpp>

#include "export_compiled.h"
#include "export_scalar_ops.h"
#include "foldnorm/common/error.h"

namespace foldnorm {

using nlohmann::json;
using export_interp::ArgSource;
using export_interp::Compiled;
using export_interp::OutBinding;
using export_interp::Step;

namespace {

c10::IValue materialize(const ArgSource& s, const std::vector<c10::IValue>& env) {
  auto element = [&](std::size_t i) { return s.slots[i] >= 0 ? env[s.slots[i]] : s.elements[i]; };
  switch (s.kind) {
    case ArgSource::Const: return s.constant;
    case ArgSource::Slot: return env[s.slot];
    case ArgSource::TensorList: {
      c10::List<at::Tensor> l;
      for (int slot : s.slots) l.push_back(env[slot].toTensor());
      return l;
    }
    case ArgSource::OptionalTensorList: {
      c10::List<std::optional<at::Tensor>> l;
      for (int slot : s.slots) l.push_back(slot >= 0 ? std::optional<at::Tensor>(env[slot].toTensor()) : std::nullopt);
      return l;
    }
    case ArgSource::IntList: {
      c10::List<int64_t> l;
      for (std::size_t i = 0; i < s.slots.size(); ++i) l.push_back(element(i).toInt());
      return l;
    }
    case ArgSource::FloatList: {
      c10::List<double> l;
      for (std::size_t i = 0; i < s.slots.size(); ++i) l.push_back(element(i).toDouble());
      return l;
    }
    case ArgSource::BoolList: {
      c10::List<bool> l;
      for (std::size_t i = 0; i < s.slots.size(); ++i) l.push_back(element(i).toBool());
      return l;
    }
  }
  return {};
}

void bindOutput(const OutBinding& b, const c10::IValue& v, std::vector<c10::IValue>& env) {
  if (!b.isList) {
    if (b.slot >= 0) env[b.slot] = v;
    return;
  }
  auto list = v.toListRef();
  if (list.size() != b.listSlots.size()) throw Error("an op returned a list of another length than recorded");
  for (std::size_t i = 0; i < list.size(); ++i)
    if (b.listSlots[i] >= 0) env[b.listSlots[i]] = list[i];
}

void flattenInto(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) out.push_back(v.toTensor());
  else if (v.isTensorList() || v.isList())
    for (const auto& e : v.toListRef()) flattenInto(e, out);
  else if (v.isTuple())
    for (const auto& e : v.toTupleRef().elements()) flattenInto(e, out);
  else if (v.isInt()) out.push_back(at::scalar_tensor(v.toInt(), at::kLong));
  else if (v.isDouble()) out.push_back(at::scalar_tensor(v.toDouble(), at::kDouble));
  else if (v.isBool()) out.push_back(at::scalar_tensor(v.toBool(), at::kBool));
}

std::vector<c10::IValue> execute(const Compiled& c, const std::vector<c10::IValue>& inputs) {
  std::vector<c10::IValue> env(c.slotCount);
  for (std::size_t i = 0; i < c.inputSlots.size(); ++i) {
    int slot = c.inputSlots[i];
    if (slot < 0) continue;
    // An input an in-place op writes gets a private copy: state and caller's tensors stay as given.
    env[slot] = c.writtenInputs.count(slot) && inputs[i].isTensor() ? c10::IValue(inputs[i].toTensor().clone()) : inputs[i];
  }
  for (const auto& step : c.steps) {
    std::vector<c10::IValue> stack;
    stack.reserve(step.args.size());
    for (const auto& a : step.args) stack.push_back(materialize(a, env));
    try {
      switch (step.kind) {
        case Step::Op:
          step.op->callBoxed(stack);
          if (stack.size() != step.outputs.size()) throw Error("the op returned another number of results");
          for (std::size_t i = 0; i < stack.size(); ++i) bindOutput(step.outputs[i], stack[i], env);
          break;
        case Step::GetItem: {
          const auto& seq = stack.at(0);
          auto idx = stack.at(1).toInt();
          auto elems = seq.isTuple() ? seq.toTupleRef().elements().vec() : seq.toListRef().vec();
          if (idx < 0) idx += static_cast<int64_t>(elems.size());
          bindOutput(step.outputs.at(0), elems.at(idx), env);
          break;
        }
        case Step::ScalarOp: bindOutput(step.outputs.at(0), exportScalarOp(step.scalarOp, stack), env); break;
        case Step::SetGradSubgraph: {
          auto results = execute(*step.subgraph, stack);
          if (step.outputs.size() == 1 && step.outputs[0].isList) {
            c10::impl::GenericList list(c10::AnyType::get());
            for (auto& r : results) list.push_back(r);
            bindOutput(step.outputs[0], list, env);
          } else {
            if (results.size() != step.outputs.size()) throw Error("the subgraph returned another number of results");
            for (std::size_t i = 0; i < results.size(); ++i) bindOutput(step.outputs[i], results[i], env);
          }
          break;
        }
      }
    } catch (const c10::Error& e) {
      // The op, where the model's code called it, and the cause (the message's last line).
      throw Error(step.description + (step.sourceLine.empty() ? "" : " at " + step.sourceLine) + " failed: " +
                  errorCause(e.what_without_backtrace()));
    } catch (const Error& e) {
      throw Error(step.description + ": " + e.what());
    }
  }
  std::vector<c10::IValue> out;
  for (const auto& o : c.outputs) out.push_back(materialize(o, env));
  return out;
}

// Restores the default dtype when a retargeted run ends (also by an exception).
struct DefaultDtypeGuard {
  caffe2::TypeMeta saved = c10::get_default_dtype();
  explicit DefaultDtypeGuard(std::optional<at::ScalarType> dtype) {
    if (dtype && at::isFloatingType(*dtype)) c10::set_default_dtype(c10::scalarTypeToTypeMeta(*dtype));
  }
  ~DefaultDtypeGuard() { c10::set_default_dtype(saved); }
};

at::Tensor retargeted(const at::Tensor& t, const ExportRunOptions& o) {
  return t.to(o.device, o.dtype && t.is_floating_point() ? *o.dtype : t.scalar_type());
}

}  // namespace

struct ExportInterpreter::Program {
  std::shared_ptr<const Compiled> graph;
  ExportRunOptions options;
  std::vector<c10::IValue> inputs;   // per graph input: the state tensor or constant; user slots empty
  std::vector<std::size_t> userPositions;
  std::vector<std::string> userNames;
  std::vector<std::size_t> userOutputs;  // positions in graph.outputs
};

ExportInterpreter::ExportInterpreter(const json& program, const std::map<std::string, at::Tensor>& state,
                                     const ExportRunOptions& options) {
  auto p = std::make_shared<Program>();
  p->options = options;
  const auto& gm = program.at("graph_module");
  p->graph = export_interp::compileGraph(gm.at("graph"), options);
  const auto& specs = gm.at("signature").at("input_specs");
  if (specs.size() != p->graph->inputSlots.size())
    throw Error("the program's signature lists " + std::to_string(specs.size()) + " inputs, its graph " +
                std::to_string(p->graph->inputSlots.size()));
  std::map<const at::TensorImpl*, at::Tensor> castOnce;  // tensors shared by several names stay shared
  auto stateTensor = [&](const std::string& kind, const std::string& name) -> c10::IValue {
    auto it = state.find(name);
    if (it == state.end()) throw Error("the program reads " + kind + " '" + name + "', which the archive does not hold");
    auto& cast = castOnce[it->second.unsafeGetTensorImpl()];
    if (!cast.defined()) cast = retargeted(it->second.detach(), options);
    return cast;
  };
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string kind = specs[i].begin().key();
    const json& spec = specs[i].begin().value();
    if (kind == "parameter") p->inputs.push_back(stateTensor(kind, spec.at("parameter_name")));
    else if (kind == "buffer") p->inputs.push_back(stateTensor(kind, spec.at("buffer_name")));
    else if (kind == "tensor_constant") p->inputs.push_back(stateTensor("constant", spec.at("tensor_constant_name")));
    else if (kind == "constant_input") {
      const std::string vk = spec.at("value").begin().key();
      const json& v = spec.at("value").begin().value();
      p->inputs.push_back(vk == "as_int" ? c10::IValue(v.get<int64_t>()) : vk == "as_float" ? c10::IValue(export_interp::floatOf(v))
                          : vk == "as_bool" ? c10::IValue(v.get<bool>()) : vk == "as_string" ? c10::IValue(v.get<std::string>())
                                            : c10::IValue());
    } else if (kind == "user_input") {
      p->inputs.emplace_back();
      p->userPositions.push_back(i);
      const auto& arg = spec.at("arg");
      const std::string ak = arg.begin().key();
      const json& av = arg.begin().value();
      p->userNames.push_back(av.is_object() && av.contains("name") ? av.at("name").get<std::string>() : ak);
    } else {
      throw Error("inputs of kind '" + kind + "' (input " + std::to_string(i) + ") are not supported by the interpreter");
    }
  }
  const auto& outSpecs = gm.at("signature").at("output_specs");
  for (std::size_t i = 0; i < outSpecs.size(); ++i)
    if (outSpecs[i].contains("user_output")) p->userOutputs.push_back(i);
  program_ = p;
}

std::vector<at::Tensor> ExportInterpreter::run(const std::vector<at::Tensor>& userInputs) const {
  const auto& p = *program_;
  if (userInputs.size() != p.userPositions.size())
    throw Error("the program takes " + std::to_string(p.userPositions.size()) + " inputs, got " +
                std::to_string(userInputs.size()));
  at::NoGradGuard noGrad;
  DefaultDtypeGuard dtypeGuard(p.options.dtype);
  auto inputs = p.inputs;
  for (std::size_t i = 0; i < userInputs.size(); ++i) inputs[p.userPositions[i]] = retargeted(userInputs[i], p.options);
  auto outs = execute(*p.graph, inputs);
  std::vector<at::Tensor> flat;
  for (auto i : p.userOutputs) flattenInto(outs.at(i), flat);
  return flat;
}


}  // namespace foldnorm
