"""The torch.fx tracer for transformers models: sequential targets and ignored modules are leaves.

Only the ancestors of sequential targets are traced through; every other module becomes a single
``call_module`` node. That keeps attention, rotary embeddings and vision towers opaque unless a
target lives inside them, so calibration hooks on the targets see real module calls.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import numpy as np
import torch
from torch import fx, nn
from transformers import PretrainedConfig
from transformers.utils import ModelOutput

from ..registry.ignore import DEFAULT_IGNORE  # noqa: F401 - re-exported
from ..registry.normalize import ModuleEntries
from ..registry.wrapped import is_wrapped_name
from .decisions import DecisionNeeded, Decisions, is_decision
from .explain import explained
from .graph_runtime import CONSTANT_PREFIX, ROOT_ATTRIBUTE, TracedGraph, gc_paused, traced_message
from .errors import SharedStateError
from .filled_caches import check_no_read_after_fill
from .hooks import check_leaf_output_capture, check_no_global_hooks, check_traced_through, replay_hidden_state_capture
from .influence import eager_ignores
from .leaf_outputs import OUTPUT_KEYS, VALUE, Items, holds_none, leaf_output_checked, structured
from .liveness import check_inputs_reach_output, record_source
from .mid_trace_runs import TraceTouched, values_worked_out_mid_trace
from .model_walk import ModelWalk
from .moved_code import NoneResult, may_return_none, none_results, object_given_for_attributes, returning_function
from .opaque import mapping_result, opaque_calls, traced_dtype_queries
from .none_decisions import DecidedTuple, NoneDecisions
from .decided_lengths import check_decided_length, splits_a_tensor
from .decided_indices import decided_container_indices
from .device_reads import DeviceReads
from .passes.arguments import read_arguments
from .passes.branch_decisions import traced_deciding_branches
from .passes.hidden_targets import check_no_hidden_targets
from .passes.layerdrop import check_layerdrop
from .passes.leaf_state import check_leaf_state_unchanged
from .passes.leaf_structures import (leaves_read_as_containers, retraced_for_iterated_leaf_outputs,
                                     retraced_with_leaf_structures)
from .passes.requested_outputs import check_requested_outputs
from .passes.sample_checks import check_sample, sample_keys_not_taken  # noqa: F401 - sample_keys_not_taken re-exported
from .passes.settled_settings import retraced_with_settled_settings
from .passes.unpacked_keys import retraced_with_unpacked_keys
from .recorded import recorded_graph
from .root import ROOT_FORWARD, swapped_class, traced_root
from .shared_state import (can_be_state, changed_after_handing, copy_containers, emptied, filled_state,
                           fillable_with_graph_values, fingerprint, handed_state, new_state)
from .state import preserved_model_state
from .traced_through import NOT_TRACED_THROUGH, TRACED_THROUGH_TYPES, trace_through
from .proxy import TracingProxy
from .traces import EagerFacts, TraceResult, Tracing
from .wrapped_state import apply_settings, call_with_settings, may_change_settings


class SequentialTracer(fx.Tracer):
    """fx tracer that stops at targets/ignored modules and keeps foreign objects by reference."""

    def __init__(self, model: nn.Module, traced_modules: set[nn.Module], target_names: set[str],
                 leaf_outputs: Mapping[nn.Module, list[Any]] | None = None,
                 leaf_output_keys: Mapping[str, tuple[str, ...]] | None = None,
                 settled_settings: Mapping[Any, Any] | None = None, decisions: Decisions | None = None,
                 none_decisions: NoneDecisions | None = None, walk: ModelWalk | None = None):
        super().__init__(autowrap_functions=(), param_shapes_constant=False)
        self.model = model
        # module path -> the keys its output had on an eager run (see patcher.trace.leaf_outputs)
        self.leaf_output_keys = leaf_output_keys or {}
        self.unpacked_without_keys = False  # `**` met a leaf's output whose keys are not known
        self.iterated_a_traced_value = False  # a loop over a graph value was refused
        # wrapped function -> the settings its calls leave (see patcher.trace.wrapped_state)
        self.settled_settings = settled_settings or {}
        self.wrapped_calls_on_modules = False  # moved code that may change settings was handed a module
        # opaque calls of moved code with the items they hand back that may be None when the graph
        # runs: named by the error of a trace that fails after taking one for a value
        self.opaque_none_results: list[tuple[fx.Node, Any, list[NoneResult]]] = []
        self.decisions = decisions if decisions is not None else Decisions()
        self.none_decisions = none_decisions if none_decisions is not None else NoneDecisions()
        self.traced_modules = traced_modules
        self.target_names = target_names
        # what each call of a leaf returned in eager, in call order (see leaf_outputs.py)
        self.leaf_outputs = leaf_outputs or {}
        self._leaf_calls: dict[nn.Module, int] = {}
        # nodes made to hand on a leaf's output item by item, and whether a node kept unread still checks
        # something the trace decided on
        self._structure_nodes: list[tuple[fx.Node, bool]] = []
        self.constants: dict[str, Any] = {}
        self.module_path_stack: list[str] = []
        self.failed_module_path: str | None = None
        self.traced_through: dict[str, None] = {}  # paths of the modules walked through, in call order
        self._constant_names: dict[int, str] = {}
        # containers handed to modules the graph calls (see patcher.trace.shared_state), by identity:
        # (the container, kept alive; the node of its value now; its contents then; where first handed)
        self._states: dict[int, tuple[Any, fx.Node, Any, fx.Node]] = {}
        # devices read from `module.device` while tracing (by identity; kept alive) -> the module
        self.devices = DeviceReads(self)  # module.device reads: run-time reads in the graph
        self.sample_ranks: dict[str, int] = {}  # sample tensor -> its rank (the graph input's name)
        self.ranks_read: dict[str, int] = {}  # those that traced code read: checked at every run
        # parameter reads cached while tracing a call through: (cache, key), taken back if it fails
        self._cache_keys_added: list[tuple[dict, str]] | None = None
        # tensor and config paths from one walk of the modules, shared by the traces of one trace_graph call
        walk = walk if walk is not None else ModelWalk(model)
        self._tensor_paths = walk.tensor_paths
        # Configs are reached through the module that owns them, so graphs read `self.model.config`.
        self._config_paths = walk.config_paths

    # -- leaves ------------------------------------------------------------------------
    def is_leaf_module(self, module: nn.Module, qualified_name: str) -> bool:
        return module not in self.traced_modules

    def call_module(self, module, forward, args, kwargs):
        name = self.path_of_module(module)
        if module in self.traced_modules:
            check_traced_through(name, module)  # its hooks would be baked into the graph
            self.traced_through.setdefault(name)
        else:
            check_leaf_output_capture(name, module)  # capture hooks on/in a leaf never fire
        self.module_path_stack.append(name)
        try:
            output = super().call_module(module, forward, args, kwargs)
            if module not in self.traced_modules:
                replay_hidden_state_capture(module, args, output, self._record_call)
                output = self._as_in_eager(module, name, output)
                if isinstance(output, fx.Proxy) and name in self.leaf_output_keys:
                    output.node.meta[OUTPUT_KEYS] = self.leaf_output_keys[name]
            return output
        except Exception:
            # The stack unwinds before the error is explained: remember the innermost module.
            if self.failed_module_path is None:
                self.failed_module_path = name
            raise
        finally:
            self.module_path_stack.pop()

    def keys(self, obj: fx.Proxy):
        """``**obj``: the keys a leaf's output had on the eager run, where the trace has them."""
        keys = obj.node.meta.get(OUTPUT_KEYS)
        if keys is None:
            self.unpacked_without_keys = True
            return super().keys(obj)
        return list(keys)

    def iter(self, obj: fx.Proxy):
        """A loop over a split of a tensor (``for chunk in torch.split(x, n)``): over the sample's
        count, checked at every run (see :mod:`patcher.trace.decided_lengths`); any other is refused."""
        # Not inside an attempt to trace moved code through: the attempt is taken back when it fails, and
        # proxies of the leaves the loop called would outlive it (the loop stays in the opaque call, as before).
        if splits_a_tensor(obj.node) and self._cache_keys_added is None:
            return iter([obj[index] for index in range(self.decisions.answer_length(self, obj, check_decided_length))])
        self.iterated_a_traced_value = True
        return super().iter(obj)

    def to_bool(self, obj: fx.Proxy) -> bool:
        """A condition the patcher left to the tracer (``_decided_*``): the sample's answer, checked
        again by the graph at every run (see :mod:`patcher.trace.decisions`); any other is refused."""
        if is_decision(obj.node):
            return self.decisions.answer(self, obj)
        return super().to_bool(obj)

    def _record_call(self, function, *args):
        return self.create_proxy("call_function", function, args, {})

    def _as_in_eager(self, module: nn.Module, name: str, output: fx.Proxy) -> Any:
        """The leaf call's graph value in the structure eager returned for this call (a tuple with
        None where eager had None), checked when the graph runs; the value itself where unknown."""
        calls = self.leaf_outputs.get(module)
        if not calls:
            return output
        index = self._leaf_calls[module] = self._leaf_calls.get(module, -1) + 1
        structure = calls[index] if index < len(calls) else VALUE
        if structure == VALUE:
            return output
        checked = self.create_proxy("call_function", leaf_output_checked, (output, name, structure), {})
        self._structure_nodes.append((checked.node, holds_none(structure)))
        return structured(structure, checked, self._read_item)

    def _read_item(self, value: fx.Proxy, index: int) -> fx.Proxy:
        item = value[index]
        self._structure_nodes.append((item.node, False))
        return item

    def drop_unread_items(self, graph: fx.Graph) -> None:
        """Remove the item reads nobody used, and the checks of structures without None that
        nothing reads (every item of those was a graph value anyway)."""
        for node, decided_on in reversed(self._structure_nodes):
            if node.users or decided_on:
                continue
            references = [value for value in node.all_input_nodes if value.op == "get_attr"]
            graph.erase_node(node)
            for reference in references:
                if not reference.users:
                    graph.erase_node(reference)

    # -- values ------------------------------------------------------------------------
    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict):
        """Parameters *and buffers* read in traced code become graph reads.

        fx leaves buffers concrete by default: arithmetic on them would run once while tracing
        and be baked into the graph as a constant (a meta tensor when tracing on meta, stale
        after new weights are loaded). fx's own lookup also scans every parameter per access.
        """
        if isinstance(attr_val, torch.Tensor):
            path = self._tensor_paths.get(id(attr_val))
            if path is not None:
                proxy = parameter_proxy_cache.get(path)
                if proxy is None:
                    proxy = parameter_proxy_cache[path] = self.create_proxy("get_attr", path, (), {})
                    if self._cache_keys_added is not None:
                        self._cache_keys_added.append((parameter_proxy_cache, path))
                return proxy
        return attr_val

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return TracingProxy(node, self)

    def sample_rank(self, node: fx.Node) -> int | None:
        """The rank of the sample tensor ``node`` stands for (None: not a sample tensor), recorded
        as read: the graph refuses an input of another rank."""
        if node.op != "placeholder" or node.target not in self.sample_ranks:
            return None
        rank = self.ranks_read[node.target] = self.sample_ranks[node.target]
        return rank

    def create_proxy(self, kind, target, args, kwargs, *rest, **options):
        if kind == "call_function" and is_wrapped_name(getattr(target, "__name__", "")) and \
                any(isinstance(value, nn.Module) for value in (*args, *kwargs.values())):
            self.wrapped_calls_on_modules |= may_change_settings(target, args, kwargs)
            settled = self.settled_settings.get(target)
            if settled:
                # the code after the call is traced for the settings the call leaves on the sample
                proxy = super().create_proxy(kind, call_with_settings, (target, self.model, settled, *args),
                                             kwargs, *rest, **options)
                record_source(proxy.node)
                apply_settings(self.model, settled)
                return proxy
        if kind == "call_function" and not rest and not options:
            owner = object_given_for_attributes(target, args, kwargs)
            if owner is not None or may_return_none(target):
                traced = trace_through(self, target, args, kwargs, owner=owner)
                if traced is not NOT_TRACED_THROUGH:
                    return traced
        if kind == "call_module":
            args = tuple(self._handed(value) for value in args)
            kwargs = {key: self._handed(value) for key, value in kwargs.items()}
        proxy = super().create_proxy(kind, target, args, kwargs, *rest, **options)
        record_source(proxy.node)
        if kind == "call_function":
            if is_wrapped_name(getattr(target, "__name__", "")):
                results = none_results(target, args, kwargs)
                if results:
                    decided = self.none_decisions.apply(self, proxy, returning_function(target, args), results)
                    if decided is not proxy:
                        return decided  # None where the sample has None (see patcher.trace.none_decisions)
                    self.opaque_none_results.append((proxy.node, target, results))
            return mapping_result(target, args, kwargs, proxy)  # per-layer-type mask dicts
        return proxy

    def _reference(self, value: Any) -> fx.Node:
        """A get_attr node that returns ``value`` itself when the graph runs."""
        name = self._constant_names.get(id(value))
        if name is None:
            name = f"{CONSTANT_PREFIX}{len(self.constants)}"
            self._constant_names[id(value)] = name
            self.constants[name] = value
        return self.create_node("get_attr", name, (), {})

    def _handed(self, value: Any) -> Any:
        """An argument of a call of a module the graph calls: a container it could fill becomes the run's
        own container, copied for this call if an earlier one got it (see :mod:`patcher.trace.shared_state`)."""
        state = self._states.get(id(value))
        if state is None or state[0] is not value:
            if can_be_state(value):
                node = self.create_node("call_function", new_state, (self._reference(copy_containers(value)),), {})
            elif fillable_with_graph_values(value):
                node = self.create_node("call_function", filled_state,
                                        (self._reference(emptied(value)), self.create_arg(dict(value.items()))), {})
            else:
                return value
            record_source(node)
            self._states[id(value)] = (value, node, fingerprint(value), node)
            return self.proxy(node)
        node = self._state_now(state)
        if node.users:  # an earlier call got it and may have changed it: this call gets a copy of that
            node = self.create_node("call_function", handed_state, (node,), {})
            record_source(node)
            self._states[id(value)] = (value, node, state[2], state[3])
        return self.proxy(node)

    def _state_now(self, state: tuple[Any, fx.Node, Any, fx.Node]) -> fx.Node:
        """The node of a handed container's value at this point of the run, if the traced code left it
        as it was when the first module got it; else ``SharedStateError``."""
        value, node, contents, first = state
        if fingerprint(value) != contents:
            raise SharedStateError(changed_after_handing(value, first))
        return node

    def _message_arg(self, text: str) -> fx.Node | None:
        """A string an f-string formatted with proxies (a check's message, ``"tokens: Proxy(sum_1)"``):
        formatted again when the graph runs, with the values of those nodes (None if a name is not
        a node of the graph)."""
        pieces = _PROXY_REPR.split(text)
        names = pieces[1::2]
        nodes = {node.name: node for node in self.graph.nodes if node.name in names}
        if not names or any(name not in nodes for name in names):
            return None
        values = [self.proxy(nodes[name]) for name in names]
        return self.create_proxy("call_function", traced_message, (tuple(pieces[0::2]), *values), {}).node

    def create_arg(self, a: Any):
        if isinstance(a, fx.Proxy):
            return a.node
        state = self._states.get(id(a))
        if state is not None and state[0] is a:  # a container modules the graph calls were handed
            return self._state_now(state)
        if isinstance(a, Items):  # by reference: fx would rebuild a dataclass from its fields
            return self._reference(a)
        if type(a) in (*TRACED_THROUGH_TYPES, DecidedTuple):
            return self.create_arg(tuple(a) if isinstance(a, tuple) else dict(a))
        if isinstance(a, torch.device):
            node = self.devices.argument(a)
            if node is not None:
                return node
        if isinstance(a, str) and "Proxy(" in a:
            node = self._message_arg(a)
            if node is not None:
                return node
        if isinstance(a, nn.Module):
            if a is self.model:
                return self.create_node("get_attr", ROOT_ATTRIBUTE, (), {})
            path = self.submodule_paths.get(a) if self.submodule_paths else None
            return self.create_node("get_attr", path, (), {}) if path else self._reference(a)
        if isinstance(a, torch.Tensor):
            path = self._tensor_paths.get(id(a))
            return self.create_node("get_attr", path, (), {}) if path else self._reference(a)
        if isinstance(a, np.generic):
            # numpy scalars would be emitted as `np.float64(8.0)`, a name the graph code lacks
            return a.item()
        if isinstance(a, PretrainedConfig):
            # By reference, never rebuilt from fields: rebuilding loses _attn_implementation.
            path = self._config_paths.get(id(a))
            return self.create_node("get_attr", path, (), {}) if path else self._reference(a)
        if isinstance(a, ModelOutput):
            # fx would hand on a plain dict: code reading `.pooler_output` of a traced-through
            # tower's output (or setting it, in a wrapped function) needs the ModelOutput class.
            return self.create_node("call_function", type(a), (),
                                    {key: self.create_arg(value) for key, value in a.items()})
        try:
            return super().create_arg(a)
        except NotImplementedError:
            if _is_plain_object(a):
                return self._reference(a)
            raise



