"""The one comparison of a traced run's output with eager, and the one table of its tolerances.

Everything that says "the traced model computes what the eager one computes" (``verify_subgraphs``,
the coverage sweep, the zoo's tests) compares through :func:`compare` with a row of
:data:`TOLERANCES`; the verdict is ``torch.testing.assert_close``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Tolerance:
    """``torch.testing.assert_close``'s ``rtol``/``atol``; ``equal_nan``: NaN where eager has NaN
    agrees; ``check_dtype``: the dtypes must match too (else values are compared after promotion)."""

    rtol: float
    atol: float
    equal_nan: bool = False
    check_dtype: bool = True


EXACT = Tolerance(0.0, 0.0)

#: (rtol, atol) per purpose and dtype. The subgraph chain calls the same modules as eager, so on
#: the same kernels fp32 is exact and half precision gets a dtype tolerance (it rounds differently
#: only where a kernel differs); across kernels (e.g. traced on CPU, run on GPU) fp32 gets one too.
#: The coverage sweep compares the logits of shrunk random models of every architecture by max
#: |diff| with ``--atol`` (default below), where a NaN that eager has too agrees and dtypes may
#: differ; it runs fp32 only.
TOLERANCES: dict[str, dict[torch.dtype, Tolerance]] = {
    "same kernels": {
        torch.float32: EXACT,
        torch.bfloat16: Tolerance(1.6e-2, 1e-2),
        torch.float16: Tolerance(1e-3, 1e-3),
    },
    "other kernels": {
        torch.float32: Tolerance(1.3e-6, 1e-5),
        torch.bfloat16: Tolerance(1.6e-2, 1e-2),
        torch.float16: Tolerance(1e-3, 1e-3),
    },
    "coverage sweep": {
        torch.float32: Tolerance(0.0, 1e-5, equal_nan=True, check_dtype=False),
    },
}


def tolerance(dtype: torch.dtype, purpose: str = "same kernels") -> Tolerance:
    return TOLERANCES[purpose][dtype]


def sweep_tolerance(atol: float | None = None) -> Tolerance:
    """The coverage sweep's row, with its ``atol`` replaced when ``--atol`` is given."""
    row = tolerance(torch.float32, "coverage sweep")
    return row if atol is None else Tolerance(row.rtol, atol, row.equal_nan, row.check_dtype)


def max_abs_diff(got: Any, expected: Any) -> float:
    """Max |got - expected|; inf when either is no tensor, or shapes or NaN positions differ."""
    if not isinstance(got, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return math.inf
    if got.shape != expected.shape:
        return math.inf
    got, expected = got.detach().float().cpu(), expected.detach().float().cpu()
    if not torch.equal(torch.isnan(got), torch.isnan(expected)):
        return math.inf
    keep = ~torch.isnan(got)
    if not keep.any():
        return 0.0
    a, b = got[keep], expected[keep]
    if not torch.equal(torch.isinf(a), torch.isinf(b)) or not torch.equal(a[torch.isinf(a)], b[torch.isinf(b)]):
        return math.inf
    finite = torch.isfinite(a)
    return float((a[finite] - b[finite]).abs().max()) if finite.any() else 0.0


@dataclass(frozen=True)
class Comparison:
    equal: bool
    max_abs_diff: float
    message: str  # assert_close's account of the difference; empty when equal


def compare(got: Any, expected: Any, within: Tolerance) -> Comparison:
    """Whether ``got`` agrees with the eager ``expected`` within the tolerance, and by how much they differ."""
    diff = max_abs_diff(got, expected)
    if not isinstance(got, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return Comparison(False, diff, f"expected a tensor, got {type(got).__name__}")
    try:
        torch.testing.assert_close(got, expected, rtol=within.rtol, atol=within.atol, equal_nan=within.equal_nan,
                                   check_dtype=within.check_dtype)
    except AssertionError as exc:
        return Comparison(False, diff, str(exc))
    return Comparison(True, diff, "")


def assert_equivalent(got: Any, expected: Any, within: Tolerance, what: str = "output") -> float:
    """Raise ``AssertionError`` (naming ``what``) unless ``compare`` agrees; return the max |diff|."""
    result = compare(got, expected, within)
    if not result.equal:
        raise AssertionError(f"{what} differs from eager:\n{result.message}")
    return result.max_abs_diff
