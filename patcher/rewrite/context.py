"""The state a rewrite works in: the module being patched, the function, the statement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper

from ..registry.locations import Location
from ..registry.origins import origin_note
from ..registry.wrapped import DECIDED_PREFIX, WRAPPED_PREFIX
from . import hoist as hoist_mod
from .bound import bound_before
from .detect import find_issues, header_nodes
from .wrapper_names import Namer
from .opaque_results import tests_none_of
from .traced_items import truth_tests_item
from .positions import positions_of
from .records import Blocker, Rewrite
from .shapes import is_shape_expr
from .taint import Taint
from .targets import TargetIndex
from .walk import descendants


@dataclass(frozen=True)
class Forwarder:
    """The module-level wrapped function that calls to an ignored function or a method wrapped
    whole go through, with the rule it is recorded under and why (see rules.base.RuleHooks)."""

    function: str  # its name
    code: str  # the rule that forwards the call
    reason: str  # why, as the manifest says it


class Forwarding(Protocol):
    """What a statement's rules need of the engine (engine.Engine): the module's state, the
    names calls to which go through forwarders, and the forwarder for one of them."""

    state: ModuleState
    redirect_names: set[str]

    def forwarder(self, name: str, *, method: bool, line: int) -> Forwarder | None: ...


@dataclass
class ModuleState:
    filename: str
    wrapper: MetadataWrapper
    namer: Namer
    ignore: set[str]
    redirect_methods: dict[str, str]  # method name -> rule code (whole-method wrap)
    targets: TargetIndex
    locations: dict[int, Location]  # line -> what a tracer failure asks for there
    existing_wrapped: set[str]
    module_names: set[str]  # bound at module level: definitions, imports, assignments
    wrapped_defs: dict
    has_torch: bool
    has_note_helper: bool
    tensor_attrs: dict = field(default_factory=dict)  # class -> its parameters and buffers (taint.tensor_attributes)
    rewrites: list[Rewrite] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)
    pending: list[cst.BaseStatement] = field(default_factory=list)
    forwarders: dict[tuple[str, bool], Forwarder] = field(default_factory=dict)
    used_locations: set[int] = field(default_factory=set)
    containers_changed: bool = False
    unsettled: set = field(default_factory=set)  # functions to look at again (see api._settle)
    only: set | None = None  # rewrite only these functions (qualnames); None: all
    line_map: dict = field(default_factory=dict)  # lines of this module -> lines of the original source
    #: (class or None, function) -> parameter -> taint the module's own call sites pass in
    param_seeds: dict = field(default_factory=dict)
    #: module-level functions a rule wraps whole (named in redirect_methods with its rule)
    whole_functions: set = field(default_factory=set)
    _pos: object = None

    current_top: int = 0  # index of the top-level statement being rewritten
    _starts: list | None = None
    _done_tops: set = field(default_factory=set)

    def lines(self, node: cst.CSTNode) -> tuple[int, int]:
        """(first, last) line of an original node of the current top-level statement.

        Positions cost a codegen pass with bookkeeping on every node; it is paid only for the
        top-level statements that something is rewritten in (plain codegen finds their start)."""
        if self._pos is None:
            self._pos = {}
        r = self._pos.get(node)
        if r is None and self.current_top not in self._done_tops:
            self._done_tops.add(self.current_top)
            self._pos.update(positions_of(self.wrapper.module, self.current_top, self._top_starts()))
            r = self._pos.get(node)
        if r is None:
            raise KeyError(node)
        return r.start.line, r.end.line

    def _top_starts(self) -> list[int]:
        if self._starts is None:
            module = self.wrapper.module
            line = 1 + len(module.header)
            starts = []
            for stmt in module.body:
                starts.append(line)
                line += module.code_for_node(stmt).count("\n")
            self._starts = starts
        return self._starts

    def origin(self, line: int) -> str:
        return f"{self.filename}:{self.line_map.get(line, line)}"

    def block(self, line: int, code: str, kind: str, reason: str) -> None:
        b = Blocker(self.filename, line, code, kind, reason)
        if not any((x.line, x.reason) == (b.line, b.reason) for x in self.blockers):
            self.blockers.append(b)

    def add_function(self, fn: cst.FunctionDef) -> None:
        if not self.has_torch:
            self.pending.append(cst.parse_statement("import torch").with_changes(
                leading_lines=[cst.EmptyLine(comment=cst.Comment("# TRACING: the wrapped functions below need torch.fx"))]))
            self.has_torch = True
        if not self.has_note_helper:
            self.pending.append(hoist_mod.note_helper())
            self.has_note_helper = True
        self.pending.append(fn)


@dataclass
class FunctionCtx:
    qualname: str
    method: str
    cls: str | None
    taint: Taint
    local_names: set[str]
    first_bound_fn: object
    params: set[str]
    shape_names: set[str]
    module_locals: set[str]
    body: list | None = None  # the function's statements (original nodes), for bound.bound_before
    outer_names: set = field(default_factory=set)  # locals of enclosing functions (bound: closures)
    #: names holding an opaque call's result at the statement being rewritten (see opaque_results)
    opaque_results: set = field(default_factory=set)
    #: dicts holding a traced value at the statement being rewritten (see traced_items)
    traced_items: set = field(default_factory=set)
    _first_bound: dict | None = None

    @property
    def first_bound(self) -> dict[str, int]:
        if self._first_bound is None:
            self._first_bound = self.first_bound_fn()
        return self._first_bound


class StatementContext:
    """What a rule may ask about, and do to, one statement: implements rules.base.RuleContext
    for the rules, and tells the engine what they did (hoisted, guarded, blocked)."""

    def __init__(self, engine: Forwarding, fctx: FunctionCtx, stmt: cst.CSTNode, forced: str | None,
                 forced_lines: set[int]):
        self.engine = engine
        self.state = engine.state
        self.fctx = fctx
        self.stmt = stmt
        self.taint = fctx.taint
        self.method = fctx.method.strip("_") or "fn"
        self.body = fctx.body
        self.forced = forced
        self.forced_lines = forced_lines
        self.hoisted = False
        self.guarded = False  # the hoisted call sits inside an `if NAME is not None:` guard
        self.guard_kept = False  # a rule kept a plain guard as an `if` around the wrapped call
        self.header_only = False  # a rule rewrote only the tests of an `if`: its bodies are the engine's
        self.blocked = False
        self._issues: dict[int, list] = {}

    def issues(self, stmt: cst.CSTNode) -> list:
        key = id(stmt)
        if key not in self._issues:
            self._issues[key] = find_issues(stmt, self.taint)
        return self._issues[key]

    def forces(self, code: str, branch: cst.If) -> bool:
        if self.forced != code:
            return False
        start, _ = self.state.lines(branch)
        _, end = self.state.lines(branch.test)
        return any(start <= line <= end for line in self.forced_lines)

    def tests_opaque_none(self, test: cst.BaseExpression) -> bool:
        """Does ``test`` ask whether an opaque call's result is None? (Decided by the data.)"""
        return tests_none_of(test, self.fctx.opaque_results)

    def tests_traced_item(self, test: cst.BaseExpression) -> bool:
        """Is ``test`` a truth test of an item read back from a dict holding a traced value?"""
        return truth_tests_item(test, self.fctx.traced_items)

    def is_local(self, name: str) -> bool:
        return name in self.fctx.local_names

    def is_builtin(self, name: str) -> bool:
        """Does ``name`` here mean Python's builtin: bound by neither the function, those
        enclosing it, nor the module?"""
        return name not in self.fctx.local_names and name not in self.state.module_names

    def is_shape(self, expr: cst.CSTNode) -> bool:
        return is_shape_expr(expr, self.fctx.shape_names)

    def mentions_redirected(self, stmt: cst.CSTNode) -> bool:
        """Does `stmt`'s header name any ignored function or redirected method?"""
        wanted = self.engine.redirect_names
        for head in header_nodes(stmt):
            for node in descendants(head, stop=(cst.FunctionDef, cst.ClassDef)):
                if type(node) is cst.Name and node.value in wanted:
                    return True
        return False

    def forwarder(self, name: str, *, method: bool) -> Forwarder | None:
        return self.engine.forwarder(name, method=method, line=self.state.lines(self.stmt)[0])

    def _span_lines(self, span: cst.CSTNode) -> tuple[int, int]:
        """The lines of ``span``. Expression rules run one after another on a statement, so a rule
        after the first may be handed the statement an earlier one rebuilt: a new node, with no
        position in the source; it stands for the statement the engine is rewriting (``self.stmt``)."""
        try:
            return self.state.lines(span)
        except KeyError:
            return self.state.lines(self.stmt)

    def replace(self, stmts: Sequence[cst.BaseStatement], *, code: str, reason: str,
                span: cst.CSTNode) -> list[cst.BaseStatement]:
        lines = self._span_lines(span)
        comment = cst.EmptyLine(comment=cst.Comment(f"# TRACING({code}): {reason}"))
        first = stmts[0].with_changes(leading_lines=list(stmts[0].leading_lines) + [comment])
        self.state.rewrites.append(Rewrite(code, lines, None, reason, self.fctx.qualname))
        return [first] + list(stmts[1:])

    def hides_targets(self, stmts: Sequence[cst.BaseStatement]) -> str | None:
        """Why hoisting ``stmts`` would hide sequential targets in an opaque call (also through a
        method of the class they call, ``self.get_image_features(...)``), or None."""
        return self.state.targets.hidden_targets(list(stmts), self.fctx.cls, self.fctx.module_locals,
                                                 follow_methods=True)

    def decided(self, condition: cst.BaseExpression, *, desc: str, span: cst.CSTNode) -> cst.Call:
        """``condition`` as the argument of a new module-level ``@torch.fx.wrap`` function
        ``_decided_<desc>`` returning ``bool(condition)``: the tracer answers it from the sample and
        puts a check into the graph that it still holds at every run (patcher.trace.decisions)."""
        line = self._span_lines(span)[0]
        name = self.state.namer.unique(f"{DECIDED_PREFIX}_{desc}".replace("__", "_"), method=self.method, line=line)
        origin = f"{self.state.origin(line)} ({self.fctx.qualname})"
        source = (f"@torch.fx.wrap\n"
                  f"def {name}(condition):\n"
                  f"    {origin_note(origin)}\n"
                  f"    return bool(condition)\n")
        function = cst.parse_module(source).body[0]
        self.state.add_function(function.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
        return cst.Call(func=cst.Name(name), args=[cst.Arg(condition)])

    def hoist(self, stmts: Sequence[cst.BaseStatement], *, code: str, desc: str, reason: str,
              span: cst.CSTNode, prefix: str = WRAPPED_PREFIX) -> list[cst.BaseStatement] | None:
        lines = self._span_lines(span)
        why_not = hoist_mod.unhoistable(list(stmts)) or self.state.targets.hidden_targets(
            list(stmts), self.fctx.cls, self.fctx.module_locals)
        if why_not:
            self.state.block(lines[0], code, "unhoistable", f"{reason}; not rewritten: {why_not}")
            self.blocked = True
            return None
        base = f"{prefix}_{desc}".replace("__", "_")
        name = self.state.namer.unique(base, method=self.method, line=lines[0])
        defined_before = {n for n, line in self.fctx.first_bound.items() if line < lines[0]} | self.fctx.params
        maybe_unbound: set[str] = set()
        if self.fctx.body is not None:
            sure = bound_before(self.fctx.body, span, set(self.fctx.params) | self.fctx.outer_names)
            if sure is not None:
                maybe_unbound = defined_before - sure
        origin = f"{self.state.origin(lines[0])} ({self.fctx.qualname})"
        taint = self.taint

        h = hoist_mod.hoist(list(stmts), name=name, local_names=self.fctx.local_names,
                            defined_before=defined_before, origin=origin, maybe_unbound=maybe_unbound,
                            comment=f"# TRACING({code}): {reason} -> {name}")
        self.state.add_function(h.function)
        if h.maybe_none:
            # Recorded for the tracer: downstream `is None` tests on these are fixed while tracing.
            reason += f" (may return None for {', '.join(h.maybe_none)})"
        self.state.rewrites.append(Rewrite(code, lines, name, reason, self.fctx.qualname))
        self.hoisted = True
        # What the call returns is a proxy while tracing, not the list/dict it was: later
        # statements must see that (earlier ones are caught by another pass, see api).
        became_proxies = set(h.returns) & taint.containers
        if became_proxies:
            taint.containers -= became_proxies
            taint._memo.clear()
            self.state.containers_changed = True
            self.state.unsettled.add(self.fctx.qualname)
        guarded = hoist_mod.guard_by_presence(stmts, h.replacement)
        self.guarded = guarded is not h.replacement
        return guarded