#: how a proxy formats itself in an f-string: ``Proxy(<node name>)``
_PROXY_REPR = re.compile(r"Proxy\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _is_plain_object(value: Any) -> bool:
    # Objects fx does not know (dtype-likes, enums are handled by fx itself) travel by reference.
    return not isinstance(value, (list, tuple, dict, set, fx.Proxy))


def trace_graph(
    model: nn.Module,
    sample_input: Mapping[str, Any],
    sequential_targets: ModuleEntries,
    ignore: ModuleEntries | None = None,
    unused_inputs: Iterable[str] | str = (),
) -> TracedGraph:
    """Trace ``model`` with targets and ignored modules as leaves; return the whole graph.

    ``ignore=None`` (the default) means :data:`DEFAULT_IGNORE`; pass ``[]`` to ignore nothing,
    or ``[*DEFAULT_IGNORE, ...]`` to add to the defaults. Targets and ignore entries are names
    (or ``re:`` patterns) or ``nn.Module`` subclasses (meaning their name); a single string or
    class is one entry, as is a single string for ``unused_inputs`` (see :mod:`patcher.registry.normalize`:
    an argument of another type raises ``TypeError`` naming it).

    Sample tensors (and other objects) become the graph's inputs; ``None`` and Python scalars
    (bools, ints, floats, strings) are constants of the trace, since the model decides Python
    control flow on them. The result records the inputs, constants, train/eval mode and
    structure it was traced with, and refuses runs that do not fit (see
    :class:`~patcher.trace.record.TraceRecord`). Trace in the mode you will run in.

    Every tensor of ``sample_input`` must reach the graph's output, unless ``unused_inputs``
    names it (an input the eager model does not read either).

    Raises ``TypeError`` (an argument of the wrong type), ``TargetMatchError``, ``SampleInputError``
    (also for a sample key the model does not take, a flag given as a tensor, ``use_cache=True``),
    ``TrainingModeError`` (train mode with layerdrop), ``UntraceableCodeError`` (naming file, line,
    construct and fix) or
    ``MissingTargetsError``, ``DroppedInputError`` (a sample tensor that never reaches the output; its
    subclass ``UnknownInputError``, before tracing, for an ``unused_inputs`` name the sample lacks),
    ``HookError`` (a user hook on the root or on a module traced through, or a global module hook:
    the graph cannot honour it) or ``OutputCaptureError`` (``output_hidden_states``/``output_attentions``
    collected by hooks inside modules the graph calls as a whole: the graph would return empty tuples).
    """
    walk = ModelWalk(model)  # the modules, walked once for every trace of this call (see model_walk.py)
    arguments = read_arguments(model, sample_input, sequential_targets, ignore, unused_inputs, walk)
    check_sample(model, sample_input)
    check_layerdrop(model, arguments.traced_modules)
    root = traced_root(model, sample_input)
    check_traced_through("", model)  # the graph replaces the root's forward: its hooks never run
    check_no_global_hooks()
    tracing = Tracing(model, sample_input, arguments, root, trace_once, walk=walk)
    result = traced_deciding_branches(tracing, EagerFacts())
    result = retraced_with_unpacked_keys(tracing, result)
    result = retraced_for_iterated_leaf_outputs(tracing, result)
    result = retraced_with_settled_settings(tracing, result)
    result = retraced_with_leaf_structures(tracing, result)
    check_leaf_state_unchanged(model, result.changes)
    check_no_hidden_targets(result.graph, model, arguments.targets)
    check_no_read_after_fill(result.graph, result.tracer.constants, type(model).__name__)
    check_inputs_reach_output(result.graph, sample_input, model_name=type(model).__name__,
                              unused_inputs=arguments.unused_inputs, nested=root.nested,
                              eager_ignores=lambda name: eager_ignores(model, sample_input, name))
    check_requested_outputs(result.graph, model, root.fixed)
    return recorded_graph(tracing, result)


def trace_once(tracing: Tracing, facts: EagerFacts) -> TraceResult:
    """One trace of the model with ``facts``, stopped at a branch condition not decided yet; a failure
    where ``**`` unpacked a leaf's output whose keys no eager run gave yet, else the error explained."""
    model, sample, root, traced_modules = tracing.model, tracing.sample, tracing.root, tracing.arguments.traced_modules
    tracer = SequentialTracer(model, traced_modules, set(tracing.arguments.targets), facts.leaf_outputs,
                              facts.leaf_output_keys, facts.settled_settings, tracing.decisions,
                              tracing.none_decisions, tracing.walk)
    tracer.sample_ranks = {key: value.ndim for key, value in root.graph_values(sample).items()
                           if isinstance(value, torch.Tensor)}
    tracer.traced_func_name = ROOT_FORWARD
    needed = failure = None
    with gc_paused(), preserved_model_state(model, walk=tracing.walk) as snapshot, \
            opaque_calls(model, tracing.arguments.ignore, tracing.walk.classes), \
            traced_dtype_queries(), tracer.devices.recorded(), swapped_class(model, root.traced_class), \
            decided_container_indices(tracer, lambda: tracer._cache_keys_added is None), \
            values_worked_out_mid_trace(tracing, tracer, snapshot):
        try:
            graph = tracer.trace(model)
        except DecisionNeeded as stop:
            needed = stop
        except TraceTouched:
            tracing.mid_trace_runs = False  # traced again, deciding between traces (see mid_trace_runs.py)
            return TraceResult(tracer, facts, decided_none_results=True)
        except Exception as exc:  # every failure gets a source location when one exists
            if tracer.unpacked_without_keys and facts.leaf_output_keys is None:
                # `**` of a leaf's output: its keys are known once it ran (see passes.unpacked_keys)
                return TraceResult(tracer, facts, failure=exc)
            if tracer.iterated_a_traced_value and facts.leaf_outputs is None and \
                    leaves_read_as_containers(model, tracer.graph):
                # a leaf's output, one graph value, iterated: its structure is known once it ran
                # (see passes.leaf_structures)
                return TraceResult(tracer, facts, iterated=exc)
            failure = exc
        else:
            # Leaves run later, reading their attributes then: see patcher.trace.passes.leaf_state.
            snapshot.report_changes(lambda module: module not in traced_modules)
    changes = snapshot.changes_found
    # Outside the trace (fx's patches undone, the model's state restored): modules run for real.
    # Moved code's results first: one that is None for the sample changes the path after it.
    if tracing.none_decisions.decide_pending(tracer.graph, model, root.graph_values(sample), tracer.constants,
                                             tracing.walk.modules):
        return TraceResult(tracer, facts, decided_none_results=True)
    if failure is not None:
        raise explained(failure, model, tracer, root.original_class) from failure
    if needed is not None:
        return TraceResult(tracer, facts, undecided=needed)
    tracer.drop_unread_items(graph)
    return TraceResult(tracer, facts, graph, changes)
