"""What the modules a graph calls as a whole return: the structure of their outputs, from eager.

While tracing, a leaf (a sequential target, an ignored module) does not run: its call is one graph
value, and every item read from it is a value too, also one that is ``None`` in eager. Code that
decides on such an item then takes the wrong branch: XLNet's layers return ``(output_h, None)``,
``output_g if output_g is not None else output_h`` took ``output_g``, and the chain failed in
``dropout(None)``; a branch that does not fail would compute something else without a word.

So when traced code reads items of a leaf's output, the model runs once eagerly with the sample
and records what each call of those leaves returned (:func:`eager_leaf_outputs`). The trace is
then redone with each call returning that structure: a tuple, list or ``ModelOutput`` of graph
values, with ``None`` where eager had ``None`` (:func:`structured`). The graph checks, at every run,
that each such call still returns the structure it was traced with (:func:`leaf_output_checked`):
an input for which an item is ``None`` only sometimes raises :class:`LeafOutputError` instead of
running the branch of another input.

The keys of a leaf's output that ``**`` unpacks: ``Output(**outputs)`` on the output of a leaf module (InstructBLIP's
``BaseModelOutputWithVisionQformerOutputs(**vision_outputs, vision_outputs=vision_outputs)``) needs
that output's keys while tracing, and a leaf's output is one graph value without any: which fields
of a ``ModelOutput`` are set (``None`` fields are no keys) is only known once the module has run.
When a trace unpacks such a value, the tracer runs the model once eagerly on the sample, records the
keys every leaf call returned, and traces again with them. Each unpacked value then reads its key
through :func:`~patcher.trace.graph_runtime.unpacked_item`, which refuses a run whose output has other
keys than the eager run had: a key set the graph did not unpack would otherwise be dropped silently.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import fx, nn
from transformers.utils import ModelOutput

from .errors import LeafOutputError
from .state import run_on_sample

#: An item that is neither ``None`` nor a container: a graph value while tracing.
VALUE = "value"


@dataclass(frozen=True)
class Items:
    """A tuple, list or ``ModelOutput`` (``kind``) and the structure of each item (``names``: a
    ``ModelOutput``'s fields, all of them, ``None`` ones included)."""

    kind: type
    items: tuple
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.names:
            fields = ", ".join(f"{name}={_text(item)}" for name, item in zip(self.names, self.items))
            return f"{self.kind.__name__}({fields})"
        inner = ", ".join(_text(item) for item in self.items)
        return f"[{inner}]" if self.kind is list else f"({inner}{',' if len(self.items) == 1 else ''})"


def _text(structure: Any) -> str:
    return "None" if structure is None else str(structure)


def describe(value: Any) -> Any:
    """The structure of ``value``: ``None``, :data:`VALUE`, or :class:`Items` of structures."""
    if value is None:
        return None
    if type(value) in (tuple, list):
        return Items(type(value), tuple(describe(item) for item in value))
    if isinstance(value, ModelOutput) and dataclasses.is_dataclass(value):
        names = tuple(field.name for field in dataclasses.fields(value))
        return Items(type(value), tuple(describe(getattr(value, name, None)) for name in names), names)
    return VALUE


def holds_none(structure: Any) -> bool:
    """Whether a single graph value would misrepresent ``structure``: ``None`` in it somewhere."""
    if structure is None:
        return True
    return isinstance(structure, Items) and any(holds_none(item) for item in structure.items)


def leaf_output_checked(output: Any, module: str, structure: Any) -> Any:
    """``output`` of the call of ``module`` when the graph runs, if it has the ``structure`` the
    graph was traced with; else :class:`LeafOutputError`."""
    found = describe(output)
    if found != structure:
        raise LeafOutputError(
            f"module '{module}' returned {_text(found)} when the graph ran, but {_text(structure)} when it was "
            "traced (with the sample): the traced code decided on that structure (which items are None), so "
            "the graph would compute what another input computes. Trace with a sample that gives the structure "
            "you will run with, and run each structure with its own trace.", module, str(found), str(structure))
    return output


def structured(structure: Any, value: Any, item: Callable[[Any, Any], Any]) -> Any:
    """``structure`` built of graph values: ``value`` itself for :data:`VALUE`, ``None`` for None,
    and ``item(value, index)`` (a graph read of one item) for each item of a container."""
    if structure is None:
        return None
    if not isinstance(structure, Items):
        return value
    if structure.names:
        result = structure.kind.__new__(structure.kind)
        for name, inner in zip(structure.names, structure.items):
            if inner is not None:  # a ModelOutput holds only its fields that are not None
                result[name] = structured(inner, getattr(value, name), item)
        return result
    return structure.kind(structured(inner, item(value, index), item) for index, inner in enumerate(structure.items))


#: Attributes of a tensor: reading one of them from a leaf's output does not treat it as a container.
_TENSOR_ATTRIBUTES = frozenset(dir(torch.Tensor))


def read_as_container(node: fx.Node) -> bool:
    """Whether traced code reads ``node``'s value item by item: indexes it by a number, a slice or a
    name (a tuple index is a tensor's), unpacks it, or reads an attribute a tensor lacks (a
    ``ModelOutput`` field)."""
    for user in node.users:
        if user.op != "call_function" or not user.args or user.args[0] is not node:
            continue
        if user.target is operator.getitem and isinstance(user.args[1], (int, slice, str)):
            return True
        if user.target is getattr and user.args[1] not in _TENSOR_ATTRIBUTES:
            return True
    return False


def eager_leaf_outputs(model: nn.Module, sample: Mapping[str, Any], flags: Mapping[str, Any],
                       modules: Iterable[nn.Module]) -> dict[nn.Module, list[Any]] | None:
    """The structure of every output of each of ``modules`` in one eager run of ``model`` on
    ``sample`` (with the trace's ``flags``), in call order; ``None`` when the model cannot run
    (on the meta device, or it fails on the sample): then nothing is known."""
    if any(tensor.is_meta for tensor in model.parameters()):
        return None
    found: dict[nn.Module, list[Any]] = {module: [] for module in modules}

    def record(module, args, output):
        found[module].append(describe(output))

    try:
        # leaves run as the graph will run them: with the config's own use_cache (the trace turns it
        # off while tracing; a leaf called by the graph reads it again, as CLVP's decoder does)
        run_on_sample(model, sample, flags, [(module, record) for module in found], disable_cache=False)
    except Exception:  # noqa: BLE001 - the trace is what reports problems with the sample
        return None
    return found


#: ``node.meta`` key: the keys the value of a leaf call had on the eager run.
OUTPUT_KEYS = "tracezoo_output_keys"


def _keys(output: Any) -> tuple[str, ...] | None:
    return tuple(output.keys()) if isinstance(output, Mapping) else None


def observed_output_keys(model: nn.Module, sample_input: Mapping[str, Any], fixed: Mapping[str, Any],
                         leaves: Iterable[nn.Module]) -> dict[str, tuple[str, ...]]:
    """Module path -> the keys its output had on one eager run of ``model`` on the sample, for the
    ``leaves`` whose every call returned a mapping with the same keys (calls the trace may count
    differently, e.g. from code the rewriter moved, then cannot pair up with the wrong run).

    The run leaves the model as it was (module state, configs, hooks)."""
    paths = {module: name for name, module in model.named_modules()}
    calls: dict[str, list[tuple[str, ...] | None]] = defaultdict(list)
    recorders = [(module, lambda _module, _args, output, name=paths[module]: calls[name].append(_keys(output)))
                 for module in leaves if module in paths]
    run_on_sample(model, sample_input, fixed, recorders, disable_cache=False)  # as the graph runs leaves
    return {name: seen[0] for name, seen in calls.items() if seen[0] is not None and len(set(seen)) == 1}
