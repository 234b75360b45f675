"""Classes the rewrite leaves alone stay the source module's own classes.

A generated module that defines a copy of every class hands out classes that are equal in code
but not in identity, and a registry keyed on the class object misses the copy without a word:
llm-compressor finds Llama 4's fused experts by ``LinearExperts2D._registry[Llama4TextExperts]``,
so a model built from a patched copy of ``modeling_llama4.py`` had none of its 48 expert Linears
quantized, and said nothing. So where a class is provably the same thing in both modules, the
generated module imports it from the source module instead of defining it again.

A class stays the original only if all of this holds (each point is a way the original and the
copy could behave differently):

- **its statement is unchanged** (the same syntax tree, decorators included);
- **everything it reads is unchanged, transitively**: every name in the class (bases, decorators,
  method bodies) that the module binds at its top level is an import (the same object in both
  modules), a class or function that is itself unchanged with unchanged reads, or a constant. A
  method of the original class reads the *source* module's globals: had the rewrite changed a
  function it calls (``apply_rotary_emb``) or a class it builds (``Llama4TextAttention`` in
  ``Llama4TextDecoderLayer.__init__``), the original class would call and build the unrewritten
  ones, so it must stay a copy;
- **it shares no module state**: a name bound by any other statement (a dict or object made when
  the module runs, a conditional definition) is a different object in each module, so a class
  reading one stays a copy. A logger (``logging.get_logger(__name__)``) only prints and counts as
  a constant;
- **it looks nothing up dynamically** (``globals()``, ``sys.modules``, ``eval``, ``__name__``, a
  ``global`` statement): what it would find is not known before it runs;
- **the generated module does nothing to it when it runs**: a top-level statement, decorator or
  class body that reads an attribute of the class, calls it, or hands it to a call at import time
  (``X.register(...)``, ``LAYERS.append(X)``) would do that to transformers' own class. Using it
  as a base class, or naming it in a class attribute (``_can_record_outputs = {...: X}``), does
  nothing to it;
- the caller does not name it in ``treat_as_changed``: ``load_traceable`` names the Auto classes
  it rebinds after import (a class that builds a sub-model with ``AutoModel.from_config`` must
  build the traceable one) and the class it returns, the zoo the classes an entry exports.

Everything else stays a copy, as before. The analysis runs on syntax only; it never imports.
"""

from __future__ import annotations

import ast
import importlib
import sys
import weakref
from dataclasses import dataclass, field
from types import ModuleType
from typing import Iterable

import libcst as cst

#: Names through which code finds objects other than by reading a global of its module.
DYNAMIC_NAMES = frozenset({"globals", "locals", "vars", "eval", "exec", "compile", "__import__", "sys",
                           "importlib", "__name__", "__file__", "__spec__", "__loader__", "__package__",
                           "__builtins__", "__dict__"})

#: Calls that only store the class they are given (transformers' output capture matches modules
#: against it with ``isinstance``), which is the same in both modules once the class is the original.
STORING_CALLS = frozenset({"OutputRecorder"})

#: The comment on the import that replaces an unchanged class (``rewrite.originals`` explains it).
NOTE = "unchanged by the patcher: the original class"


@dataclass
class _Binding:
    """What the top level of a module binds to one name."""

    kinds: set[str] = field(default_factory=set)  # "import", "class", "function", "constant", "state"
    statements: list[str] = field(default_factory=list)  # ast.dump of each statement that binds it
    reads: set[str] = field(default_factory=set)  # every name those statements mention
    dynamic: bool = False


