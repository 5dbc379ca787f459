#include "foldnorm/import/input_spec.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "foldnorm/common/error.h"

namespace foldnorm {
namespace {

const char* const kDtypes[] = {"float32", "float64", "float16", "bfloat16", "int64", "int32",
                               "bool"};

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw Error("bad input spec '" + text + "': " + why +
              " (expected SHAPE:DTYPE[lo,hi), e.g. 2x16:int64[0,1000) or 1x3x224x224:float32)");
}

int64_t parseInt(const std::string& text, const std::string& part) {
  if (part.empty()) bad(text, "empty dimension");
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(part, &used);
  } catch (const std::exception&) {
    bad(text, "'" + part + "' is not a number");
  }
  if (used != part.size()) bad(text, "'" + part + "' is not a number");
  return v;
}

double parseNumber(const std::string& text, const std::string& part) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(part, &used);
  } catch (const std::exception&) {
    bad(text, "'" + part + "' is not a number");
  }
  if (used != part.size()) bad(text, "'" + part + "' is not a number");
  return v;
}

std::string formatNumber(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

bool InputSpec::isFloating() const {
  return dtype == "float32" || dtype == "float64" || dtype == "float16" || dtype == "bfloat16";
}

std::string InputSpec::toString() const {
  std::string s;
  if (shape.empty()) s = "scalar";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  s += ":" + dtype;
  if (low && high) s += "[" + formatNumber(*low) + "," + formatNumber(*high) + ")";
  return s;
}

InputSpec parseInputSpec(const std::string& text) {
  InputSpec spec;
  std::string rest = text;
  auto colon = rest.find(':');
  std::string shapePart = rest.substr(0, colon);
  std::string typePart = colon == std::string::npos ? "float32" : rest.substr(colon + 1);
  if (shapePart.empty()) bad(text, "missing shape");
  if (shapePart != "scalar") {
    std::size_t start = 0;
    while (true) {
      auto x = shapePart.find('x', start);
      auto dim = parseInt(text, shapePart.substr(start, x - start));
      if (dim < 0) bad(text, "negative dimension");
      spec.shape.push_back(dim);
      if (x == std::string::npos) break;
      start = x + 1;
    }
  }
  auto bracket = typePart.find('[');
  spec.dtype = typePart.substr(0, bracket);
  if (spec.dtype.empty()) spec.dtype = "float32";
  bool known = false;
  for (auto* d : kDtypes) known |= spec.dtype == d;
  if (!known) bad(text, "unknown dtype '" + spec.dtype + "'");
  if (bracket != std::string::npos) {
    auto range = typePart.substr(bracket);
    if (range.size() < 5 || range.back() != ')') bad(text, "range must look like [lo,hi)");
    auto comma = range.find(',');
    if (comma == std::string::npos) bad(text, "range must look like [lo,hi)");
    spec.low = parseNumber(text, range.substr(1, comma - 1));
    spec.high = parseNumber(text, range.substr(comma + 1, range.size() - comma - 2));
    if (!(*spec.low < *spec.high)) bad(text, "empty range: lo must be below hi");
    if (spec.dtype == "bool" && (*spec.low < 0 || *spec.high > 2)) bad(text, "bool range within [0,2)");
  }
  return spec;
}

std::string inputSpecsToJson(const std::vector<InputSpec>& specs) {
  nlohmann::json j;
  j["format"] = "foldnorm-input-spec";
  j["version"] = 1;
  j["inputs"] = nlohmann::json::array();
  for (const auto& s : specs) j["inputs"].push_back(s.toString());
  return j.dump(2);
}

std::vector<InputSpec> inputSpecsFromJson(const std::string& json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    throw Error(std::string("embedded input spec is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", "") != "foldnorm-input-spec" || !j.contains("inputs") ||
      !j["inputs"].is_array())
    throw Error("embedded input spec: expected {\"format\": \"foldnorm-input-spec\", \"inputs\": [...]}");
  std::vector<InputSpec> specs;
  for (const auto& s : j["inputs"]) {
    if (!s.is_string()) throw Error("embedded input spec: every input must be a string");
    specs.push_back(parseInputSpec(s.get<std::string>()));
  }
  return specs;
}

}  // namespace foldnorm
