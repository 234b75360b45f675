"""Model code run for real in the middle of a trace, seeing the model as a run between two traces does.

Some of what the tracer decides from the sample needs the value that the part of the graph traced so
far computes for it: whether an item that moved code hands back is None
(:mod:`patcher.trace.none_decisions`). Worked out between two traces, the answer costs one more trace
of the whole model (Qwen2-VL's ``text_position_ids``: the second of its two traces was a third of the
time ``trace_subgraphs`` took on Qwen2-VL-2B). Worked out at the call, the trace goes on with it.

Inside :func:`run_mid_trace`, the run sees what it would see between traces:

- fx's patches (``nn.Module.__call__`` and ``__getattr__``, the globals of ``torch.fx.wrap``
  functions) are undone and fx's tracing flag is off, so the modules run instead of recording nodes;
- the modules and configs hold what they held when the trace began
  (:meth:`~patcher.trace.state.StateSnapshot.set_aside`): what the trace wrote so far (proxies such as
  Qwen2-VL's ``self.rope_deltas``, the configs' ``use_cache=False``) is set aside and put back after,
  and what the run writes is dropped (so the run keeps no journal of the settings it may change:
  :func:`~patcher.trace.wrapped_state.settings_put_back_by_caller`). Values are worked out so only
  where no moved code traced so far may write a module's settings
  (:func:`~patcher.trace.wrapped_state.may_change_settings`: a run between traces would hand its
  writes on to the next trace) and outside attempts to trace moved code through (:class:`NotRunNow`).

A run that reaches a value of the trace in progress (the graph grew while it ran: a proxy kept in a
container the snapshot cannot tell from the one it saved) has changed that trace, which is therefore
given up (:class:`TraceTouched`) and traced again, deciding between traces as before. Any other failure
of the run is the caller's: the tracer then decides between traces, as it did before this module.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from torch import fx
from torch.fx import _symbolic_trace

from .decisions import sample_result
from .state import StateSnapshot
from .wrapped_state import settings_put_back_by_caller

if TYPE_CHECKING:
    from .traces import Tracing

T = TypeVar("T")

#: fx's own way to undo and redo its patches while it traces (private; in every torch we support).
_REVERT_PATCHES = getattr(_symbolic_trace, "_maybe_revert_all_patches", None)


def _tracing_flag_access() -> tuple[Callable[[], bool], Callable[[bool], None]] | None:
    """Read and set fx's "tracing now" flag (private): a module global up to torch 2.14, thread-local
    behind ``_get_is_fx_tracing``/``_set_is_fx_tracing`` from 2.15."""
    if hasattr(_symbolic_trace, "_get_is_fx_tracing") and hasattr(_symbolic_trace, "_set_is_fx_tracing"):
        return _symbolic_trace._get_is_fx_tracing, _symbolic_trace._set_is_fx_tracing
    if hasattr(_symbolic_trace, "_is_fx_tracing_flag"):
        return (lambda: _symbolic_trace._is_fx_tracing_flag,
                lambda value: setattr(_symbolic_trace, "_is_fx_tracing_flag", value))
    return None


_TRACING_FLAG = _tracing_flag_access()

#: Whether this torch lets model code run in the middle of a trace (False: decisions wait for the trace's end).
AVAILABLE = _REVERT_PATCHES is not None and _TRACING_FLAG is not None


class NotRunNow(Exception):
    """The value waits for the trace's end, where it is worked out between two traces."""


class TraceTouched(BaseException):
    """A run in the middle of a trace reached a value of that trace: the trace is given up and traced
    again without such runs. A BaseException, so that model code catching ``Exception`` around the
    call cannot swallow it."""


def run_mid_trace(tracer: fx.Tracer, snapshot: StateSnapshot, run: Callable[[], T]) -> T:
    """``run()`` in the middle of ``tracer``'s trace, as between two traces (see the module's text).
    Raises what ``run`` raises, and :class:`TraceTouched` where it reached the trace."""
    nodes = len(tracer.graph.nodes)
    try:
        with _fx_patches_undone(), snapshot.set_aside(), settings_put_back_by_caller():
            return run()
    finally:
        if len(tracer.graph.nodes) != nodes:
            raise TraceTouched(f"model code run in the middle of the trace added {len(tracer.graph.nodes) - nodes} "
                               "node(s) to it")


@contextlib.contextmanager
def values_worked_out_mid_trace(tracing: Tracing, tracer: fx.Tracer, snapshot: StateSnapshot) -> Iterator[None]:
    """While ``tracer`` (the ``SequentialTracer``) traces, moved code's None results are decided where
    the trace meets them, by a run of the graph so far on the sample (:func:`run_mid_trace`), where
    this torch allows it."""
    if not (AVAILABLE and tracing.mid_trace_runs):
        yield
        return
    sample = tracing.root.graph_values(tracing.sample)

    def value_now(node: fx.Node) -> Any:
        if tracer._cache_keys_added is not None:
            raise NotRunNow("inside an attempt to trace moved code through, which may be taken back")
        if tracer.wrapped_calls_on_modules:
            raise NotRunNow("moved code traced so far may write a module's settings: a run between traces "
                            "hands its writes on to the next trace")
        return run_mid_trace(tracer, snapshot, lambda: sample_result(
            tracer.graph, node, tracing.model, sample, tracer.constants, tracing.walk.modules))

    tracing.none_decisions.value_now = value_now
    try:
        yield
    finally:
        tracing.none_decisions.value_now = None


@contextlib.contextmanager
def _fx_patches_undone() -> Iterator[None]:
    read, write = _TRACING_FLAG
    flag = read()
    with _REVERT_PATCHES():
        write(False)
        try:
            yield
        finally:
            write(flag)


def fx_tracing_now() -> bool:
    """fx's "tracing now" flag, as ``torch.fx._symbolic_trace.is_fx_symbolic_tracing`` reads it."""
    return _TRACING_FLAG[0]()
