"""Refuse a wrapped function that changes a module's settings while a graph runs, unless the graph was
traced for that change (see "settings the sample's run changes" below).

The rewriter moves code the tracer cannot decide (a branch on a shape) into ``@torch.fx.wrap``
functions, which do not run while tracing, only when the graph runs. One that changes a setting of
a module it is given (BigBird's ``self.set_attention_type("original_full")`` under
``if seq_length <= max_tokens_to_attend``) changes it after tracing decided the code that follows
on the old value: the graph runs the rest of the forward for the old setting and the modules it
calls in the new one, a silent wrong result. The graph's code therefore calls these functions
through a guard that compares the Python-scalar attributes and the children of every module
argument before and after the call, and raises :class:`StateChangeError` naming the source line.
A refused run leaves the model's settings as they were before it (see "rolling a refused run back").

Tensors stored as attributes (a positions table moved to another device or grown) are data, not
settings Python code branches on, so they are left out. Only the module arguments themselves are
compared, not their descendants: that keeps the guard cheap on models with many layers.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from typing import Any, Callable, Iterable, Iterator, MutableMapping

from torch import nn

from ..registry.origins import noted_origin
from ..registry.wrapped import is_wrapped_name
from .errors import StateChangeError
from .moved_code import function_tree
from .record import is_trace_constant, same_constant

_MODULE_SLOTS = ("_parameters", "_buffers", "_modules")
_UNSET = object()


def guard_wrapped_functions(namespace: MutableMapping[str, Any]) -> None:
    """Replace the rewriter's wrapped functions among a compiled graph's globals by guarded calls."""
    for key, value in list(namespace.items()):
        if inspect.isfunction(value) and is_wrapped_name(value.__name__):
            namespace[key] = _guarded(value)


def _guarded(function: Callable) -> Callable:
    origin, location = _origin(function)

    @functools.wraps(function)
    def guarded(*args, **kwargs):
        modules = [value for value in (*args, *kwargs.values()) if isinstance(value, nn.Module)]
        if not modules:
            return function(*args, **kwargs)
        save_settings(modules)  # the run's journal puts them back if the run is refused
        before = [_settings(module) for module in modules]
        result = function(*args, **kwargs)
        changes = [change for module, old in zip(modules, before) for change in _changes(module, old)]
        if changes:
            error = StateChangeError(
                f"{origin}: code the rewriter moved into {function.__name__} changed "
                f"{'; '.join(changes[:5])}{' ...' if len(changes) > 5 else ''} while the graph ran. That code does "
                "not run while tracing, so the code after it was traced for the old value: the graph would run "
                "the rest of the forward for the old setting and the modules it calls in the new one (a silent "
                "wrong result). Put the model in that state before tracing (call the setter the code calls, "
                "or run the model once on inputs of the shape you will run), or trace and run with inputs for "
                "which the code does not run. The run's changes to the model's settings are undone.",
                changes,
            )
            error.location = location  # the moved code's origin note, for reports that map lines back
            raise error
        return result

    return guarded


def _origin(function: Callable) -> tuple[str, tuple[str, int] | None]:
    """``modeling_x.py:766 (in Foo.forward)`` from the moved code's origin note (else the function's
    name), and the (file, line) of that note."""
    try:
        lines, first = inspect.getsourcelines(function)
        filename = inspect.getsourcefile(function)
    except (OSError, TypeError):
        lines, first, filename = [], 0, None
    for offset, line in enumerate(lines):
        origin = noted_origin(line)
        if origin is not None:
            return origin, (filename, first + offset) if filename else None
    return function.__qualname__, None


def _settings(module: nn.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    scalars = {key: value for key, value in vars(module).items()
               if key not in _MODULE_SLOTS and is_trace_constant(value)}
    return scalars, dict(module._modules)


def _changes(module: nn.Module, before: tuple[dict[str, Any], dict[str, Any]]) -> list[str]:
    scalars, children = before
    owner = type(module).__name__
    now, found = vars(module), []
    for key, old in scalars.items():
        new = now.get(key, _UNSET)
        if not same_constant(old, new):
            found.append(f"{owner}.{key}: {old!r} -> {_describe(new)}")
    for key, new in now.items():
        if key not in scalars and key not in _MODULE_SLOTS and is_trace_constant(new):
            found.append(f"{owner}.{key}: <unset or not a scalar> -> {new!r}")
    for key in sorted(children.keys() | module._modules.keys()):
        if children.get(key) is not module._modules.get(key):
            found.append(f"{owner}.{key}: submodule replaced by {type(module._modules.get(key)).__name__}")
    return found



def _describe(value: Any) -> str:
    return "<unset>" if value is _UNSET else repr(value) if is_trace_constant(value) else f"a {type(value).__name__}"


# -- settings the sample's run changes: replayed while tracing, checked when the graph runs ---------
#
# Refusing every change leaves the sample itself refused where the model switches on it (BigBird on
# any input shorter than its sparse blocks need). When one eager run shows that a wrapped function
# changes settings of modules the graph traces through, the tracer traces again and, at each call of
# that function, applies the settings the call left: the code after it is traced for the new setting,
# as eager runs it. The graph calls the function through :func:`call_with_settings`, which refuses a
# run that leaves any other setting than the one traced for (a longer input that does not switch a
# fresh model) instead of running the rest for the wrong one.

#: (module path, attribute, value) for every setting a call changed
Settled = tuple[tuple[str, str, Any], ...]


def may_change_settings(function: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether this call of ``function`` can write a setting of a module it is handed: its code (or a
    method of that module it calls, a few calls deep) stores or deletes an attribute of the module
    (``self.mode = ...``, ``setattr(self, ...)``, BigBird's ``self.set_attention_type(...)``). Only those
    make the tracer run the model once to look (:func:`observe_settled_settings`): moved code that reads a
    size off a module (most moved code handed ``self``) is not worth an extra forward of a large model.
    A change other code makes (a function the module is passed to) is still refused when the graph runs."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return True
    modules = {name: value for name, value in bound.arguments.items() if isinstance(value, nn.Module)}
    return bool(modules) and _writes_settings(function, modules, depth=0)


#: how many calls deep :func:`may_change_settings` follows methods before it assumes a write
_MAX_DEPTH = 4


def _writes_settings(function: Callable, modules: dict[str, nn.Module], depth: int) -> bool:
    import ast

    definition = function_tree(function)
    if definition is None or depth > _MAX_DEPTH:
        return True

    def receiver(node: ast.AST) -> Any:
        """The object ``node`` (``self``, ``self.encoder``) names, or _UNSET when not a module's."""
        if isinstance(node, ast.Name):
            return modules.get(node.id, _UNSET)
        if isinstance(node, ast.Attribute):
            owner = receiver(node.value)
            return _UNSET if owner is _UNSET else getattr(owner, node.attr, _UNSET)
        if isinstance(node, ast.Subscript):
            return _UNSET if receiver(node.value) is _UNSET else _ANY
        return _UNSET

    def module_call_writes(callee: Any, owner: Any, name: str) -> bool:
        if isinstance(callee, nn.Module):  # a submodule called: its forward
            forward = inspect.getattr_static(type(callee), "forward", None)
            return not inspect.isfunction(forward) or _writes_settings(forward, {_first_param(forward): callee}, depth + 1)
        if not isinstance(owner, nn.Module):
            return owner is _ANY  # a tensor's, config's or number's method changes no module setting
        method = inspect.getattr_static(type(owner), name, None)
        if isinstance(method, (staticmethod, classmethod)):
            return False
        return not inspect.isfunction(method) or _writes_settings(method, {_first_param(method): owner}, depth + 1)

    for node in _stores_and_calls(definition):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and receiver(node.value) is not _UNSET:
            return True
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and node.args \
                and receiver(node.args[0]) is not _UNSET:
            return True
        if isinstance(node.func, ast.Name) and isinstance(modules.get(node.func.id), nn.Module):
            if module_call_writes(modules[node.func.id], None, "forward"):
                return True
        if isinstance(node.func, ast.Attribute):
            owner = receiver(node.func.value)
            if owner is not _UNSET and module_call_writes(getattr(owner, node.func.attr, None)
                                                          if isinstance(owner, nn.Module) else None,
                                                          owner, node.func.attr):
                return True
    return False


