"""What the tracer reads from the code the rewriter moved into ``_wrapped_*`` functions.

Which children of a module that code can reach (:func:`reached_children`). The rewriter hands its
moved code (opaque while tracing) the module it reads (``self``). A sequential target such a
call runs would get no subgraph of its own, so the tracer refuses targets that only such a call
could reach. Counting the whole module as reached would blame every target of the model that this
sample does not run (Moshi's depth decoder, which runs only with labels) on a function that reads
one embedding table. The code says more: when it uses the module only as ``self.child`` for
children (and plain data such as ``self.config``), only those children's subtrees are reachable;
a method of the model's own code it calls (``self._merge_input_ids_with_input_values(...)``, Csm's,
which runs the codec on the clips) is read the same way. Any other use (a property, a method of
torch's, the module handed on whole, the name rebound) may reach anything, and the whole module
counts, as before.

Whether some path of that code returns None (:func:`may_return_none`). One opaque node is never
None while tracing, so code after the call that tests ``is None`` on its result is decided for a
value even where the graph will get None (Csm's ``input_ids = None`` once its 2-D ids are
embedded: the backbone then sees ids and embeddings and refuses both). The tracer traces such a
call through where it can decide its code (see ``SequentialTracer``). Where it cannot (a branch on
a traced value), the call stays opaque, and :func:`none_results` names the items it hands back
that may be None when the graph runs, for the error of a trace that then fails (Qwen2-Audio's
``labels``: given None, handed back unchanged on the branch that does not set it, a traced value
while tracing, so ``if labels is not None:`` computed a loss).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import linecache
import operator
import re
import textwrap
import types
from pathlib import Path
from typing import Any, Callable

from torch import fx, nn

from ..registry.origins import noted_origin
from ..registry.wrapped import is_wrapped_name


def reached_children(call: fx.Node, module_node: fx.Node, module: nn.Module) -> set[str] | None:
    """Names of ``module``'s children that ``call`` (a call of a rewriter's wrapped function,
    handed ``module`` as ``module_node``) can run; None when it may run any part of ``module``
    (not such a call, its source is unavailable, or it uses the module other than by child)."""
    function = call.target
    if call.op != "call_function" or not callable(function) or not is_wrapped_name(getattr(function, "__name__", "")):
        return None
    parameters = _parameters_bound_to(function, call, module_node)
    tree = function_tree(function)
    if not parameters or tree is None:
        return None
    reached: set[str] = set()
    for name in parameters:
        children = _children_read(function, tree, name, module)
        if children is None:
            return None
        reached |= children
    return reached


def _parameters_bound_to(function: Callable, call: fx.Node, node: fx.Node) -> list[str] | None:
    try:
        bound = inspect.signature(function).bind(*call.args, **call.kwargs)
    except (TypeError, ValueError):
        return None
    found = []
    for name, value in bound.arguments.items():
        if value is node:
            found.append(name)
        elif _contains(value, node):
            return None  # inside a container: its uses are not plain `name.child`
    return found


def _contains(value: Any, node: fx.Node) -> bool:
    if isinstance(value, (list, tuple)):
        return any(item is node or _contains(item, node) for item in value)
    if isinstance(value, dict):
        return any(item is node or _contains(item, node) for item in value.values())
    return False


def function_tree(function: Callable) -> ast.FunctionDef | None:
    """The definition of ``function`` (a function or method) parsed from its source; None where the
    source cannot be had. The source of a wrapper (``functools.wraps``) is its wrapped function's, as
    ``inspect.getsource`` reads it: the parse is cached on that function, so the wrappers each trace
    makes anew (an ignored method while ``opaque_calls`` holds it) are parsed once, not at every trace."""
    try:
        unwrapped = inspect.unwrap(function)
    except ValueError:  # a cycle of __wrapped__: getsource fails on it too
        return None
    return _parsed_definition(unwrapped)


@functools.lru_cache(maxsize=None)
def _parsed_definition(function: Callable) -> ast.FunctionDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    found = tree.body[0] if tree.body else None
    return found if isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _children_read(function: Callable, tree: ast.FunctionDef, name: str, module: nn.Module,
                   following: frozenset[Callable] = frozenset()) -> set[str] | None:
    """The children of ``module`` that ``function`` (parsed: ``tree``) reaches through its parameter
    ``name``. ``following``: the functions being read already (one that calls itself adds nothing)."""
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    children: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == name and parents.get(node) is not tree.args:
            return None  # a lambda or nested function's parameter of the same name: not followed
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        parent = parents.get(node)
        if not isinstance(node.ctx, ast.Load):
            return None  # rebound
        if isinstance(parent, ast.Call) and node in parent.args:
            # handed on to a function of the model's code (moved code the rewriter split further)
            called = _model_function(function, parent.func)
            reached = None if called is None else _read_through(called, parent.args.index(node), module, following)
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            attribute = parent.attr
            if attribute in module._modules:
                children.add(attribute)
                continue
            if _plain_data(module, attribute):
                continue
            method = _own_method(module, attribute)
            call = parents.get(parent)
            if method is None or not (isinstance(call, ast.Call) and call.func is parent):
                return None  # a property, a method of torch's, or a method handed on: it may reach any child
            reached = _read_through(method, 0, module, following)
        else:
            return None  # handed on whole
        if reached is None:
            return None
        children |= reached
    return children


def _read_through(function: Callable, position: int, module: nn.Module,
                  following: frozenset[Callable]) -> set[str] | None:
    """The children ``function``, handed ``module`` as its ``position``-th positional argument, reaches."""
    if function in following:
        return set()
    tree = function_tree(function)
    arguments = tree.args.posonlyargs + tree.args.args if tree is not None else []
    if position >= len(arguments) or _calls_super(tree):
        return None  # `super().f()` hands the module on without naming it
    return _children_read(function, tree, arguments[position].arg, module, following | {function})


def _model_function(caller: Callable, called: ast.expr) -> Callable | None:
    """The plain function of the model's code that ``called`` (a name in ``caller``) is."""
    if not isinstance(called, ast.Name):
        return None
    value = getattr(caller, "__globals__", {}).get(called.id)
    value = getattr(value, "__wrapped__", value)  # torch.fx.wrap leaves the function itself
    if not inspect.isfunction(value) or (value.__module__ or "").split(".")[0] == "torch":
        return None
    return value


