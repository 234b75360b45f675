"""Prove that the chain calls the kernels eager calls, on the same memory layouts.

Equal outputs on one machine do not show that they are equal on every machine: a BLAS library or
a vectorized loop may take another path for a transposed or strided operand, and which paths round
alike depends on the CPU (MKL on an AMD EPYC rounded BigBird's attention scores differently for a
contiguous and a transposed key, where an Intel Xeon did not). So this check compares the runs
themselves: every ATen call that computes (anything but views, copies, selection, comparison and
fills, which move values without rounding them) is recorded with the shapes, strides and dtypes of
its floating-point operands, for eager and for the chain, and the two lists must be the same. Where
they are, the chain's numbers are eager's on any CPU that runs the same kernels deterministically.

One difference is told apart: the same calls, each on eager's layouts, in another order. Rule TZ108
iterates a set in first-occurrence order, where eager iterates it in the order of this process's
string hashes (Dots3-Note's rotary embeddings, one per layer type): independent work done in another
order, which rounds nothing differently. :class:`KernelLayoutMismatch` says so (``reordered``), and
``any_order=True`` accepts it.

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> from patcher import trace_subgraphs
>>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
...     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)).eval()
>>> sample = {"input_ids": torch.randint(0, 64, (1, 5))}
>>> subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"])
>>> calls = verify_kernel_layouts(model, subgraphs, {"input_ids": torch.randint(0, 64, (2, 7))})
>>> calls > 20
True
"""

from __future__ import annotations

import itertools
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..trace.state import cache_off
from .eager import eager_inputs

if TYPE_CHECKING:
    from ..partition import Subgraph

#: ATen ops that move, select, compare or create values without rounding any: the same bits come
#: out whatever kernel or layout runs them, so where the chain calls them differently (an extra copy
#: made by a wrapped function) is no difference in its numbers. Views are left out by their schema.
VALUE_PRESERVING = frozenset({
    "_to_copy", "clone", "copy", "copy_", "lift_fresh", "lift_fresh_copy", "detach", "alias", "_unsafe_view",
    "_reshape_alias", "view_copy", "expand_copy", "permute_copy", "transpose_copy", "t_copy", "unsqueeze_copy",
    "cat", "stack", "split", "split_with_sizes", "unbind", "chunk", "repeat", "flip", "roll", "constant_pad_nd",
    "index", "_unsafe_index", "index_select", "gather", "take", "masked_select", "nonzero", "embedding",
    "index_put", "index_put_", "_index_put_impl_", "scatter", "scatter_", "masked_scatter", "masked_scatter_",
    "slice_scatter", "select_scatter", "index_copy", "index_copy_",
    "masked_fill", "masked_fill_", "where", "fill", "fill_", "zero_", "tril", "triu", "tril_", "triu_",
    "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "logical_and", "logical_or",
    "logical_not", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "any", "all",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor", "arange",
    "_local_scalar_dense", "is_nonzero", "equal", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "_assert_tensor_metadata", "_assert_async", "_functional_assert_async", "resize_", "set_",
    # random fills: weight initialisation (BigBird builds new attention modules when it switches)
    "uniform_", "normal_", "random_", "exponential_", "geometric_", "log_normal_", "cauchy_", "bernoulli_",
    "trunc_normal_",
})

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_THIS_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@dataclass(frozen=True)
class Operand:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"{tuple(self.shape)} strides {tuple(self.stride)} {str(self.dtype).removeprefix('torch.')}"


@dataclass(frozen=True)
class KernelCall:
    """One computing ATen call: the op and its floating-point operands. ``where`` (the innermost
    source line outside torch that made the call) is for messages and is not compared."""

    op: str
    operands: tuple[Operand, ...]
    where: str = ""

    def key(self) -> tuple[str, tuple[Operand, ...]]:
        # in place or not, one kernel: fx records `x += y` as `x + y`
        return self.op.removesuffix("_"), self.operands

    def __str__(self) -> str:
        operands = "; ".join(str(operand) for operand in self.operands)
        return f"{self.op}({operands})" + (f" at {self.where}" if self.where else "")


class KernelLayoutMismatch(AssertionError):
    """The chain calls a kernel eager does not call, or on another layout: its numbers may differ
    from eager's on another CPU even where they are equal here. ``reordered``: it makes eager's
    calls on eager's layouts, only in another order."""

    def __init__(self, message: str, reordered: bool = False):
        super().__init__(message)
        self.reordered = reordered


