"""What a module's own call sites pass into its helpers' parameters.

A parameter's taint is read from its name and annotation (``taint.param_taint``), which says
nothing about ``input_shape`` or ``lengths``. When the module's own code calls the helper with a
shape (``self._prepare_mask(mask, input_ids.shape)``) or a tensor, that parameter is a proxy
while tracing whatever it is called, and a branch on it fails exactly like one in the caller
would. So a parameter is as tainted as the most tainted argument any call site in the module
passes it: flow-insensitive, like the rest of the taint. Only calls the module itself resolves
are followed: ``self.method(...)`` inside the class that defines the method, and a top-level
function called by its name where no local shadows it.
"""

from __future__ import annotations

import libcst as cst

from .name_use import function_body_use, param_list
from .taint import CLEAN, Level, Taint, function_taint
from .walk import descendants

#: (class name or None for a top-level function, function name)
FunctionKey = tuple[str | None, str]

#: Rounds of propagation: a helper's helper needs a second round; deeper chains are rare.
_ROUNDS = 4


def _is_static(fn: cst.FunctionDef) -> bool:
    return any(isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod" for d in fn.decorators)


def _functions(module: cst.Module) -> dict[FunctionKey, cst.FunctionDef]:
    found: dict[FunctionKey, cst.FunctionDef] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef):
            found[(None, stmt.name.value)] = stmt
        elif isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            for inner in stmt.body.body:
                if isinstance(inner, cst.FunctionDef):
                    found[(stmt.name.value, inner.name.value)] = inner
    return found


def _bound(fn: cst.FunctionDef, call: cst.Call, *, drops_first: bool) -> list[tuple[str, cst.BaseExpression]]:
    """(parameter name, argument) pairs of a call; starred arguments bind nothing known."""
    params = fn.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    if drops_first:
        positional = positional[1:]
    keywords = {p.name.value for p in param_list(fn)} - {params.star_kwarg.name.value if params.star_kwarg else ""}
    pairs: list[tuple[str, cst.BaseExpression]] = []
    index = 0
    for arg in call.args:
        if arg.star:
            if arg.star == "*":
                index = len(positional)  # later positional arguments land where the star's end
            continue
        if arg.keyword is None:
            if index < len(positional):
                pairs.append((positional[index], arg.value))
            index += 1
        elif arg.keyword.value in keywords:
            pairs.append((arg.keyword.value, arg.value))
    return pairs


def _callee(call: cst.Call, cls: str | None, functions: dict[FunctionKey, cst.FunctionDef],
            shadowed: set[str]) -> tuple[cst.FunctionDef, bool] | None:
    """The module's own function a call reaches, and whether its first parameter is the receiver."""
    func = call.func
    if isinstance(func, cst.Name) and func.value not in shadowed:
        fn = functions.get((None, func.value))
        return (fn, False) if fn is not None else None
    if cls is not None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
            and func.value.value == "self":
        fn = functions.get((cls, func.attr.value))
        return (fn, not _is_static(fn)) if fn is not None else None
    return None


def call_site_taint(module: cst.Module, wrapped: dict[str, cst.FunctionDef]) -> dict[FunctionKey, dict[str, Level]]:
    """For each top-level function and method: parameter -> the most tainted argument the module's
    call sites pass it (only parameters some call site taints)."""
    functions = _functions(module)
    shadowing = {key: set(function_body_use(fn).writes) | {p.name.value for p in param_list(fn)}
                 for key, fn in functions.items()}
    seeds: dict[FunctionKey, dict[str, Level]] = {}
    for _ in range(_ROUNDS):
        changed = False
        for (cls, name), fn in functions.items():
            taint = function_taint(fn, Taint(wrapped=wrapped), param_levels=seeds.get((cls, name)))
            for node in descendants(fn.body, stop=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                if not isinstance(node, cst.Call):
                    continue
                callee = _callee(node, cls, functions, shadowing[(cls, name)])
                if callee is None:
                    continue
                target, drops_first = callee
                key = (None if isinstance(node.func, cst.Name) else cls, target.name.value)
                for param, value in _bound(target, node, drops_first=drops_first):
                    level = taint.of(value)
                    if level > seeds.get(key, {}).get(param, CLEAN):
                        seeds.setdefault(key, {})[param] = level
                        changed = True
        if not changed:
            break
    return seeds
