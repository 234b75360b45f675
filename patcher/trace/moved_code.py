"""What the tracer reads from the code the rewriter moved into ``_wrapped_*`` functions.

Which children of a module that code can reach (:func:`reached_children`). The rewriter hands its
moved code (opaque while tracing) the module it reads (``self``). A sequential target such a
call runs would get no subgraph of its own, so the tracer refuses targets that only such a call
could reach. Counting the whole module as reached would blame every target of the model that this
sample does not run (Moshi's depth decoder, which runs only with labels) on a function that reads
one embedding table. The code says more: when it uses the module only as ``self.child`` for
children (and plain data such as ``self.config``), only those children's subtrees are reachable.
Any other use (a method or property, the module handed on whole, the name rebound) may reach
anything, and the whole module counts, as before.

Whether some path of that code returns None (:func:`may_return_none`). One opaque node is never
None while tracing, so code after the call that tests ``is None`` on its result is decided for a
value even where the graph will get None (Csm's ``input_ids = None`` once its 2-D ids are
embedded: the backbone then sees ids and embeddings and refuses both). The tracer traces such a
call through where it can decide its code (see ``SequentialTracer``).
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from typing import Any, Callable

from torch import fx, nn

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
        children = _children_read(tree, name, module)
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


@functools.lru_cache(maxsize=None)
def function_tree(function: Callable) -> ast.FunctionDef | None:
    """The definition of ``function`` (a function or method) parsed from its source; None where the
    source cannot be had."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    found = tree.body[0] if tree.body else None
    return found if isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _children_read(tree: ast.FunctionDef, name: str, module: nn.Module) -> set[str] | None:
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    children: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == name and parents.get(node) is not tree.args:
            return None  # a lambda or nested function's parameter of the same name: not followed
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        parent = parents.get(node)
        if not isinstance(node.ctx, ast.Load) or not (isinstance(parent, ast.Attribute) and parent.value is node):
            return None  # rebound, or handed on whole
        attribute = parent.attr
        if attribute in module._modules:
            children.add(attribute)
        elif not _plain_data(module, attribute):
            return None  # a method or property runs code that may reach any child
    return children


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
