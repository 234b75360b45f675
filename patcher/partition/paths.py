"""One traced chain per kind of batch: text-only and image batches on one model.

A graph reads the inputs it was traced with and nothing else: traced on a batch with images, it
cannot run a text-only batch (its graph reads ``pixel_values``); traced on text, it would ignore the
images of another batch. Eager takes both, and calibration sets of vision-language models mix them.
So :func:`~patcher.partition.trace_subgraphs` returns a :class:`SubgraphPaths`: the list of the
sample's subgraphs, as it always returned, which also keeps the arguments it was traced with.
:func:`~patcher.partition.run_subgraphs` runs each batch on the chain (the *path*) traced for its
kind, and traces the path of a new kind on the first batch of that kind, once, with the same
targets, ignore entries and grouping. Where every kind runs the same targets (the decoder layers),
subgraph ``i`` of every path calibrates the same layer; a vision tower's blocks as targets run only
on the paths of batches with images, whose chains are then longer.

A batch's kind is the set of names it gives as values (tensors), plus the names it gives as
constants (None, Python scalars) that the trace fixed (:meth:`TraceRecord.same_kind
<patcher.trace.record.TraceRecord.same_kind>`): text-only, with images, with video, with audio, a
padded mask where the sample had none, ``attention_mask=None`` where it had a mask. A constant of
the trace given another value (``logits_to_keep=2`` on a graph traced with 1) is no new kind: the
path refuses it (:class:`~patcher.InputMismatchError`), as before.

A plain list of subgraphs (``list(subgraphs)``, what :func:`~patcher.partition.partition_graph`
returns) is one path: a batch of another kind is refused, naming the inputs, as before; so are
``Subgraph.forward`` and ``TracedGraph.forward``, which run one trace.

Each path's subgraphs carry their own ``record`` (what that trace took, checked at every run). A
later partition object owning the record and the batch check can take the place of a path here:
this object picks a path by asking its record (:meth:`find`), and traces one (:meth:`trace_path`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from torch import nn

from ..normalize import input_names, positive_int
from ..trace.graph_runtime import gc_paused
from ..trace.record import given_inputs, input_kind
from ..trace.tracer import trace_graph
from .subgraph import Subgraph, partition_graph, run_path, subgraph_list


class SubgraphPaths(list):
    """The subgraphs :func:`~patcher.partition.trace_subgraphs` traced, one per sequential target
    plus a last one (this list: indexing, ``len`` and iteration are the sample's path, as before),
    and the paths traced since for batches of other kinds (:attr:`paths`).

    ``path_for(model, inputs, where)`` gives the path of ``inputs``' kind, tracing it on ``inputs``
    when no path of that kind exists yet; :func:`~patcher.partition.run_subgraphs` calls it for every
    run. Each path is a list of :class:`~patcher.partition.Subgraph` with its own ``record`` (what
    that trace took). The paths share the model: a module runs with its own weights on every path.
    """

    def __init__(self, subgraphs: Iterable[Subgraph], sequential_targets: Any, ignore: Any,
                 targets_per_subgraph: int, unused_inputs: Iterable[str] | str = ()):
        super().__init__(subgraphs)
        # what trace_subgraphs was called with, validated there: every later path is traced with it
        self.sequential_targets = sequential_targets
        self.ignore = ignore
        self.targets_per_subgraph = targets_per_subgraph
        self.unused_inputs = tuple(input_names(unused_inputs, "unused_inputs"))
        self._others: list[list[Subgraph]] = []

    @property
    def paths(self) -> list[list[Subgraph]]:
        """Every path traced so far, the sample's first (this list's subgraphs)."""
        return [list(self), *self._others]

    def kinds(self) -> list[str]:
        """The kind of batch each path takes (the inputs its graph reads), in :attr:`paths`' order."""
        return [path[0].record.kind() for path in self.paths]

    def find(self, inputs: Mapping[str, Any]) -> int | None:
        """The index in :attr:`paths` of the path of ``inputs``' kind, or None."""
        for index, path in enumerate(self.paths):
            if path[0].record.same_kind(inputs):
                return index
        return None

    def path_for(self, model: nn.Module, inputs: Mapping[str, Any], where: str) -> list[Subgraph]:
        """The path that runs ``inputs``, traced on them (``model``) if none of their kind exists yet."""
        index = self.find(inputs)
        if index is None:
            index = self.trace_path(model, inputs, where)
        return self.paths[index]

    def trace_path(self, model: nn.Module, inputs: Mapping[str, Any], where: str) -> int:
        """Trace the path of ``inputs``' kind on them and keep it; return its index in :attr:`paths`.

        ``model`` must be the model the first path was traced from
        (:class:`~patcher.ModelMismatchError` otherwise, before anything is traced: the paths of one
        object run one model). An error of the trace is raised as it is (its type, location and fix),
        its message beginning with what was traced and why."""
        first = self[0].record
        first.check_structure(model, where)
        # unused_inputs names inputs of the first sample; one this kind lacks is nothing to excuse
        unused = [name for name in self.unused_inputs if name in inputs]
        try:
            traced = trace_graph(model, inputs, self.sequential_targets, self.ignore, unused)
            with gc_paused():
                path = partition_graph(traced, model, self.targets_per_subgraph)
        except Exception as error:  # noqa: BLE001 - any failure of the trace: its own type, with the context
            _prefix(error, f"{where}: a batch with inputs {input_kind(given_inputs(inputs))} is of another kind than "
                           f"the batches the subgraphs were traced on ({'; '.join(self.kinds())}), so its own "
                           "subgraphs were traced on it, with the same targets; that trace failed: ")
            raise
        self._others.append(path)
        return len(self.paths) - 1


