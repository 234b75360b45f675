"""Leave the model exactly as it was after tracing.

Model code writes state while it runs (Qwen2-VL stores ``self.rope_deltas``; decorators flip
``config.is_causal``), and while tracing those writes store proxies. The tracer also turns the
cache off through the configs. Everything written is put back afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import nn
from transformers import PretrainedConfig

from .model_walk import ModelWalk, configs_within

_MODULE_SLOTS = ("_parameters", "_buffers", "_modules")
# Hooks installed while tracing (transformers installs its output-capturing hooks lazily, and marks
# the model in an attribute that is restored) are removed again, so the two stay consistent.
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_with_kwargs",
               "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs")


def configs_of(modules) -> list[PretrainedConfig]:
    return configs_within([getattr(module, "config", None) for module in modules])


def _same(old, new) -> bool:
    if old is new:
        return True
    if isinstance(old, (str, int, float, bool, type(None))) and type(old) is type(new):
        return old == new
    return False


class StateSnapshot:
    """Plain attributes of every module and config, to compare with and restore after tracing.

    Taken and checked at every trace, over every module of the model (700 in Qwen2-VL-2B): each
    module's attributes are saved as one copy of its ``__dict__``, and a module whose attributes and
    children are still the very same objects (compared by identity, no ``__eq__`` runs) is skipped
    by :meth:`changes` and :meth:`restore`; only the others are compared and put back one by one."""

    def __init__(self, model: nn.Module, walk: ModelWalk | None = None):
        walk = walk if walk is not None else ModelWalk(model)
        self.names = walk.names
        self._saved = {module: dict(vars(module)) for module in self.names}  # the slots too
        self.tensors = {module: (dict(module._parameters), dict(module._buffers)) for module in self.names}
        self.children = {module: dict(module._modules) for module in self.names}
        # the hook dicts are instance attributes (nn.Module.__init__), read from the copy just taken;
        # copied only for the modules that have a hook (most have none), the others' must stay empty
        self.hooks = {module: {attr: dict(saved[attr]) for attr in _HOOK_DICTS if attr in saved}
                      for module, saved in self._saved.items() if any(map(saved.get, _HOOK_DICTS))}
        self.configs = walk.configs
        self.config_attrs = {id(config): (config, dict(vars(config))) for config in self.configs}
        self._reported: Callable[[nn.Module], bool] | None = None
        self.changes_found: list[str] | None = None  # see report_changes

    def report_changes(self, wanted: Callable[[nn.Module], bool]) -> None:
        """Have :meth:`restore` list in :attr:`changes_found` what :meth:`changes` would give for the
        modules ``wanted`` picks, before it puts them back: one comparison of every module for both
        (it is the slowest part of the check, 700 modules at every trace of Qwen2-VL)."""
        self._reported = wanted

    def _attrs(self, module: nn.Module) -> dict[str, Any]:
        """The module's plain attributes as saved (its slots left out)."""
        saved = self._saved.get(module)
        return {} if saved is None else {key: value for key, value in saved.items() if key not in _MODULE_SLOTS}

    def _untouched(self, module: nn.Module) -> bool:
        """Every attribute and child of ``module`` is the object it was (same names, same order)."""
        saved, children = self._saved.get(module), self.children.get(module)
        return saved is not None and _same_objects(saved, vars(module)) and _same_objects(children, module._modules)

    def changes(self, modules) -> list[str]:
        """Attributes of ``modules`` written since the snapshot, as ``'path.attr: old -> new'``."""
        found = []
        for module in modules:
            if self._untouched(module):
                continue
            old = self._attrs(module)
            current = {key: value for key, value in vars(module).items() if key not in _MODULE_SLOTS}
            for key in sorted(old.keys() | current.keys()):
                if key not in current or key not in old or not _same(old[key], current[key]):
                    path = ".".join(filter(None, [self.names.get(module, "?"), key]))
                    found.append(f"{path}: {_short(old.get(key, '<unset>'))} -> {_short(current.get(key, '<unset>'))}")
            old_children, children = self.children.get(module, {}), module._modules
            for key in sorted(old_children.keys() | children.keys()):
                if old_children.get(key) is not children.get(key):
                    path = ".".join(filter(None, [self.names.get(module, "?"), key]))
                    found.append(f"{path}: submodule replaced by {type(children.get(key)).__name__}")
        return found

    def restore(self) -> None:
        for config, attrs in self.config_attrs.values():
            current = vars(config)
            for key in [key for key in current if key not in attrs]:
                del current[key]
            current.update(attrs)
        touched = [module for module in self.names if not self._untouched(module)]
        if self._reported is not None:
            self.changes_found = self.changes(module for module in touched if self._reported(module))
        for module in touched:
            attrs = self._attrs(module)
            current = vars(module)
            for key in [key for key in current if key not in attrs and key not in _MODULE_SLOTS]:
                del current[key]
            current.update(attrs)
        for module in touched:
            module._modules.clear()
            module._modules.update(self.children[module])
        for module, saved in self._saved.items():
            hooks = self.hooks.get(module)
            # The attributes are back: a module's hook dicts are the ones saved. Most modules had no
            # hook and got none; theirs are all empty still.
            if hooks is None and not any(map(saved.get, _HOOK_DICTS)):
                continue
            for attr in _HOOK_DICTS:
                if attr not in saved:
                    continue
                current, entries = getattr(module, attr), hooks[attr] if hooks is not None else {}
                if len(current) != len(entries):
                    current.clear()
                    current.update(entries)
        for module, (parameters, buffers) in self.tensors.items():
            if parameters or module._parameters:  # most modules hold none, and got none
                module._parameters.clear()
                module._parameters.update(parameters)
            if buffers or module._buffers:
                module._buffers.clear()
                module._buffers.update(buffers)

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """Inside, the modules and configs hold what they held when the snapshot was taken; on exit
        they hold again what the code before the block had written, and what the block wrote is gone.

        For model code run for real in the middle of a trace (:mod:`patcher.trace.mid_trace_runs`):
        it must see the model as a run between two traces does, not the proxies the trace stored so
        far (Qwen2-VL's ``self.rope_deltas``) nor the configs' ``use_cache=False``. The hook dicts are
        left alone: such a run silences the hooks itself (:func:`hooks_silenced`)."""
        written = self._written()
        self._put(self._saved_state(written))
        try:
            yield
        finally:
            # what the block wrote, also on modules the trace had left alone, goes; the trace's writes come back
            self._put(self._saved_state(self._written()))
            self._put(written)

    def _written(self) -> _State:
        """The current state of every config, and of the modules whose attributes, children or tensors
        are not what the snapshot saved (most modules: untouched, and compared by identity only)."""
        modules = [(module, dict(vars(module)), dict(module._modules)) for module in self.names
                   if not self._untouched(module)]
        tensors = [(module, dict(module._parameters), dict(module._buffers))
                   for module, (parameters, buffers) in self.tensors.items()
                   if not (_same_objects(parameters, module._parameters) and _same_objects(buffers, module._buffers))]
        configs = [(config, dict(vars(config))) for config, _ in self.config_attrs.values()]
        return _State(modules, tensors, configs)

    def _saved_state(self, written: _State) -> _State:
        """The snapshot's state of what ``written`` holds."""
        return _State([(module, self._saved[module], self.children[module]) for module, _, _ in written.modules],
                      [(module, *self.tensors[module]) for module, _, _ in written.tensors],
                      [(config, self.config_attrs[id(config)][1]) for config, _ in written.configs])

    @staticmethod
    def _put(state: _State) -> None:
        for module, attributes, children in state.modules:
            _replace(vars(module), attributes)  # the slots' dicts are the very ones saved: only filled below
            _replace(module._modules, children)
        for module, parameters, buffers in state.tensors:
            _replace(module._parameters, parameters)
            _replace(module._buffers, buffers)
        for config, attributes in state.configs:
            _replace(vars(config), attributes)