def in_another_order(eager: list[KernelCall], chain: list[KernelCall]) -> bool:
    """The two runs make the same computing calls, each on the same layouts, but not in the same order."""
    keys = [call.key() for call in eager], [call.key() for call in chain]
    return keys[0] != keys[1] and Counter(keys[0]) == Counter(keys[1])


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[KernelCall] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if not func.is_view and name not in VALUE_PRESERVING:
            operands = tuple(Operand(tuple(t.shape), tuple(t.stride()), t.dtype)
                             for t in _tensors(args, kwargs) if t.is_floating_point() or t.is_complex())
            if operands:
                self.calls.append(KernelCall(f"aten.{name}", operands, _caller()))
        return func(*args, **kwargs)


def _tensors(args: tuple, kwargs: Mapping[str, Any]):
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (item for item in value if isinstance(item, torch.Tensor))


def _caller() -> str:
    """The innermost frame outside torch and this check: the modeling line, or the graph's code."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_TORCH_DIR) and not filename.startswith(_THIS_PACKAGE + "verify"):
            return f"{_short(filename)}:{frame.f_lineno} in {frame.f_code.co_name}()"
        frame = frame.f_back
    return ""


def _short(filename: str) -> str:
    parts = filename.replace(os.sep, "/").split("/")
    return "/".join(parts[-3:]) if "transformers" in parts else "/".join(parts[-2:])


def record_kernel_calls(run: Callable[[], Any]) -> list[KernelCall]:
    """The computing ATen calls ``run()`` makes, in order (under ``no_grad``)."""
    recorder = _Recorder()
    with torch.no_grad(), recorder:
        run()
    return recorder.calls


def kernel_layout_differences(
    model: nn.Module, subgraphs: list[Subgraph], inputs: Mapping[str, Any], eager_flags: Mapping[str, Any] | None = None,
    eager_model: nn.Module | None = None,
) -> tuple[list[KernelCall], list[KernelCall], int | None]:
    """The kernel calls of eager (``eager_model``, by default ``model``, as traced:
    :func:`patcher.verify.eager.eager_inputs`, plus ``eager_flags``) and of the chain on ``inputs``,
    and the index of the first that differs (None where the lists are the same)."""
    from ..partition import run_subgraphs

    eager_model = model if eager_model is None else eager_model
    eager_kwargs = {**eager_inputs(eager_model, inputs), **(eager_flags or {})}
    with cache_off(eager_model):
        eager = record_kernel_calls(lambda: eager_model(**eager_kwargs))
    chain = record_kernel_calls(lambda: run_subgraphs(model, subgraphs, inputs))
    for index, (a, b) in enumerate(itertools.zip_longest(eager, chain)):
        if a is None or b is None or a.key() != b.key():
            return eager, chain, index
    return eager, chain, None


def verify_kernel_layouts(
    model: nn.Module, subgraphs: list[Subgraph], inputs: Mapping[str, Any], eager_flags: Mapping[str, Any] | None = None,
    eager_model: nn.Module | None = None, any_order: bool = False,
) -> int:
    """Raise ``KernelLayoutMismatch`` (naming the first call that differs, with both source lines)
    unless the chain on ``inputs`` makes eager's computing calls on eager's layouts; return how
    many calls were compared. ``eager_model``: the model eager runs, where the chain was traced
    from another class (a zoo drop-in against its transformers original). ``any_order``: the same
    calls in another order pass too (see the module's text)."""
    eager, chain, index = kernel_layout_differences(model, subgraphs, inputs, eager_flags, eager_model)
    if index is None:
        return len(eager)
    reordered = in_another_order(eager, chain)
    if reordered and any_order:
        return len(eager)
    theirs = eager[index] if index < len(eager) else "nothing (eager has no more calls)"
    ours = chain[index] if index < len(chain) else "nothing (the chain has no more calls)"
    if reordered:
        raise KernelLayoutMismatch(
            f"the chain makes eager's {len(eager)} computing calls, each on eager's layouts, in another order; "
            f"the first out of place is call {index + 1}:\n  eager: {theirs}\n  chain: {ours}\n"
            "independent work done in another order rounds nothing differently (rule TZ108 iterates a set in "
            "first-occurrence order, eager in this process's hash order); any_order=True accepts it "
            "(GUIDE.md#exact-on-every-machine)", reordered=True)
    raise KernelLayoutMismatch(
        f"kernel call {index + 1} differs (eager made {len(eager)} computing calls, the chain {len(chain)}):\n"
        f"  eager: {theirs}\n  chain: {ours}\n"
        "the outputs may be equal on this CPU, but another CPU or BLAS may round these two calls differently; "
        "make the chain hand the kernel eager's layout (GUIDE.md#exact-on-every-machine)")
