"""A trace that wrote attributes of modules the graph calls whole refused: they would run without the write."""

from __future__ import annotations

from torch import nn

from ..errors import StateChangeError


def check_leaf_state_unchanged(model: nn.Module, changes: list[str]) -> None:
    """Leaves run later, reading their attributes then: a write made while tracing is undone after
    it, so the graph would silently run them in the state from before it."""
    if changes:
        raise StateChangeError(
            f"tracing {type(model).__name__} changed {len(changes)} attribute(s) of modules that run "
            f"later as single calls: {'; '.join(changes[:5])}{' ...' if len(changes) > 5 else ''}. "
            "The graph would run them without that change (a silent wrong result). Put the model in that state "
            "before tracing (e.g. call the setter the forward calls), or make the forward not write module state.",
            changes,
        )