@dataclasses.dataclass
class _State:
    """Attributes, children and tensors of some modules, and attributes of some configs (copies)."""

    modules: list[tuple[nn.Module, dict[str, Any], dict[str, Any]]]
    tensors: list[tuple[nn.Module, dict[str, Any], dict[str, Any]]]
    configs: list[tuple[PretrainedConfig, dict[str, Any]]]


def _replace(current: dict, wanted: dict) -> None:
    if current is not wanted:
        current.clear()
        current.update(wanted)


def _same_objects(saved: dict, current: dict) -> bool:
    """``current`` holds the very objects ``saved`` does, under the same names in the same order.
    Identity, not ``==``: a tensor's ``==`` is elementwise, and an object's own ``__eq__`` may run code.
    A name stored anew as an equal string that is another object only sends the module to the slow,
    exact comparison."""
    return len(saved) == len(current) and all(map(operator.is_, saved.values(), current.values())) \
        and all(map(operator.is_, saved, current))


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@contextlib.contextmanager
def preserved_model_state(model: nn.Module, *, disable_cache: bool = True,
                          walk: ModelWalk | None = None) -> Iterator[StateSnapshot]:
    """Snapshot plain attributes of every module and config; restore them on exit.

    Yields the snapshot, so the tracer can ask which attributes tracing wrote. ``walk``: the model's
    modules as walked before (the traces of one call share one walk), else they are walked here.
    """
    snapshot = StateSnapshot(model, walk)
    if disable_cache:
        # Decorators read use_cache from the config; a DynamicCache must not reach the graph.
        for config in _with_cache_flag(snapshot.configs):
            config.use_cache = False
    try:
        yield snapshot
    finally:
        snapshot.restore()


