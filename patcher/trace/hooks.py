"""Module hooks and graphs: which hooks a graph honours, and refusing the ones it cannot.

The graph *calls* sequential targets and ignored (leaf) modules, so their hooks run when the graph
runs, as in eager. Modules the tracer walks through are not called by the graph: their code is
inlined. A forward hook on one of those runs once while tracing, on proxies, and what it does is
baked into the graph (it keeps applying after ``.remove()``); one added after tracing never runs.
Hooks on the root model never run at all (the graph is the root's forward). So hooks there are
refused when tracing (``HookError``), and hooks added there after tracing are refused when the
graph runs. Global module hooks (``torch.nn.modules.module.register_module_forward_hook``) would
do the same on every traced-through module, and are refused too.

transformers' own output-capturing hooks (``output_hidden_states``/``output_attentions``, installed
by ``capture_outputs``) are not the user's: they do nothing unless a forward asked for outputs.
When one is asked for and the hook sits inside a module the graph calls as a whole, it cannot
run while tracing and the graph would return an empty tuple: ``OutputCaptureError``. A
``hidden_states`` hook on the called module itself (a vision tower's layer as a sequential target,
whose forward returns ``hidden_states[-2]`` to the projector) is replayed on the call's graph value
instead (:func:`replay_hidden_state_capture`), so the collected tuple holds the layers' outputs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from torch import nn

from .errors import HookError, OutputCaptureError

#: Per-module hook dicts that only ``Module.__call__`` applies.
HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                 "_global_backward_hooks")
_CAPTURE_MODULE = "transformers.utils.output_capturing"

_FIX = ("Remove it before tracing (`handle.remove()`) and add it back afterwards, or put the hook on a sequential "
        "target or an ignored module: the graph calls those as modules, so their hooks run. See "
        "GUIDE.md#silent-wrong-results")


def is_output_capturing(hook: Any) -> bool:
    """transformers' own hook for ``output_hidden_states``/``output_attentions``."""
    return getattr(hook, "__module__", None) == _CAPTURE_MODULE


def _name(hook: Any) -> str:
    return getattr(hook, "__qualname__", None) or getattr(hook, "__name__", None) or repr(hook)


def _kind(attr: str) -> str:
    return attr.strip("_").replace("global_", "").replace("_hooks", " hook").replace("_", " ")


def user_hooks(module: nn.Module) -> list[str]:
    """The hooks on ``module`` that ``Module.__call__`` would apply, other than transformers'
    output capturing, as ``'forward hook my_hook'``."""
    found = []
    for attr in HOOK_DICTS:
        for hook in (getattr(module, attr, None) or {}).values():
            if not is_output_capturing(hook):
                found.append(f"{_kind(attr)} {_name(hook)}")
    return found


def global_hooks() -> list[str]:
    """Global module hooks registered with ``torch.nn.modules.module.register_module_*_hook``."""
    from torch.nn.modules import module as module_mod

    return [f"global {_kind(attr)} {_name(hook)}" for attr in _GLOBAL_HOOKS
            for hook in (getattr(module_mod, attr, None) or {}).values()]


def _where(path: str, module: nn.Module) -> str:
    return f"module '{path}' ({type(module).__name__})" if path else f"the root model ({type(module).__name__})"


def check_traced_through(path: str, module: nn.Module) -> None:
    """Refuse, while tracing, a user hook on a module the tracer walks through (or on the root)."""
    hooks = user_hooks(module)
    if not hooks:
        return
    if path:
        effect = ("the graph inlines this module instead of calling it: the hook would run once now, on "
                  "symbolic values, and its effect would be baked into the graph (it would keep applying after "
                  "`.remove()`, and a hook added later would never run)")
    else:
        effect = "the graph is the root model's forward, so hooks on the root never run when the graph runs"
    raise HookError(f"{_where(path, module)} has {', '.join(hooks)}; {effect}. {_FIX}.", path, hooks)


def check_no_global_hooks() -> None:
    hooks = global_hooks()
    if hooks:
        raise HookError(
            f"{', '.join(hooks)} registered: global module hooks would run while tracing on every module the tracer "
            "walks through and be baked into the graph (a silent wrong result). Remove them before tracing "
            "(`handle.remove()`); to observe layers, register per-module hooks on sequential targets.",
            "", hooks)