@functools.lru_cache(maxsize=None)
def _stores_and_calls(definition) -> tuple:
    """The attribute stores and deletions and the calls of a parsed definition, in ``ast.walk``'s
    order: the only nodes :func:`_writes_settings` looks at, found once per function (the definition
    is cached), not at every call of it while tracing."""
    import ast

    return tuple(node for node in ast.walk(definition)
                 if isinstance(node, ast.Call)
                 or (isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))))


#: an object reached through a module by subscript (``self.layers[0]``): not known without running
_ANY = object()


def _first_param(function: Callable) -> str:
    return next(iter(inspect.signature(function).parameters), "self")


def observe_settled_settings(model: nn.Module, sample_input: Any, fixed: Any,
                             traced_modules: set[nn.Module]) -> dict[Callable, Settled]:
    """Wrapped function -> the settings of traced-through modules each of its calls changed on one
    eager run of the sample, for the functions whose every call changed the same scalars and replaced
    no child (a new module object cannot be replayed while tracing; the run-time guard refuses it).
    The model is left as it was."""
    from .opaque import modeling_namespaces
    from .state import run_on_sample

    paths = {module: name for name, module in model.named_modules() if module in traced_modules}
    calls: dict[Callable, list[Settled | None]] = {}

    def observed(function: Callable) -> Callable:
        @functools.wraps(function)
        def observing(*args, **kwargs):
            if not any(isinstance(value, nn.Module) for value in (*args, *kwargs.values())):
                return function(*args, **kwargs)
            before = {module: _settings(module) for module in paths}
            result = function(*args, **kwargs)
            calls.setdefault(function, []).append(_settled(paths, before))
            return result

        return observing

    restore = []
    try:
        for namespace in modeling_namespaces(model):
            for key, value in list(namespace.items()):
                if inspect.isfunction(value) and is_wrapped_name(value.__name__):
                    restore.append((namespace, key, value))
                    namespace[key] = observed(value)
        run_on_sample(model, sample_input, fixed)
    finally:
        for namespace, key, value in reversed(restore):
            namespace[key] = value
    return {function: seen[0] for function, seen in calls.items() if seen[0] and len(set(seen)) == 1}


