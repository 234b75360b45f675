"""Which results of an opaque call of moved code are None, decided from the sample.

Code the patcher moved into a ``_wrapped_*`` function (a branch on a traced value, rules
TZ101-TZ106) runs as one opaque node while tracing, so every item it hands back is a traced value,
also one that is None when the model runs: a parameter given as None and handed back unchanged
(Qwen2-Audio's ``labels``), or a name the moved code sets to None (Csm's ``input_ids = None`` once
its ids are embedded). Code after the call that tests ``is None`` on such an item would be traced
for a value: a loss computed on labels that do not exist, a backbone handed ids and embeddings.

The items that may be None are known from the code (:func:`~patcher.trace.moved_code.none_results`);
whether they are None for the sample is worked out as branch decisions are
(:mod:`patcher.trace.decisions`): the part of the graph traced so far that computes the call runs on
the sample, between two traces. An item that is None for the sample is None in the trace that
follows, and the graph checks at every run that each decided item is (or is not) None as it was
for the sample: a run whose call hands back another raises
:class:`~patcher.trace.errors.BranchDecisionError` instead of running code traced for the other case.

A call is decided where the trace meets it, by running that part of the graph in the middle of the
trace (:mod:`patcher.trace.mid_trace_runs`), so the code after it is traced once, for the sample's
answer. Where that cannot be done (moved code traced so far may write a module's settings; the call
is inside an attempt to trace moved code through, which may be taken back; the run failed there),
the trace goes on over the call (its items stay traced values), and the calls it met so are decided
after it, in order, up to the first that has a None item: the code after that one follows another
path in the next trace, while a call whose items are all values changes nothing. A call whose value
cannot be worked out (a model on the meta device whose moved code reads tensor values) stays as it
was: traced values, no check, and the error of a trace that then fails names the item
(:func:`~patcher.trace.moved_code.none_result_reaching`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import types
from typing import Any, Callable, Mapping

from torch import fx, nn

from .decisions import sample_result
from .errors import BranchDecisionError
from .liveness import describe_node, model_frame
from .moved_code import NoneResult, function_tree


@dataclasses.dataclass(frozen=True)
class NoneAnswer:
    """For the items of one call that may be None: (index in the returned tuple, name, None for the
    sample?)."""

    items: tuple[tuple[int, str, bool], ...]

    @property
    def has_none(self) -> bool:
        return any(is_none for _, _, is_none in self.items)


#: An answer that could not be worked out: the call's items stay traced values, unchecked.
UNDECIDED = None


class DecidedTuple(tuple):
    """What a decided call hands the code after it: the opaque node's items, None where the sample
    has None. fx's wrapper of a ``torch.fx.wrap`` function marks ``result.node``: the call's node."""

    node: fx.Node


@dataclasses.dataclass
class _Pending:
    node: fx.Node
    function: Callable
    results: list[NoneResult]


class NoneDecisions:
    """Answers of earlier traces, handed out in order to the opaque calls of moved code that may
    hand back None (tracing is deterministic: the k-th such call of one trace is the k-th of the
    next, as long as the answers before it are the same)."""

    def __init__(self):
        self.answers: list[NoneAnswer | None] = []
        self.used = 0
        self.pending: list[_Pending] = []
        # Set by the tracer for the trace in progress: the value a node of it has for the sample, worked
        # out in the middle of the trace (raises where it is not, or fails); None: calls wait for the trace's end.
        self.value_now: Callable[[fx.Node], Any] | None = None

    def restart(self) -> None:
        self.used = 0
        self.pending = []

    def apply(self, tracer: fx.Tracer, proxy: fx.Proxy, function: Callable, results: list[NoneResult]) -> Any:
        """What the code after the call gets: the proxy itself where undecided (the call is decided
        after the trace), else the sample's structure, checked when the graph runs. Only items the
        calling code reads after the call count: moved code hands back every name it sets (Qwen2-Audio's
        audio_attention_mask, None for a sample without padding), and checking one that nothing reads
        would refuse inputs the graph runs right."""
        frame = model_frame()
        read = _names_read_elsewhere(frame.f_code, frame.f_lineno) if frame is not None else None
        results = [result for result in results if read is None or result.name in read]
        if not results:
            return proxy
        if self.used == len(self.answers):
            call = _Pending(proxy.node, function, results)
            answer = self._answered_now(call)
            if answer is None:
                self.pending.append(call)
                return proxy
            self.answers.append(answer)
        answer = self.answers[self.used]
        self.used += 1
        if answer is UNDECIDED:
            return proxy
        tracer.create_proxy("call_function", check_none_results,
                            (proxy, answer.items, describe_node(proxy.node)), {})
        return _decided_value(proxy, function, answer)

    def _answered_now(self, call: _Pending) -> NoneAnswer | None:
        """The call's answer worked out where the trace meets it; None where it waits for the trace's end.
        Answers are handed out by position, so once a call waits, so do the calls after it."""
        if self.value_now is None or self.pending:
            return None
        try:
            answer = _answer_of(call, self.value_now(call.node))
        except Exception:  # noqa: BLE001 - not run now, or it failed (moved code reading values on meta): after the trace
            return None
        return answer if isinstance(answer, NoneAnswer) else None

    def decide_pending(self, graph: fx.Graph, model: nn.Module, sample: Mapping[str, Any],
                       constants: Mapping[str, Any], modules: list[nn.Module] | None = None) -> bool:
        """Answer the calls the last trace met undecided, in order, up to the first with a None
        item. True: trace again (that call's code after it takes another path). False: the trace
        stands; the checks of the calls answered are added to ``graph`` after each call.
        ``modules``: ``list(model.modules())`` when the caller has it."""
        answered: list[tuple[fx.Node, NoneAnswer]] = []
        for call in self.pending:
            answer = _answer(graph, call, model, sample, constants, modules)
            self.answers.append(answer)
            if answer is UNDECIDED:
                continue
            if answer.has_none:
                self.pending = []
                return True
            answered.append((call.node, answer))
        self.pending = []
        for node, answer in answered:
            with graph.inserting_after(node):
                check = graph.call_function(check_none_results, (node, answer.items, describe_node(node)))
            check.meta.update({key: node.meta[key] for key in ("tz_source",) if key in node.meta})
        return False


def _answer(graph: fx.Graph, call: _Pending, model: nn.Module, sample: Mapping[str, Any],
            constants: Mapping[str, Any], modules: list[nn.Module] | None) -> NoneAnswer | None:
    if call.node.graph is not graph or getattr(call.node, "_erased", False):
        return UNDECIDED  # made inside a trace-through attempt that was taken back
    try:
        value = sample_result(graph, call.node, model, sample, constants, modules)
    except Exception:  # noqa: BLE001 - e.g. moved code reading tensor values on meta: left as it was
        return UNDECIDED
    return _answer_of(call, value)


def _answer_of(call: _Pending, value: Any) -> NoneAnswer | None:
    """Which of the call's items ``value`` (what the call returns for the sample) has None."""
    if not isinstance(value, tuple) or _returned_length(call.function) != len(value):
        return UNDECIDED  # not the one tuple of names the rewriter's functions return
    items = []
    for result in call.results:
        # A whole result that is None cannot be handed on: fx's wrapper marks the node of what the
        # call returns. Such a call stays as it was.
        if result.index is None:
            return UNDECIDED
        items.append((result.index, result.name, value[result.index] is None))
    return NoneAnswer(tuple(items))


def _decided_value(proxy: fx.Proxy, function: Callable, answer: NoneAnswer) -> Any:
    by_index = {index: is_none for index, _, is_none in answer.items}
    if not answer.has_none:
        return proxy
    decided = DecidedTuple(None if by_index.get(index) else proxy[index] for index in range(_returned_length(function)))
    decided.node = proxy.node
    return decided


@functools.lru_cache(maxsize=1024)
def _names_read_elsewhere(code: types.CodeType, line: int) -> frozenset[str] | None:
    """The names the function of ``code`` reads outside its statement at ``line`` (the call's own
    arguments are read before it); None where its source cannot be read."""
    try:
        lines, start = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    line -= start - 1
    statements = [node for node in ast.walk(tree) if isinstance(node, ast.stmt)
                  and node.lineno <= line <= (node.end_lineno or node.lineno)]
    if not statements:
        return None
    call = min(statements, key=lambda node: (node.end_lineno or node.lineno) - node.lineno)
    inside = {id(node) for node in ast.walk(call)}
    return frozenset(node.id for node in ast.walk(tree) if isinstance(node, ast.Name)
                     and isinstance(node.ctx, ast.Load) and id(node) not in inside)


def _returned_length(function: Callable) -> int | None:
    """How many items ``function`` returns: the rewriter's functions end in one ``return`` of a
    tuple of names; None where that is not so."""
    tree = function_tree(function)
    if tree is None:
        return None
    lengths = {len(node.value.elts) for node in ast.walk(tree)
               if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple)}
    return lengths.pop() if len(lengths) == 1 else None


def check_none_results(value: Any, items: tuple[tuple[int, str, bool], ...], where: str) -> None:
    """The graph's check that the items of a call decided while tracing are None, or not, as they
    were for the sample."""
    for index, name, was_none in items:
        item = value[index]
        if (item is None) != was_none:
            now, then = ("None", "a value") if item is None else ("a value", "None")
            raise BranchDecisionError(
                f"this input takes another path than the sample the graph was traced with: `{name}`, handed back "
                f"by the {where}, is {now} here and was {then} while tracing. The graph holds only the code the "
                f"sample ran after it (the patcher moved that code into one call, so the tracer decided from the "
                f"sample whether `{name}` is None); trace with a sample for which `{name}` is {now} to run "
                "such inputs.")
