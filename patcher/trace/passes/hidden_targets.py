"""Targets the graph never calls (swallowed by a leaf or an opaque call) refused: they would get no subgraph."""

from __future__ import annotations

from typing import Any

from torch import fx, nn

from ...registry.wrapped import WRAPPED_PREFIX
from ..errors import MissingTargetsError
from ..graph_runtime import ROOT_ATTRIBUTE
from ..moved_code import reached_children, untold_targets_fix
from ..recorded import value_at


def check_no_hidden_targets(graph: fx.Graph, model: nn.Module, targets: dict[str, nn.Module]) -> None:
    """Targets passed into opaque calls (or inside leaf modules) never get their own subgraph.

    Linear: only targets that were never called are looked at, each by walking up its own name.
    """
    called = {node.target for node in graph.find_nodes(op="call_module") if node.target in targets}
    uncalled = [name for name in targets if name not in called]
    if not uncalled:
        return
    # Module references that could hide a target: leaves called, and modules handed to opaque calls.
    holders: dict[str, str] = {}
    for node in graph.find_nodes(op="call_module"):
        if node.target not in targets:
            holders.setdefault(node.target, f"module '{node.target}'")
    handed: dict[str, set[str]] = {}  # path -> the calls a module there is handed to
    functions: dict[str, Any] = {}  # name -> the function of a call a module is handed to
    for node in graph.find_nodes(op="get_attr"):
        path = "" if node.target == ROOT_ATTRIBUTE else node.target
        module = model if not path else value_at(model, path)
        if path in holders or not isinstance(module, nn.Module):
            continue
        if not node.users:
            handed.setdefault(path, set()).add("an opaque call")
        for user in node.users:
            how = getattr(user.target, "__name__", str(user.target))
            functions.setdefault(how, user.target)
            # moved code that reads only some children of the module reaches only their subtrees
            children = reached_children(user, node, module)
            for reached in [path] if children is None else [f"{path}.{child}" if path else child
                                                            for child in children]:
                handed.setdefault(reached, set()).add(how)
    for path, hows in handed.items():
        holders.setdefault(path, ", ".join(sorted(hows)))
    hidden: dict[str, str] = {}
    for name in uncalled:
        parts = name.split(".")
        for cut in range(len(parts), -1, -1):
            prefix = ".".join(parts[:cut])
            if prefix in holders:
                hidden[name] = holders[prefix]
                break
    if hidden:
        missing = sorted(hidden)
        detail = "; ".join(f"{name} (swallowed by {how})" for name, how in list(hidden.items())[:10])
        moved = sorted({how for how in hidden.values() if how.startswith(WRAPPED_PREFIX + "_")})
        fix = ("Each target must be called directly by traced code. Remove the function or module that "
               "swallows them from `ignore`, or rewrite it with the patcher.")
        if moved:
            # The rewriter keeps targets out of the code it moves only where it sees them: classes
            # defined in another modeling file (a vision tower's blocks) it cannot follow.
            fix = (f"{', '.join(moved)} is code the patcher moved out of the model's forward (a branch on a "
                   "traced value around the call that reaches these targets, which are defined in another "
                   "modeling file). Leave these targets out (e.g. the tower's blocks: the tower then runs "
                   "whole inside that call), or cut at targets the branch does not reach.")
            fix = untold_targets_fix(model, [functions[how] for how in moved if how in functions],
                                     [targets[name] for name in missing]) or fix
        raise MissingTargetsError(
            f"{len(missing)} sequential target(s) are missing from the graph: {detail}. {fix}",
            missing,
        )
