"""A key/value cache the forward builds while tracing, filled by modules the graph calls and read
after them by traced code.

PI0 runs its VLM with ``use_cache=True`` whatever the config says, then reads the cache's length
(``past_key_values.get_seq_length()``) and builds its action expert's mask over it. While tracing,
the VLM's layers are single calls that never run, so the cache is still empty when the traced code
reads it: the graph keeps length 0 and a mask over no cached tokens, and computes something else
than eager on every run (the chain differed from eager by 1e-1). The graph cannot know what the
modules will write, so this is an error, naming where the cache was read.
"""

from __future__ import annotations

from typing import Any, Mapping

from torch import fx

from .errors import TracingError
from .graph_runtime import _is_cache
from .liveness import describe_node


class FilledCacheError(TracingError):
    """Traced code read a cache (built while tracing) after a module the graph calls was handed it."""


def check_no_read_after_fill(graph: fx.Graph, constants: Mapping[str, Any], model_name: str) -> None:
    handed: dict[str, fx.Node] = {}  # cache constant -> the first module call it was handed to
    for node in graph.nodes:
        caches = [str(value.target) for value in node.all_input_nodes
                  if value.op == "get_attr" and _is_cache(constants.get(str(value.target)))]
        if not caches:
            continue
        if node.op == "call_module":
            for cache in caches:
                handed.setdefault(cache, node)
            continue
        filled = next((handed[cache] for cache in caches if cache in handed), None)
        if filled is not None:
            error = FilledCacheError(
                f"tracing {model_name}: the traced code reads a key/value cache it built ({describe_node(node)}) "
                f"after handing it to {filled.target!r}, which the graph calls as a whole and which fills it when it "
                "runs. While tracing that module did not run, so everything the traced code read from the cache "
                "(its length, its masks) is the empty cache's, and the graph would compute something else than "
                "eager. Fix: trace with that module traced through (not a target or an ignored module), or patch "
                "the forward so that the cache is not built and filled inside it (pass past_key_values in)."
            )
            error.location = _source_line(node)
            raise error


def _source_line(node: fx.Node) -> tuple[str, int] | None:
    """``(file, line)`` the node was traced from (the generated modeling file's line)."""
    source = node.meta.get("tz_source")
    return (source[0], source[1]) if source else None
