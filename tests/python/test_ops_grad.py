"""torch.autograd.gradcheck (float64) through foldnorm::rms_norm, layer_norm and add_rms_norm,
with weight and bias present or absent, on the CPU and, where there is one, on a CUDA device;
and no "silently incorrect behavior" warning (the autograd fallback's) on the way. Exits 0 and
prints 'foldnorm grads ok' on success; exits 77 (ctest SKIP) only when the library is missing.

Usage: python test_ops_grad.py <path to libfoldnorm_ops.so>
"""
import os
import sys
import warnings

import torch


def ops():
    f = torch.ops.foldnorm
    return {
        "rms_norm": lambda x, r, w, b: f.rms_norm(x, [x.shape[-1]], w, b, 1e-3),
        "layer_norm": lambda x, r, w, b: f.layer_norm(x, [x.shape[-1]], w, b, 1e-3),
        "add_rms_norm": lambda x, r, w, b: f.add_rms_norm(x, r, [x.shape[-1]], w, b, 1e-3),
    }


def check_device(device, failures):
    torch.manual_seed(0)
    for name, op in ops().items():
        for hidden in (1, 7, 33):
            for with_weight in (False, True):
                for with_bias in (False, True):
                    opts = dict(dtype=torch.float64, device=device, requires_grad=True)
                    x = torch.randn(4, 3, hidden, **opts)
                    r = torch.randn(4, 3, hidden, **opts)
                    w = torch.randn(hidden, **opts) if with_weight else None
                    b = torch.randn(hidden, **opts) if with_bias else None
                    inputs = (x, r, w, b) if name == "add_rms_norm" else (x, None, w, b)
                    label = f"{name} {device} hidden={hidden} weight={with_weight} bias={with_bias}"
                    try:
                        ok = torch.autograd.gradcheck(lambda *a: op(*a), inputs, eps=1e-6,
                                                      atol=1e-6, rtol=1e-5)
                    except Exception as e:  # gradcheck raises with the mismatching Jacobian
                        failures.append(f"{label}: {str(e).splitlines()[0]}")
                        continue
                    if not ok:
                        failures.append(f"{label}: gradcheck returned False")


def check_warnings(failures):
    x = torch.randn(5, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.ops.foldnorm.rms_norm(x, [16], w, None, 1e-5).sum().backward()
        normed, s = torch.ops.foldnorm.add_rms_norm(x, x * 2, [16], w, w, 1e-5)
        (normed.sum() + s.sum()).backward()
        torch.ops.foldnorm.layer_norm(x, [16], None, w, 1e-5).sum().backward()
    for warning in caught:
        if "silently incorrect" in str(warning.message) or "autograd kernel" in str(warning.message):
            failures.append(f"warning raised: {warning.message}")
    if x.grad is None or w.grad is None:
        failures.append("no gradient reached the leaves")


def main():
    library = sys.argv[1]
    if not os.path.exists(library):
        print(f"skipped: {library} does not exist (build the foldnorm_ops target)")
        sys.exit(77)
    torch.ops.load_library(library)
    failures = []
    check_device("cpu", failures)
    if torch.cuda.is_available():
        check_device("cuda", failures)
    else:
        print("CUDA: not available here, CPU only")
    check_warnings(failures)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("foldnorm grads ok")


if __name__ == "__main__":
    main()
