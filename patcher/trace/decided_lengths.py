"""Loops over the pieces of a split tensor, over the sample's count of pieces.

``for chunk in torch.split(input_values, chunk_size, dim=-1):`` (VibeVoice ASR's tokenizers, which
carry a cache from chunk to chunk) iterates a traced value: fx cannot know how many pieces there are.
How many there are for the sample is worked out as branch decisions are
(:mod:`patcher.trace.decisions`: the part of the graph that computes the split runs on the sample,
between two traces), the loop is traced over that many pieces, and the graph checks the count at
every run: an input split into another number of pieces raises
:class:`~patcher.trace.errors.BranchDecisionError` instead of running the traced pieces only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from .errors import BranchDecisionError

#: Functions and methods whose result is a tuple of tensors, as many as the input's shape says.
SPLITTING_FUNCTIONS = frozenset({torch.split, torch.functional.split, torch.chunk, torch.unbind, torch.tensor_split,
                                 torch.Tensor.split, torch.Tensor.chunk, torch.Tensor.unbind, torch.Tensor.tensor_split})
SPLITTING_METHODS = frozenset({"split", "chunk", "unbind", "tensor_split", "split_with_sizes"})


def splits_a_tensor(node: fx.Node) -> bool:
    """Whether ``node``'s value is the tuple of pieces of a split tensor."""
    if node.op == "call_method":
        return node.target in SPLITTING_METHODS
    return node.op == "call_function" and node.target in SPLITTING_FUNCTIONS


def check_decided_length(value: Any, count: int, where: str) -> None:
    """The graph's check that a split has as many pieces as for the sample the loop was traced over."""
    if len(value) != count:
        raise BranchDecisionError(
            f"this input takes another path than the sample the graph was traced with: the {where} gives "
            f"{len(value)} pieces here and gave {count} while tracing. The graph runs the loop over them {count} "
            f"times (fx cannot loop over a traced value, so the tracer counted the sample's pieces); trace with "
            f"a sample that is split into {len(value)} pieces (of the same size along that dimension) to run "
            "such inputs.")
