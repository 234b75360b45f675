"""The eager run a traced chain is held to: the model called as the graph was traced, cache off.

The tracer traces with ``use_cache=False`` in every config (a cache built while tracing would be one
constant that every run grows), and llm-compressor calibrates with the cache off too. With the cache on, eager
computes the same numbers through other memory layouts: a fresh ``DynamicCache`` concatenates each
layer's keys and values onto an empty tensor, so attention gets contiguous copies where the cache-off
run hands it transposed views. BLAS libraries may round those two layouts differently (MKL did on an
AMD EPYC: BigBird's ``query @ key.transpose(-1, -2)`` 1.49e-8 apart in 9 of 1728 logits, while
equal on Intel), so "exact" is only a claim against the cache-off run, which calls the same kernels
on the same layouts as the chain (:mod:`patcher.verify.kernels` proves that for a model).
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

import torch
from torch import nn

from ..trace.state import cache_off

#: The flags the graph is traced with, set on the eager run where the forward takes them and the
#: inputs leave them out.
AS_TRACED = {"use_cache": False}


def eager_inputs(model: nn.Module, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs`` plus :data:`AS_TRACED`'s flags the forward takes and ``inputs`` does not give."""
    try:
        taken = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        taken = {}
    return {**{flag: value for flag, value in AS_TRACED.items() if flag in taken and flag not in inputs}, **inputs}


def run_eagerly(model: nn.Module, inputs: Mapping[str, Any]) -> Any:
    """The eager output a chain traced from ``model`` must equal: ``model(**inputs)`` under
    ``no_grad``, as traced: the cache off in the call and in every config (a vision-language
    model's text model reads ``use_cache`` from its own config).

    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)).eval()
    >>> run_eagerly(model, {"input_ids": torch.randint(0, 64, (1, 5))}).past_key_values is None
    True
    """
    with torch.no_grad(), cache_off(model):
        return model(**eager_inputs(model, inputs))
