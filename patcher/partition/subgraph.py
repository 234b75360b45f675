"""Split a traced graph into one subgraph per sequential target and run the chain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from torch import fx, nn

from ..normalize import positive_int
from ..trace.record import TraceRecord
from ..trace.hooks import check_run_time
from ..trace.graph_runtime import ROOT_ATTRIBUTE, GraphRoot, TracedGraph, compile_graph, gc_paused, run_graph
from ..trace.wrapped_state import settings_rolled_back_on_error


class BatchInputNames(list):
    """Subgraph 0's ``input_names``: iterating it (and ``len``, indexing, ``==``) gives the inputs it
    reads, like any subgraph's; ``name in`` it is also true for every other name a batch may hold at the
    model level, that is, any name the chain does not hand from one subgraph to the next.

    A loop that picks the values each subgraph gets by asking ``name in subgraph.input_names``
    (llm-compressor's ``IntermediatesCache.fetch``, ``{k: v for k, v in batch.items() if k in
    subgraph.input_names}``) therefore hands subgraph 0 every input of the batch, and subgraph 0 refuses
    one the graph was traced without (:class:`~patcher.InputMismatchError`) or a constant of the trace
    given another value; with a plain list, such an input never reached it and a padded mask was
    dropped without a word. Iterating still gives only the inputs the graph reads, so a loop that
    indexes the batch by them (``{name: batch[name] for name in subgraph.input_names}``) does not fail
    on a batch without an optional input (a constant of the trace left out). Such a loop shows
    subgraph 0 nothing it does not name, so it cannot be refused an input the graph was traced
    without: hand everything, or pick by ``in`` (GUIDE.md, "Why tracing is required").
    """

    def __init__(self, names: Iterable[str] = (), excluded: Iterable[str] = ()):
        super().__init__(names)
        #: names that are no model input: the values one subgraph hands the next (a cache that holds them
        #: for a batch need not move them to subgraph 0, which would not read them), and keys a tool keeps
        #: for itself
        self.excluded = frozenset(excluded)

    def __contains__(self, name: object) -> bool:
        return list.__contains__(self, name) or (isinstance(name, str) and name not in self.excluded)

    def without(self, names: Iterable[str]) -> "BatchInputNames":
        """These names, with ``names`` (keys a tool keeps in its batches for itself) not handed on."""
        return BatchInputNames(self, self.excluded | frozenset(names))


@dataclass
class Subgraph:
    """One piece of the partition: the nodes from one target boundary to the next.

    ``input_names`` are read from the intermediates, ``output_names`` are written back (the
    model's output names for the last subgraph), and ``consumed_names`` are inputs that no later
    subgraph needs, so a cache may drop them after this subgraph ran. Subgraph 0's ``input_names`` is
    a :class:`BatchInputNames`: ``in`` it is true for every model-level name, so that a loop picking
    a batch's values by ``in`` shows subgraph 0 an input the graph was traced without.

    ``forward`` checks each run against the trace's ``record``: inputs may include any value the
    chain hands on, but a name the trace never took, a constant of the trace (None, Python
    scalars) with another value, another train/eval mode of the modules this subgraph runs, or
    a model of another structure raise (:class:`~patcher.InputMismatchError`,
    :class:`~patcher.TrainingModeError`, :class:`~patcher.ModelMismatchError`).
    """

    index: int
    graph: fx.Graph
    input_names: list[str]
    output_names: list[str]
    consumed_names: list[str]
    targets: list[str]
    modules: list[str]
    record: TraceRecord = field(repr=False)
    constants: Mapping[str, Any] = field(repr=False, default_factory=dict)
    #: modules whose train/eval mode this subgraph depends on (called modules and everything
    #: inside them, traced-through modules, modules passed by reference)
    mode_names: tuple[str, ...] = field(default=(), repr=False)
    #: every value name the chain reads or writes (shared by the subgraphs of one partition)
    handed_names: frozenset[str] = field(default=frozenset(), repr=False)
    traced_through: list[str] = field(default_factory=list)  # inlined modules: see TracedGraph
    _forward: Any = field(default=None, repr=False)

    def forward(self, model: nn.Module, **inputs) -> dict[str, Any]:
        """Run this subgraph against ``model``'s real modules; return ``{name: value}``.

        Raises ``HookError`` when a module the tracer walked through got a hook after tracing:
        the graph inlined that module, so the hook would never run."""
        check_run_time(model, self.traced_through)
        self.record.check_subgraph_inputs(self.index, self.input_names, self.handed_names, inputs)
        self.record.check_model(model, self.mode_names, f"subgraph {self.index}")
        return self._run(model, inputs)

    def _run(self, model: nn.Module, inputs: Mapping[str, Any]) -> dict[str, Any]:
        if self._forward is None:
            self._forward = compile_graph(self.graph)
        return run_graph(self._forward, self.graph, GraphRoot(model, self.constants),
                         [inputs[name] for name in self.input_names], f"subgraph {self.index}")

    __call__ = forward

    @property
    def code(self) -> str:
        return self.graph.python_code(root_module="self").src


def partition_graph(traced: TracedGraph, model: nn.Module, targets_per_subgraph: int = 1) -> list[Subgraph]:
    """Cut the graph after every ``targets_per_subgraph``-th target call, in execution order.

    With N target calls the result has ``ceil(N / targets_per_subgraph) + 1`` subgraphs: the
    last one holds what follows the last target (final norm, head).

    Graph order is execution order, so in-place nodes (``setitem``) stay after the values they
    mutate and before their readers. Every lookup is a dict, so the cost is linear in nodes.
    ``targets_per_subgraph`` is an int >= 1 (else ``TypeError``/``ValueError``).
    """
    targets_per_subgraph = positive_int(targets_per_subgraph, "targets_per_subgraph")
    graph = traced.graph
    target_names = set(traced.target_names)
    target_calls = [node for node in graph.find_nodes(op="call_module") if node.target in target_names]
    last_target = target_calls[-1] if target_calls else None
    partition_of: dict[fx.Node, int] = {}
    partitions: list[list[fx.Node]] = [[]]
    in_current = 0
    output_node = None
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            continue
        if node.op == "output":
            output_node = node
            partition_of[node] = len(partitions) - 1
            continue
        partitions[-1].append(node)
        partition_of[node] = len(partitions) - 1
        if node.op == "call_module" and node.target in target_names:
            in_current += 1
            # What follows the last target (final norm, head) always gets its own subgraph.
            if in_current == targets_per_subgraph or node is last_target:
                partitions.append([])
                in_current = 0
    last = len(partitions) - 1

    # The last partition a value is read in; get_attr nodes are copied, never passed.
    last_use: dict[fx.Node, int] = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            continue
        uses = [partition_of[user] for user in node.users]
        last_use[node] = max(uses) if uses else partition_of.get(node, -1)

    subgraphs = []
    for index, nodes in enumerate(partitions):
        subgraphs.append(
            _build_subgraph(index, nodes, partition_of, last_use, output_node if index == last else None,
                            model, traced, target_names)
        )
    handed = frozenset(name for subgraph in subgraphs for name in (*subgraph.input_names, *subgraph.output_names))
    subgraphs[0].input_names = BatchInputNames(
        subgraphs[0].input_names, (name for subgraph in subgraphs[:-1] for name in subgraph.output_names))
    traced_through = tuple(traced.record.children)
    for subgraph in subgraphs:
        subgraph.handed_names = handed
        subgraph.mode_names = _mode_names(model, subgraph, traced_through)
    return subgraphs


def _mode_names(model: nn.Module, subgraph: Subgraph, traced_through: tuple[str, ...]) -> tuple[str, ...]:
    """Modules whose ``training`` flag this subgraph's run depends on: the traced-through modules
    (their `self.training` branches are in the graph), each module it calls with everything
    inside, and modules it passes by reference (their own flag; the root's stands for the model)."""
    names = dict.fromkeys(traced_through)
    called = {str(node.target) for node in subgraph.graph.find_nodes(op="call_module")}
    for name in subgraph.modules:
        if name == ROOT_ATTRIBUTE:
            names[""] = None
        elif name in called:
            names.update(dict.fromkeys(inner for inner, _ in model.get_submodule(name).named_modules(prefix=name)))
        else:
            names[name] = None
    return tuple(names)


def _build_subgraph(index, nodes, partition_of, last_use, output_node, model, traced, target_names) -> Subgraph:
    own = set(nodes)
    readers = list(nodes) + ([output_node] if output_node is not None else [])
    inputs: list[fx.Node] = []
    attributes: list[fx.Node] = []
    seen: set[fx.Node] = set()
    for node in readers:
        for value in node.all_input_nodes:
            if value not in own and value not in seen:
                seen.add(value)
                # get_attr nodes are copied into every subgraph that reads them: free, never passed
                (attributes if value.op == "get_attr" else inputs).append(value)

    new_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for value in inputs:
        env[value] = new_graph.placeholder(value.name)
    for value in attributes:
        env[value] = new_graph.get_attr(value.target)
    for node in nodes:
        env[node] = new_graph.node_copy(node, env.__getitem__)

    if output_node is not None:
        result = output_node.args[0]
        new_graph.output(fx.map_arg(result, env.__getitem__))
        output_names = list(result.keys()) if isinstance(result, dict) else ["output"]
    else:
        produced = [node for node in nodes if last_use[node] > index]
        new_graph.output({node.name: env[node] for node in produced})
        output_names = [node.name for node in produced]

    calls = [node for node in nodes if node.op == "call_module"]
    modules = [str(node.target) for node in calls]
    modules += [str(value.target) for value in attributes if _is_module(model, value.target)]
    return Subgraph(
        index=index,
        graph=new_graph,
        input_names=[value.name for value in inputs],
        output_names=output_names,
        consumed_names=[value.name for value in inputs if last_use[value] <= index],
        targets=[str(node.target) for node in calls if node.target in target_names],
        modules=modules,
        record=traced.record,
        constants=traced.constants,
        traced_through=traced.traced_through,
    )


def _is_module(model: nn.Module, target: str) -> bool:
    if target == ROOT_ATTRIBUTE:
        return True
    value: Any = model
    for part in target.split("."):
        value = getattr(value, part, None)
        if value is None:
            return False
    return isinstance(value, nn.Module)


def subgraph_list(subgraphs: Any, function: str) -> list[Subgraph]:
    """``subgraphs`` as a non-empty list of :class:`Subgraph`: ``TypeError`` for another type (a
    single subgraph included), ``ValueError`` for an empty list."""
    if isinstance(subgraphs, (Subgraph, str, bytes)) or not hasattr(subgraphs, "__iter__"):
        hint = " (wrap a single one in a list)" if isinstance(subgraphs, Subgraph) else ""
        raise TypeError(f"{function}: subgraphs must be the list of Subgraph that trace_subgraphs returns; got "
                        f"{type(subgraphs).__name__}{hint}")
    subgraphs = list(subgraphs)
    if not subgraphs:
        raise ValueError(f"{function}: subgraphs is empty, so nothing would run; pass the list trace_subgraphs "
                         "returns (it always holds at least one subgraph)")
    for index, subgraph in enumerate(subgraphs):
        if not isinstance(subgraph, Subgraph):
            raise TypeError(f"{function}: subgraphs[{index}] is a {type(subgraph).__name__}, not a Subgraph; pass "
                            "the list trace_subgraphs returns")
    return subgraphs


def run_path(model: nn.Module, subgraphs: list[Subgraph], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Run one path's subgraphs in order on ``inputs`` of its kind (:func:`run_subgraphs`, which picks
    the path, says what is checked); return the model's outputs."""
    record = subgraphs[0].record
    record.check_model_inputs(inputs, "run_subgraphs")
    record.check_structure(model, "run_subgraphs")
    check_run_time(model, subgraphs[0].traced_through)  # hooks the chain could not honour
    inputs = {name: value for name, value in inputs.items() if name not in record.constants}
    intermediates = dict(inputs)
    outputs: dict[str, Any] = {}
    with settings_rolled_back_on_error():  # one journal for the chain: a later refusal undoes an earlier switch
        for subgraph in subgraphs:
            step = {name: intermediates[name] for name in subgraph.input_names if name in intermediates}
            missing = [name for name in subgraph.input_names if name not in step]
            if missing:
                subgraph.record.check_subgraph_inputs(subgraph.index, subgraph.input_names, subgraph.handed_names,
                                                      step)
            subgraph.record.check_mode(model, subgraph.mode_names, f"subgraph {subgraph.index}")
            outputs = subgraph._run(model, step)
            for name in subgraph.consumed_names:
                intermediates.pop(name, None)
            intermediates.update(outputs)
    return outputs
