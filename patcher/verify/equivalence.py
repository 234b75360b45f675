"""Prove a partition right: the subgraph chain computes what the eager model computes.

Two checks on real inputs: every sequential target the eager forward calls lands in exactly
one subgraph, and the outputs agree (exactly in fp32 on the same kernels; with a tolerance fit
for the dtype otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import torch
from torch import nn

from .compare import EXACT, Tolerance, compare
from ..trace.state import cache_off
from .eager import eager_inputs

if TYPE_CHECKING:
    from ..partition import Subgraph


class PartitionMismatch(AssertionError):
    """The subgraphs disagree with the eager model; the message says where."""


@dataclass
class EquivalenceReport:
    output_names: list[str]
    max_abs_diff: dict[str, float]
    targets_called: list[str]

    def __str__(self) -> str:
        diffs = ", ".join(f"{name}: {diff:.3g}" for name, diff in self.max_abs_diff.items())
        return f"{len(self.targets_called)} targets called, max |diff| {diffs}"


def targets_called_eagerly(model: nn.Module, inputs: Mapping[str, Any], sequential_targets) -> tuple[list[str], Any]:
    """Run the eager model as traced (cache off), recording the targets it calls in order; return
    (names, output)."""
    from ..trace.matching import resolve_targets  # here: importing verify stays cheap (the sweep reads compare)

    targets = resolve_targets(model, sequential_targets)
    called: list[str] = []
    handles = [
        module.register_forward_pre_hook(lambda module, args, name=name: called.append(name))
        for name, module in targets.items()
    ]
    try:
        with torch.no_grad(), cache_off(model):
            output = model(**eager_inputs(model, inputs))
    finally:
        for handle in handles:
            handle.remove()
    return called, output


def verify_subgraphs(
    model: nn.Module,
    subgraphs: list[Subgraph],
    inputs: Mapping[str, Any],
    sequential_targets: Iterable[str] | str,
    within: Tolerance = EXACT,
) -> EquivalenceReport:
    """Raise ``PartitionMismatch`` unless the chain matches eager on ``inputs`` (exactly, unless
    ``within`` is another row of ``TOLERANCES``).

    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from patcher import trace_subgraphs
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)).eval()
    >>> sample = {"input_ids": torch.randint(0, 64, (1, 5))}
    >>> subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"])
    >>> print(verify_subgraphs(model, subgraphs, {"input_ids": torch.randint(0, 64, (2, 7))}, ["LlamaDecoderLayer"]))
    2 targets called, max |diff| logits: 0
    """
    from ..partition import run_subgraphs

    called, eager = targets_called_eagerly(model, inputs, sequential_targets)
    placed = [target for subgraph in subgraphs for target in subgraph.targets]
    if sorted(called) != sorted(placed):
        missing = sorted(set(called) - set(placed))
        extra = sorted(set(placed) - set(called))
        raise PartitionMismatch(
            "the targets the eager forward calls differ from the subgraphs' targets: "
            f"missing from subgraphs {missing or 'none'}, not called eagerly {extra or 'none'}"
        )
    with torch.no_grad():
        got = run_subgraphs(model, subgraphs, inputs)
    expected = {key: value for key, value in eager.items() if isinstance(value, torch.Tensor)}
    diffs = {}
    for name, value in expected.items():
        if name not in got:
            raise PartitionMismatch(f"the subgraphs do not return {name!r} (they return {sorted(got)})")
        comparison = compare(got[name], value, within)
        if not comparison.equal:
            raise PartitionMismatch(f"output {name!r} differs from eager:\n{comparison.message}")
        diffs[name] = comparison.max_abs_diff if value.numel() else 0.0
    return EquivalenceReport(list(expected), diffs, called)