def _calls_super(tree: ast.FunctionDef) -> bool:
    return any(isinstance(node, ast.Name) and node.id == "super" for node in ast.walk(tree))


def _own_method(module: nn.Module, attribute: str) -> Callable | None:
    """The plain function ``module.attribute`` calls as a method, where it is the model's own code
    (not torch's, whose methods reach the module's children by ``_modules``)."""
    static = inspect.getattr_static(type(module), attribute, _MISSING)
    if not inspect.isfunction(static) or attribute in vars(module):
        return None
    if (static.__module__ or "").split(".")[0] == "torch":
        return None
    return static


def _plain_data(module: nn.Module, attribute: str) -> bool:
    """An attribute that runs no code when read and is no module: a tensor, a config, a number."""
    static = inspect.getattr_static(type(module), attribute, _MISSING)
    if static is not _MISSING and (callable(static) or hasattr(static, "__get__")):
        return False
    if attribute in module._parameters or attribute in module._buffers:
        return True
    value = vars(module).get(attribute, _MISSING)
    return value is not _MISSING and not isinstance(value, nn.Module) and not callable(value)


_MISSING = object()


def may_return_none(function: Any) -> bool:
    """Does ``function`` (a rewriter's wrapped function) return a name that some path sets to
    None (``input_ids = None`` in a branch, a name the branch may leave unset)?"""
    return inspect.isfunction(function) and is_wrapped_name(function.__name__) and _sets_a_result_to_none(function)


@functools.lru_cache(maxsize=1024)  # asked at every call of the function while tracing
def _sets_a_result_to_none(function: Callable) -> bool:
    tree = function_tree(function)
    if tree is None:
        return False
    returned: set[str] = set()
    set_to_none: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            returned |= {value.id for value in values if isinstance(value, ast.Name)}
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is None:
            set_to_none |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return bool(returned & set_to_none)


def object_given_for_attributes(function: Any, args: tuple, kwargs: dict) -> Any:
    """The object this call hands ``function`` (a rewriter's wrapped function that only sets
    attributes of one parameter and returns it: ``outputs.pooler_output = ...; return outputs``)
    when it is a Python object, not a graph value; else None.

    The rewriter moves an attribute assignment on a value it cannot tell from a graph value (TZ103:
    a proxy records no setattr). Given a Python object (the ``ModelOutput`` of graph values a tower
    traced through returns), the assignment records itself when run, and the object stays one the
    code after it can take apart: Molmo2's ``filter_output_hidden_states`` iterates ``.items()`` of
    what ``get_image_features`` returns, which one opaque node cannot give."""
    if not (inspect.isfunction(function) and is_wrapped_name(function.__name__)):
        return None
    owner = _attribute_owner(function)
    if owner is None:
        return None
    try:
        value = inspect.signature(function).bind(*args, **kwargs).arguments.get(owner)
    except (TypeError, ValueError):
        return None
    # an object without a __dict__ could not be marked as a call's result (see trace_through)
    return value if hasattr(value, "__dict__") and not isinstance(value, fx.Proxy) else None


