"""Ignore entries checked against the model: each keeps something opaque, and no target lies inside one."""

from __future__ import annotations

import difflib
import re
from typing import Mapping

from torch import nn

from ...registry.ignore import DEFAULT_IGNORE
from ..errors import IgnoreMatchError, MissingTargetsError
from ..matching import REGEX_PREFIX, ModulePattern
from ..opaque import callable_names


def check_ignore_matches(model: nn.Module, hits: Mapping[ModulePattern, int],
                         classes: set[type] | None = None) -> None:
    """Every ignore entry beyond the defaults keeps something opaque: a module (by class name or
    ``re:`` pattern) or a function or method the model's code can call. The defaults name every
    model's helpers and so match nothing in most models; an entry of the caller's that matches
    nothing is a misspelling (``create_causal_mak``) that would be accepted without a word.
    ``classes``: the model's module classes, when the caller has them."""
    unmatched = [pattern for pattern, count in hits.items() if count == 0 and pattern.text not in DEFAULT_IGNORE]
    if not unmatched:
        return
    functions = callable_names(model, classes)
    unmatched = [pattern for pattern in unmatched if pattern.regex is not None or pattern.text not in functions]
    if not unmatched:
        return
    classes = {type(module).__name__ for module in model.modules()}
    module_names = [name for name, _ in model.named_modules() if name]
    lines = []
    for pattern in unmatched:
        if pattern.regex is not None:
            wanted, candidates = pattern.text[len(REGEX_PREFIX):].replace("\\", ""), module_names
        else:
            wanted, candidates = pattern.text, sorted(classes | functions)
        close = difflib.get_close_matches(wanted, candidates, n=1)
        lines.append(f"ignore entry '{pattern.text}' matches no {'module name' if pattern.regex else 'module class, function or method'} "
                     f"of {type(model).__name__}, so it keeps nothing opaque"
                     + (f"; did you mean '{REGEX_PREFIX + re.escape(close[0]) if pattern.regex else close[0]}'?" if close else ""))
    lines.append("Entries are module class names, 're:' + a regex matching whole module names, or names of functions "
                 "and methods the model's code calls; fix the entry or remove it.")
    raise IgnoreMatchError("\n".join(lines), [pattern.text for pattern in unmatched])


def check_targets_not_ignored(targets: dict[str, nn.Module], ignored: dict[str, nn.Module]) -> None:
    if not ignored:
        return
    swallowed = []
    for name in targets:
        parts = name.split(".")
        for cut in range(1, len(parts) + 1):
            prefix = ".".join(parts[:cut])
            if prefix in ignored:
                swallowed.append((name, prefix))
                break
    if swallowed:
        missing = [name for name, _ in swallowed]
        detail = ", ".join(f"{name} (inside ignored '{prefix}')" for name, prefix in swallowed[:10])
        raise MissingTargetsError(
            f"{len(missing)} sequential target(s) lie inside ignored modules and would be swallowed: {detail}. "
            "Remove the ignore entry or narrow it.",
            missing,
        )
