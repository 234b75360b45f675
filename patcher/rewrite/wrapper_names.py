"""Deterministic, descriptive, unique names for the wrapped functions."""

from __future__ import annotations

import re

import libcst as cst

from .walk import children

_SKIP = frozenset({"self", "torch", "None", "True", "False", "config", "nn", "F", "cls"})


def describe(*nodes: cst.CSTNode, limit: int = 3) -> str:
    """`position_ids.ndim == 2` -> "position_ids_ndim": the identifiers, in source order."""
    words: list[str] = []

    def walk(node: cst.CSTNode) -> None:
        if isinstance(node, cst.Name):
            if node.value not in _SKIP and node.value not in words:
                words.append(node.value)
            return
        if isinstance(node, (cst.SimpleString, cst.FormattedString, cst.Lambda)):
            return
        for child in children(node):
            walk(child)

    for node in nodes:
        walk(node)
    text = ""
    for word in words[:limit]:
        word = re.sub(r"\W", "_", word).strip("_").lower()
        if text and len(text) + len(word) > 24:
            break
        text = f"{text}_{word}" if text else word
    return re.sub(r"_+", "_", text) or "block"


class Namer:
    """Hands out names not yet bound at module level; on a clash, qualify by method, then line."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def unique(self, base: str, *, method: str | None = None, line: int | None = None) -> str:
        candidates = [base]
        if method:
            candidates.append(f"{base}_in_{method.strip('_')}")
        if line is not None:
            candidates.append(f"{candidates[-1]}_l{line}")
        for cand in candidates:
            if cand not in self.taken:
                self.taken.add(cand)
                return cand
        i = 2
        while f"{candidates[-1]}_{i}" in self.taken:
            i += 1
        name = f"{candidates[-1]}_{i}"
        self.taken.add(name)
        return name