def _with_cache_flag(configs: Iterable[PretrainedConfig]) -> list[PretrainedConfig]:
    return [config for config in configs if "use_cache" in vars(config) or hasattr(type(config), "use_cache")]


@contextlib.contextmanager
def cache_off(model: nn.Module) -> Iterator[None]:
    """Every config of ``model`` says ``use_cache=False`` inside, as while tracing: the eager run a
    graph is compared with (a sub-model reads the flag from its own config, not from the call's
    ``use_cache``). Only that flag is put back on exit; what the run itself writes stays."""
    configs = _with_cache_flag(configs_of(model.modules()))
    saved = [(config, vars(config).get("use_cache", _UNSET)) for config in configs]
    for config in configs:
        config.use_cache = False
    try:
        yield
    finally:
        for config, value in saved:
            if value is _UNSET:
                vars(config).pop("use_cache", None)
            else:
                config.use_cache = value


_UNSET = object()


@contextlib.contextmanager
def hooks_silenced(model: nn.Module, modules: list[nn.Module] | None = None) -> Iterator[None]:
    """No hook of ``model``'s modules runs inside but transformers' own output capturing (which
    fills ``hidden_states``: the run must return what the graph's run will): the tracer's own eager
    runs on the sample (a leaf's output structure, the keys ``**`` unpacks, the settings moved code
    leaves, a branch decision) are no calibration batch, and a hook that accumulates statistics
    (GPTQ's Hessians, a user's activation recorder) would take them for one. On exit the hooks are
    back; hooks registered inside are removed, but capture hooks transformers installed lazily stay,
    as its mark that it installed them does. ``modules``: ``list(model.modules())`` when the caller has it."""
    from .hooks import is_output_capturing

    def capturing(module: nn.Module) -> set[int]:
        # the flag dicts (``_forward_hooks_with_kwargs``...) share the hook dicts' keys
        return {key for attr in ("_forward_hooks", "_forward_pre_hooks")
                for key, hook in getattr(module, attr, {}).items() if is_output_capturing(hook)}

    # Only the hook dicts that hold something are copied and put back: a model has hundreds of
    # modules and a few hooks, and this runs at every eager run of the trace.
    modules = modules if modules is not None else list(model.modules())
    saved = [(module, attr, dict(hooks)) for module in modules for attr in _HOOK_DICTS
             if (hooks := getattr(module, attr, None))]
    for module, attr, entries in saved:
        hooks, kept = getattr(module, attr), capturing(module)
        for key in entries:
            if key not in kept:
                del hooks[key]
    try:
        yield
    finally:
        for module, attr, entries in saved:
            hooks = getattr(module, attr)
            installed = {key: value for key, value in hooks.items()
                         if key not in entries and key in capturing(module)}
            hooks.clear()
            hooks.update(entries)
            hooks.update(installed)
        # a dict empty on entry keeps only the capture hooks transformers installed inside
        filled = {(id(module), attr) for module, attr, _ in saved}
        for module in modules:
            for attr in _HOOK_DICTS:
                hooks = getattr(module, attr, None)
                if hooks and (id(module), attr) not in filled:
                    kept = capturing(module)
                    for key in [key for key in hooks if key not in kept]:
                        del hooks[key]


def run_on_sample(model: nn.Module, sample: Mapping[str, Any], flags: Mapping[str, Any],
                  recorders: Iterable[tuple[nn.Module, Callable]] = (), *, disable_cache: bool = True) -> Any:
    """One eager forward of ``model`` on the trace's ``sample`` and ``flags``, as the tracer runs it
    to learn what tracing cannot see: the model's own hooks silenced (:func:`hooks_silenced`), only
    the ``(module, forward hook)`` ``recorders`` on; the model's state, the caller's random draws
    (dropout in train mode) and the hooks as they were afterwards. ``disable_cache=False`` runs the
    modules with their configs' own ``use_cache``, as the graph runs the modules it calls whole."""
    devices = sorted({tensor.device.index or 0 for tensor in model.parameters() if tensor.device.type == "cuda"})
    with hooks_silenced(model):
        handles = [module.register_forward_hook(hook) for module, hook in recorders]
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad(), \
                    preserved_model_state(model, disable_cache=disable_cache):
                return model(**sample, **{key: value for key, value in flags.items() if key not in sample})
        finally:
            for handle in handles:
                handle.remove()