@functools.lru_cache(maxsize=1024)  # asked at every call of the function while tracing
def _attribute_owner(function: Callable) -> str | None:
    """The parameter ``function`` sets one attribute of, all it does, before returning it; None for
    any other function. One assignment: one that fails while tracing has changed nothing (Python
    computes the value before it assigns), so the opaque call taken instead gets the object as it
    came."""
    tree = function_tree(function)
    if tree is None:
        return None
    body = tree.body
    if len(body) == 1 and isinstance(body[0], ast.Try):  # the rewriter's note on a failure
        body = body[0].body
    if len(body) != 2:
        return None
    assign, returned = body
    if not (isinstance(returned, ast.Return) and isinstance(returned.value, ast.Name)
            and isinstance(assign, ast.Assign) and len(assign.targets) == 1):
        return None
    owner, target = returned.value.id, assign.targets[0]
    parameters = {arg.arg for arg in (*tree.args.posonlyargs, *tree.args.args, *tree.args.kwonlyargs)}
    if owner in parameters and isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
            and target.value.id == owner:
        return owner
    return None


@dataclasses.dataclass(frozen=True)
class NoneResult:
    """An item an opaque call of moved code hands back that may be None when the graph runs."""

    index: int | None  # in the returned tuple; None: the whole result
    name: str
    why: str


def returning_function(function: Any, args: tuple) -> Any:
    """The function whose ``return`` a call of ``function`` (with ``args``) hands back: the method a
    rewriter's wrapper of an ignored call forwards to (``return obj.NAME(*args, **kwargs)``, TZ106:
    Gemma 4's ``_maybe_slice_kv_shared_inputs``, which hands back ``per_layer_inputs`` as given, None
    for its assistants), else ``function`` itself."""
    if not (inspect.isfunction(function) and is_wrapped_name(function.__name__)) or not args:
        return function
    name = _forwarded_method_name(function)
    method = getattr(type(args[0]), name, None) if name else None
    return method if inspect.isfunction(method) else function


@functools.lru_cache(maxsize=1024)
def _forwarded_method_name(function: Callable) -> str | None:
    """``NAME`` where ``function``'s only return is ``return obj.NAME(*args, **kwargs)`` of its parameters."""
    tree = function_tree(function)
    if tree is None or not tree.args.args or tree.args.vararg is None or tree.args.kwarg is None:
        return None
    returns = [node.value for node in ast.walk(tree) if isinstance(node, ast.Return)]
    if len(returns) != 1 or not isinstance(returns[0], ast.Call):
        return None
    call = returns[0]
    owner, varargs, varkw = tree.args.args[0].arg, tree.args.vararg.arg, tree.args.kwarg.arg
    if (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id == owner
            and len(call.args) == 1 and isinstance(call.args[0], ast.Starred)
            and isinstance(call.args[0].value, ast.Name) and call.args[0].value.id == varargs
            and len(call.keywords) == 1 and call.keywords[0].arg is None
            and isinstance(call.keywords[0].value, ast.Name) and call.keywords[0].value.id == varkw):
        return call.func.attr
    return None


def none_results(function: Any, args: tuple, kwargs: dict) -> list[NoneResult]:
    """The items of what ``function`` (a rewriter's wrapped function, called with ``args`` and
    ``kwargs`` while tracing) returns that may be None when it runs: a name some path sets to
    None, or a parameter given None at this call (handed back as it came wherever the code does
    not set it). Empty where the source cannot be read. A wrapper forwarding to a method is read
    through (:func:`returning_function`)."""
    if not (inspect.isfunction(function) and is_wrapped_name(function.__name__)):
        return []
    function = returning_function(function, args)
    returned, set_to_none, assigned = _returned_names(function)
    if not returned:
        return []
    try:
        bound = inspect.signature(function).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {}
    found = []
    for index, name in returned:
        if name in set_to_none:
            found.append(NoneResult(index, name, f"the moved code sets `{name} = None` on some path"))
        elif name in bound and bound[name] is None:
            how = "wherever the moved code does not set it" if name in assigned else "unchanged"
            found.append(NoneResult(index, name, f"`{name}` was given as None at the call and is handed back {how}"))
    return found


