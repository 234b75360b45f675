"""Model inputs that are containers of tensors: one graph input per tensor while tracing, one input
of the graph's callers, whose structure every run checks.

Gemma 4's assistants take the target model's keys and values as ``shared_kv_states``, a dict of
``(key, value)`` tuples, and their forward loops over it (``{k: (v[0].to(...), v[1].to(...)) for
k, v in shared_kv_states.items()}``). Traced as one graph input, the dict is a single proxy: the loop
cannot run over it (fx: "iteration over a traced value"). So a sample value that is a ``dict``,
``list`` or ``tuple`` (nested, too) holding only tensors is traced as one placeholder per tensor
(``shared_kv_states_full_attention_0``, ...), rebuilt into the same containers before the forward
sees it: the model code walks real dicts and tuples, with graph values inside.

Callers still hand the graph the container (a batch holds ``shared_kv_states`` as assisted generation
makes it): after the trace the leaf placeholders become reads of one input of the container's name
(:func:`taking_containers`), through :func:`nested_leaves`, which checks that the run's container has
the traced structure (the same keys in the same order, as many items, a tensor at every leaf, of the
rank the traced code read) and raises :class:`~patcher.InputMismatchError` naming the input otherwise:
a dict without a key the graph reads would fail somewhere in the model, and one with another key
order, or an extra key, would be silently read as traced. ``TraceRecord`` checks the same before a
whole-model run or a subgraph touches anything.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from typing import Any, Iterable, Mapping

import torch
import torch.utils._pytree as pytree
from torch import fx

from .errors import InputMismatchError

#: The containers traced as one graph input per tensor: exactly these types, so a ModelOutput, a
#: Cache or a namedtuple stays one input as before.
CONTAINERS = (dict, list, tuple)
#: The graph constant holding a container input's structure, by the input's name.
STRUCTURE_PREFIX = "nested_"


def _is_leaf(value: Any) -> bool:
    return type(value) not in CONTAINERS


def flatten(value: Any) -> tuple[list[Any], pytree.TreeSpec]:
    """The leaves of ``value``'s dicts, lists and tuples, in order, and its structure."""
    return pytree.tree_flatten(value, is_leaf=_is_leaf)


def is_nested(value: Any) -> bool:
    """A dict, list or tuple (nested, too) whose leaves are all tensors, at least one."""
    if type(value) not in CONTAINERS:
        return False
    leaves, _ = flatten(value)
    return bool(leaves) and all(isinstance(leaf, torch.Tensor) for leaf in leaves)


