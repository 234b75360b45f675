"""Resolve ``sequential_targets`` and ``ignore`` entries against a model's modules.

An entry is either a module class name (``"LlamaDecoderLayer"``) or a regular expression on
qualified module names prefixed with ``re:`` (``"re:model\\.layers\\.\\d+"``). Regexes must match
the whole name (``re.fullmatch``): a prefix match would also select every submodule of the
intended module and nest targets inside targets.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from torch import nn

from ..registry.normalize import ModuleEntries, module_entries
from .errors import TargetMatchError

REGEX_PREFIX = "re:"


@dataclass(frozen=True)
class ModulePattern:
    """One ``sequential_targets`` / ``ignore`` entry."""

    text: str
    regex: re.Pattern | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, text: str) -> "ModulePattern":
        if text.startswith(REGEX_PREFIX):
            source = text[len(REGEX_PREFIX):]
            try:
                return cls(text, re.compile(source))
            except re.error as exc:
                raise TargetMatchError(f"invalid regular expression in {text!r}: {exc}") from exc
        return cls(text)

    def matches(self, qualified_name: str, module: nn.Module) -> bool:
        if self.regex is not None:
            return self.regex.fullmatch(qualified_name) is not None
        return type(module).__name__ == self.text


def class_name_entries(entries: ModuleEntries) -> list[str]:
    """The entries that name a module class, not a ``re:`` pattern on module names (which the
    rewriter, reading source, cannot see)."""
    return [entry for entry in module_entries(entries, "targets") if not entry.startswith(REGEX_PREFIX)]


def parse_patterns(entries: ModuleEntries | None, argument: str = "entries") -> list[ModulePattern]:
    """``entries`` (normalised by :func:`patcher.registry.normalize.module_entries`; ``argument`` names them in
    its errors) as patterns."""
    return [ModulePattern.parse(entry) for entry in module_entries(entries, argument, functions=True)]


def match_modules(
    model: nn.Module, patterns: Sequence[ModulePattern], named: Iterable[tuple[str, nn.Module]] | None = None
) -> tuple[dict[str, nn.Module], dict[ModulePattern, int]]:
    """Return ``{qualified_name: module}`` for modules matching any pattern, and hit counts.
    ``named``: ``model.named_modules()`` when the caller has it."""
    matched: dict[str, nn.Module] = {}
    hits = {pattern: 0 for pattern in patterns}
    if not patterns:
        return matched, hits
    by_class: dict[str, list[ModulePattern]] = {}
    regexes = []
    for pattern in patterns:
        (regexes.append(pattern) if pattern.regex else by_class.setdefault(pattern.text, []).append(pattern))
    for name, module in named if named is not None else model.named_modules():
        for pattern in by_class.get(type(module).__name__, ()):
            hits[pattern] += 1
            matched[name] = module
        for pattern in regexes:
            if pattern.regex.fullmatch(name):
                hits[pattern] += 1
                matched[name] = module
    return matched, hits


def resolve_targets(model: nn.Module, sequential_targets: ModuleEntries,
                    named: Iterable[tuple[str, nn.Module]] | None = None) -> dict[str, nn.Module]:
    """Modules selected by ``sequential_targets``, outermost first; every entry must match.

    Entries are read by :func:`patcher.registry.normalize.module_entries` (an ``nn.Module`` subclass means
    its name; a single string or class is one entry; another type raises ``TypeError``).

    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    >>> sorted(resolve_targets(model, ["Linear"]))
    ['0', '2']
    >>> sorted(resolve_targets(model, ["re:[01]"]))
    ['0', '1']
    """
    patterns = [ModulePattern.parse(entry) for entry in module_entries(sequential_targets, "sequential_targets")]
    if not patterns:
        raise TargetMatchError("sequential_targets is empty: name at least one module class or 're:' pattern")
    matched, hits = match_modules(model, patterns, named)
    unmatched = [pattern.text for pattern, count in hits.items() if count == 0]
    if unmatched:
        raise TargetMatchError(_no_match_message(model, unmatched))
    nested = _nested_targets(matched)
    if nested:
        inner, outer = nested
        raise TargetMatchError(
            f"sequential target {inner!r} lies inside sequential target {outer!r}; targets must not nest. "
            "Use a more specific class name or anchor the regex (it must match the whole module name)."
        )
    return matched


def _nested_targets(matched: dict[str, nn.Module]) -> tuple[str, str] | None:
    names = set(matched)
    for name in matched:
        parts = name.split(".")
        for cut in range(1, len(parts)):
            prefix = ".".join(parts[:cut])
            if prefix in names:
                return name, prefix
    return None


def _no_match_message(model: nn.Module, unmatched: list[str]) -> str:
    classes = sorted({type(module).__name__ for module in model.modules()})
    quoted = ", ".join("'" + text + "'" for text in unmatched)  # repr() would double regex backslashes
    lines = [f"sequential target pattern(s) {quoted} match no module of {type(model).__name__}."]
    for text in unmatched:
        if not text.startswith(REGEX_PREFIX):
            close = difflib.get_close_matches(text, classes, n=3)
            if close:
                lines.append(f"  Did you mean {' or '.join(map(repr, close))}?")
    layer_like = [name for name in classes if "Layer" in name or "Block" in name]
    lines.append(f"  Module classes that look like layers: {', '.join(layer_like) or '(none)'}")
    lines.append("  Entries are class names, or 're:' + a regex that must match a whole qualified module name.")
    return "\n".join(lines)
