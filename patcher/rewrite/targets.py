"""Which `self.` attributes hold (or contain) sequential target modules.

A wrapped function is opaque to the tracer: if it called a target layer, that layer would vanish
from the graph and could not be compressed on its own. So hoisting refuses statements that use
such attributes. An attribute counts when the expression assigned to it in the class mentions a
target class, a module class of this file that (transitively) contains one, or a model built at
run time (`AutoModel.from_config`), which may contain anything.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst

from .taint import target_names
from .walk import children, descendants

_CONTAINERS = frozenset({"layers", "layer", "h", "blocks", "block", "decoder_layers", "encoder_layers"})
_DYNAMIC = ("AutoModel", "from_config", "from_pretrained")


def _identifiers(node: cst.CSTNode) -> set[str]:
    out: set[str] = set()

    def walk(n: cst.CSTNode) -> None:
        if isinstance(n, cst.Name):
            out.add(n.value)
        for c in children(n):
            walk(c)

    walk(node)
    return out


def _identity_test_with_none(parent: cst.CSTNode | None, node: cst.CSTNode) -> bool:
    """Whether ``parent`` is ``node is None`` / ``node is not None`` (or ``None is node``): a test
    of whether the module is there, which calls nothing. Granite 4 Vision's ``pack_image_features``
    asks ``if self.layerwise_projectors is not None`` in its loop over images; taken for a use of
    the projectors (a model built by ``AutoModel.from_config``, so possibly holding targets), it kept
    the loop from being wrapped, and the tracer then met ``select_best_resolution``'s branches on
    the image sizes."""
    if not isinstance(parent, cst.Comparison) or len(parent.comparisons) != 1:
        return False
    target = parent.comparisons[0]
    if not isinstance(target.operator, (cst.Is, cst.IsNot)):
        return False
    other = target.comparator if parent.left is node else parent.left if target.comparator is node else None
    return isinstance(other, cst.Name) and other.value == "None"


class TargetIndex:
    def __init__(self, module: cst.Module, targets: Sequence[str]):
        self.targets = {t.rsplit(".", 1)[-1] for t in targets}
        self.attrs: dict[str, dict[str, set[str]]] = {}  # class -> attr -> identifiers assigned
        self.bases: dict[str, list[str]] = {}
        self.methods: dict[str, dict[str, cst.FunctionDef]] = {}  # class -> method name -> its def
        if not self.targets:
            return
        for cls in module.body:
            if isinstance(cls, cst.ClassDef):
                self._index_class(cls)
        containing = set(self.targets)
        for _ in range(len(self.attrs) + 1):
            grown = {c for c in self.attrs if c not in containing and self._uses(c, containing)}
            if not grown:
                break
            containing |= grown
        self.containing = containing

    def _index_class(self, cls: cst.ClassDef) -> None:
        attrs: dict[str, set[str]] = {}

        for node in descendants(cls):
            if isinstance(node, cst.Assign):
                for t in node.targets:
                    tg = t.target
                    if isinstance(tg, cst.Attribute) and isinstance(tg.value, cst.Name) and tg.value.value == "self":
                        attrs.setdefault(tg.attr.value, set()).update(_identifiers(node.value))
        self.attrs[cls.name.value] = attrs
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []
        self.methods[cls.name.value] = {fn.name.value: fn for fn in body if isinstance(fn, cst.FunctionDef)}
        self.bases[cls.name.value] = [a.value.value for a in cls.bases if isinstance(a.value, cst.Name)]

    def _class_attrs(self, cls: str, seen: set[str] | None = None) -> dict[str, set[str]]:
        seen = seen or set()
        if cls in seen:
            return {}
        seen.add(cls)
        merged: dict[str, set[str]] = {}
        for base in self.bases.get(cls, []):
            merged.update(self._class_attrs(base, seen))
        merged.update(self.attrs.get(cls, {}))
        return merged

    def _method(self, cls: str, name: str, seen: set[str] | None = None) -> cst.FunctionDef | None:
        """``cls``'s method ``name`` defined in this file (its own or a base's)."""
        seen = seen or set()
        if cls in seen:
            return None
        seen.add(cls)
        found = self.methods.get(cls, {}).get(name)
        for base in self.bases.get(cls, []):
            found = found or self._method(base, name, seen)
        return found

    def _uses(self, cls: str, containing: set[str]) -> bool:
        return any(self._blocked(ids, containing) for ids in self._class_attrs(cls).values())

    @staticmethod
    def _blocked(ids: set[str], containing: set[str]) -> bool:
        return bool(ids & containing) or any(d in i for i in ids for d in _DYNAMIC)

    def blocked_attrs(self, cls: str | None) -> set[str]:
        if not self.targets:
            return set()
        attrs = self._class_attrs(cls) if cls else {}
        return {a for a, ids in attrs.items() if self._blocked(ids, self.containing)} | _CONTAINERS

    def module_locals(self, fn: cst.FunctionDef, cls: str | None) -> set[str]:
        """Locals bound from blocked attributes (`for layer in self.layers`, `m = self.layers[0]`)."""
        if not self.targets:
            return set()
        blocked = self.blocked_attrs(cls)
        found: set[str] = set()

        def mentions(node: cst.CSTNode) -> bool:
            """Is `node` a module (container) itself? Calls return tensors, not modules."""
            if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
                return node.attr.value in blocked
            if isinstance(node, cst.Name):
                return node.value in found
            if isinstance(node, (cst.Attribute, cst.Subscript)):
                return mentions(node.value)
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in (
                    "enumerate", "zip", "reversed", "iter", "list", "tuple"):
                return any(mentions(a.value) for a in node.args)
            return False

        def bound(target: cst.CSTNode, iterable: cst.CSTNode) -> list[str]:
            """The names a loop binds to modules: in `for i, layer in enumerate(self.layers)` the
            index `i` is a plain int (wrapping code that reads it hides no module)."""
            if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) \
                    and iterable.func.value == "enumerate" and isinstance(target, (cst.Tuple, cst.List)) \
                    and len(target.elements) == 2:
                return target_names(target.elements[1].value)
            return target_names(target)

        for _ in range(2):
            for node in descendants(fn):
                if isinstance(node, cst.For) and mentions(node.iter):
                    found.update(bound(node.target, node.iter))
                elif isinstance(node, cst.Assign) and mentions(node.value):
                    for t in node.targets:
                        found.update(target_names(t.target))
        return found

    def _runs_targets(self, call: cst.Call, cls: str, blocked: set[str], followed: set[str]) -> bool:
        """Is ``call`` a call of a method of ``cls`` (defined in this file) that calls a module
        holding targets (``self.vision_tower(...)``, ``layer(...)`` over ``self.layers``), itself or
        through another such method? Only calls count: a method that merely reaches such a module
        (a setter, BigBird's ``set_attention_type``) runs no target."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
            return False
        name = func.attr.value
        method = self._method(cls, name)
        if method is None or name in followed:
            return False
        followed.add(name)
        local_modules = self.module_locals(method, cls)

        def holds_targets(callee: cst.CSTNode) -> bool:
            while isinstance(callee, cst.Subscript):  # `self.layers[0](x)`
                callee = callee.value
            if isinstance(callee, cst.Attribute) and isinstance(callee.value, cst.Name) and callee.value.value == "self":
                return callee.attr.value in blocked
            return isinstance(callee, cst.Name) and callee.value in local_modules

        return any(isinstance(node, cst.Call) and (holds_targets(node.func)
                                                   or self._runs_targets(node, cls, blocked, followed))
                   for node in descendants(method.body))

    def hidden_targets(self, stmts: list[cst.CSTNode], cls: str | None, local_modules: set[str] = frozenset(),
                       follow_methods: bool = False) -> str | None:
        """Why `stmts` may not be wrapped (they reach a target module), or None. With
        ``follow_methods``, a call of a method of ``cls`` defined in this file
        (``self.get_image_features(...)``) counts when that method calls one (see _runs_targets)."""
        if not self.targets:
            return None
        blocked = self.blocked_attrs(cls)
        hits: list[str] = []

        def walk(n: cst.CSTNode, parent: cst.CSTNode | None, grand: cst.CSTNode | None) -> None:
            if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and n.value.value == "self" \
                    and n.attr.value in blocked:
                # Reading a plain attribute (`self.visual.spatial_merge_size`) runs no module, nor
                # does testing whether the module is there (`self.projectors is not None`).
                reads_attr = isinstance(parent, cst.Attribute) and parent.value is n and not (
                    isinstance(grand, cst.Call) and grand.func is parent)
                if not reads_attr and not _identity_test_with_none(parent, n):
                    hits.append(f"self.{n.attr.value}")
            elif isinstance(n, cst.Name) and (n.value in self.containing or n.value in local_modules):
                hits.append(n.value)
            elif follow_methods and cls and isinstance(n, cst.Call) and self._runs_targets(n, cls, blocked, set()):
                hits.append(f"{cst.Module([]).code_for_node(n.func)}()")
            for c in children(n):
                walk(c, n, parent)

        for s in stmts:
            walk(s, None, None)
        if hits:
            return f"would hide target module(s) {', '.join(sorted(set(hits)))} inside an opaque call"
        return None