def _prefix(error: BaseException, context: str) -> None:
    """Put ``context`` before ``error``'s message, keeping its type (and what callers catch it as)."""
    if error.args and isinstance(error.args[0], str):
        error.args = (context + error.args[0], *error.args[1:])


def trace_subgraphs(
    model: nn.Module,
    sample_input: Mapping[str, Any],
    sequential_targets: Iterable[str | type] | str | type,
    ignore: Iterable[str | type] | str | type | None = None,
    targets_per_subgraph: int = 1,
    unused_inputs: Iterable[str] | str = (),
) -> SubgraphPaths:
    """Trace ``model`` and split it into subgraphs, one per sequential target (plus a last one).

    The result is the list of those subgraphs (a :class:`~patcher.partition.SubgraphPaths`), which
    also keeps these arguments: :func:`run_subgraphs` runs a batch of another kind than the sample
    (text-only on a graph traced with images, or the reverse) on subgraphs traced for that kind, on
    the first batch of it, with the same targets (``paths``; see :mod:`patcher.partition.paths`).

    ``sequential_targets`` and ``ignore`` entries are names, ``re:`` patterns or ``nn.Module``
    subclasses (``[LlamaDecoderLayer]`` means ``["LlamaDecoderLayer"]``); a single string or class
    is one entry. ``ignore=None`` (the default) means ``DEFAULT_IGNORE``, as everywhere in
    tracezoo; ``[]`` ignores nothing. ``targets_per_subgraph`` is an int >= 1.

    ``unused_inputs`` names sample inputs the model does not read (see :func:`trace_graph`; a
    single string is one name): any other sample tensor that does not reach the output is an
    error, never a silent drop.

    An argument of the wrong type raises ``TypeError``, a ``targets_per_subgraph`` below 1
    ``ValueError``, both naming the argument (:mod:`patcher.normalize`), before anything is traced.

    Example (a tiny Llama built from its config)::

        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> from patcher import trace_subgraphs, run_subgraphs
        >>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
        ...                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
        >>> model = LlamaForCausalLM(config).eval()
        >>> sample = {"input_ids": torch.randint(0, 64, (1, 5)), "attention_mask": torch.ones(1, 5)}
        >>> subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"])
        >>> len(subgraphs)
        3
        >>> outputs = run_subgraphs(model, subgraphs, sample)
        >>> torch.equal(outputs["logits"], model(**sample).logits)
        True
    """
    targets_per_subgraph = positive_int(targets_per_subgraph, "targets_per_subgraph")
    traced = trace_graph(model, sample_input, sequential_targets, ignore, unused_inputs)
    with gc_paused():
        subgraphs = partition_graph(traced, model, targets_per_subgraph)
    return SubgraphPaths(subgraphs, sequential_targets, ignore, targets_per_subgraph, unused_inputs)


def run_subgraphs(model: nn.Module, subgraphs: list[Subgraph], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Run the subgraphs in order, handing activations on; return the model's outputs.

    ``subgraphs`` as :func:`trace_subgraphs` returned them run ``inputs`` of any kind: of the
    sample's kind (the same inputs given as tensors) on the sample's subgraphs, of another kind
    (text-only where the sample had images, images where it had none, a padded mask where it had
    none) on subgraphs traced for that kind, on the first such ``inputs``, once (kept in
    ``subgraphs.paths``; see :mod:`patcher.partition.paths`). A plain list of subgraphs is one path:
    there every input the graph takes must be given, and an input it was traced without raises
    (:class:`~patcher.InputMismatchError`: the graph would ignore it). Either way constants of the
    trace (None, Python scalars such as ``logits_to_keep=1``) may be left out or given with the
    traced value only. The model must be the one traced (same structure, checked once per model) and in
    the same train/eval mode (:class:`~patcher.TrainingModeError`, :class:`~patcher.ModelMismatchError`).
    Values no later subgraph needs are dropped as soon as their last reader has run.
    ``subgraphs`` is the non-empty list :func:`trace_subgraphs` returned (else ``TypeError`` or
    ``ValueError``: no subgraph would run, and the result would be empty).
    A run refused part-way (by any subgraph, or a check between two) leaves the settings of the
    model as they were before the first subgraph ran.
    """
    paths = subgraphs
    subgraphs = subgraph_list(subgraphs, "run_subgraphs")
    if isinstance(paths, SubgraphPaths):
        subgraphs = paths.path_for(model, inputs, "run_subgraphs")
    return run_path(model, subgraphs, inputs)
