"""Rotation-ready models (issue 30, docs/rotation.md): the CLI's ``foldnorm rotate`` from Python.

    rotated = foldnorm.rotate(model, {"input_ids": ids})          # fold, absorb, rotate, verified
    rotated.foldnorm_report["stage"]["streams"]                    # what rotated, what was refused
    absorbed = foldnorm.fold_traced(model, inputs, absorb_affine=True)   # absorb only

The model is traced (an eager module), or read from a TorchScript file or ScriptModule; the
result is a ScriptModule whose norms are weightless ``aten::rms_norm`` (plain PyTorch runs it).
"""
from __future__ import annotations

import json
import os
from typing import Optional, Union

import torch

from . import _foldnorm
from ._trace import ExampleInputs, read_model
from .errors import ArgumentError, FoldError, public


def _stage(model, example_inputs, out, rotate: bool, rotation: str, seed: int, random_inputs: int,
           insert_rotations: bool = True):
    if rotation not in ("hadamard", "random"):
        raise ArgumentError(f"rotation must be 'hadamard' or 'random', not {rotation!r}")
    out_path = os.fspath(out) if out is not None else ""

    def read(path, specs):
        # a .pt2 is refused by the core in one line (rotateModel, fold/rotate.cpp)
        return _foldnorm.analyze(path, specs).rotate(rotate, rotation, seed, random_inputs, out_path,
                                                     insert_rotations)

    (text, module), _, _ = read_model(model, example_inputs, read, export_first=False)
    report = json.loads(text)
    stage = report["stage"]
    if not stage["verification"]["passed"]:
        v = stage["verification"]
        raise FoldError(f"the model after the stage differs from the original in float64: relative "
                        f"{v['worst_relative_float64']:.3e} > {v['tolerance_float64']:.0e}"
                        + ("; nothing written" if out is not None else ""))
    result = torch.jit._recursive.wrap_cpp_module(module)
    result.foldnorm_report = report
    return result


@public
def rotate(model, example_inputs: Optional[ExampleInputs] = None, out: Optional[Union[str, os.PathLike]] = None, *,
           rotation: str = "hadamard", seed: int = 0, random_inputs: int = 1,
           insert_rotations: bool = True) -> torch.jit.ScriptModule:
    """Folds ``model``, moves each folded norm's weight and bias into its readers where all are
    linear, rotates every residual stream whose norms are then weightless RMSNorms by an
    orthogonal matrix (``rotation="hadamard"``: a randomized Hadamard where the width has a
    construction, else random; ``"random"``: a random orthogonal matrix; ``seed`` seeds either),
    and checks the result against the original in float64 (relative 1e-12) on the example inputs
    and ``random_inputs`` more sets. Returns the ScriptModule (written to ``out`` when given);
    its ``foldnorm_report`` holds {"fold": ..., "stage": ...}: per norm what was absorbed into
    which readers or why not, per stream whether it rotated (kind, seed, width) or why not.
    Where a non-linear op writes a stream (Whisper's GELU stem, BLOOM's embedding norm) or reads
    it (a norm that keeps its affine, the model's output), the rotation is inserted there as an op
    (Q after the writer, Q^T before the reader; the report's ``inserted``);
    ``insert_rotations=False`` refuses such a stream instead.
    Raises FoldError when the float64 check fails (nothing written)."""
    return _stage(model, example_inputs, out, True, rotation, seed, random_inputs, insert_rotations)


def absorb_affine(model, example_inputs, out, random_inputs: int):
    """fold_traced(..., absorb_affine=True): the stage without the rotation."""
    return _stage(model, example_inputs, out, False, "hadamard", 0, random_inputs)