def _settled(paths: dict[nn.Module, str], before: dict[nn.Module, tuple[dict, dict]]) -> Settled | None:
    """The scalars a call changed, or None where it replaced a child or changed a non-scalar setting."""
    settled = []
    for module, (scalars, children) in before.items():
        if any(children.get(key) is not module._modules.get(key) for key in children.keys() | module._modules.keys()):
            return None
        now = vars(module)
        for key in sorted(scalars.keys() | {key for key, value in now.items()
                                              if key not in _MODULE_SLOTS and is_trace_constant(value)}):
            old, new = scalars.get(key, _UNSET), now.get(key, _UNSET)
            if old is _UNSET or new is _UNSET or not is_trace_constant(new):
                if old is not new:
                    return None
            elif not same_constant(old, new):
                settled.append((paths[module], key, new))
    return tuple(settled)


def _names_expected(change: str, module: nn.Module, expected: dict) -> bool:
    # `_changes` also reports a scalar missing from the snapshot given to it: one traced for is checked apart
    return any(owner is module and change.startswith(f"{type(module).__name__}.{key}:") for owner, key in expected)


def apply_settings(root: nn.Module, settled: Settled) -> None:
    for path, key, value in settled:
        setattr(root.get_submodule(path), key, value)


def call_with_settings(function: Callable, root: nn.Module, settled: Settled, *args, **kwargs):
    """``function(*args, **kwargs)`` where the graph was traced for the settings ``settled`` after it:
    refused unless the call leaves exactly those (it may make them, as on the sample's run, or find them
    made) and changes nothing else of its module arguments."""
    origin, location = _origin(function)
    expected = {(root.get_submodule(path), key): value for path, key, value in settled}
    modules = [value for value in (*args, *kwargs.values()) if isinstance(value, nn.Module)]
    save_settings([*modules, *(module for module, _ in expected)])
    before = [_settings(module) for module in modules]
    result = function(*args, **kwargs)
    problems = [f"{type(module).__name__}.{key} is {_describe(vars(module).get(key, _UNSET))} where the graph "
                f"was traced for {value!r}"
                for (module, key), value in expected.items() if not same_constant(vars(module).get(key, _UNSET), value)]
    for module, (scalars, children) in zip(modules, before):
        # the settings traced for are checked above, whatever they were before the call
        others = {key: value for key, value in scalars.items() if (module, key) not in expected}
        problems += [change for change in _changes(module, (others, children))
                     if not _names_expected(change, module, expected)]
    if problems:
        error = StateChangeError(
            f"{origin}: after the code the rewriter moved into {function.__name__}, {'; '.join(problems[:5])}"
            f"{' ...' if len(problems) > 5 else ''}. The graph was traced for the settings that code left on the "
            "sample's run (it switched the model), so running the rest of it for others would be a silent wrong "
            "result. Run the graph on inputs for which the model ends in the state it was traced in, or trace "
            "with a sample like this run's input. The run's changes to the model's settings are undone.",
            problems,
        )
        error.location = location
        raise error
    return result


