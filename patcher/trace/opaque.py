"""Keep named functions and methods as single opaque graph nodes while tracing.

``ignore`` names functions (``create_causal_mask``) and methods (``get_rope_index``) whose
bodies must not be traced. For the duration of a trace, every modeling module that the model's
classes come from has those globals replaced with a wrapper, and every class that defines such a
method gets a wrapper method. A wrapper called with any proxy argument records one node; called
with concrete values it just runs the original.

Configs and modules reaching these calls are passed by reference (see ``SequentialTracer``):
rebuilding a config from its fields drops ``_attn_implementation`` and silently removes the
causal mask.

Some opaque calls return one mask *per attention type*, and model code then tests
``isinstance(mask, dict)`` to skip building masks again. A single node would fail that test
while tracing (a proxy is no dict) although the value is a dict when the graph runs, so the
traced graph would build masks from a dict. For those calls (:data:`MAPPING_OUTPUTS`) the tracer
returns a real dict of one graph value per key; a key missing at run time raises ``KeyError``
instead of computing something else.

Some opaque calls have a result that the trace already decides (:data:`PYTHON_RESULT_WHEN`):
``get_max_seqlen`` is None unless flash attention is requested. Those run for real while
tracing, so tests such as ``is not None`` on their result see the value the graph will see.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import types
from typing import Any, Container, Iterable, Iterator

from torch import fx, nn
from torch.utils import _pytree as pytree

from ..registry.wrapped import is_wrapped_name


def _vision_mask_keys(args: tuple, kwargs: dict) -> tuple[str, ...]:
    return ("full_attention", "sliding_attention")  # the two masks Gemma3's builder always returns


def _generate_mask_keys(args: tuple, kwargs: dict) -> tuple[str, ...] | None:
    """Keys of ``create_masks_for_generate``: one per layer type, when every type has a builder;
    otherwise it returns a single mask (or the raw attention mask)."""
    from transformers import masking_utils

    config = kwargs.get("config", args[0] if args else None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text_config, "layer_types", None)
    builders = getattr(masking_utils, "LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING", {})
    if not layer_types or any(layer_type not in builders for layer_type in layer_types):
        return None
    return tuple(dict.fromkeys(layer_types))


#: Opaque callee name -> the keys of the dict it returns, from the call's arguments (None: not a dict).
MAPPING_OUTPUTS: dict[str, Any] = {
    "create_masks_for_vision_model": _vision_mask_keys,
    "create_masks_for_generate": _generate_mask_keys,
}


def _max_seqlen_is_none(original, args: tuple, kwargs: dict) -> bool:
    """``get_max_seqlen(cu_seqlens, config, kwargs)`` is None, without reading ``cu_seqlens``, unless
    flash attention is requested or the caller's kwargs carry the length: both are known while
    tracing. As one graph node its None would be a proxy, and the caller's ``if max_seqlens is not
    None: max_seqlens // 4`` (MiniCPM-V's vision tower) would be decided True and fail at run time."""
    from transformers.utils.generic import is_flash_attention_requested

    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return False
    bound.apply_defaults()
    config, call_kwargs = bound.arguments.get("config"), bound.arguments.get("kwargs")
    precomputed = call_kwargs.get(bound.arguments.get("kwarg_name")) if isinstance(call_kwargs, dict) else None
    try:
        return precomputed is None and not is_flash_attention_requested(config)
    except Exception:  # noqa: BLE001  (no usable config: keep the call as a node)
        return False


#: Opaque callee name -> whether a call with these arguments gives its Python result while tracing
#: (the real function runs then, never reading the traced values it is handed), not a graph node.
PYTHON_RESULT_WHEN: dict[str, Any] = {
    "get_max_seqlen": _max_seqlen_is_none,
}


def _callee_names(target: Any) -> set[str]:
    name = getattr(target, "__name__", None)
    if name is None:
        return set()
    if is_wrapped_name(name):
        # a patcher forwarder (`_wrapped_f(*args, **kwargs)` calling `f`): the callee is in its code
        return {name, *getattr(getattr(target, "__code__", None), "co_names", ())}
    return {name}


class TracedMapping(dict):
    """The traced result of a call returning a dict: one graph value per key. ``node`` is the
    call's node, as on a proxy (``torch.fx.wrap`` marks the node of every wrapped call)."""

    def __init__(self, proxy: fx.Proxy, keys: Iterable[str]):
        super().__init__((key, proxy[key]) for key in keys)
        self.node = proxy.node


def mapping_result(target: Any, args: tuple, kwargs: dict, proxy: fx.Proxy) -> Any:
    """``proxy``, or a :class:`TracedMapping` when ``target`` is known to return a dict."""
    for name in _callee_names(target) & MAPPING_OUTPUTS.keys():
        keys = MAPPING_OUTPUTS[name](args, kwargs)
        if keys is not None:
            return TracedMapping(proxy, keys)
    return proxy


