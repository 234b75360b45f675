"""Which expressions become fx proxies while tracing ("tainted"), and of which kind.

`VALUE`: depends on tensor data (a tensor, `.sum()`, `.item()`): Python control flow on it is
data-dependent (TZ101/TZ103). `META`: depends only on shapes/dtypes/devices (`x.shape[1]`, `x.ndim`,
`x.dtype`): still a proxy under symbolic tracing, but the rewrite can often stay generic (TZ105).
`CLEAN`: a plain Python value while tracing (configs, `self.` attributes, constants, `is None`).

Flow-insensitive on purpose: a name is tainted if any assignment in the function taints it.
"""

from __future__ import annotations

import re

import libcst as cst

from ..registry.rules import CLEAN, META, VALUE, Level
from ..registry.wrapped import is_decision_name
from .walk import children, descendants

from .name_use import param_list


META_ATTRS = frozenset(
    {"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "layout", "is_sparse", "is_meta", "is_quantized"}
)
META_METHODS = frozenset(
    {"size", "dim", "numel", "ndimension", "nelement", "get_device", "is_floating_point", "is_complex",
     "element_size", "stride", "is_contiguous"}
)
#: Shape reads of a module's own parameters and buffers (``self.pos_embed.shape[1]``): the tracer
#: reads those tensors as graph values, so their shapes are traced too.
SHAPE_ATTRS = frozenset({"shape", "ndim"})
_TENSOR_CONSTRUCTORS = ("Parameter", "Buffer")
_TENSOR_REGISTRARS = ("register_buffer", "register_parameter")


def tensor_attributes(cls: cst.ClassDef) -> frozenset[str]:
    """Attributes the class's own code makes parameters or buffers (``self.x = nn.Parameter(...)``,
    ``nn.Buffer(...)``, ``self.register_buffer("x", ...)``)."""
    found: set[str] = set()
    for node in descendants(cls):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) \
                and (dotted(node.value.func) or "").rsplit(".", 1)[-1] in _TENSOR_CONSTRUCTORS:
            for target in node.targets:
                tg = target.target
                if isinstance(tg, cst.Attribute) and isinstance(tg.value, cst.Name) and tg.value.value == "self":
                    found.add(tg.attr.value)
        elif isinstance(node, cst.Call) and (dotted(node.func) or "").rsplit(".", 1)[-1] in _TENSOR_REGISTRARS \
                and node.args and isinstance(node.args[0].value, cst.SimpleString):
            found.add(node.args[0].value.evaluated_value)
    return frozenset(found)


def class_tensor_attributes(module: cst.Module) -> dict[str, frozenset[str]]:
    """Class name -> :func:`tensor_attributes`, with those of its bases defined in the module."""
    classes = {node.name.value: node for node in module.body if isinstance(node, cst.ClassDef)}
    own = {name: tensor_attributes(cls) for name, cls in classes.items()}

    def gathered(name: str, seen: frozenset[str] = frozenset()) -> frozenset[str]:
        if name in seen or name not in classes:
            return frozenset()
        bases = [dotted(base.value) for base in classes[name].bases]
        return own[name].union(*(gathered(base, seen | {name}) for base in bases if base))

    return {name: gathered(name) for name in classes}


# Calls whose result is a plain Python value even when given a proxy.
CLEAN_CALLS = frozenset({"isinstance", "hasattr", "callable", "type", "id", "issubclass", "repr", "str"})
# `torch.` namespaces that never return tensors (the flags fx itself consults while tracing).
_CLEAN_TORCH = re.compile(
    r"^torch\.(jit|compiler|_dynamo|fx|cuda|backends|distributed|overrides|_C|_utils|testing|"
    r"is_grad_enabled|is_autocast_enabled|get_default_dtype|is_tensor|device|get_autocast)"
)
_TENSOR_PARAM_NAMES = frozenset({"x", "query", "key", "value", "labels", "freq", "freqs", "cos", "sin"})
_FLAG_PREFIXES = ("with_", "use_", "return_", "output_", "is_", "has_", "num_", "n_", "do_", "skip_")
# Unannotated parameters whose names say "tensor" in transformers' vocabulary.
_TENSOR_PARAM_PARTS = ("states", "mask", "_ids", "embed", "tensor", "logits", "pixel", "feature", "hidden",
                       "_thw", "freqs", "positions")


_TENSOR_METHODS: set[str] = set()


def is_tensor_method(name: str) -> bool:
    """Is `name` an attribute of torch.Tensor? (True for everything if torch is unavailable.)"""
    if not _TENSOR_METHODS:
        try:
            import torch

            _TENSOR_METHODS.update(dir(torch.Tensor))
        except Exception:  # pragma: no cover - the patcher itself does not need torch
            return True
    return name in _TENSOR_METHODS