# -- rolling a refused run back ---------------------------------------------------------------------
#
# The guards above refuse a change after the moved code made it, and a later check of the same run (a
# branch decided on the sample, a leaf's output, the mode of the next subgraph's modules) may refuse
# after a call the graph was traced for switched the model. Either way the batch is refused, but the
# model kept the switch: traced on 32 tokens, BigBird refused a 5-token batch and stayed in full
# attention, and the next run of the very sample it was traced on went through with no error, 1e-3
# off. So before moved code is handed a module, the settings of that module and of everything inside it
# (BigBird's switch replaces the attention of every layer) are saved in the run's journal, and an
# exception out of the run puts back every setting saved. A setting is what the guards compare: an
# attribute holding a Python scalar or None (one that held or now holds one), and the children.
# Tensors that moved code stores are data the next run recomputes, and stay.

#: the journal of the run in progress (None outside a run)
_JOURNAL: contextvars.ContextVar["SettingsJournal | None"] = contextvars.ContextVar("tracezoo_settings_journal",
                                                                                 default=None)


class SettingsJournal:
    """The settings modules had when the run first handed them (or a module holding them) to moved code."""

    def __init__(self):
        self._saved: dict[int, tuple[nn.Module, dict[str, Any], dict[str, nn.Module | None]]] = {}

    def save(self, modules: Iterable[nn.Module]) -> None:
        for outer in modules:
            if id(outer) in self._saved:
                continue  # saved with everything inside it then; a module made since is dropped on restore
            for module in outer.modules():
                if id(module) not in self._saved:  # the first state of the run is the one to go back to
                    # one copy of the whole __dict__ (the slots are skipped on restore): this runs for every
                    # module inside one handed to moved code, at every run of such a graph
                    self._saved[id(module)] = (module, dict(vars(module)), dict(module._modules))

    def restore(self) -> None:
        for module, attributes, children in self._saved.values():
            if list(module._modules.items()) != list(children.items()):
                module._modules.clear()
                module._modules.update(children)
            now = vars(module)
            for key in [key for key, value in now.items()
                        if key not in _MODULE_SLOTS and key not in attributes and is_trace_constant(value)]:
                del now[key]
            for key, old in attributes.items():
                if key in _MODULE_SLOTS:
                    continue
                new = now.get(key, _UNSET)
                if new is not old and (new is _UNSET or is_trace_constant(old) or is_trace_constant(new)):
                    now[key] = old


@contextlib.contextmanager
def settings_rolled_back_on_error() -> Iterator[None]:
    """A run: if the block raises, the settings moved code changed in it are put back. Nested blocks
    share the outermost block's journal, so a chain refused in its last subgraph also puts back what its
    first one switched."""
    if _JOURNAL.get() is not None:
        yield
        return
    journal = SettingsJournal()
    token = _JOURNAL.set(journal)
    try:
        yield
    except BaseException:
        journal.restore()
        raise
    finally:
        _JOURNAL.reset(token)


def save_settings(modules: Iterable[nn.Module]) -> None:
    """Save the settings of ``modules`` and everything inside them in the run's journal, before moved
    code that is handed them runs."""
    journal = _JOURNAL.get()
    if journal is not None:
        journal.save(modules)


class _UnkeptJournal(SettingsJournal):
    """The journal of a run whose caller puts back whatever the run writes: it saves nothing."""

    def save(self, modules: Iterable[nn.Module]) -> None:
        pass


@contextlib.contextmanager
def settings_put_back_by_caller() -> Iterator[None]:
    """Runs inside keep no journal of the settings moved code may change: the caller puts back everything
    the block writes, also where it raises (a run in the middle of a trace:
    :meth:`patcher.trace.state.StateSnapshot.set_aside`). The journal would copy every module handed to
    moved code first (700 on Qwen2-VL) for nothing."""
    token = _JOURNAL.set(_UnkeptJournal())
    try:
        yield
    finally:
        _JOURNAL.reset(token)