def _find_proxy(args: tuple, kwargs: dict) -> fx.Proxy | None:
    found = None

    def visit(value: Any) -> None:
        nonlocal found
        if found is None and isinstance(value, fx.Proxy):
            found = value

    pytree.tree_map_(visit, (args, kwargs), is_leaf=lambda value: isinstance(value, fx.Proxy))
    return found


def _opaque_function(original):
    python_result_when = PYTHON_RESULT_WHEN.get(original.__name__)

    @functools.wraps(original)
    def opaque(*args, **kwargs):
        proxy = _find_proxy(args, kwargs)
        if proxy is None or (python_result_when is not None and python_result_when(original, args, kwargs)):
            return original(*args, **kwargs)
        return proxy.tracer.create_proxy("call_function", original, args, kwargs)

    opaque.__tracezoo_opaque__ = True
    return opaque


def _opaque_method(name: str, original):
    @functools.wraps(original)
    def opaque(self, *args, **kwargs):
        proxy = _find_proxy(args, kwargs)
        if proxy is None:
            return original(self, *args, **kwargs)
        # call_method on a by-reference module: at run time this calls the real method.
        return proxy.tracer.create_proxy("call_method", name, (self, *args), kwargs)

    opaque.__tracezoo_opaque__ = True
    return opaque


def modeling_namespaces(model: nn.Module, classes: Iterable[type] | None = None) -> list[dict]:
    """Globals of every module defining a class (or base class) used in the model (``classes``: the
    model's module classes, when the caller has them)."""
    seen: dict[str, dict] = {}
    for cls in classes if classes is not None else _module_classes(model):
        for base in inspect.getmro(cls):
            if base.__module__ in seen or base.__module__.startswith(("torch.", "builtins")):
                continue
            module = sys.modules.get(base.__module__)
            if module is not None:
                seen[base.__module__] = vars(module)
    return list(seen.values())


def _module_classes(model: nn.Module) -> set[type]:
    return {type(module) for module in model.modules()}


def _functions_and_methods(model: nn.Module, names: Container[str] | None = None,
                           classes: set[type] | None = None) -> Iterator[tuple[Any, str, Any, bool]]:
    """``(owner, name, function, is_namespace)`` for every function an ignore entry can name: the
    globals of the modeling modules, and the methods of the model's classes and their bases (only
    those called one of ``names``, when given). Each base class is read once, though most classes
    share ``nn.Module`` and ``PreTrainedModel``: this runs at every trace, over hundreds of methods."""
    classes = classes if classes is not None else _module_classes(model)
    for namespace in modeling_namespaces(model, classes):
        for name, value in list(namespace.items()):
            if (names is None or name in names) and isinstance(value, types.FunctionType):  # inspect.isfunction
                yield namespace, name, value, True
    for base in dict.fromkeys(base for cls in classes for base in inspect.getmro(cls)):
        for name, value in list(vars(base).items()):
            if (names is None or name in names) and isinstance(value, types.FunctionType):
                yield base, name, value, False


def callable_names(model: nn.Module, classes: set[type] | None = None) -> set[str]:
    """The names of functions and methods an ignore entry can keep opaque in ``model`` (``classes``:
    the model's module classes, when the caller has them)."""
    return {name for _, name, _, _ in _functions_and_methods(model, classes=classes)}


@contextlib.contextmanager
def opaque_calls(model: nn.Module, names: Iterable[str], classes: set[type] | None = None) -> Iterator[set[str]]:
    """Patch functions/methods called ``names`` for the duration of the context.

    Yields the names that were found (functions or methods); the caller may report the rest.
    ``classes``: the model's module classes, when the caller has them (else the modules are walked).
    """
    names = set(names)
    found: set[str] = set()
    restore: list[tuple[Any, str, Any, bool]] = []
    try:
        for owner, name, value, is_namespace in _functions_and_methods(model, names, classes):
            if name not in names or getattr(value, "__tracezoo_opaque__", False):
                continue
            restore.append((owner, name, value, is_namespace))
            if is_namespace:
                owner[name] = _opaque_function(value)
            else:
                setattr(owner, name, _opaque_method(name, value))
            found.add(name)
        yield found
    finally:
        for owner, name, value, is_namespace in reversed(restore):
            if is_namespace:
                owner[name] = value
            else:
                setattr(owner, name, value)


def _dtype_query(original):
    # torch.finfo/iinfo are types: with a traced dtype they record one node, read at run time.
    def query(dtype=None):
        if isinstance(dtype, fx.Proxy):
            return dtype.tracer.create_proxy("call_function", original, (dtype,), {})
        return original() if dtype is None else original(dtype)

    return query


@contextlib.contextmanager
def traced_dtype_queries() -> Iterator[None]:
    """``torch.finfo(x.dtype)`` on a traced ``x``: a graph node instead of a TypeError."""
    import torch

    originals = {name: getattr(torch, name) for name in ("finfo", "iinfo")}
    try:
        for name, original in originals.items():
            setattr(torch, name, _dtype_query(original))
        yield
    finally:
        for name, original in originals.items():
            setattr(torch, name, original)
