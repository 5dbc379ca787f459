// Python's scalar helpers on concrete values (see export_scalar_ops.h).
#include "export_scalar_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "foldnorm/common/error.h"

namespace foldnorm {

c10::IValue exportScalarOp(const std::string& op, const std::vector<c10::IValue>& a) {
  auto isInt = [&](std::size_t i) { return a.at(i).isInt() || a.at(i).isBool(); };
  auto i = [&](std::size_t k) { return a.at(k).isBool() ? int64_t(a.at(k).toBool()) : a.at(k).toInt(); };
  auto d = [&](std::size_t k) { return a.at(k).isDouble() ? a.at(k).toDouble() : double(i(k)); };
  bool ints = a.size() >= 1 && isInt(0) && (a.size() < 2 || isInt(1));
  auto arith = [&](auto fi, auto fd) -> c10::IValue { return ints ? c10::IValue(fi(i(0), i(1))) : c10::IValue(fd(d(0), d(1))); };
  if (op == "_operator.add") return arith(std::plus<int64_t>(), std::plus<double>());
  if (op == "_operator.sub") return arith(std::minus<int64_t>(), std::minus<double>());
  if (op == "_operator.mul") return arith(std::multiplies<int64_t>(), std::multiplies<double>());
  if (op == "_operator.truediv") return d(0) / d(1);
  if (op == "_operator.floordiv")
    return arith([](int64_t x, int64_t y) { int64_t q = x / y; return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q; },
                 [](double x, double y) { return std::floor(x / y); });
  if (op == "_operator.mod")
    return arith([](int64_t x, int64_t y) { int64_t r = x % y; return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r; },
                 [](double x, double y) { double r = std::fmod(x, y); return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r; });
  if (op == "_operator.pow") return ints && i(1) >= 0 ? c10::IValue(int64_t(std::llround(std::pow(d(0), d(1))))) : c10::IValue(std::pow(d(0), d(1)));
  if (op == "_operator.neg") return isInt(0) ? c10::IValue(-i(0)) : c10::IValue(-d(0));
  if (op == "_operator.pos") return a.at(0);
  if (op == "_operator.eq") return d(0) == d(1);
  if (op == "_operator.ne") return d(0) != d(1);
  if (op == "_operator.lt") return d(0) < d(1);
  if (op == "_operator.le") return d(0) <= d(1);
  if (op == "_operator.gt") return d(0) > d(1);
  if (op == "_operator.ge") return d(0) >= d(1);
  if (op == "_operator.and_") return bool(i(0) & i(1));
  if (op == "_operator.or_") return bool(i(0) | i(1));
  if (op == "torch.sym_not") return !a.at(0).toBool();
  if (op == "torch.sym_int" || op == "math.trunc") return static_cast<int64_t>(std::trunc(d(0)));
  if (op == "torch.sym_float") return d(0);
  if (op == "torch.sym_sqrt") return std::sqrt(d(0));
  if (op == "torch.sym_max") return arith([](int64_t x, int64_t y) { return std::max(x, y); }, [](double x, double y) { return std::max(x, y); });
  if (op == "torch.sym_min") return arith([](int64_t x, int64_t y) { return std::min(x, y); }, [](double x, double y) { return std::min(x, y); });
  if (op == "torch.sym_ite") return a.at(0).toBool() ? a.at(1) : a.at(2);
  throw Error("the scalar helper " + op + " is not supported by the interpreter");
}

}  // namespace foldnorm