def dotted(node: cst.CSTNode) -> str | None:
    """`torch.nn.functional.pad` -> "torch.nn.functional.pad"; None for anything not a dotted name."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _annotation_text(param: cst.Param) -> str | None:
    if param.annotation is None:
        return None
    return cst.Module([]).code_for_node(param.annotation.annotation)


def param_taint(param: cst.Param) -> Level:
    name = param.name.value
    ann = _annotation_text(param)
    if ann is not None:
        return VALUE if "Tensor" in ann else CLEAN
    if name.startswith(_FLAG_PREFIXES):
        return CLEAN  # `with_mask`, `use_cache`, `num_hidden_states`: flags and counts
    if name in _TENSOR_PARAM_NAMES or any(part in name for part in _TENSOR_PARAM_PARTS):
        return VALUE
    return CLEAN


_SEQUENCE_TYPES = frozenset({"list", "tuple", "List", "Tuple", "typing.List", "typing.Tuple"})


def _sequence_check_of_traced(node: cst.Call, taint: "Taint") -> bool:
    """``isinstance(x, (list, tuple))`` on a traced ``x``: while tracing ``x`` is one proxy, never a
    list, so the check is always False there; when the graph runs, a wrapped helper may hand a real
    list (Idefics' per-image feature list before ``torch.cat``). Such a check decides at run time."""
    if len(node.args) != 2 or taint.of(node.args[0].value) != VALUE:
        return False
    kinds = node.args[1].value
    names = [element.value for element in kinds.elements] if isinstance(kinds, (cst.Tuple, cst.List)) else [kinds]
    return any(dotted(name) in _SEQUENCE_TYPES for name in names)


_CONTAINER_CALLS = frozenset({"dict", "list", "tuple", "set", "defaultdict", "OrderedDict", "collections.defaultdict"})


class Taint:
    """Taint of the local names of one function (and of enclosing functions).

    `containers`: locals bound to Python containers (dict/list literals): item assignment into
    them is plain Python even when the items are proxies.
    """

    def __init__(self, names: dict[str, Level] | None = None, containers: set[str] | None = None,
                 wrapped: dict | None = None, items: dict[str, Level] | None = None,
                 tensor_attrs: frozenset[str] = frozenset()):
        self.names: dict[str, Level] = dict(names or {})
        self.containers: set[str] = set(containers or ())
        # Module-level functions made by an earlier patch: a call to one is as tainted as the code
        # it holds, so that re-patching sees what the first patch saw (idempotence).
        self.wrapped: dict[str, cst.FunctionDef] = wrapped if wrapped is not None else {}
        # `outputs["image"] = self.get_image_features(...)`: the name itself stays plain (a dict),
        # but what is read back out of it (`outputs["image"].deepstack_features`) is traced.
        self.items: dict[str, Level] = dict(items or {})
        self._memo: dict[int, tuple[cst.CSTNode, Level]] = {}
        #: the enclosing class's parameters and buffers (see tensor_attributes)
        self.tensor_attrs = tensor_attrs

    def _own_tensor(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self" \
            and node.attr.value in self.tensor_attrs

    def call_results(self, node: cst.Call) -> list[Level] | None:
        """Per-returned-name taint of a call to a hoisted function, or None for other calls."""
        if not isinstance(node.func, cst.Name) or node.func.value not in self.wrapped:
            return None
        fn = self.wrapped[node.func.value]
        ret = _hoisted_return(fn)
        if ret is None:
            return None
        params = [p.name.value for p in param_list(fn)]
        seed = {p: self.of(a.value) for p, a in zip(params, node.args) if a.keyword is None and not a.star}
        inner = function_taint(fn, Taint(seed, self.containers, {}), seed_params=False)
        return [inner.names.get(n, CLEAN) for n in ret]

    def of_iterable(self, node: cst.CSTNode) -> Level:
        """Taint of iterating `node`: a literal tuple/list of proxies iterates fine."""
        if isinstance(node, (cst.Tuple, cst.List)):
            return CLEAN
        if isinstance(node, cst.Name) and node.value in self.containers:
            return CLEAN
        if isinstance(node, cst.Call) and dotted(node.func) in ("enumerate", "zip", "reversed", "list", "tuple"):
            return max((self.of_iterable(a.value) if not a.star else self.of(a.value) for a in node.args),
                       default=CLEAN)
        if isinstance(node, cst.GeneratorExp):
            return self.of_iterable(node.for_in.iter)
        if isinstance(node, cst.Call) and dotted(node.func) == "range":
            return max((self.of(a.value) for a in node.args), default=CLEAN)
        return self.of(node)

    def of(self, node: cst.CSTNode) -> Level:
        # Memoised per node (nodes are immutable); cleared whenever a name's taint changes.
        key = id(node)
        cached = self._memo.get(key)
        if cached is None or cached[0] is not node:
            cached = self._memo[key] = (node, self._of(node))
        return cached[1]

    def set(self, name: str, level: Level) -> None:
        self.names[name] = level
        self._memo.clear()

    def set_items(self, name: str, level: Level) -> None:
        self.items[name] = level
        self._memo.clear()

    def _of(self, node: cst.CSTNode) -> Level:  # noqa: C901 - one dispatch table
        t = type(node)
        if t is cst.Name:
            return self.names.get(node.value, CLEAN)
        if t is cst.Subscript and isinstance(node.value, cst.Name) and node.value.value in self.items:
            return max(self.items[node.value.value], max((self.of(c) for c in children(node)), default=CLEAN))
        if t is cst.Attribute:
            base = self.of(node.value)
            if base == VALUE and node.attr.value in META_ATTRS:
                return META
            if node.attr.value in SHAPE_ATTRS and self._own_tensor(node.value):
                return META
            return base
        if t is cst.Comparison:
            if all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons):
                return CLEAN
            return max([self.of(node.left)] + [self.of(c.comparator) for c in node.comparisons])
        if t is cst.Call:
            if isinstance(node.func, cst.Name) and is_decision_name(node.func.value):
                return CLEAN  # the tracer answers it with a Python bool (checked again at every run)
            results = self.call_results(node)
            if results is not None:
                return max(results, default=CLEAN)
            name = dotted(node.func)
            args = max((self.of(a.value) for a in node.args), default=CLEAN)
            if name == "isinstance" and _sequence_check_of_traced(node, self):
                return VALUE
            if name in CLEAN_CALLS:
                return CLEAN
            if name == "len":
                return META if args else CLEAN
            if name is not None and name.startswith("torch."):
                if _CLEAN_TORCH.match(name):
                    return CLEAN
                if name in ("torch.finfo", "torch.iinfo"):
                    return META if args else CLEAN
                return VALUE if args else CLEAN
            if isinstance(node.func, cst.Attribute):
                base = self.of(node.func.value)
                method = node.func.attr.value
                if method in META_METHODS and self._own_tensor(node.func.value):
                    return META
                if base == VALUE and not is_tensor_method(method):
                    # `past_key_values.get_seq_length()`: not a tensor after all (annotations lie);
                    # the result is as traced as what goes in.
                    return VALUE if args else CLEAN
                if base == VALUE:
                    return META if method in META_METHODS else VALUE
                if base == META:
                    return META
                # `self.proj(x)`: a module (or helper) applied to a proxy returns a proxy.
                return VALUE if args else CLEAN
            return VALUE if args else CLEAN
        if t in (cst.Lambda, cst.SimpleString, cst.Integer, cst.Float, cst.Imaginary):
            return CLEAN
        if t is cst.FormattedString:
            return CLEAN  # formatting a proxy works; freezing it is TZ102's business
        return max((self.of(c) for c in children(node)), default=CLEAN)


def _assignments(fn: cst.FunctionDef):
    """(target node, value node) pairs for every binding in fn's own scope."""
    pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = []

    for node in descendants(fn.body, stop=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        t = type(node)
        if t is cst.Assign:
            for tgt in node.targets:
                pairs.append((tgt.target, node.value))
        elif t is cst.AnnAssign:
            if node.value is not None:
                pairs.append((node.target, node.value))
        elif t in (cst.AugAssign, cst.NamedExpr):
            pairs.append((node.target, node.value))
        elif t in (cst.For, cst.CompFor):
            pairs.append((node.target, node.iter))
        elif t is cst.WithItem:
            if node.asname is not None:
                pairs.append((node.asname.name, node.item))
    return pairs


def target_names(node: cst.CSTNode) -> list[str]:
    """The names an assignment or loop target binds (through tuples, lists and starred elements)."""
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [n for el in node.elements for n in target_names(el.value)]
    if isinstance(node, cst.StarredElement):
        return target_names(node.value)
    return []


def param_like_tensor(node: cst.CSTNode, taint: Taint) -> bool:
    return taint.of(node) != CLEAN


def _hoisted_return(fn: cst.FunctionDef) -> list[str] | None:
    """Names returned by a function the hoister made (`try: ...; return a, b`), else None."""
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else []
    tries = [s for s in body if isinstance(s, cst.Try)]
    if len(tries) != 1:
        return None
    last = tries[0].body.body[-1] if tries[0].body.body else None
    if not isinstance(last, cst.SimpleStatementLine) or not isinstance(last.body[0], cst.Return):
        return [] if last is not None else None
    value = last.body[0].value
    if isinstance(value, cst.Name):
        return [value.value]
    if isinstance(value, cst.Tuple) and all(isinstance(e.value, cst.Name) for e in value.elements):
        return [e.value.value for e in value.elements]
    return None


# Attributes that other objects commonly have too: transformers' models and configs
# (`module.dtype`, `config.dtype`, `model.dequantize()`), BatchFeature's and dataclasses'
# `.data`, anything's `.name`.
_SHARED_WITH_OTHER_OBJECTS = frozenset({"dtype", "dequantize", "data", "name", "volatile"})
_TENSOR_ONLY: dict[str, frozenset[str]] = {}


def tensor_only_attributes() -> tuple[frozenset[str], frozenset[str]]:
    """(properties, methods) of ``torch.Tensor`` that no other common argument has: not Python's
    numbers, strings and containers, nor modules, dtypes, devices, sizes or generators. So
    ``x.shape``/``x.ndim`` (read) and ``x.sum()``/``x.any()``/``x.tolist()`` (called) are in;
    ``x.to``, ``x.float``, ``x.index``, ``x.split``, ``x.dtype`` are out. Methods count only when
    called: ``conv.stride`` or ``layer.indices`` read as attributes are a module's settings.
    Empty without torch: then nothing is inferred."""
    if not _TENSOR_ONLY:
        try:
            import torch
        except Exception:  # pragma: no cover - the patcher itself does not need torch
            return frozenset(), frozenset()
        shared: set[str] = set(_SHARED_WITH_OTHER_OBJECTS)
        for kind in (object, int, float, bool, complex, str, bytes, list, tuple, dict, set, frozenset,
                     torch.nn.Module, torch.dtype, torch.device, torch.Size, torch.Generator):
            shared.update(dir(kind))
        names = [n for n in dir(torch.Tensor) if not n.startswith("_") and n not in shared]
        _TENSOR_ONLY["methods"] = frozenset(n for n in names if callable(getattr(torch.Tensor, n)))
        _TENSOR_ONLY["properties"] = frozenset(names) - _TENSOR_ONLY["methods"]
    return _TENSOR_ONLY["properties"], _TENSOR_ONLY["methods"]


# What a torch function calls its first parameter when that parameter is a tensor.
_TENSOR_INPUT_NAMES = frozenset({"input", "self", "tensor", "condition"})
_FIRST_PARAMETER: dict[str, str | None] = {}


def takes_tensor_first(name: str) -> bool:
    """Does the torch function ``name`` (``torch.sum``, ``torch.nn.functional.pad``) take a tensor
    as its first argument? Read from its signature or, for builtins, its documented one
    (``sum(input, *, dtype=None)``); factories such as ``torch.arange(start, ...)`` and
    ``torch.zeros(*size)`` take numbers, ``torch.cat(tensors)`` a sequence: no."""
    if name not in _FIRST_PARAMETER:
        _FIRST_PARAMETER[name] = _first_parameter(name)
    return _FIRST_PARAMETER[name] in _TENSOR_INPUT_NAMES


def _first_parameter(name: str) -> str | None:
    import inspect

    try:
        import torch
    except Exception:  # pragma: no cover
        return None
    obj = torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    if not callable(obj) or isinstance(obj, type):
        return None
    try:
        parameters = list(inspect.signature(obj).parameters)
        return parameters[0] if parameters else None
    except (TypeError, ValueError):
        match = re.match(r"\s*[\w.]+\((\*?\w+)", getattr(obj, "__doc__", None) or "")
        return match.group(1) if match else None


def _torch_name(name: str | None) -> str | None:
    """``nn.functional.pad`` (transformers' ``from torch import nn``) -> ``torch.nn.functional.pad``."""
    if name is None:
        return None
    if name.startswith("nn."):
        return "torch." + name
    return name if name.startswith("torch.") else None


def _used_as_tensor(fn: cst.FunctionDef) -> set[str]:
    """Unannotated parameters that the body uses as tensors, whatever their names say (`lengths`,
    `données`): an attribute only tensors have (`p.sum()`, `p.shape`, `p.tolist()`), or the tensor
    argument of a torch function (`torch.sum(p)`). Names alone miss them, and then control flow on
    their data would be neither rewritten nor reported."""
    unknown = {p.name.value for p in param_list(fn) if p.annotation is None and p.name.value not in ("self", "cls")
               and param_taint(p) == CLEAN and not p.name.value.startswith(_FLAG_PREFIXES)}
    found: set[str] = set()
    if not unknown:
        return found
    properties, methods = tensor_only_attributes()
    for node in descendants(fn.body, stop=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value in unknown \
                and node.attr.value in properties:
            found.add(node.value.value)
        if not isinstance(node, cst.Call):
            continue
        method = node.func
        if isinstance(method, cst.Attribute) and isinstance(method.value, cst.Name) \
                and method.value.value in unknown and method.attr.value in methods:
            found.add(method.value.value)
        elif node.args and node.args[0].keyword is None and not node.args[0].star \
                and isinstance(node.args[0].value, cst.Name) and node.args[0].value.value in unknown:
            torch_name = _torch_name(dotted(node.func))
            if torch_name is not None and not _CLEAN_TORCH.match(torch_name) and takes_tensor_first(torch_name):
                found.add(node.args[0].value.value)
    return found


_CONTAINER_TYPES = frozenset({"dict", "list", "tuple", "Mapping", "MutableMapping", "Sequence", "OrderedDict"})


def _container_checked(fn: cst.FunctionDef) -> set[int]:
    """ids of walrus targets tested with `isinstance(name := value, <container type>)`."""
    found: set[int] = set()
    for node in descendants(fn.body, stop=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        if not (isinstance(node, cst.Call) and dotted(node.func) == "isinstance" and len(node.args) == 2):
            continue
        first, kind = node.args[0].value, node.args[1].value
        kinds = [e.value for e in kind.elements] if isinstance(kind, cst.Tuple) else [kind]
        if isinstance(first, cst.NamedExpr) and any(
                (dotted(k) or "").rsplit(".", 1)[-1] in _CONTAINER_TYPES for k in kinds):
            found.add(id(first.target))
    return found


def function_taint(fn: cst.FunctionDef, outer: Taint | None = None, *, seed_params: bool = True,
                   param_levels: dict[str, Level] | None = None) -> Taint:
    """Fixpoint of taint over fn's assignments, seeded from its parameters. ``param_levels``:
    what the module's call sites pass in (``call_sites.call_site_taint``), raising a parameter
    above what its name and annotation say."""
    taint = Taint(outer.names if outer else None, outer.containers if outer else None,
                  outer.wrapped if outer else None, outer.items if outer else None,
                  outer.tensor_attrs if outer else frozenset())
    for p in param_list(fn) if seed_params else ():
        taint.set(p.name.value, param_taint(p))
    if seed_params:
        for name in _used_as_tensor(fn):
            taint.set(name, VALUE)
        for name, level in (param_levels or {}).items():
            if level > taint.names.get(name, CLEAN):
                taint.set(name, level)
    pairs = _assignments(fn)
    # A container only if every binding of the name is a literal or constructor call:
    # `x = list(x)` on a tensor `x` must not hide the tensor.
    kinds: dict[str, bool] = {}
    checked = _container_checked(fn)
    for target, value in pairs:
        if id(target) in checked:
            # `if not isinstance(m := mask, dict): m = {...}`: the check itself says what m may be;
            # the other bindings decide whether m is a container.
            continue
        is_container = isinstance(value, (cst.Dict, cst.List, cst.DictComp, cst.ListComp)) or (
            isinstance(value, cst.Call) and dotted(value.func) in _CONTAINER_CALLS
            and not any(a.value and param_like_tensor(a.value, taint) for a in value.args))
        for name in target_names(target):
            kinds[name] = kinds.get(name, True) and is_container and isinstance(target, cst.Name)
    taint.containers |= {n for n, c in kinds.items() if c}
    for _ in range(8):
        changed = False
        for target, value in pairs:
            if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
                level = taint.of(value)
                if level > taint.items.get(target.value.value, CLEAN):
                    taint.set_items(target.value.value, level)
                    changed = True
                continue
            if isinstance(target, (cst.Subscript, cst.Attribute)):
                continue
            per = taint.call_results(value) if isinstance(value, cst.Call) and isinstance(target, cst.Tuple) else None
            if per is not None and len(per) == len(target.elements):
                for el, level in zip(target.elements, per):
                    for name in target_names(el.value):
                        if level > taint.names.get(name, CLEAN):
                            taint.set(name, level)
                            changed = True
                continue
            level = taint.of(value)
            for name in target_names(target):
                if level > taint.names.get(name, CLEAN):
                    taint.set(name, level)
                    changed = True
        if not changed:
            break
    return taint
