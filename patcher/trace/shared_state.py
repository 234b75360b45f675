"""Containers a forward makes for the modules it calls to share: one per run, handed on like a value.

Gemma 3n, Gemma 4 (and its unified variant) and Mistral Large 4 make ``shared_kv_states =
KVSharingDict()`` (a ``UserDict``) in the text model's forward and hand it to every decoder layer:
the layers that own keys and values store them in it, the layers that share them read them back.
The layers are modules the graph calls, so none of that happens while tracing; fx cannot write a
``UserDict`` into the graph's code either, so the tracer kept the very object made while tracing as a
constant of the graph. Every run then handed the same dict to the layers. A whole-model run filled it
before reading it, so it was right by accident of order; llm-compressor's sequential pipeline runs
subgraph 0 on every batch, then subgraph 1 on every batch, so a sharing layer read the keys the
*last* batch had stored (logits 0.2 to 0.6 off on tiny models, no error). A plain ``{}`` or ``[]``
was wrong the other way: fx writes it into the code as a literal, so each call got a new, empty one
and what one layer stored never reached the next.

So a mutable container handed to a module the graph calls (the layers' empty dict) is made a value
of the graph (:func:`can_be_state` says which): :func:`new_state` makes each run's
own copy of it as it was when the first module got it; one of a class fx cannot write that holds graph
values (a ``KVSharingDict`` around the keys and values Gemma 4's assistants take as an input,
:func:`fillable_with_graph_values`) is an empty one of its class filled with the run's values
(:func:`filled_state`). Before each further call that gets it, the
graph makes a copy (:func:`handed_state`) that the call may change and everything after reads, so
the chain hands each batch's own container from subgraph to subgraph, and a subgraph run twice on
one batch (llm-compressor's calibration and propagation passes) starts both times from what the
previous subgraph handed on. Only the containers are copied; the tensors and other objects inside
are shared, as eager shares them. A dict or list that holds graph values, tensors or modules is
still fx's literal, built anew for each call from what it held while tracing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, MutableSequence, MutableSet, Sequence, Set
from typing import Any

import torch
from torch import fx, nn
from torch.fx.immutable_collections import immutable_dict, immutable_list
from transformers.utils import ModelOutput

from .liveness import describe_node, describe_source, model_source


_CONTAINERS = (MutableMapping, MutableSequence, MutableSet)
#: mutable by type, but not state a forward makes for its modules (fx.Proxy: a graph value)
_NOT_STATE = (ModelOutput, nn.Module, bytearray, immutable_dict, immutable_list, fx.Proxy)


def is_state_container(value: Any) -> bool:
    """A container a module the graph calls could fill: a mutable mapping, sequence or set
    (``dict``, ``list``, ``UserDict``, ``deque`` ...), not a model output or a module."""
    return isinstance(value, _CONTAINERS) and not isinstance(value, _NOT_STATE)


def can_be_state(value: Any) -> bool:
    """A container a module the graph calls could fill (:func:`is_state_container`) that the graph
    can make anew at each run from what it held while tracing. Not a dict or list holding a graph
    value, a tensor or a module: fx writes those into the graph's code as a literal that reads them
    when the graph runs (a module or a parameter by its path, so the checks of the modules a graph
    runs see them). Not a container of another class holding a graph value: that value exists only
    while tracing."""
    if not is_state_container(value):
        return False
    return not _holds(value, (fx.Proxy, torch.Tensor, nn.Module) if isinstance(value, (dict, list)) else fx.Proxy)


def _holds(value: Any, kinds: type | tuple[type, ...], _seen: set[int] | None = None) -> bool:
    """Whether an object of ``kinds`` lies anywhere inside the containers of ``value``."""
    if isinstance(value, kinds):
        return True
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, Mapping):
        return any(_holds(key, kinds, seen) or _holds(item, kinds, seen) for key, item in value.items())
    if isinstance(value, (Sequence, Set)) and not isinstance(value, (str, bytes, bytearray)):
        return any(_holds(item, kinds, seen) for item in value)
    return False


def fillable_with_graph_values(value: Any) -> bool:
    """A mapping of a class fx cannot write into the graph's code (a ``UserDict``: transformers'
    ``KVSharingDict``) that holds graph values: the forward wrapped values the graph computes (Gemma 4's
    assistants hand their target's keys and values to the text model, which wraps them in a
    ``KVSharingDict``). Kept as a constant, it would hold the proxies of the trace; the graph fills an
    empty one of its class with the run's values instead (:func:`filled_state`)."""
    return (is_state_container(value) and isinstance(value, MutableMapping) and type(value) is not dict
            and _holds(value, fx.Proxy))