def check_run_time(model: nn.Module, traced_through: Iterable[str], known_global: int = 0) -> None:
    """When a graph runs: refuse hooks added after tracing where the graph cannot honour them."""
    for path in traced_through:
        module = model.get_submodule(path) if path else model
        hooks = user_hooks(module)
        if hooks:
            raise HookError(
                f"{_where(path, module)} has {', '.join(hooks)}, added after tracing; the graph "
                f"{'inlined this module' if path else 'is the root model forward'}, so the hook would never run. "
                "Put it on a sequential target or an ignored module (the graph calls those), or remove it.",
                path, hooks)
    hooks = global_hooks()
    if len(hooks) > known_global:
        raise HookError(
            f"{', '.join(hooks)} registered: the graph inlined modules it traced through, so global module hooks "
            "would run only for the modules it calls (targets, ignored modules), not for "
            f"{', '.join(repr(p) for p in list(traced_through)[:5]) or 'the root'}. Remove them while running graphs, "
            "or register per-module hooks on sequential targets.", "", hooks)


def _closure_value(hook: Any, name: str) -> Any:
    code, closure = getattr(hook, "__code__", None), getattr(hook, "__closure__", None)
    if code is None or not closure:
        return None
    cells = dict(zip(code.co_freevars, closure))
    try:
        return cells[name].cell_contents if name in cells else None
    except ValueError:
        return None


def _capture_key(hook: Any) -> str | None:
    return _closure_value(hook, "key")


def _active_capture() -> dict | None:
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:  # older transformers: outputs are collected by traced code
        return None
    return _active_collector.get()


def captured_output(output: Any, index: int) -> Any:
    """What transformers' capture hook keeps of a module's output: ``output[index]`` of a tuple,
    else the output itself (decided when the graph runs, where the output's type is known)."""
    return output[index] if isinstance(output, tuple) else output


def replay_hidden_state_capture(module: nn.Module, args: tuple, output: Any, record: Callable[..., Any]) -> None:
    """Run ``module``'s own ``hidden_states`` capture hooks on the graph value of its call.

    While tracing, a module the graph calls as a whole does not run, so its hooks do not either.
    The capture hook only appends the (first) input and the output to the active collector, so it
    is replayed with the call's graph values: ``record(captured_output, output, index)`` makes
    the value the hook keeps. Hooks of other keys (``attentions``: the hook skips ``None``
    outputs, which a graph value cannot tell) are refused by :func:`check_leaf_output_capture`."""
    collected = _active_capture()
    if not collected or "hidden_states" not in collected:
        return
    for hook in list(module._forward_hooks.values()):
        if is_output_capturing(hook) and _capture_key(hook) == "hidden_states":
            hook(module, args, record(captured_output, output, _closure_value(hook, "index") or 0))


def check_leaf_output_capture(path: str, module: nn.Module) -> None:
    """Refuse ``output_hidden_states``/``output_attentions`` collected by hooks inside a leaf call.

    While tracing, a module called as a whole (a target or an ignored module) is not run, so
    transformers' capture hooks on it or inside it never fire and the collected tuple stays empty.
    """
    collected = _active_capture()
    wanted = {key for key in (collected or {}) if not key.startswith("_")}
    if not wanted:
        return
    for name, sub in module.named_modules():
        for hook in sub._forward_hooks.values():
            key = _capture_key(hook) if is_output_capturing(hook) else None
            if key == "hidden_states" and not name:
                continue  # on the called module itself: replayed (replay_hidden_state_capture)
            if key in wanted:
                where = ".".join(filter(None, [path, name]))
                raise OutputCaptureError(
                    f"output_{key} is requested (in the config or the sample), and transformers collects `{key}` "
                    f"with a forward hook on '{where}' ({type(sub).__name__}), "
                    f"{'which' if not name else 'inside ' + repr(path) + ', which'} the graph calls as a single "
                    f"module: the hook cannot run while tracing, so the graph would return an empty `{key}` tuple. "
                    f"Trace with it off (`model.config.output_{key} = False`, and no `output_{key}` in the sample). "
                    "To get each layer's output, run the subgraphs (a target's subgraph returns that layer's "
                    "output) or register a forward hook on the sequential targets, which the graph calls.",
                    key, where)
