"""One trace's subgraphs and what that trace took: the object a batch is checked against.

:func:`~patcher.partition.partition_graph` returns a :class:`Partition`: the list of the subgraphs
(indexing, ``len`` and iteration as before) that also owns the trace's
:class:`~patcher.trace.record.TraceRecord` (:attr:`Partition.record`). Callers ask it about a batch
(:meth:`Partition.check_batch`, :meth:`Partition.same_kind`, :meth:`Partition.kind`) rather than
reaching through ``subgraphs[0].record``. Each subgraph keeps a reference to the same record, which
``Subgraph.forward`` checks its own run against.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from torch import nn

from ..trace.record import TraceRecord


class Partition(list):
    """The subgraphs of one trace, in order, and the :class:`~patcher.trace.record.TraceRecord` of that
    trace (:attr:`record`: the inputs, constants, mode and structure it took)."""

    # subgraphs: Subgraph objects; not imported here, since subgraph.py imports this module (no cycle)
    def __init__(self, subgraphs: Iterable[Any], record: TraceRecord):
        super().__init__(subgraphs)
        self.record = record

    @classmethod
    def of(cls, subgraphs: list[Any]) -> Partition:
        """``subgraphs`` as a partition: itself if it is one, else a plain (non-empty) list of one
        trace's subgraphs with the record they share."""
        if isinstance(subgraphs, Partition):
            return subgraphs
        return cls(subgraphs, subgraphs[0].record)

    def check_batch(self, batch: Mapping[str, Any], where: str = "run_subgraphs", fix: str | None = None) -> None:
        """Raise if ``batch`` (a whole-model run's inputs) has an input this trace was made without,
        lacks one it takes, or gives a constant of the trace another value
        (:class:`~patcher.InputMismatchError`, :class:`~patcher.trace.errors.MissingInputError`);
        ``where`` begins the message, and ``fix`` replaces what the error of an input too many or too
        few says to do, where the caller knows better."""
        self.record.check_model_inputs(batch, where, fix)

    def check_structure(self, model: nn.Module, where: str = "run_subgraphs") -> None:
        """Raise :class:`~patcher.ModelMismatchError` unless ``model`` has the structure traced."""
        self.record.check_structure(model, where)

    def same_kind(self, batch: Mapping[str, Any]) -> bool:
        """Whether ``batch`` is of the kind this trace was made on (the same inputs given as values,
        constants only where the trace has them): see :meth:`TraceRecord.same_kind
        <patcher.trace.record.TraceRecord.same_kind>`."""
        return self.record.same_kind(batch)

    def kind(self) -> str:
        """The inputs this trace reads, as messages name a kind of batch."""
        return self.record.kind()