def _targets(node: ast.AST) -> Iterable[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            yield sub.id


def _is_logger(value: ast.AST) -> bool:
    """``logging.get_logger(__name__)`` / ``logging.getLogger(__name__)`` / ``get_logger(__name__)``."""
    if not isinstance(value, ast.Call) or len(value.args) != 1 or value.keywords:
        return False
    argument = value.args[0]
    return (_called_name(value) in ("get_logger", "getLogger") and isinstance(argument, ast.Name)
            and argument.id == "__name__")


def _constant(value: ast.AST) -> bool:
    """A value that is the same thing in both modules, or carries no state they could share."""
    if isinstance(value, (ast.Constant, ast.Name)):
        return True  # a name is read: the fixpoint decides whether it is unchanged
    if isinstance(value, ast.Attribute):
        return _constant(value.value)
    if isinstance(value, ast.Tuple):
        return all(_constant(element) for element in value.elts)
    if isinstance(value, ast.UnaryOp):
        return isinstance(value.operand, ast.Constant)
    if isinstance(value, ast.BinOp):
        return isinstance(value.left, ast.Constant) and isinstance(value.right, ast.Constant)
    return _is_logger(value)


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _statement_bindings(stmt: ast.stmt) -> list[tuple[str, str]]:
    """(name, kind) for every name a top-level statement binds."""
    if isinstance(stmt, ast.Import):
        return [((alias.asname or alias.name.split(".")[0]), "import") for alias in stmt.names]
    if isinstance(stmt, ast.ImportFrom):
        return [((alias.asname or alias.name), "import") for alias in stmt.names if alias.name != "*"]
    if isinstance(stmt, ast.ClassDef):
        return [(stmt.name, "class")]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(stmt.name, "function")]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        if stmt.value is None:
            return []
        kind = "constant" if _constant(stmt.value) else "state"
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        simple = all(isinstance(target, ast.Name) for target in targets)
        return [(name, kind if simple else "state") for target in targets for name in _targets(target)]
    # Anything else (augmented assignments, `del`, `if`/`try`/`with` blocks that import or define)
    # binds names when the module runs, perhaps conditionally: imports in such blocks are still the
    # same objects in both modules; every other binding is the module's own.
    found: list[tuple[str, str]] = []
    for sub in ast.walk(stmt):
        if isinstance(sub, (ast.Import, ast.ImportFrom)):
            found += [(name, "import") for name, _ in _statement_bindings(sub)]
        elif isinstance(sub, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((sub.name, "state"))
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            found.append((sub.id, "state"))
    return found


def _bindings(tree: ast.Module) -> dict[str, _Binding]:
    table: dict[str, _Binding] = {}
    for stmt in tree.body:
        dump = ast.dump(stmt)
        reads = {sub.id for sub in ast.walk(stmt) if isinstance(sub, ast.Name)}
        dynamic = bool(reads & DYNAMIC_NAMES) or any(isinstance(sub, ast.Global) for sub in ast.walk(stmt))
        for name, kind in _statement_bindings(stmt):
            binding = table.setdefault(name, _Binding())
            binding.kinds.add(kind)
            binding.statements.append(dump)
            if kind != "import":
                binding.reads |= reads - {name}
                binding.dynamic |= dynamic and kind in ("class", "function")
    return table


def _changed_names(before: dict[str, _Binding], after: dict[str, _Binding], treat_as_changed: set[str]) -> set[str]:
    """Top-level names that are not provably the same thing in the source and the generated module."""
    changed = set(treat_as_changed)
    for name in before.keys() | after.keys():
        binding = before.get(name)
        if binding is None or name not in after or binding.statements != after[name].statements:
            changed.add(name)
        elif "state" in binding.kinds or binding.dynamic:
            changed.add(name)
    # what reads a changed name is changed: until nothing more changes
    grew = True
    while grew:
        grew = False
        for name, binding in before.items():
            if name not in changed and binding.kinds != {"import"} and binding.reads & changed:
                changed.add(name)
                grew = True
    return changed


def _import_time_uses(tree: ast.Module, names: set[str]) -> set[str]:
    """Names of ``names`` that code run at import time does something to (see the module docstring):
    read an attribute of, call, or hand to a call or decorator; anywhere in a top-level statement
    other than a class or function definition."""
    used: set[str] = set()

    def harmful(node: ast.AST) -> None:
        # anything in this expression that mentions a name does something with it
        used.update(sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and sub.id in names)

    def attribute_or_call(node: ast.AST) -> None:
        # a plain reference stores the class; an attribute read or a call acts on it
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in names:
                used.add(sub.value.id)
            elif isinstance(sub, ast.Call) and _called_name(sub) not in STORING_CALLS:
                for part in (sub.func, *sub.args, *(keyword.value for keyword in sub.keywords)):
                    if isinstance(part, ast.Name) and part.id in names:
                        used.add(part.id)

    def function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            harmful(decorator)
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if default is not None:
                attribute_or_call(default)

    def class_body(node: ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            harmful(decorator)
        for base in (*node.bases, *(keyword.value for keyword in node.keywords)):
            if not isinstance(base, ast.Name):
                attribute_or_call(base)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                function(stmt)
            elif isinstance(stmt, ast.ClassDef):
                class_body(stmt)
            else:
                attribute_or_call(stmt)

    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function(stmt)
        elif isinstance(stmt, ast.ClassDef):
            class_body(stmt)
        elif not isinstance(stmt, (ast.Import, ast.ImportFrom)):
            harmful(stmt)
    return used


def unchanged_classes(before: str, after: str, treat_as_changed: Iterable[str] = ()) -> list[str]:
    """Top-level classes of ``before`` (the source, imports made absolute) that ``after`` (the
    rewritten module) may import from the source module instead of defining again, in order."""
    before_tree, after_tree = ast.parse(before), ast.parse(after)
    before_bindings, after_bindings = _bindings(before_tree), _bindings(after_tree)
    kept = set(treat_as_changed)
    while True:
        changed = _changed_names(before_bindings, after_bindings, kept)
        candidates = [name for name, binding in before_bindings.items()
                      if binding.kinds == {"class"} and len(binding.statements) == 1 and name not in changed]
        # a class the module acts on stays a copy, and so does every class that reads it: an
        # original class that built the original where the copy's readers expect the copy
        # (``_can_record_outputs`` of a copied PreTrainedModel) would split the two
        acted_on = _import_time_uses(after_tree, set(candidates))
        if not acted_on:
            return candidates
        kept |= acted_on


def import_originals(module: cst.Module, names: Iterable[str], source_module: str) -> cst.Module:
    """``module`` with the top-level definitions of the classes ``names`` replaced, in place, by an
    import of the source module's own class (comments and blank lines before them kept)."""
    names = set(names)
    if not names:
        return module
    body = []
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value in names:
            line = cst.parse_statement(f"from {source_module} import {stmt.name.value}  # {NOTE}\n")
            stmt = line.with_changes(leading_lines=stmt.leading_lines)
        body.append(stmt)
    return module.with_changes(body=body)


def source_class(cls: type) -> type | None:
    """The class ``cls`` is a rewritten copy of: the class of the same name in the source module
    that the generated file defining ``cls`` names in its header (``# source module: ...``), for
    classes of files the patcher generated (``load_traceable``'s, the zoo's, ``patcher patch``'s).
    None for any other class, and for a class the generated file imports from its source (it is
    the original already).

    For lookups keyed on the original class object that a rewritten copy must be found by as well
    (llm-compressor's ``LinearExperts2D._registry[GptOssExperts]``: GPT-OSS's experts loop is
    rewritten, so its class cannot be the original). A copy computes what the original computes
    and has the same parameters (``__init__`` is never rewritten), so what a registry keeps for
    the original fits the copy.
    """
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    source_module = _source_module_of(module) if module is not None else None
    if source_module is None or source_module == module.__name__:
        return None
    try:
        original = getattr(importlib.import_module(source_module), cls.__name__, None)
    except ImportError:
        return None
    return original if isinstance(original, type) and original is not cls else None


def _source_module_of(module: ModuleType) -> str | None:
    """The ``source module`` header field of a generated module's file; None for other modules."""
    if module in _SOURCE_MODULES:
        return _SOURCE_MODULES[module]
    from .file_header import MARKER, split_header

    path = getattr(module, "__file__", None)
    found = None
    try:
        with open(path, encoding="utf-8") as handle:
            head = handle.read(4096)
    except (OSError, TypeError):
        head = ""
    if head.startswith(MARKER):
        found = split_header(head)[0].get("source module")
    _SOURCE_MODULES[module] = found
    return found


#: module -> its file's header's source module (None: not generated), read once per module object
_SOURCE_MODULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
