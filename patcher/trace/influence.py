"""Whether the eager model reads an input: run it twice, the input changed the second time.

The tracer asks this when a sample input never reaches the graph's output: if the eager output
does not change either, the input is really unused and may be declared (``unused_inputs``); if it
changes, the graph lost it, and declaring it unused would hide a silent wrong result.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

import torch
from torch import nn


def perturbed(value: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Another value of the same shape and kind: a 0/1 mask flipped, other ids, other floats."""
    if value.dtype == torch.bool or (not value.is_floating_point() and value.numel() and value.min() >= 0
                                     and value.max() <= 1):
        return (1 - value.long()).to(value.dtype)
    if not value.is_floating_point():
        high = int(value.max()) + 1 if value.numel() else 1
        return torch.randint(0, max(high, 2), value.shape, generator=generator, dtype=value.dtype)
    other = torch.randn(value.shape, generator=generator, dtype=value.dtype)
    # samples are often drawn from a generator of the same seed: never hand back the same values
    return other if not torch.equal(other, value) else value + 1


def main_output(outputs: Any, key: str | None = None) -> tuple[str | None, Any]:
    """``(name, tensor)`` of a forward's result: ``key``'s, else ``logits``, else the first tensor
    (a bare tensor is itself)."""
    if isinstance(outputs, torch.Tensor):
        return None, outputs
    if outputs is None:
        return None, None
    items = outputs.items() if hasattr(outputs, "items") else []
    items = [(name, value) for name, value in items if isinstance(value, torch.Tensor)]
    if key is not None:
        return key, dict(items).get(key)
    for name, value in items:
        if name == "logits":
            return name, value
    return (items[0][0], items[0][1]) if items else (None, None)


def accepts(model: nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def eager_ignores(model: nn.Module, sample: Mapping[str, Any], name: str, seed: int = 0) -> bool | None:
    """Whether ``model``'s eager output stays the same when input ``name`` changes.

    ``False`` also when the model refuses the other value (it reads it); ``None`` when it cannot be
    told: the model is on the meta device, the input is no tensor, or the model fails on the sample
    itself."""
    value = sample.get(name)
    if not isinstance(value, torch.Tensor) or any(p.is_meta for p in model.parameters()):
        return None
    extra = {"use_cache": False} if accepts(model, "use_cache") and "use_cache" not in sample else {}
    other = {**sample, name: perturbed(value, torch.Generator().manual_seed(seed + 7919))}
    # the same random draws for both runs (dropout in train mode), and the caller's left as they were
    with torch.random.fork_rng(devices=[]):
        try:
            torch.manual_seed(seed)
            with torch.no_grad():
                expected = model(**sample, **extra)
        except Exception:  # noqa: BLE001 - nothing to compare with
            return None
        try:
            torch.manual_seed(seed)
            with torch.no_grad():
                changed = model(**other, **extra)
        except Exception:  # noqa: BLE001 - the model rejects other values: it reads them
            return False
    key, a = main_output(expected)
    _, b = main_output(changed, key)
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    return a.shape == b.shape and torch.equal(a, b)