@functools.lru_cache(maxsize=1024)
def _returned_names(function: Callable) -> tuple[tuple[tuple[int | None, str], ...], frozenset[str], frozenset[str]]:
    """``((index, name) returned, ...)`` (index None: a lone name), the names set to None, the names
    assigned at all. The rewriter's functions end in one ``return`` of names."""
    tree = function_tree(function)
    if tree is None:
        return (), frozenset(), frozenset()
    returned: dict[tuple[int | None, str], None] = {}
    set_to_none: set[str] = set()
    assigned: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Tuple):
                returned.update({(index, value.id): None for index, value in enumerate(node.value.elts)
                                 if isinstance(value, ast.Name)})
            elif isinstance(node.value, ast.Name):
                returned[(None, node.value.id)] = None
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
            assigned |= names
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                set_to_none |= names
    return tuple(returned), frozenset(set_to_none), frozenset(assigned)


def none_result_reaching(calls: list[tuple[fx.Node, Callable, list[NoneResult]]],
                         code: types.CodeType) -> tuple[Callable, NoneResult] | None:
    """Of ``calls`` (opaque calls of moved code and their :func:`none_results`), the first item
    whose value reaches a node made by ``code`` (the function whose line failed), where that
    function tests the name for None (``if labels is not None:``): the value it took for not None.
    Both must hold, so that a failure with another cause (a sample that lacks an input) keeps its
    own message."""
    lines = {line for *_, line in code.co_lines() if line is not None}
    source = "".join(linecache.getline(code.co_filename, line) for line in sorted(lines))
    for node, function, results in calls:
        if node.graph is None or getattr(node, "_erased", False):
            continue  # made inside a trace-through attempt that was taken back
        results = [result for result in results
                   if re.search(rf"\b{re.escape(result.name)}\s+is\s+(not\s+)?None\b", source)]
        by_index = {result.index: result for result in results}
        starts = [(node, by_index[None])] if None in by_index else []
        starts += [(user, by_index[user.args[1]]) for user in node.users
                   if user.op == "call_function" and user.target is operator.getitem and user.args[1] in by_index]
        for start, result in starts:
            if _reaches(start, code, lines):
                return function, result
    return None


def _reaches(start: fx.Node, code: types.CodeType, lines: set[int]) -> bool:
    frontier, seen = [start], {start}
    while frontier:
        node = frontier.pop()
        source = node.meta.get("tz_source")
        if source is not None and source[0] == code.co_filename and source[2] == code.co_name and source[1] in lines:
            return True
        for user in node.users:
            if user not in seen:
                seen.add(user)
                frontier.append(user)
    return False


def moved_from(function: Any) -> str | None:
    """The origin the patcher notes in a moved function (``# from modeling_x.py:720 (...)``), where
    its source can be read. The note follows the function's own set-up lines (the names it sets to
    None first, for paths that leave them unset), so the whole definition is searched."""
    try:
        lines, _ = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return None
    return next((origin for origin in map(noted_origin, lines) if origin), None)


def untold_targets_fix(model: nn.Module, functions: list[Callable], hidden: list[nn.Module]) -> str | None:
    """The fix for targets that ``functions`` (moved code) swallowed where the patcher could have kept
    them out: their classes are defined in the file the code was moved from, but the model's class
    was patched without them as targets (``load_traceable(cls)``: xLSTM's blocks, run by its moved
    training branch). None where that is not so."""
    patch = getattr(type(model), "__tracezoo_patch__", None)
    told = set(getattr(patch, "manifest", {}).get("patch_targets", ()) or ())
    classes = sorted({type(module).__name__ for module in hidden})
    if patch is None or not classes or told & set(classes):
        return None
    # the target classes are the generated module's own, or (left unchanged) the original file's
    files = {Path(inspect.getsourcefile(type(module)) or "").name for module in hidden}
    modules = {type(module).__module__ for module in hidden}
    origins = {function: (moved_from(function) or "").split(":", 1)[0] for function in functions}
    if not origins or not all(function.__module__ in modules or origin in files for function, origin in origins.items()):
        return None
    return (f"{', '.join(sorted(set(origins.values())))} defines these targets, but {type(model).__name__} was patched without them "
            f"as targets, so the patcher moved the code that runs them into {', '.join(f.__name__ for f in functions)}. "
            f"Load the model with load_traceable({type(model).__name__}, targets={classes!r}) (the targets you "
            "trace with): the patcher then keeps them out of the code it moves.")
