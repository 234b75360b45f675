"""Walks a module's functions statement by statement and applies the rules.

The walk rebuilds only the statements a rule changes; every other node is the parsed original,
so libcst prints it byte for byte. Functions the rules create are inserted just before the
top-level class or function whose code they came from.

The engine names no rule: it runs ``rules.HOIST_RULES`` then ``rules.EXPRESSION_RULES`` on each
statement, and leaves every other choice to the rules' hooks (``rules.base.RuleHooks``): which
rule a targeted statement is forced to, which methods are wrapped whole, which rule forwards
ignored calls.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper

from ..registry.locations import Location
from ..registry.rules import NO_RULE
from ..registry.wrapped import forwarder_name
from . import hoist as hoist_mod
from .context import Forwarder, FunctionCtx, ModuleState, StatementContext
from .hoist import is_fx_wrapped
from .name_use import function_body_use, param_list
from . import opaque_results, traced_items
from .wrapper_names import Namer
from .records import Blocker, Rewrite
from .rules import (EXPRESSION_RULES, FORWARD_REASONS, HOIST_RULES, IGNORED_CALLS, LOCATION_FALLBACK, LOCATION_RULES,
                    WHOLE_METHOD_RULES)
from ..registry.ignore import FORWARDED_BY_REWRITER
from .call_sites import call_site_taint
from .shapes import shape_names_of
from .taint import Taint, class_tensor_attributes, function_taint
from .targets import TargetIndex

__all__ = ["Blocker", "Engine", "Rewrite", "run_rules"]

# Methods that never run under the tracer (construction, weight init, generation plumbing):
# rewriting them would only add noise to the diff.
NOT_TRACED = frozenset({"__init__", "_init_weights", "init_weights", "extra_repr", "__repr__",
                        "prepare_inputs_for_generation", "_update_model_kwargs_for_generation"})


class Engine:
    def __init__(self, state: ModuleState):
        self.state = state
        self.redirect_names = set(state.ignore) | set(state.redirect_methods)

    # -- module level ---------------------------------------------------------------------
    def run(self, module: cst.Module) -> cst.Module:
        new_body: list[cst.BaseStatement] = []
        for index, stmt in enumerate(module.body):
            self.state.current_top = index
            out = self.top_level(stmt)
            if self.state.pending:
                new_body.extend(self.state.pending)
                self.state.pending = []
            new_body.append(out)
        return module.with_changes(body=new_body)

    def top_level(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        if isinstance(stmt, cst.ClassDef):
            return self.visit_class(stmt, None, None)
        if isinstance(stmt, cst.FunctionDef):
            return self.visit_function(stmt, None, None, "")
        return stmt

    def visit_class(self, cls: cst.ClassDef, outer: FunctionCtx | None, prefix: str | None) -> cst.ClassDef:
        if not isinstance(cls.body, cst.IndentedBlock):
            return cls
        qual = f"{prefix}.{cls.name.value}" if prefix else cls.name.value
        body = []
        for stmt in cls.body.body:
            if isinstance(stmt, cst.FunctionDef):
                body.append(self.visit_function(stmt, cls.name.value, outer, qual))
            elif isinstance(stmt, cst.ClassDef):
                body.append(self.visit_class(stmt, outer, qual))
            else:
                body.append(stmt)
        return cls.with_changes(body=cls.body.with_changes(body=body))

    def skip_function(self, fn: cst.FunctionDef, cls: str | None) -> bool:
        name = fn.name.value
        if is_fx_wrapped(fn) or name == hoist_mod.NOTE_HELPER or (cls is not None and name in NOT_TRACED):
            return True
        if name in self.state.ignore:
            return True  # runs as one opaque call: its body executes eagerly
        return name in self.state.redirect_methods and (cls is not None or name in self.state.whole_functions)

    def visit_function(self, fn: cst.FunctionDef, cls: str | None, outer: FunctionCtx | None,
                       prefix: str) -> cst.FunctionDef:
        if self.skip_function(fn, cls) or not isinstance(fn.body, cst.IndentedBlock):
            return fn
        qual = f"{prefix}.{fn.name.value}" if prefix else fn.name.value
        if self.state.only is not None and not any(q == qual or q.startswith(qual + ".") for q in self.state.only):
            return fn
        fctx = self.function_ctx(fn, cls, outer, prefix)
        body = self.block(fn.body.body, fctx)
        return fn.with_changes(body=fn.body.with_changes(body=body))

    def function_ctx(self, fn: cst.FunctionDef, cls: str | None, outer: FunctionCtx | None,
                     prefix: str) -> FunctionCtx:
        params = {p.name.value for p in param_list(fn)}
        use = function_body_use(fn)
        state = self.state

        def first_bound() -> dict[str, int]:
            # Lazy: positions cost a codegen pass, paid only by files that hoist something.
            first: dict[str, int] = dict(outer.first_bound) if outer else {}
            for node in use.write_nodes:
                try:
                    line = state.lines(node)[0]
                except KeyError:
                    continue
                if node.value not in params:
                    first[node.value] = min(first.get(node.value, line), line)
            for p in params:
                first.pop(p, None)
            return first
        local = set(params) | set(use.writes) | (outer.local_names if outer else set())
        name = fn.name.value
        qual = f"{prefix}.{name}" if prefix else name
        return FunctionCtx(
            qualname=qual, method=name, cls=cls if outer is None else outer.cls,
            taint=function_taint(fn, outer.taint if outer else Taint(
                wrapped=self.state.wrapped_defs, tensor_attrs=self.state.tensor_attrs.get(cls, frozenset())),
                param_levels=None if outer else self.state.param_seeds.get((cls, name))),
            local_names=local,
            first_bound_fn=first_bound, params=params | (outer.params if outer else set()),
            shape_names=shape_names_of(fn) | (outer.shape_names if outer else set()),
            module_locals=self.state.targets.module_locals(fn, cls) | (outer.module_locals if outer else set()),
            body=list(fn.body.body) if isinstance(fn.body, cst.IndentedBlock) else None,
            outer_names=set(outer.local_names) if outer else set(),
        )

    # -- statements -----------------------------------------------------------------------
    def block(self, stmts: Iterable[cst.BaseStatement], fctx: FunctionCtx) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        enclosing = fctx.opaque_results, fctx.traced_items
        # a nested block starts with what held before it
        fctx.opaque_results, fctx.traced_items = set(enclosing[0]), set(enclosing[1])
        try:
            for stmt in stmts:
                out.extend(self.statement(stmt, fctx))
                fctx.opaque_results = opaque_results.after_statement(fctx.opaque_results, stmt,
                                                                     lambda call: self.is_opaque_call(call, fctx))
                fctx.traced_items = traced_items.after_statement(fctx.traced_items, stmt, fctx.taint)
        finally:
            fctx.opaque_results, fctx.traced_items = enclosing
        return out

    def is_opaque_call(self, call: cst.Call, fctx: FunctionCtx) -> bool:
        """A call the rules turn into one opaque graph node: one the forwarding rule forwards (the
        call's form is its decision, the name this module's)."""
        callee = IGNORED_CALLS.HOOKS.forwarded_callee(call, fctx.local_names.__contains__)
        return callee is not None and self.forward_code(*callee) is not None

    def forward_code(self, name: str, method: bool) -> str | None:
        """The rule a call of ``name`` is forwarded under in this module; None: not forwarded. A
        module-level helper wrapped whole is forwarded where it is called by name, not as a method."""
        if method:
            return None if name in self.state.whole_functions else self.state.redirect_methods.get(name)
        if name in self.state.ignore:
            return IGNORED_CALLS.CODE
        return self.state.redirect_methods.get(name) if name in self.state.whole_functions else None

    def _forced(self, stmt: cst.BaseStatement, fctx: FunctionCtx) -> tuple[str | None, set[int]]:
        if not self.state.locations:
            return None, set()
        start, end = self.state.lines(stmt)
        spans = [(start, end)]
        if not isinstance(stmt, cst.SimpleStatementLine):
            heads = [stmt.test] if isinstance(stmt, (cst.If, cst.While)) else [stmt.iter] if isinstance(stmt, cst.For) else []
            spans = [(start, self.state.lines(h)[1]) for h in heads] or [(start, start)]
            if isinstance(stmt, cst.If):
                br = stmt
                while isinstance(br.orelse, cst.If):
                    br = br.orelse
                    spans.append((self.state.lines(br)[0], self.state.lines(br.test)[1]))
        hits = {line for line in self.state.locations if any(a <= line <= b for a, b in spans)}
        if not hits:
            return None, set()
        self.state.used_locations |= hits
        code = self.state.locations[min(hits)].rule
        if code is None:  # the location names no rule: the statement's form decides
            code = location_rule(stmt, fctx.taint)
        return code, hits

    def statement(self, stmt: cst.BaseStatement, fctx: FunctionCtx) -> list[cst.BaseStatement]:
        if isinstance(stmt, cst.FunctionDef):
            return [self.visit_function(stmt, fctx.cls, fctx, fctx.qualname)]
        if isinstance(stmt, cst.ClassDef):
            return [self.visit_class(stmt, fctx, fctx.qualname)]
        forced, lines = self._forced(stmt, fctx)
        ctx = StatementContext(self, fctx, stmt, forced, lines)
        current = stmt
        for rule in HOIST_RULES:
            out = rule.rewrite(stmt, ctx)
            if out is not None:
                if ctx.header_only:  # only the tests changed: on as for a statement left in place
                    current = out[0]
                    break
                if isinstance(stmt, cst.If) and len(out) == 1 and isinstance(out[0], cst.If) \
                        and not ctx.guarded and not ctx.guard_kept:
                    out = [self.kept_branches(stmt, out[0], fctx)]
                return out
            if ctx.blocked:
                break
        for rule in EXPRESSION_RULES:
            ctx.stmt = stmt
            out = rule.rewrite(current, ctx)
            if out is None:
                continue
            if ctx.hoisted or len(out) != 1:
                return out
            current = out[0]
        if forced and not ctx.hoisted and current is stmt and not ctx.blocked:
            self.state.block(lines and min(lines) or self.state.lines(stmt)[0], forced, "targeted",
                             f"{forced} does not apply to this statement")
        return [self.descend(stmt, current, fctx)]

    def descend(self, original: cst.BaseStatement, current: cst.BaseStatement, fctx: FunctionCtx):
        """`current` (original with a rewritten header) with its nested blocks rewritten."""
        if isinstance(original, cst.SimpleStatementLine) or not hasattr(original, "body"):
            return current
        changes: dict = {}
        if isinstance(original.body, cst.IndentedBlock):
            changes["body"] = current.body.with_changes(body=self.block(original.body.body, fctx))
        if isinstance(original, cst.If) and original.orelse is not None:
            if isinstance(original.orelse, cst.If):
                changes["orelse"] = self.elif_branch(original.orelse, current.orelse, fctx)
            else:
                changes["orelse"] = self.else_block(original.orelse, current.orelse, fctx)
        elif isinstance(original, (cst.For, cst.While)) and original.orelse is not None:
            changes["orelse"] = self.else_block(original.orelse, current.orelse, fctx)
        elif isinstance(original, (cst.Try, cst.TryStar)):
            changes["handlers"] = [
                cur.with_changes(body=cur.body.with_changes(body=self.block(h.body.body, fctx)))
                if isinstance(h.body, cst.IndentedBlock) else cur
                for h, cur in zip(original.handlers, current.handlers)
            ]
            for attr in ("orelse", "finalbody"):
                if getattr(original, attr) is not None:
                    changes[attr] = self.else_block(getattr(original, attr), getattr(current, attr), fctx)
        return current.with_changes(**changes)

    def kept_branches(self, original: cst.If, current: cst.If, fctx: FunctionCtx) -> cst.If:
        """After a chain was hoisted from branch k on: rewrite inside branches 0..k-1, which stay."""
        orig_chain, new_chain = [original], [current]
        while isinstance(new_chain[-1].orelse, cst.If):
            new_chain.append(new_chain[-1].orelse)
            orig_chain.append(orig_chain[-1].orelse)
        rebuilt = None
        for orig, new in reversed(list(zip(orig_chain, new_chain))):
            body = new.body
            if isinstance(orig.body, cst.IndentedBlock):
                body = new.body.with_changes(body=self.block(orig.body.body, fctx))
            rebuilt = new.with_changes(body=body, orelse=rebuilt if rebuilt is not None else new.orelse)
        return rebuilt

    def else_block(self, original, current, fctx):
        if not isinstance(original.body, cst.IndentedBlock):
            return current
        return current.with_changes(body=current.body.with_changes(body=self.block(original.body.body, fctx)))

    def elif_branch(self, original: cst.If, current: cst.If, fctx: FunctionCtx) -> cst.If:
        ctx = StatementContext(self, fctx, original, None, set())
        header = current
        for rule in EXPRESSION_RULES:
            out = rule.rewrite(header, ctx)
            if out is not None and not ctx.hoisted and len(out) == 1:
                header = out[0]
        return self.descend(original, header, fctx)

    # -- forwarders -------------------------------------------------------------------------
    def forwarder(self, name: str, *, method: bool, line: int) -> Forwarder | None:
        code = self.forward_code(name, method)
        if code is None:
            return None
        key = (name, method)
        if key not in self.state.forwarders:
            fname = forwarder_name(name)
            if fname not in self.state.existing_wrapped:
                fname = self.state.namer.unique(fname, method="method" if method else None)
                self.state.add_function(hoist_mod.forwarding_wrapper(
                    fname, name, method=method, origin=f"{self.state.origin(line)} (calls {name})"))
            self.state.forwarders[key] = Forwarder(fname, code, FORWARD_REASONS[code])
        return self.state.forwarders[key]


def location_rule(stmt: cst.BaseStatement, taint: Taint) -> str:
    """The rule a targeted location that names none forces at ``stmt``: the first rule (by
    precedence) whose ``HOOKS.takes_location`` takes it, else the fallback rule."""
    for rule in LOCATION_RULES:
        if rule.HOOKS.takes_location(stmt, taint):
            return rule.CODE
    return LOCATION_FALLBACK.CODE


def whole_methods(module: cst.Module, targets: TargetIndex, wrapped: dict) -> dict[str, str]:
    """Method name -> the rule that wraps it whole (their callers call them wrapped)."""
    found: dict[str, str] = {}
    for rule in WHOLE_METHOD_RULES:
        for name in rule.HOOKS.whole_methods(module, targets, wrapped):
            found.setdefault(name, rule.CODE)
    return found


def run_rules(module: cst.Module, *, filename: str, targets: Sequence[str], ignore: Sequence[str],
              locations: Sequence[Location], only: set[str] | None = None,
              redirect: dict[str, str] | None = None,
              line_map: dict[int, int] | None = None) -> tuple[cst.Module, ModuleState]:
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    top_names: set[str] = set()
    existing_wrapped: set[str] = set()
    wrapped_defs: dict[str, cst.FunctionDef] = {}
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            top_names.add(stmt.name.value)
            if isinstance(stmt, cst.FunctionDef) and is_fx_wrapped(stmt):
                existing_wrapped.add(stmt.name.value)
                wrapped_defs[stmt.name.value] = stmt
        else:
            use = function_body_use_stmt(stmt)
            top_names |= use
    ignore_set = set(FORWARDED_BY_REWRITER) | set(ignore)
    line_locs: dict[int, Location] = {}
    for location in locations:
        if location.function is not None:
            ignore_set.add(location.function)
        else:
            line_locs[location.line] = location
    index = TargetIndex(module, targets)
    class_tensors = class_tensor_attributes(module)
    redirect = dict(redirect) if redirect is not None else whole_methods(module, index, wrapped_defs)
    method_names = {fn.name.value for cls in module.body if isinstance(cls, cst.ClassDef)
                    and isinstance(cls.body, cst.IndentedBlock) for fn in cls.body.body
                    if isinstance(fn, cst.FunctionDef)}
    function_names = {stmt.name.value for stmt in module.body if isinstance(stmt, cst.FunctionDef)}
    # module-level helpers a rule wraps whole: their calls by name go through forwarders
    whole_functions = {name for name in redirect if name in function_names and name not in method_names}
    for name in ignore_set:
        if name in method_names or name not in top_names:
            redirect.setdefault(name, IGNORED_CALLS.CODE)
    state = ModuleState(
        filename=os.path.basename(filename), wrapper=wrapper, namer=Namer(top_names), ignore=ignore_set,
        redirect_methods=redirect, targets=index, locations=line_locs, existing_wrapped=existing_wrapped,
        module_names=top_names, wrapped_defs=wrapped_defs,
        has_torch="torch" in top_names, has_note_helper=hoist_mod.NOTE_HELPER in top_names, only=only,
        line_map=line_map or {},
        param_seeds=call_site_taint(module, wrapped_defs), whole_functions=whole_functions,
        tensor_attrs=class_tensors,
    )
    new = Engine(state).run(module)
    for line in sorted(set(line_locs) - state.used_locations):
        location = line_locs[line]
        state.block(line, location.wanted if location.names_a_code else NO_RULE,
                    location.wanted, "no rewritable statement at this line (outside functions, or in wrapped code)")
    return new, state


def function_body_use_stmt(stmt: cst.CSTNode) -> set[str]:
    from .name_use import name_use

    return set(name_use(stmt).writes)