def emptied(value: MutableMapping) -> MutableMapping:
    """An empty container of ``value``'s class, with its other attributes (the template :func:`filled_state` fills)."""
    empty = copy.copy(value)
    empty.clear()
    return empty


def filled_state(empty: MutableMapping, items: Mapping[Any, Any]) -> MutableMapping:
    """A run's own container of ``empty``'s class holding ``items``, the run's graph values."""
    state = copy_containers(empty)
    state.update(items)
    return state


def fingerprint(value: Any) -> Any:
    """What a container holds, by the identity of everything that is not a container: traced code
    that changes it while tracing changes this."""
    if isinstance(value, Mapping):
        return type(value), tuple((key, fingerprint(item)) for key, item in value.items())
    if isinstance(value, (Sequence, Set)) and not isinstance(value, (str, bytes, bytearray)):
        return type(value), tuple(fingerprint(item) for item in value)
    return id(value)


def copy_containers(value: Any) -> Any:
    """``value`` with every container in it copied, each of its own class; tensors, modules and any
    other object inside are the same objects (keys and values a layer stores are not copied)."""
    kind = type(value)
    if kind is dict:
        return {key: copy_containers(item) for key, item in value.items()}
    if kind is list:
        return [copy_containers(item) for item in value]
    if kind is tuple:
        return tuple(copy_containers(item) for item in value)
    if kind is set:
        return set(value)
    if not is_state_container(value):
        return value
    copied = copy.copy(value)  # the container's own class (a UserDict copies its `data`)
    data = getattr(copied, "data", None)
    if type(data) in (dict, list):  # UserDict, UserList: copy what they hold too
        copied.data = copy_containers(data)
    elif isinstance(copied, dict):  # OrderedDict, defaultdict: the class's own __setitem__ is not run
        for key, item in value.items():
            dict.__setitem__(copied, key, copy_containers(item))
    elif isinstance(copied, list):
        for index, item in enumerate(value):
            list.__setitem__(copied, index, copy_containers(item))
    return copied


def new_state(template: Any) -> Any:
    """A run's own container, as the forward had made it when the first module got it."""
    return copy_containers(template)


def handed_state(state: Any) -> Any:
    """The container a module the graph calls gets: a copy of what earlier calls left in it."""
    return copy_containers(state)


def changed_after_handing(value: Any, first: fx.Node) -> str:
    """What ``SharedStateError`` says, raised where the traced code hands the changed container on."""
    kind = type(value).__name__
    return (
        f"a {kind} the forward hands to the modules the graph calls was changed by the traced code between "
        f"{describe_node(next(iter(first.users), first))}, which got it first, and "
        f"{describe_source(model_source())}, where it is handed on again.\n"
        f"  why: those modules fill and read it when the graph runs, so the graph makes each run's own {kind} as "
        "it was when the first of them got it and hands that on; a change made by the traced code afterwards "
        "exists only while tracing, and the modules after it would not see it (a silent wrong result)\n"
        f"  fix: change the {kind} before the first module gets it, or inside a module the graph calls (a "
        "sequential target or an ignored module); see GUIDE.md#silent-wrong-results"
    )
