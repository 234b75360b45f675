"""Which names a piece of code reads and binds, the facts hoisting needs.

Written against libcst node types directly (no ScopeProvider): it is fast, and hoisting only needs
the names of one function, with inner scopes (lambdas, comprehensions, nested defs) kept apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from .walk import children

_COMPS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)

#: Methods that change a list, dict or set in place. Code moved into a wrapped function that calls
#: one on a local must hand the container back: while tracing, the wrapper does not run, so the
#: caller's container would stay as it was and later Python tests on it would be decided wrongly.
#: `add` and `sort` are left out: on tensors (far more common in modeling code) they return a
#: new tensor, and `set.add` on a local set inside moved code is rare.
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "reverse",  # list
    "update", "setdefault", "popitem",  # dict
    "discard", "difference_update", "intersection_update", "symmetric_difference_update",  # set
})


@dataclass
class NameUse:
    reads: list[str] = field(default_factory=list)  # first-appearance order, may repeat
    writes: list[str] = field(default_factory=list)  # names (re)bound
    # bases of `x[i] = ...`, `x.a = ...`, `del x[i]`, `x[i] += ...` and `x.append(...)`-like calls
    mutated: list[str] = field(default_factory=list)
    write_nodes: list[cst.Name] = field(default_factory=list)
    control: list[str] = field(default_factory=list)  # return/yield/await/break/continue/global/...

    def ordered_reads(self) -> list[str]:
        return list(dict.fromkeys(self.reads))

    def ordered_writes(self) -> list[str]:
        return list(dict.fromkeys(self.writes))


class _Collector:
    def __init__(self, use: NameUse):
        self.use = use
        self.loop_depth = 0

    def target(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Name):
            self.use.writes.append(node.value)
            self.use.write_nodes.append(node)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self.target(el.value)
        elif isinstance(node, cst.StarredElement):
            self.target(node.value)
        elif isinstance(node, (cst.Subscript, cst.Attribute)):
            base = node.value
            while isinstance(base, (cst.Subscript, cst.Attribute)):
                base = base.value
            if isinstance(base, cst.Name):
                self.use.mutated.append(base.value)
            self.visit(node)
        else:
            self.visit(node)

    def inner_scope(self, node: cst.CSTNode, bound: set[str]) -> None:
        inner = NameUse()
        sub = _Collector(inner)
        for child in children(node):
            sub.visit(child)
        bound = bound | set(inner.writes)
        self.use.reads.extend(r for r in inner.reads if r not in bound)
        # Control flow inside an inner scope (a nested def's `return`) does not leave this code.

    def loop(self, node: cst.For | cst.While) -> None:
        """A loop's body, one loop deeper (``break`` / ``continue`` there stay inside), then its ``else``."""
        self.loop_depth += 1
        self.visit(node.body)
        self.loop_depth -= 1
        if node.orelse is not None:
            self.visit(node.orelse)

    def visit(self, node: cst.CSTNode) -> None:  # noqa: C901 - one dispatch table
        t = type(node)
        if t is cst.Name:
            self.use.reads.append(node.value)
        elif t is cst.Attribute:
            self.visit(node.value)
        elif t is cst.Arg:
            self.visit(node.value)
        elif t is cst.Assign:
            self.visit(node.value)
            for tgt in node.targets:
                self.target(tgt.target)
        elif t is cst.AnnAssign:
            if node.value is not None:
                self.visit(node.value)
                self.target(node.target)
        elif t is cst.AugAssign:
            self.visit(node.value)
            self.visit(node.target)
            self.target(node.target)
        elif t is cst.NamedExpr:
            self.visit(node.value)
            self.target(node.target)
        elif t in (cst.For,):
            self.visit(node.iter)
            self.target(node.target)
            self.loop(node)
        elif t is cst.While:
            self.visit(node.test)
            self.loop(node)
        elif t is cst.WithItem:
            self.visit(node.item)
            if node.asname is not None:
                self.target(node.asname.name)
        elif t is cst.ExceptHandler:
            if node.type is not None:
                self.visit(node.type)
            if node.name is not None:
                self.target(node.name.name)
            self.visit(node.body)
        elif t is cst.Del:
            if isinstance(node.target, cst.Name):
                self.use.control.append("del")
            self.target(node.target)
        elif t in (cst.Import, cst.ImportFrom):
            if t is cst.ImportFrom and isinstance(node.names, cst.ImportStar):
                self.use.control.append("import *")
                return
            for alias in node.names:
                if alias.asname is not None:
                    self.target(alias.asname.name)
                else:
                    name = alias.name
                    while isinstance(name, cst.Attribute):
                        name = name.value
                    self.target(name)
        elif t in _COMPS:
            bound: set[str] = set()
            comp = node.for_in
            while comp is not None:
                tmp = NameUse()
                _Collector(tmp).target(comp.target)
                bound |= set(tmp.writes)
                comp = comp.inner_for_in
            self.inner_scope(node, bound)
        elif t is cst.Lambda:
            self.inner_scope(node, {p.name.value for p in _all_params(node.params)})
        elif t in (cst.FunctionDef, cst.ClassDef):
            for dec in node.decorators:
                self.visit(dec)
            if t is cst.FunctionDef:
                for p in _all_params(node.params):
                    if p.default is not None:
                        self.visit(p.default)
                params = {p.name.value for p in _all_params(node.params)}
                self.inner_scope(node.body, params)
            else:
                for arg in node.bases:
                    self.visit(arg)
                self.inner_scope(node.body, set())
            self.target(node.name)
        elif t in (cst.Return, cst.Yield, cst.Await):
            self.use.control.append(t.__name__.lower())
            for child in children(node):
                self.visit(child)
        elif t in (cst.Break, cst.Continue):
            if self.loop_depth == 0:
                self.use.control.append(t.__name__.lower())
        elif t in (cst.Global, cst.Nonlocal):
            self.use.control.append(t.__name__.lower())
        elif t is cst.Call:
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in MUTATING_METHODS:
                base = func.value
                while isinstance(base, (cst.Subscript, cst.Attribute)):
                    base = base.value
                if isinstance(base, cst.Name):
                    self.use.mutated.append(base.value)
            # zero-argument super() needs the method's __class__ cell, which a hoisted copy lacks.
            if isinstance(node.func, cst.Name) and node.func.value == "super" and not node.args:
                self.use.control.append("super()")
            for child in children(node):
                self.visit(child)
        else:
            for child in children(node):
                self.visit(child)


def _all_params(params: cst.Parameters) -> list[cst.Param]:
    out = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    if isinstance(params.star_arg, cst.Param):
        out.append(params.star_arg)
    if params.star_kwarg is not None:
        out.append(params.star_kwarg)
    return out


def param_list(fn: cst.FunctionDef) -> list[cst.Param]:
    return _all_params(fn.params)


def name_use(*nodes: cst.CSTNode) -> NameUse:
    """Reads and bindings of `nodes` taken together, in source order."""
    use = NameUse()
    col = _Collector(use)
    for node in nodes:
        col.visit(node)
    return use


def function_body_use(fn: cst.FunctionDef) -> NameUse:
    """Names bound anywhere in `fn`'s own scope (not in nested scopes)."""
    use = NameUse()
    col = _Collector(use)
    col.visit(fn.body)
    return use
