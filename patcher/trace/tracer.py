"""The torch.fx tracer for transformers models: sequential targets and ignored modules are leaves.

Only the ancestors of sequential targets are traced through; every other module becomes a single
``call_module`` node. That keeps attention, rotary embeddings and vision towers opaque unless a
target lives inside them, so calibration hooks on the targets see real module calls.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import difflib
import inspect
import itertools
import operator
import re
from typing import Any, Iterable, Mapping

import numpy as np
import torch
from torch import fx, nn
from transformers import PretrainedConfig
from transformers.utils import ModelOutput

from ..normalize import input_names
from ..registry.ignore import DEFAULT_IGNORE, resolve_ignore  # noqa: F401 - DEFAULT_IGNORE re-exported
from ..registry.wrapped import WRAPPED_PREFIX, is_wrapped_name
from .decisions import DecisionNeeded, Decisions, is_decision, sample_value
from .diagnose import MODEL_ERROR, diagnose, failing_code, library_class_fix, moved_none_symptom
from .graph_runtime import (CONSTANT_PREFIX, ROOT_ATTRIBUTE, TracedGraph, gc_paused, module_device, traced_message,
                            unpacked_item)
from .errors import (
    IgnoreMatchError,
    MissingTargetsError,
    SampleInputError,
    SharedStateError,
    StateChangeError,
    TargetMatchError,
    TracingError,
    TrainingModeError,
    UntraceableCodeError,
)
from .influence import eager_ignores
from .leaf_outputs import (
    VALUE,
    Items,
    eager_leaf_outputs,
    holds_none,
    leaf_output_checked,
    read_as_container,
    structured,
)
from .leaf_outputs import OUTPUT_KEYS, observed_output_keys
from .liveness import (check_inputs_reach_output, check_unused_inputs_known, describe_node, describe_source,
                       model_source, record_source)
from .hooks import (
    check_leaf_output_capture,
    check_no_global_hooks,
    check_run_time,
    check_traced_through,
    replay_hidden_state_capture,
)
from .matching import REGEX_PREFIX, ModulePattern, match_modules, parse_patterns, resolve_targets
from .opaque import callable_names, mapping_result, opaque_calls, traced_dtype_queries
from .moved_code import (NoneResult, may_return_none, moved_from, none_result_reaching, none_results, reached_children,
                         untold_targets_fix)
from .none_decisions import DecidedTuple, NoneDecisions
from .decided_lengths import check_decided_length, splits_a_tensor
from .record import TraceRecord, is_trace_constant, mode_exceptions, same_constant
from .shared_state import can_be_state, copy_containers, fingerprint, handed_state, new_state
from .state import preserved_model_state
from .wrapped_state import apply_settings, call_with_settings, may_change_settings, observe_settled_settings



class TracingProxy(fx.Proxy):
    """A proxy that also records in-place indexed assignment (``x[..., i] = y``), knows the
    rank of a sample tensor: the graph checks it at every run (``TraceRecord.tensor_ranks``), so
    code that branches on ``input_ids.ndim`` (Csm's 2-D text ids or 3-D codebook ids) is decided
    while tracing, as on a None or a Python flag; and reads the keys of a leaf's output that ``**``
    unpacks through a check of its keys when the graph runs."""

    def __setitem__(self, indices, values):
        return self.tracer.create_proxy("call_function", operator.setitem, (self, indices, values), {})

    @property
    def ndim(self):
        rank = self.tracer.sample_rank(self.node)
        return rank if rank is not None else fx.Proxy.__getattr__(self, "ndim")

    def dim(self):
        rank = self.tracer.sample_rank(self.node)
        return rank if rank is not None else fx.Proxy.__getattr__(self, "dim")()


    def __getitem__(self, key):
        keys = self.node.meta.get(OUTPUT_KEYS)
        if keys is not None and isinstance(key, str):
            return self.tracer.create_proxy("call_function", unpacked_item, (self, key, keys), {})
        return super().__getitem__(key)

class _NoNode:
    """What torch.fx's wrapper of a ``torch.fx.wrap`` function marks on a call traced through
    (it sets ``result.node.meta["is_wrapped"]``): there is no node of that call."""

    def __init__(self):
        self.meta: dict[str, Any] = {}


class _TracedThroughTuple(tuple):
    """The tuple a wrapped function traced through returned (a tuple has no ``node`` to mark)."""

    node: _NoNode


class _TracedThroughDict(dict):
    """The dict a wrapped function traced through returned."""

    node: _NoNode


_NOT_TRACED_THROUGH = object()


class _KeepOpaque(Exception):
    """A wrapped function traced through to no purpose: the attempt is taken back."""


class SequentialTracer(fx.Tracer):
    """fx tracer that stops at targets/ignored modules and keeps foreign objects by reference."""

    def __init__(self, model: nn.Module, traced_modules: set[nn.Module], target_names: set[str],
                 leaf_outputs: Mapping[nn.Module, list[Any]] | None = None,
                 leaf_output_keys: Mapping[str, tuple[str, ...]] | None = None,
                 settled_settings: Mapping[Any, Any] | None = None, decisions: Decisions | None = None,
                 none_decisions: NoneDecisions | None = None):
        super().__init__(autowrap_functions=(), param_shapes_constant=False)
        self.model = model
        # module path -> the keys its output had on an eager run (see patcher.trace.leaf_outputs)
        self.leaf_output_keys = leaf_output_keys or {}
        self.unpacked_without_keys = False  # `**` met a leaf's output whose keys are not known
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
        self._device_sources: dict[int, tuple[torch.device, nn.Module]] = {}
        self.sample_ranks: dict[str, int] = {}  # sample tensor -> its rank (the graph input's name)
        self.ranks_read: dict[str, int] = {}  # those that traced code read: checked at every run
        # parameter reads cached while tracing a call through: (cache, key), taken back if it fails
        self._cache_keys_added: list[tuple[dict, str]] | None = None
        self._tensor_paths = {id(t): name for name, t in itertools.chain(
            model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False))}
        # Configs are reached through the module that owns them, so graphs read `self.model.config`.
        self._config_paths: dict[int, str] = {}
        for name, module in model.named_modules():
            config = getattr(module, "config", None)
            if isinstance(config, PretrainedConfig) and id(config) not in self._config_paths:
                self._config_paths[id(config)] = f"{name}.config" if name else "config"

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

    def _trace_through(self, function, args: tuple, kwargs: dict) -> Any:
        """Run a wrapped function that may return None on the traced values instead of recording
        one opaque call, so that the names it sets to None are None while tracing too. Where its
        code cannot be decided while tracing (a branch on a traced value), or it returns no None
        (the opaque call's result is then decided alike by every `is None` after it), everything
        the attempt recorded is taken back and the call stays one opaque node
        (``_NOT_TRACED_THROUGH``): the graph changes only where one node would hide a None."""
        # iter(): torch before 2.13 gives reversed() an iterable, not an iterator
        last = next(iter(reversed(self.graph.nodes)), None)
        saved = (dict(self.ranks_read), dict(self.traced_through), self.failed_module_path,
                 collections.OrderedDict(self.module_stack), dict(self.num_calls), dict(self._states))
        self._cache_keys_added, outer_keys = [], self._cache_keys_added
        try:
            result = function(*args, **kwargs)
            if type(result) is tuple and any(value is None for value in result):
                result = _TracedThroughTuple(result)
            elif type(result) is dict and any(value is None for value in result.values()):
                result = _TracedThroughDict(result)
            else:  # no None to show, or a result fx cannot mark (None itself, a scalar)
                raise _KeepOpaque()
            result.node = _NoNode()
            return result
        except Exception:  # noqa: BLE001 - undecidable while tracing, or nothing gained: keep the opaque call
            added = []
            for node in reversed(self.graph.nodes):
                if node is last:
                    break
                added.append(node)
            taken_back = set(added)
            for node in added:  # newest first: a node's users are gone before it
                # fx makes the node of an attribute read (`outputs.last_hidden_state`) the first time
                # the proxy is used, and the proxy keeps it: made during the attempt from a value
                # from before it, the node is kept (reading an attribute does nothing), else code
                # after the attempt would use an erased node (Lfm2-VL's KeyError: getattr_1)
                if node.users or (node.op == "call_function" and node.target is getattr
                                  and not any(arg in taken_back for arg in node.all_input_nodes)):
                    taken_back.discard(node)
                    continue
                self.graph.erase_node(node)
            for cache, key in self._cache_keys_added:
                cache.pop(key, None)
            ranks, traced_through, self.failed_module_path, module_stack, num_calls, states = saved
            self._states = states
            self.ranks_read.clear()
            self.ranks_read.update(ranks)
            self.traced_through.clear()
            self.traced_through.update(traced_through)
            self.module_stack.clear()
            self.module_stack.update(module_stack)
            self.num_calls.clear()
            self.num_calls.update(num_calls)
            return _NOT_TRACED_THROUGH
        finally:
            if outer_keys is not None:
                outer_keys.extend(self._cache_keys_added)
            self._cache_keys_added = outer_keys

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
        if kind == "call_function" and not rest and not options and may_return_none(target):
            traced = self._trace_through(target, args, kwargs)
            if traced is not _NOT_TRACED_THROUGH:
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
                    decided = self.none_decisions.apply(self, proxy, target, results)
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
            if not can_be_state(value):
                return value
            node = self.create_node("call_function", new_state, (self._reference(copy_containers(value)),), {})
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
            raise SharedStateError(_changed_after_handing(value, first))
        return node

    def module_device_read(self, module: nn.Module, device: Any) -> Any:
        """``module.device`` read by traced code: a fresh ``torch.device`` object whose identity
        remembers the module, so that an argument made of it becomes a run-time read
        (:func:`~patcher.trace.graph_runtime.module_device`). Python code deciding on it
        (``device.type == "cuda"``) still sees the concrete device."""
        if not isinstance(device, torch.device):
            return device
        device = torch.device(device)
        self._device_sources[id(device)] = (device, module)
        return device

    def _device_arg(self, device: torch.device) -> fx.Node | None:
        """A device the graph must not bake: one read from ``module.device`` (the module's device
        when the graph runs), or ``meta`` (the device of a model traced on meta, read another way,
        e.g. ``next(self.parameters()).device``: the model's device when the graph runs)."""
        source = self._device_sources.get(id(device))
        if source is not None and source[0] is device:
            module = source[1]
        elif device.type == "meta":
            module = self.model
        else:
            return None
        return self.create_proxy("call_function", module_device, (module,), {}).node

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
        if type(a) in (_TracedThroughTuple, _TracedThroughDict, DecidedTuple):
            return self.create_arg(tuple(a) if isinstance(a, tuple) else dict(a))
        if isinstance(a, torch.device):
            node = self._device_arg(a)
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


def _changed_after_handing(value: Any, first: fx.Node) -> str:
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


#: how a proxy formats itself in an f-string: ``Proxy(<node name>)``
_PROXY_REPR = re.compile(r"Proxy\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _is_plain_object(value: Any) -> bool:
    # Objects fx does not know (dtype-likes, enums are handled by fx itself) travel by reference.
    return not isinstance(value, (list, tuple, dict, set, fx.Proxy))


def _forward_parameters(model: nn.Module) -> tuple[Any, inspect.Signature]:
    forward = inspect.unwrap(type(model).forward)
    return forward, inspect.signature(forward)


#: Flags the forward decides Python control flow on: they must be Python values in the sample.
FLAGS = ("use_cache", "return_dict", "output_attentions", "output_hidden_states", "output_router_logits")


def _kwargs_names(model: nn.Module) -> set[str]:
    """Keys a forward's ``**kwargs`` legitimately takes: transformers' typed kwargs
    (``TransformersKwargs``, ``FlashAttentionKwargs``, any ``Unpack[...]`` annotation of a forward
    in the model) and the named parameters of the forwards of the model's modules (a wrapper's
    ``**kwargs`` reach them)."""
    import typing

    from transformers.utils.generic import TransformersKwargs

    names: set[str] = set(_typed_dict_keys(TransformersKwargs))
    try:
        from transformers.modeling_flash_attention_utils import FlashAttentionKwargs

        names |= _typed_dict_keys(FlashAttentionKwargs)
    except ImportError:  # pragma: no cover - older transformers
        pass
    for cls in {type(module) for module in model.modules()}:
        try:
            params = inspect.signature(inspect.unwrap(cls.forward)).parameters.values()
        except (TypeError, ValueError):
            continue
        for param in params:
            if param.kind is param.VAR_KEYWORD:
                annotation = param.annotation
                if isinstance(annotation, str) and "Unpack[" in annotation:
                    try:
                        annotation = typing.get_type_hints(inspect.unwrap(cls.forward)).get(param.name)
                    except Exception:  # noqa: BLE001 - unresolvable annotations: nothing to add
                        annotation = None
                for argument in typing.get_args(annotation) or ():
                    names |= _typed_dict_keys(argument)
            elif param.kind is not param.VAR_POSITIONAL:
                names.add(param.name)
    names.discard("self")
    return names


def _typed_dict_keys(cls: Any) -> set[str]:
    keys: set[str] = set()
    for base in getattr(cls, "__mro__", ()):
        keys |= set(getattr(base, "__annotations__", {}) or {})
    return keys if hasattr(cls, "__total__") else set()


def sample_keys_not_taken(model: nn.Module, sample: Mapping[str, Any]) -> list[str]:
    """The keys of ``sample`` that ``model``'s forward cannot receive, which tracing refuses: not a
    parameter of its forward and, where the forward has ``**kwargs``, not a name that any module of
    the model takes through them (a typo, or an input nothing reads).

    A default sample built from a config (``patcher.samples.sample_input``, the coverage sweep's)
    drops these, e.g. ``attention_mask`` for xLSTM, whose forward has none; a user's own sample is
    refused with a message instead.

    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    >>> sample_keys_not_taken(model, {"input_ids": None, "attention_mask": None, "attenton_mask": None})
    ['attenton_mask']
    """
    return _keys_not_taken(model, _forward_parameters(model)[1], sample)


def _named_parameters(signature: inspect.Signature) -> tuple[set[str], bool]:
    """The forward's parameter names (self dropped), and whether it has ``**kwargs``."""
    params = list(signature.parameters.values())[1:]  # drop self
    names = {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def _keys_not_taken(model: nn.Module, signature: inspect.Signature, sample: Mapping[str, Any]) -> list[str]:
    names, accepts_kwargs = _named_parameters(signature)
    unknown = [key for key in sample if key not in names]
    if not unknown or not accepts_kwargs:
        return unknown
    # **kwargs takes anything, so a typo (`attenton_mask`) would become an input nothing reads
    known = _kwargs_names(model)
    return [key for key in unknown if key not in known]


def deprecated_keywords(function: Any) -> dict[str, str | None]:
    """Old keyword -> new name (``None``: dropped) of transformers' ``@deprecate_kwarg`` wrappers
    around ``function``. The tracer traces the unwrapped forward, so an old name in the sample
    would reach no parameter, while eager renames it (Fuyu's ``image_patches`` -> ``pixel_values``).

    >>> from transformers.utils.deprecation import deprecate_kwarg
    >>> @deprecate_kwarg("image_patches", version="v99", new_name="pixel_values")  # as Fuyu's, in 5.23
    ... def forward(self, pixel_values=None):
    ...     return pixel_values
    >>> deprecated_keywords(forward)
    {'image_patches': 'pixel_values'}
    """
    found: dict[str, str | None] = {}
    while callable(function):
        code = getattr(function, "__code__", None)
        cells = {}
        for name, cell in zip(code.co_freevars if code else (), getattr(function, "__closure__", None) or ()):
            try:
                cells[name] = cell.cell_contents
            except ValueError:  # an empty cell
                pass
        if isinstance(cells.get("old_name"), str) and "new_name" in cells:
            found[cells["old_name"]] = cells["new_name"]
        function = getattr(function, "__wrapped__", None)
    return found


def _validate_sample(model: nn.Module, signature: inspect.Signature, sample: Mapping[str, Any]) -> None:
    names, accepts_kwargs = _named_parameters(signature)
    # Eager renames a deprecated keyword before the forward's body sees it; the tracer binds the
    # sample to the body itself, where the old name may still be a parameter that nothing reads.
    renamed = deprecated_keywords(type(model).forward)
    for key in sample:
        if renamed.get(key) is not None:
            raise SampleInputError(
                f"sample input {key!r} is a deprecated name: {type(model).__name__}.forward renames it to "
                f"{renamed[key]!r} (transformers' @deprecate_kwarg) and reads it under that name; use "
                f"{renamed[key]!r} in the sample and in every input you run the graph with")
    refused = _keys_not_taken(model, signature, sample)
    if refused and not accepts_kwargs:
        raise SampleInputError(
            f"sample input has {', '.join(map(repr, refused))}, which {type(model).__name__}.forward "
            f"does not accept; it takes: {', '.join(sorted(names))}"
        )
    if refused:
        known = _kwargs_names(model)
        lines = [f"sample input has {', '.join(map(repr, refused))}, which {type(model).__name__}.forward "
                 "does not name and no module of the model takes through **kwargs; it would be an input "
                 "nothing reads (a silent wrong result)."]
        for key in refused:
            close = difflib.get_close_matches(key, sorted(names | known), n=1)
            if close:
                lines.append(f"  {key!r}: did you mean {close[0]!r}?")
        lines.append(f"  {type(model).__name__}.forward takes: {', '.join(sorted(names))}")
        raise SampleInputError("\n".join(lines))
    for key in sample:
        if not key.isidentifier():
            raise SampleInputError(f"sample input key {key!r} is not a valid Python identifier")
    for key in FLAGS:
        if isinstance(sample.get(key), torch.Tensor):
            raise SampleInputError(
                f"sample input {key!r} is a tensor; {key} is a flag the forward decides Python control flow "
                f"on, so it must be a Python bool (or None) in the sample, e.g. {key}=False"
            )
    if sample.get("use_cache") is True:
        raise SampleInputError(
            "sample input use_cache=True is not supported: the cache the forward creates while tracing would be "
            "baked into the graph as a constant, shared and grown by every run (wrong logits from the second run "
            "on). Trace and run with use_cache=False (tracezoo's default when the sample leaves it out)."
        )
    missing = [
        p.name
        for p in list(signature.parameters.values())[1:]
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in sample
    ]
    if missing:
        raise SampleInputError(
            f"sample input is missing required input(s) {', '.join(map(repr, missing))} of "
            f"{type(model).__name__}.forward; give them in the sample"
        )


def _check_layerdrop(model: nn.Module, traced_modules: set[nn.Module]) -> None:
    """Layerdrop throws dice in Python while tracing (`torch.rand([]) < self.layerdrop`): the graph
    would keep the layers of one throw for ever."""
    if not any(module.training for module in traced_modules):
        return
    found = []
    configs = {id(module.config): module.config for module in traced_modules
               if isinstance(getattr(module, "config", None), PretrainedConfig)}
    stack = list(configs.values())
    while stack:
        config = stack.pop()
        for key, value in vars(config).items():
            if isinstance(value, PretrainedConfig) and id(value) not in configs:
                configs[id(value)] = value
                stack.append(value)
            elif key.endswith("layerdrop") and isinstance(value, (int, float)) and value > 0:
                found.append(f"config.{key}={value}")
    for module in traced_modules:
        value = vars(module).get("layerdrop")
        if module.training and isinstance(value, (int, float)) and value > 0:
            found.append(f"{type(module).__name__}.layerdrop={value}")
    if found:
        raise TrainingModeError(
            f"{type(model).__name__} is in train mode with layerdrop ({', '.join(sorted(set(found)))}): "
            "which layers run is drawn at random in Python while tracing, so the graph would keep the layers "
            "of this one draw and skip the others every time it runs. Trace in eval mode (model.eval(); "
            "calibration runs in eval mode), or set layerdrop to 0."
        )


def _root_function(forward, signature: inspect.Signature, placeholders: list[str], fixed: dict[str, Any]):
    """Build ``root(self, <placeholders>)`` calling the unwrapped forward with fixed extras.

    fx reads the root's parameters from its code object, so this must be a real function with
    exactly the sample's names; decorated forwards (``can_return_tuple``) would make fx patch
    the wrapper's code object and fail ("co_varnames is too small").
    """
    params = ", ".join(["self", *placeholders])
    kwargs = ", ".join(f"{name}={name}" for name in placeholders)
    source = (
        f"def _tracezoo_root_forward({params}):\n"
        f"    return _normalize_output(_forward(self, {kwargs}{', ' if kwargs else ''}**_fixed))\n"
    )
    namespace = {"_forward": forward, "_fixed": fixed, "_normalize_output": _normalize_output}
    exec(compile(source, "<tracezoo-root>", "exec"), namespace)
    return namespace["_tracezoo_root_forward"]


def _normalize_output(output):
    if isinstance(output, ModelOutput):
        return {key: value for key, value in output.items()}
    if isinstance(output, Mapping):
        return dict(output)
    if isinstance(output, tuple):
        return {f"output_{index}": value for index, value in enumerate(output)}
    return {"output": output}


def _ancestors(model: nn.Module, names: Iterable[str]) -> set[nn.Module]:
    modules = dict(model.named_modules(remove_duplicate=False))
    ancestors = {model}
    for name in names:
        parts = name.split(".")
        for cut in range(1, len(parts)):
            ancestors.add(modules[".".join(parts[:cut])])
    return ancestors


def trace_graph(
    model: nn.Module,
    sample_input: Mapping[str, Any],
    sequential_targets: Iterable[str | type] | str | type,
    ignore: Iterable[str | type] | str | type | None = None,
    unused_inputs: Iterable[str] | str = (),
) -> TracedGraph:
    """Trace ``model`` with targets and ignored modules as leaves; return the whole graph.

    ``ignore=None`` (the default) means :data:`DEFAULT_IGNORE`; pass ``[]`` to ignore nothing,
    or ``[*DEFAULT_IGNORE, ...]`` to add to the defaults. Targets and ignore entries are names
    (or ``re:`` patterns) or ``nn.Module`` subclasses (meaning their name); a single string or
    class is one entry, as is a single string for ``unused_inputs`` (see :mod:`patcher.normalize`:
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
    unused_inputs = input_names(unused_inputs, "unused_inputs")
    check_unused_inputs_known(sample_input, unused_inputs)
    ignore = resolve_ignore(ignore)
    targets = resolve_targets(model, sequential_targets)
    ignored_modules, ignore_hits = match_modules(model, parse_patterns(ignore))
    _check_ignore_matches(model, ignore_hits)
    _check_targets_not_ignored(targets, ignored_modules)
    traced_modules = _ancestors(model, targets) - set(ignored_modules.values()) - set(targets.values())
    if model in ignored_modules.values():
        raise TargetMatchError("the root model itself matches an ignore entry; nothing would be traced")

    forward, signature = _forward_parameters(model)
    _validate_sample(model, signature, sample_input)
    _check_layerdrop(model, traced_modules)
    # None, bools, ints, floats and strings are constants of the trace: the model decides Python
    # control flow on them (`isinstance(logits_to_keep, int)`), so they are never graph inputs.
    placeholders = [key for key, value in sample_input.items() if not is_trace_constant(value)]
    fixed = {key: value for key, value in sample_input.items() if is_trace_constant(value)}
    omittable = {key for key, value in fixed.items() if _omitting_means(signature, key, value)}
    for flag, value in (("use_cache", False), ("return_dict", True)):
        if flag in signature.parameters and flag not in sample_input:
            fixed[flag] = value
            omittable.add(flag)
    root_forward = _root_function(forward, signature, placeholders, fixed)

    check_traced_through("", model)  # the graph replaces the root's forward: its hooks never run
    check_no_global_hooks()
    original_class = type(model)
    traced_class = type(original_class.__name__, (original_class,), {"_tracezoo_root_forward": root_forward})
    decisions = Decisions()
    none_decisions = NoneDecisions()

    def traced(leaf_outputs=None, leaf_output_keys=None, settled_settings=None):
        decisions.restart()
        none_decisions.restart()
        while True:  # once, plus once more per condition decided from the sample (see .decisions, .none_decisions)
            tracer = SequentialTracer(model, traced_modules, set(targets), leaf_outputs, leaf_output_keys,
                                      settled_settings, decisions, none_decisions)
            tracer.sample_ranks = {key: sample_input[key].ndim for key in placeholders
                                   if isinstance(sample_input[key], torch.Tensor)}
            tracer.traced_func_name = "_tracezoo_root_forward"
            needed = failure = None
            with gc_paused(), preserved_model_state(model) as snapshot, opaque_calls(model, ignore), \
                    traced_dtype_queries(), _recorded_module_devices(tracer), _swapped_class(model, traced_class):
                try:
                    graph = tracer.trace(model)
                except DecisionNeeded as stop:
                    needed = stop
                except Exception as exc:  # every failure gets a source location when one exists
                    if tracer.unpacked_without_keys and leaf_output_keys is None:
                        return tracer, None, exc  # `**` of a leaf's output: its keys are known once it ran
                    failure = exc
                else:
                    # Leaves run later, reading their attributes then: a write made while tracing is
                    # undone below, so the graph would silently run them in the state from before it.
                    changes = snapshot.changes(module for module in snapshot.names if module not in traced_modules)
            # Outside the trace (fx's patches undone, the model's state restored): modules run for real.
            # Moved code's results first: one that is None for the sample changes the path after it.
            if none_decisions.decide_pending(tracer.graph, model, sample_input, tracer.constants):
                decisions.restart()
                none_decisions.restart()
                continue
            if failure is not None:
                raise _explain(failure, model, tracer, original_class) from failure
            if needed is None:
                break
            decisions.add(sample_value(tracer.graph, needed.node, model, sample_input, tracer.constants, needed.measure))
            decisions.restart()
            none_decisions.restart()
        tracer.drop_unread_items(graph)
        return tracer, graph, changes

    leaf_output_keys = settled_settings = None
    tracer, graph, leaf_changes = traced()
    if graph is None:
        # `**` of a leaf's output: its keys exist only once it ran, so run once and trace again
        leaf_output_keys = _observed_leaf_keys(model, sample_input, fixed, traced_modules, leaf_changes, tracer)
        tracer, graph, leaf_changes = traced(None, leaf_output_keys)
    if tracer.wrapped_calls_on_modules:
        # moved code the trace did not run may switch the model on this sample: trace for the switch
        settled_settings = _observed_settings(model, sample_input, fixed, traced_modules)
        if settled_settings:
            tracer, graph, leaf_changes = traced(None, leaf_output_keys, settled_settings)
    # Items read from a leaf's output were each one graph value, also where eager has None: decided
    # on, they take the branch eager does not. Known from one eager run, the trace is redone with them.
    containers = [model.get_submodule(node.target) for node in graph.find_nodes(op="call_module")
                  if read_as_container(node)]
    if containers and not leaf_changes:
        leaf_outputs = eager_leaf_outputs(model, sample_input, fixed, dict.fromkeys(containers))
        if leaf_outputs and any(structure != VALUE for calls in leaf_outputs.values() for structure in calls):
            tracer, graph, leaf_changes = traced(leaf_outputs, leaf_output_keys, settled_settings)
    if leaf_changes:
        raise StateChangeError(
            f"tracing {type(model).__name__} changed {len(leaf_changes)} attribute(s) of modules that run "
            f"later as single calls: {'; '.join(leaf_changes[:5])}{' ...' if len(leaf_changes) > 5 else ''}. "
            "The graph would run them without that change (a silent wrong result). Put the model in that state "
            "before tracing (e.g. call the setter the forward calls), or make the forward not write module state.",
            leaf_changes,
        )
    _check_no_hidden_targets(graph, model, targets)
    check_inputs_reach_output(graph, sample_input, model_name=type(model).__name__, unused_inputs=unused_inputs,
                              eager_ignores=lambda name: eager_ignores(model, sample_input, name))
    _check_requested_outputs(graph, model, fixed)
    record = TraceRecord(
        model_class=original_class.__name__,
        tensor_inputs=tuple(placeholders),
        constants=dict(fixed),
        omittable=frozenset(omittable),
        training=model.training,
        training_exceptions=mode_exceptions(model),
        children={name: tuple(module._modules) for name, module in model.named_modules() if module in traced_modules},
        tensor_shapes=_tensor_shapes(graph, model, tracer),
        tensor_ranks=dict(tracer.ranks_read),
    )
    return TracedGraph(graph=graph, input_names=placeholders, constants=tracer.constants,
                       target_names=list(targets), record=record,
                       traced_through=["", *tracer.traced_through])


#: Flags asking for extra outputs -> the output they fill (hidden states and attentions are
#: checked before tracing, by ``hooks.check_leaf_output_capture``).
REQUESTED_OUTPUTS = {"output_router_logits": "router_logits"}


def _check_requested_outputs(graph: fx.Graph, model: nn.Module, fixed: Mapping[str, Any]) -> None:
    """A flag set to True whose output the graph leaves empty: transformers collects these with
    hooks of a decorator the trace does not run, so the graph would return nothing for them."""
    output = next(iter(graph.find_nodes(op="output")), None)
    result = output.args[0] if output is not None and output.args else None
    if not isinstance(result, dict):
        return
    for flag, key in REQUESTED_OUTPUTS.items():
        if fixed.get(flag) is True and key in result and result[key] in (None, ()):
            raise SampleInputError(
                f"sample input {flag}=True is not supported for {type(model).__name__}: the traced graph returns "
                f"no {key} (transformers collects them with hooks the trace does not run), so {key!r} would be "
                f"empty. Trace without {flag}, and record {key} with hooks on the modules if you need them."
            )


def _observed_leaf_keys(model: nn.Module, sample_input: Mapping[str, Any], fixed: Mapping[str, Any],
                        traced_modules: set[nn.Module], failure: Exception, tracer: SequentialTracer):
    """The keys of the leaves' outputs on one eager run; the trace's own failure where that run fails
    (a model that cannot run on this sample, e.g. on meta), since it names the line that unpacks."""
    leaves = [module for module in model.modules() if module not in traced_modules]
    try:
        return observed_output_keys(model, sample_input, fixed, leaves)
    except Exception as exc:  # noqa: BLE001 - the untraceable line is the better message
        raise _explain(failure, model, tracer) from exc


def _observed_settings(model: nn.Module, sample_input: Mapping[str, Any], fixed: Mapping[str, Any],
                       traced_modules: set[nn.Module]):
    """The settings wrapped functions change on one eager run; none where that run fails (the graph's
    guard then refuses any change when it runs, as without this)."""
    try:
        return observe_settled_settings(model, sample_input, fixed, traced_modules)
    except Exception:  # noqa: BLE001 - e.g. a model on meta: nothing replayed, every change refused
        return {}


def _omitting_means(signature: inspect.Signature, key: str, value: Any) -> bool:
    """Leaving ``key`` out at run time means the same as ``value`` (the forward's default)."""
    param = signature.parameters.get(key)
    if param is None or param.default is param.empty:
        return value is None or value is False  # through **kwargs: absent reads as None/False
    return same_constant(param.default, value)


def _tensor_shapes(graph: fx.Graph, model: nn.Module, tracer: SequentialTracer) -> dict[str, tuple[int, ...]]:
    """Shapes of the tensors the graph reads directly and of the direct parameters of the modules
    it calls: a model of other sizes (hidden size, vocabulary) does not fit the graph's constants."""
    shapes: dict[str, tuple[int, ...]] = {}
    tensor_paths = set(tracer._tensor_paths.values())
    for node in graph.find_nodes(op="get_attr"):
        if node.target in tensor_paths:
            value = _resolve(model, node.target)
            if isinstance(value, torch.Tensor):
                shapes[node.target] = tuple(value.shape)
    for node in graph.find_nodes(op="call_module"):
        module = _resolve(model, node.target)
        if isinstance(module, nn.Module):
            for name, parameter in module.named_parameters(recurse=False):
                shapes[f"{node.target}.{name}"] = tuple(parameter.shape)
    return shapes


@contextlib.contextmanager
def _recorded_module_devices(tracer: SequentialTracer):
    """While tracing, ``module.device`` (transformers' ``ModuleUtilsMixin.device``, read by e.g.
    ``inputs_embeds.to(self.device)``) is recorded as a run-time read instead of being baked: a model
    traced on meta would otherwise move values to the meta device when its graph runs."""
    from transformers.modeling_utils import ModuleUtilsMixin

    original = ModuleUtilsMixin.__dict__["device"]

    def device(module):
        return tracer.module_device_read(module, original.__get__(module))

    ModuleUtilsMixin.device = property(device, doc=original.__doc__)
    try:
        yield
    finally:
        ModuleUtilsMixin.device = original


@contextlib.contextmanager
def _swapped_class(model: nn.Module, cls: type):
    # fx reads the traced function from type(root); a per-instance subclass avoids touching
    # the model's real class, which other instances share.
    original = type(model)
    object.__setattr__(model, "__class__", cls)
    try:
        yield
    finally:
        object.__setattr__(model, "__class__", original)


def _explain(exc: Exception, model: nn.Module, tracer: SequentialTracer, model_class: type | None = None) -> Exception:
    """``exc`` as the error a user can act on: the construct, its line and the fix. ``model_class``:
    the model's own class (while tracing, ``type(model)`` is the tracer's subclass of it)."""
    if isinstance(exc, TracingError):  # already says what to do (sample, targets, hooks)
        return exc
    model_class = model_class or type(model)
    module_path = tracer.failed_module_path or ""
    construct = diagnose(exc, module_path)
    if construct is None:
        return exc
    header = f"could not trace {model_class.__name__}:"
    if construct.symptom is MODEL_ERROR:
        moved_none = _moved_none(exc, construct, tracer)
        if moved_none is not None:
            construct = dataclasses.replace(construct, symptom=moved_none)
            return UntraceableCodeError(f"{header}\n{construct.describe()}", construct)
        message = f"{header} {construct.symptom.name}\n{construct.describe()}\n" \
                  "  note: this often means the sample input lacks an input the model needs"
        return SampleInputError(message) if isinstance(exc, ValueError) else UntraceableCodeError(message, construct)
    return UntraceableCodeError(f"{header}\n{construct.describe(library_class_fix(model_class, construct))}", construct)


def _moved_none(exc: Exception, construct, tracer: SequentialTracer):
    """The symptom when the failing function took a value of an opaque call of moved code for not
    None, a value that is None when the model runs (None when no such value reaches it)."""
    code = failing_code(exc, construct) if tracer.opaque_none_results else None
    found = none_result_reaching(tracer.opaque_none_results, code) if code is not None else None
    if found is None:
        return None
    function, result = found
    return moved_none_symptom(result.name, function.__name__, moved_from(function), result.why)


def _check_ignore_matches(model: nn.Module, hits: Mapping[ModulePattern, int]) -> None:
    """Every ignore entry beyond the defaults keeps something opaque: a module (by class name or
    ``re:`` pattern) or a function or method the model's code can call. The defaults name every
    model's helpers and so match nothing in most models; an entry of the caller's that matches
    nothing is a misspelling (``create_causal_mak``) that would be accepted without a word."""
    unmatched = [pattern for pattern, count in hits.items() if count == 0 and pattern.text not in DEFAULT_IGNORE]
    if not unmatched:
        return
    functions = callable_names(model)
    unmatched = [pattern for pattern in unmatched if pattern.regex is not None or pattern.text not in functions]
    if not unmatched:
        return
    classes = {type(module).__name__ for module in model.modules()}
    module_names = [name for name, _ in model.named_modules() if name]
    lines = []
    for pattern in unmatched:
        if pattern.regex is not None:
            wanted, candidates = pattern.text[len(REGEX_PREFIX):].replace("\\", ""), module_names
        else:
            wanted, candidates = pattern.text, sorted(classes | functions)
        close = difflib.get_close_matches(wanted, candidates, n=1)
        lines.append(f"ignore entry '{pattern.text}' matches no {'module name' if pattern.regex else 'module class, function or method'} "
                     f"of {type(model).__name__}, so it keeps nothing opaque"
                     + (f"; did you mean '{REGEX_PREFIX + re.escape(close[0]) if pattern.regex else close[0]}'?" if close else ""))
    lines.append("Entries are module class names, 're:' + a regex matching whole module names, or names of functions "
                 "and methods the model's code calls; fix the entry or remove it.")
    raise IgnoreMatchError("\n".join(lines), [pattern.text for pattern in unmatched])


def _check_targets_not_ignored(targets: dict[str, nn.Module], ignored: dict[str, nn.Module]) -> None:
    if not ignored:
        return
    swallowed = []
    for name in targets:
        parts = name.split(".")
        for cut in range(1, len(parts) + 1):
            prefix = ".".join(parts[:cut])
            if prefix in ignored:
                swallowed.append((name, prefix))
                break
    if swallowed:
        missing = [name for name, _ in swallowed]
        detail = ", ".join(f"{name} (inside ignored '{prefix}')" for name, prefix in swallowed[:10])
        raise MissingTargetsError(
            f"{len(missing)} sequential target(s) lie inside ignored modules and would be swallowed: {detail}. "
            "Remove the ignore entry or narrow it.",
            missing,
        )


def _check_no_hidden_targets(graph: fx.Graph, model: nn.Module, targets: dict[str, nn.Module]) -> None:
    """Targets passed into opaque calls (or inside leaf modules) never get their own subgraph.

    Linear: only targets that were never called are looked at, each by walking up its own name.
    """
    called = {node.target for node in graph.find_nodes(op="call_module") if node.target in targets}
    uncalled = [name for name in targets if name not in called]
    if not uncalled:
        return
    # Module references that could hide a target: leaves called, and modules handed to opaque calls.
    holders: dict[str, str] = {}
    for node in graph.find_nodes(op="call_module"):
        if node.target not in targets:
            holders.setdefault(node.target, f"module '{node.target}'")
    handed: dict[str, set[str]] = {}  # path -> the calls a module there is handed to
    functions: dict[str, Any] = {}  # name -> the function of a call a module is handed to
    for node in graph.find_nodes(op="get_attr"):
        path = "" if node.target == ROOT_ATTRIBUTE else node.target
        module = model if not path else _resolve(model, path)
        if path in holders or not isinstance(module, nn.Module):
            continue
        if not node.users:
            handed.setdefault(path, set()).add("an opaque call")
        for user in node.users:
            how = getattr(user.target, "__name__", str(user.target))
            functions.setdefault(how, user.target)
            # moved code that reads only some children of the module reaches only their subtrees
            children = reached_children(user, node, module)
            for reached in [path] if children is None else [f"{path}.{child}" if path else child
                                                            for child in children]:
                handed.setdefault(reached, set()).add(how)
    for path, hows in handed.items():
        holders.setdefault(path, ", ".join(sorted(hows)))
    hidden: dict[str, str] = {}
    for name in uncalled:
        parts = name.split(".")
        for cut in range(len(parts), -1, -1):
            prefix = ".".join(parts[:cut])
            if prefix in holders:
                hidden[name] = holders[prefix]
                break
    if hidden:
        missing = sorted(hidden)
        detail = "; ".join(f"{name} (swallowed by {how})" for name, how in list(hidden.items())[:10])
        moved = sorted({how for how in hidden.values() if how.startswith(WRAPPED_PREFIX + "_")})
        fix = ("Each target must be called directly by traced code. Remove the function or module that "
               "swallows them from `ignore`, or rewrite it with the patcher.")
        if moved:
            # The rewriter keeps targets out of the code it moves only where it sees them: classes
            # defined in another modeling file (a vision tower's blocks) it cannot follow.
            fix = (f"{', '.join(moved)} is code the patcher moved out of the model's forward (a branch on a "
                   "traced value around the call that reaches these targets, which are defined in another "
                   "modeling file). Leave these targets out (e.g. the tower's blocks: the tower then runs "
                   "whole inside that call), or cut at targets the branch does not reach.")
            fix = untold_targets_fix(model, [functions[how] for how in moved if how in functions],
                                     [targets[name] for name in missing]) or fix
        raise MissingTargetsError(
            f"{len(missing)} sequential target(s) are missing from the graph: {detail}. {fix}",
            missing,
        )


def _resolve(model: nn.Module, target: str):
    value: Any = model
    for part in target.split("."):
        value = getattr(value, part, None)
    return value
