// The orthogonal matrices of a rotation (include/foldnorm/fold/rotate.h): randomized Hadamard
// where an exact construction of the width's order is known, a random orthogonal matrix
// otherwise. Everything in float64; a Hadamard matrix is checked (H H^T = n I, exactly: its
// entries are +-1) before use.
#include <ATen/ATen.h>

#include <stdexcept>

#include "foldnorm/fold/rotate.h"

namespace foldnorm {
namespace {

bool isPrime(int64_t q) {
  if (q < 2) return false;
  for (int64_t d = 2; d * d <= q; ++d)
    if (q % d == 0) return false;
  return true;
}

/// The order m of a Paley (type I) Hadamard matrix, m = q + 1 with q a prime = 3 mod 4, or 1;
/// `width` = m * 2^k with the smallest such m. 0 when there is none.
int64_t hadamardFactor(int64_t width) {
  if (width < 1) return 0;
  for (int64_t pow2 = 1; pow2 <= width && width % pow2 == 0; pow2 *= 2) {
    const int64_t m = width / pow2;
    if (m == 1 || (m % 4 == 0 && isPrime(m - 1) && (m - 1) % 4 == 3)) return m;
  }
  return 0;
}

/// Paley I: H = I + [[0, 1^T], [-1, J]], J the Jacobsthal matrix of GF(q), J_ij = chi(j - i).
at::Tensor paley(int64_t m) {
  const int64_t q = m - 1;
  std::vector<int> chi(static_cast<std::size_t>(q), -1);
  chi[0] = 0;
  for (int64_t x = 1; x < q; ++x) chi[static_cast<std::size_t>(x * x % q)] = 1;
  auto h = at::zeros({m, m}, at::kDouble);
  auto a = h.accessor<double, 2>();
  for (int64_t i = 0; i < m; ++i) a[i][i] = 1;
  for (int64_t j = 1; j < m; ++j) {
    a[0][j] = 1;
    a[j][0] = -1;
  }
  for (int64_t i = 0; i < q; ++i)
    for (int64_t j = 0; j < q; ++j)
      if (i != j) a[i + 1][j + 1] += chi[static_cast<std::size_t>(((j - i) % q + q) % q)];
  return h;
}

at::Tensor hadamard(int64_t width) {
  const int64_t m = hadamardFactor(width);
  auto h = m == 1 ? at::ones({1, 1}, at::kDouble) : paley(m);
  auto two = at::tensor({1.0, 1.0, 1.0, -1.0}, at::kDouble).view({2, 2});
  while (h.size(0) < width) h = at::kron(h, two);  // Sylvester doubling
  auto gram = at::matmul(h, h.t());
  if (!gram.equal(at::eye(width, at::kDouble) * static_cast<double>(width)))
    throw std::logic_error("rotate: the Hadamard construction of order " + std::to_string(width) + " is wrong");
  return h;
}

}  // namespace

const char* toString(RotationKind kind) { return kind == RotationKind::Hadamard ? "hadamard" : "random"; }

bool hasHadamard(int64_t width) { return hadamardFactor(width) != 0; }

at::Tensor rotationMatrix(int64_t width, RotationKind kind, uint64_t seed, RotationKind* kindUsed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  if (kind == RotationKind::Hadamard && hasHadamard(width)) {
    if (kindUsed) *kindUsed = RotationKind::Hadamard;
    auto signs = at::empty({width}, at::kDouble).bernoulli_(0.5, gen).mul_(2).sub_(1);
    // Rows are the new channels: Q = H diag(s) / sqrt(n); Q Q^T = H H^T / n = I.
    return hadamard(width) * signs.unsqueeze(0) / std::sqrt(static_cast<double>(width));
  }
  if (kindUsed) *kindUsed = RotationKind::Random;
  auto g = at::empty({width, width}, at::kDouble).normal_(0, 1, gen);
  auto [q, r] = at::linalg_qr(g);
  // Signs of R's diagonal moved into Q: the QR's Q is then Haar-distributed.
  return q * at::sign(r.diagonal()).unsqueeze(0);
}

}  // namespace foldnorm
