"""The package's exceptions, and the rule that every failure reaches the user as one line.

FoldnormError is the C++ core's foldnorm::Error (a bad path, a damaged archive, an unsupported op,
a bad setting): raised with the same one-line text the CLI prints. FoldError is a fold that does
not compute the original's function (or cannot be executed on an eager module). ArgumentError is a
bad argument type (also a TypeError).

Every public call (analyze, fold, fold_traced, bench) runs under ``public``: whatever fails inside
it, in capture, analysis, fold or verification, comes out as a FoldnormError (or subclass) whose
message is one line naming the stage and the cause; the exception it came from is kept as
``__context__`` for debugging but not printed (``raise ... from None``), and the traceback starts at
the public call, not deep inside torch.
"""
import contextlib
import functools
from typing import Iterator, Type

import torch  # noqa: F401  (LibTorch must be loaded before the extension)

from ._foldnorm import FoldnormError


class FoldError(FoldnormError):
    """A fold that failed: verification found an output that differs in float64 (the message
    names the output and the error), or the plan cannot be executed on the eager module."""


class ArgumentError(FoldnormError, TypeError):
    """An argument of the wrong type (a FoldnormError, and a TypeError as Python has it)."""


def first_line(e: BaseException, limit: int = 300) -> str:
    """An exception as one line: the first line of its message that says something (torch's
    messages often start with a banner), prefixed by its type unless it is one of ours, cut at
    ``limit`` characters."""
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    banners = ("The following operation failed", "Traceback", "File \"", "from user code", "-----",
               "Set TORCHDYNAMO", "Explanation:")
    useful = [l for l in lines if not l.startswith(banners)]
    text = (useful or lines or [""])[0]
    if not isinstance(e, FoldnormError):
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextlib.contextmanager
def stage(what: str, error: Type[FoldnormError] = FoldnormError) -> Iterator[None]:
    """Any exception but ours inside the block becomes ``error("<what>: <cause>")``."""
    try:
        yield
    except FoldnormError:
        raise
    except Exception as e:  # noqa: BLE001  (the point: nothing raw gets out)
        raise error(f"{what}: {first_line(e)}") from None


def public(fn):
    """A public entry point: one FoldnormError line for every failure (see the module doc)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FoldnormError as e:
            err = e
        except TypeError as e:  # a bad argument Python itself refused (a missing or unknown keyword)
            err = ArgumentError(f"{fn.__name__}: {first_line(e)}")
        except Exception as e:  # noqa: BLE001
            err = FoldnormError(f"{fn.__name__} failed: {first_line(e)}")
        message = str(err).strip()
        if "\n" in message:  # the core's messages are one line; a model's own may not be
            err = type(err)(" ".join(l.strip() for l in message.splitlines() if l.strip()))
        raise err.with_traceback(None) from None
    return wrapper


__all__ = ["FoldnormError", "FoldError", "ArgumentError", "first_line", "stage", "public"]