def describe(value: Any) -> str:
    """A container's structure as messages show it: ``{'full_attention': (tensor(4-D), tensor(4-D))}``."""
    kind = type(value)
    if kind is dict:
        return "{" + ", ".join(f"{key!r}: {describe(item)}" for key, item in value.items()) + "}"
    if kind is list:
        return "[" + ", ".join(describe(item) for item in value) + "]"
    if kind is tuple:
        return "(" + ", ".join(describe(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, torch.Tensor):
        return f"tensor({value.ndim}-D)"
    return type(value).__name__


def _path_words(path: tuple) -> list[str]:
    words = []
    for entry in path:
        key = getattr(entry, "key", getattr(entry, "idx", entry))
        words.append(re.sub(r"\W+", "_", str(key)).strip("_") or "item")
    return words


@dataclasses.dataclass(frozen=True)
class NestedInput:
    """A container input of the trace: its name, structure, and one graph input per tensor in it."""

    name: str
    spec: pytree.TreeSpec
    traced: str  # the structure as traced (:func:`describe`), for messages
    leaf_names: tuple[str, ...]  # the graph's reads of the leaves, in their order (placeholders while tracing: traced_names)
    leaf_paths: tuple[str, ...]  # where each leaf is: "['full_attention'][0]"
    leaf_ranks: Mapping[int, int] = dataclasses.field(default_factory=dict)  # leaf index -> rank the code read

    @classmethod
    def of(cls, name: str, value: Any, taken: set[str]) -> NestedInput:
        """``value``'s structure, its leaves named ``<name>_<keys>`` (unique among ``taken``, which grows)."""
        paths, spec = pytree.tree_flatten_with_path(value, is_leaf=_is_leaf)
        names = []
        for path, _ in paths:
            leaf = base = "_".join([name, *_path_words(path)])
            count = 1
            while leaf in taken or not leaf.isidentifier():
                count += 1
                leaf = f"{base}_{count}" if base.isidentifier() else f"{name}_leaf_{len(names)}_{count}"
            taken.add(leaf)
            names.append(leaf)
        return cls(name, spec, describe(value), tuple(names), tuple(pytree.keystr(path) for path, _ in paths))

    @property
    def traced_names(self) -> tuple[str, ...]:
        """The placeholders of the leaves while tracing: the leaf names are left for the graph's reads
        of them after the trace (fx never frees a node's name)."""
        return tuple(f"_traced_{leaf}" for leaf in self.leaf_names)

    def leaves(self, value: Any) -> list[Any]:
        """``value``'s leaves, in the traced order (no check)."""
        return flatten(value)[0]

    def rebuild(self, leaves: list[Any]) -> Any:
        """The traced containers around ``leaves``."""
        return pytree.tree_unflatten(list(leaves), self.spec)

    def check(self, value: Any, where: str) -> list[Any]:
        """``value``'s leaves if it has the traced structure; else :class:`InputMismatchError`."""
        leaves, spec = flatten(value) if type(value) in CONTAINERS else (None, None)
        problem = None
        if spec != self.spec:
            problem = f"it is {describe(value)}"
            if type(value) is dict and self.spec.type is dict and set(value) == set(self.spec.context) \
                    and list(value) != list(self.spec.context):
                problem += " (the same keys in another order: the graph reads them in the traced order)"
        else:
            for index, leaf in enumerate(leaves):
                rank = self.leaf_ranks.get(index)
                if not isinstance(leaf, torch.Tensor):
                    problem = f"{self.name}{self.leaf_paths[index]} is {type(leaf).__name__}, not a tensor"
                elif rank is not None and leaf.ndim != rank:
                    problem = (f"{self.name}{self.leaf_paths[index]} has {leaf.ndim} dimensions, and the traced "
                               f"code decided on its rank ({rank})")
                if problem:
                    break
        if problem is not None:
            raise InputMismatchError(
                f"{where}: input {self.name!r} does not have the structure the graph was traced with: {problem}; "
                f"traced: {self.traced}. The graph reads each tensor of {self.name!r} by its place in the traced "
                f"structure, so another one would be read wrongly or fail inside the model; give {self.name!r} "
                "as when tracing, or trace with a sample like this run's")
        return leaves


def nested_leaves(value: Any, nested: NestedInput) -> list[Any]:
    """The graph's read of a container input: its leaves, after the structure check."""
    return nested.check(value, "the graph")


def taking_containers(graph: fx.Graph, nested: Mapping[str, NestedInput], order: Iterable[str],
                      ranks_read: Mapping[str, int], constants: dict[str, Any], constant_prefix: str
                      ) -> dict[str, NestedInput]:
    """Turn the leaf placeholders of each container input into reads of one placeholder of its name
    (in ``order``, the inputs of the graph's callers), through a checked :func:`nested_leaves`, each
    read named as its leaf; the ranks the traced code read of the leaves (``ranks_read``, by
    placeholder) go into the check.
    Returns the containers as checked, by name."""
    if not nested:
        return {}
    placeholders = {node.target: node for node in graph.find_nodes(op="placeholder")}
    checked = {}
    for name, container in nested.items():
        checked[name] = dataclasses.replace(container, leaf_ranks={
            index: ranks_read[leaf] for index, leaf in enumerate(container.traced_names) if leaf in ranks_read})
    for name in order:
        if name in nested:
            with graph.inserting_before(placeholders[nested[name].traced_names[0]]):
                graph.placeholder(name)
    anchor = list(graph.find_nodes(op="placeholder"))[-1]
    parents = {node.target: node for node in graph.find_nodes(op="placeholder") if node.target in nested}
    for name, container in checked.items():
        key = f"{constant_prefix}{STRUCTURE_PREFIX}{name}"
        constants[key] = container
        with graph.inserting_after(anchor):
            structure = graph.get_attr(key)
        with graph.inserting_after(structure):
            anchor = leaves = graph.call_function(nested_leaves, (parents[name], structure))
        for index, (traced, leaf_name) in enumerate(zip(container.traced_names, container.leaf_names)):
            leaf = placeholders[traced]
            with graph.inserting_after(anchor):
                anchor = item = graph.create_node("call_function", operator.getitem, (leaves, index), name=leaf_name)
            leaf.replace_all_uses_with(item)
            graph.erase_node(leaf)
    graph.lint()
    return checked
