"""Shapes of repeated layers, computed once: identical layers on meta give outputs of the same shapes.

A real-size model repeats one layer tens of times (61 decoder layers, 32 vision blocks). On meta
only shapes come out, and those depend on a layer's structure and its inputs' signature, not on
which of the repeats it is: the first run of each (structure, signature) is kept and the others
get fresh meta tensors of its shapes. Two levels use it: the graph's ``call_module`` nodes (the
decoder layers a subgraph calls), and the children of every ``nn.ModuleList`` inside what runs
whole (a vision tower called by one node or inside an opaque function), where the weights the
first run read are counted as read by each repeat too (by name inside the layer).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Any, Iterator

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map

_SIMPLE = (int, float, str, bool, type(None))
#: attributes that number a layer without changing what it computes
_LAYER_NUMBERS = frozenset({"layer_idx", "layer_id", "layer_index", "layer_number"})
_ABSENT = object()


def _plain_attribute(value: Any) -> Any:
    """``value`` if it is a plain value or a tuple/list of them (a conv's stride), else ``_ABSENT``."""
    if isinstance(value, _SIMPLE):
        return value
    if isinstance(value, (tuple, list)) and all(isinstance(item, _SIMPLE) for item in value):
        return (type(value).__name__, tuple(value))
    return _ABSENT


def module_structure(module: nn.Module, known: dict[int, tuple]) -> tuple:
    """What decides a module's output shapes besides its inputs: its class, parameter and buffer
    shapes and dtypes, plain attributes (sliding window, attention type, stride), and its children's
    structures. ``known`` (by module id) makes a tower's structure reuse its blocks' ones."""
    found = known.get(id(module))
    if found is None:
        attributes = tuple(sorted((key, plain) for key, value in vars(module).items()
                                  if key not in _LAYER_NUMBERS and (plain := _plain_attribute(value)) is not _ABSENT))
        tensors = tuple((name, tuple(tensor.shape), tensor.dtype, tensor.device.type)
                        for name, tensor in list(module._parameters.items()) + list(module._buffers.items())
                        if tensor is not None)
        children = tuple((name, module_structure(child, known)) for name, child in module._modules.items()
                         if child is not None)
        found = known[id(module)] = (type(module), attributes, tensors, children)
    return found


def _only_meta_weights(structure: tuple) -> bool:
    _, _, tensors, children = structure
    return all(device == "meta" for *_, device in tensors) and all(
        _only_meta_weights(child) for _, child in children)


class _Unkeyable(Exception):
    """An input whose values cannot be part of a key: the call is not cached."""


#: real tensors up to this many elements are keyed by their values, larger ones by identity
_VALUES_UP_TO = 1 << 14


def _tensor_key(tensor: torch.Tensor, keep: list) -> tuple:
    key = (tuple(tensor.shape), tensor.dtype, tensor.device.type)
    if tensor.device.type == "meta":
        return key
    # A real tensor's values may decide shapes (an image grid, split sizes): small ones are keyed by
    # their values; a large one (a mask built once and handed to every layer) by identity and
    # version, kept alive by the cache so that its id cannot be reused.
    if tensor.numel() > _VALUES_UP_TO:
        keep.append(tensor)
        return key + ("same tensor", id(tensor), tensor._version)
    try:
        values = tensor.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()
    except (RuntimeError, TypeError) as exc:
        raise _Unkeyable from exc
    return key + (values,)


def input_signature(value: Any, keep: list) -> tuple:
    """Shapes, dtypes and devices of the tensors in ``value`` (and the values or identity of
    non-meta ones), plain values as they are, other objects by identity (appended to ``keep``, as
    large real tensors are); raises ``_Unkeyable``."""
    leaves, spec = tree_flatten(value)
    parts: list = [str(spec)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append(_tensor_key(leaf, keep))
        elif isinstance(leaf, _SIMPLE):
            parts.append(leaf)
        else:
            keep.append(leaf)
            parts.append(("object", id(leaf)))
    return tuple(parts)


def fresh_copy(value: Any) -> Any:
    """New meta tensors of the same shapes: a cached result handed out twice stays two values."""
    return tree_map(lambda leaf: torch.empty_like(leaf, device="meta")
                    if isinstance(leaf, torch.Tensor) and leaf.device.type == "meta" else leaf, value)


def all_meta(value: Any) -> bool:
    return all(leaf.device.type == "meta" for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor))


def _named_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return dict(list(module.named_parameters()) + list(module.named_buffers()))


class ModuleCache:
    """Results of module runs on meta, by (structure, training, input signature)."""

    def __init__(self):
        #: module id -> its structure, and whether all its weights are on meta
        self.structures: dict[int, tuple] = {}
        self.meta_only: dict[int, bool] = {}
        #: graph-level ``call_module`` results: (result, bytes it allocated at its peak)
        self.results: dict[tuple, tuple[Any, int]] = {}
        #: repeated layers run inside a module or function: (result, names of the layer's weights
        #: it read, other model tensors it read, bytes it allocated at its peak)
        self.layer_results: dict[tuple, tuple[Any, list[str], dict[int, torch.Tensor], int]] = {}
        #: the live-bytes tracker of the subgraph being propagated (a ``LiveBytes``), if any: a
        #: repeat that does not run again still counts the peak inside the layer
        self.live: Any = None
        #: the weight-reading record of the subgraph being propagated (``propagate`` sets it);
        #: has a ``read`` dict of id -> tensor
        self.reads: Any = None
        #: objects keyed by identity: alive while the cache is, so that no other takes their id
        self.kept: list = []

    def key(self, module: nn.Module, args, kwargs) -> tuple | None:
        structure = module_structure(module, self.structures)
        meta = self.meta_only.get(id(module))
        if meta is None:
            meta = self.meta_only[id(module)] = _only_meta_weights(structure)
        if not meta:
            return None  # a real model: run it
        try:
            return structure, module.training, input_signature((args, kwargs), self.kept)
        except _Unkeyable:
            return None

    @contextmanager
    def repeated_layers(self, model: nn.Module) -> Iterator[None]:
        """While inside: every child of an ``nn.ModuleList`` of ``model`` runs through the cache."""
        patched = []
        seen: set[int] = set()
        for container in model.modules():
            if not isinstance(container, nn.ModuleList):
                continue
            for layer in container:
                if id(layer) in seen:
                    continue
                seen.add(id(layer))
                patched.append((layer, layer.__dict__.get("forward", _ABSENT)))
                layer.__dict__["forward"] = self._cached_forward(layer, layer.forward)
        try:
            yield
        finally:
            self.reads = None
            for layer, previous in patched:
                if previous is _ABSENT:
                    layer.__dict__.pop("forward", None)
                else:
                    layer.__dict__["forward"] = previous

    def _cached_forward(self, layer: nn.Module, forward):
        def cached_forward(*args, **kwargs):
            reads = self.reads
            key = self.key(layer, args, kwargs) if reads is not None else None
            if key is None:
                return forward(*args, **kwargs)
            hit = self.layer_results.get(key)
            if hit is not None:
                result, own_names, others, extra = hit
                own = _named_tensors(layer)
                reads.read.update({id(own[name]): own[name] for name in own_names})
                reads.read.update(others)
                if self.live is not None:
                    self.live.transient(extra)
                return fresh_copy(result)
            outer, reads.read = reads.read, {}
            measuring = self.live.measure() if self.live is not None else nullcontext()
            try:
                with measuring as inside:
                    result = forward(*args, **kwargs)
            finally:
                inner, reads.read = reads.read, outer
                outer.update(inner)
            if all_meta(result):
                names = {id(tensor): name for name, tensor in _named_tensors(layer).items()}
                self.layer_results[key] = (result, [names[i] for i in inner if i in names],
                                           {i: t for i, t in inner.items() if i not in names},
                                           inside.extra if inside is not None else 0)
            return result

        return cached_forward
