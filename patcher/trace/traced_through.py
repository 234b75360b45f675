"""Wrapped functions that may return None traced through: the names they set to None are None while tracing."""

from __future__ import annotations

import collections
from typing import Any

from torch import fx


class _NoNode:
    """What torch.fx's wrapper of a ``torch.fx.wrap`` function marks on a call traced through
    (it sets ``result.node.meta["is_wrapped"]``): there is no node of that call."""

    def __init__(self):
        self.meta: dict[str, Any] = {}


class _TracedThroughTuple(tuple):
    """The tuple a wrapped function traced through returned (a tuple has no ``node`` to mark)."""

    node: _NoNode


class _TracedThroughDict(dict):
    """The dict a wrapped function traced through returned."""

    node: _NoNode


NOT_TRACED_THROUGH = object()


class _KeepOpaque(Exception):
    """A wrapped function traced through to no purpose: the attempt is taken back."""


#: The results of a call traced through, which the tracer hands on as a plain tuple or dict.
TRACED_THROUGH_TYPES = (_TracedThroughTuple, _TracedThroughDict)


def trace_through(tracer: fx.Tracer, function, args: tuple, kwargs: dict, owner: Any = None) -> Any:
    """Run a wrapped function that may return None on the traced values instead of recording
    one opaque call, so that the names it sets to None are None while tracing too. Where its
    code cannot be decided while tracing (a branch on a traced value), or it returns no None
    (the opaque call's result is then decided alike by every `is None` after it), everything
    the attempt recorded is taken back and the call stays one opaque node
    (``NOT_TRACED_THROUGH``): the graph changes only where one node would hide a None.

    ``owner``: the Python object a wrapped function sets attributes of and returns
    (:func:`~patcher.trace.moved_code.object_given_for_attributes`); run, the assignments record
    themselves and the object itself is the result, one the code after it can take apart."""
    # iter(): torch before 2.13 gives reversed() an iterable, not an iterator
    last = next(iter(reversed(tracer.graph.nodes)), None)
    saved = (dict(tracer.ranks_read), dict(tracer.traced_through), tracer.failed_module_path,
             collections.OrderedDict(tracer.module_stack), dict(tracer.num_calls), dict(tracer._states))
    tracer._cache_keys_added, outer_keys = [], tracer._cache_keys_added
    containers = _container_contents((args, kwargs))
    try:
        result = function(*args, **kwargs)
        if owner is not None and result is owner:
            pass  # the object given, its attributes set by the graph values recorded
        elif type(result) is tuple and any(value is None for value in result):
            result = _TracedThroughTuple(result)
        elif type(result) is dict and any(value is None for value in result.values()):
            result = _TracedThroughDict(result)
        else:  # no None to show, or a result fx cannot mark (None itself, a scalar)
            raise _KeepOpaque()
        result.node = _NoNode()
        return result
    except Exception:  # noqa: BLE001 - undecidable while tracing, or nothing gained: keep the opaque call
        added = []
        for node in reversed(tracer.graph.nodes):
            if node is last:
                break
            added.append(node)
        taken_back = set(added)
        for node in added:  # newest first: a node's users are gone before it
            # fx makes the node of an attribute read (`outputs.last_hidden_state`) the first time
            # the proxy is used, and the proxy keeps it: made during the attempt from a value
            # from before it, the node is kept (reading an attribute does nothing), else code
            # after the attempt would use an erased node (Lfm2-VL's KeyError: getattr_1)
            if node.users or (node.op == "call_function" and node.target is getattr
                              and not any(arg in taken_back for arg in node.all_input_nodes)):
                taken_back.discard(node)
                continue
            tracer.graph.erase_node(node)
        for cache, key in tracer._cache_keys_added:
            cache.pop(key, None)
        _restore_contents(containers)
        ranks, traced_through, tracer.failed_module_path, module_stack, num_calls, states = saved
        tracer._states = states
        tracer.ranks_read.clear()
        tracer.ranks_read.update(ranks)
        tracer.traced_through.clear()
        tracer.traced_through.update(traced_through)
        tracer.module_stack.clear()
        tracer.module_stack.update(module_stack)
        tracer.num_calls.clear()
        tracer.num_calls.update(num_calls)
        return NOT_TRACED_THROUGH
    finally:
        if outer_keys is not None:
            outer_keys.extend(tracer._cache_keys_added)
        tracer._cache_keys_added = outer_keys


def _container_contents(value: Any, found: dict[int, tuple[Any, Any]] | None = None) -> dict[int, tuple[Any, Any]]:
    """Every plain list and dict the call was handed (inside tuples, lists and dicts too), with a
    shallow copy of what it holds now: the attempt runs the function on them, and what it stores
    there (Granite 4 Vision's moved loop fills the ``deepstack_features`` dict it is handed) must
    go when the attempt is taken back, or the opaque call is recorded with values of erased nodes."""
    found = {} if found is None else found
    if type(value) in (list, dict) and id(value) not in found:
        found[id(value)] = (value, list(value) if type(value) is list else dict(value))
    if type(value) in (list, tuple):
        for item in value:
            _container_contents(item, found)
    elif type(value) is dict:
        for item in value.values():
            _container_contents(item, found)
    return found


def _restore_contents(containers: dict[int, tuple[Any, Any]]) -> None:
    for container, contents in containers.values():
        if type(container) is list:
            container[:] = contents
        else:
            container.clear()
            container.update(contents)
