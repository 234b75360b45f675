"""Rows built in another environment, merged into this one's sweep.

Some classes cannot be built beside the main environment's packages: the timm-tower VLMs
(FastVLM, Gemma 3n, PerceptionLM) need timm, and timm needs a torchvision built for the
installed torch, which the CPU torch of the main environment has none of. Others cannot be built on
its transformers: Gemma 4's assistants, whose config 5.23's ``kv_sharing_modes`` refuses (fixed in
5.24). The matrix's floor environment has timm and torchvision, its newest environment 5.24; their
sweeps (``scripts/coverage.py --only ...`` run with that environment's
python) write a ``coverage.json`` whose rows this module merges into the main sweep's, each
marked with the environment that built it (``CoverageRow.built_in``), so that the report counts
them as built *there*, never silently as built here.

Only rows that did not build here are replaced, and only by rows that built there.
"""

from __future__ import annotations

import json
from pathlib import Path

from .check import CoverageRow


def environment_name() -> str:
    """``transformers X, torch Y`` of the running interpreter (what a report's rows were built with)."""
    import torch
    import transformers

    return f"transformers {transformers.__version__}, torch {torch.__version__}"


def load_rows(path: str | Path) -> tuple[list[CoverageRow], str]:
    """The rows of a ``coverage.json`` and the environment that wrote it."""
    payload = json.loads(Path(path).read_text(encoding="utf-8"))
    environment = payload.get("environment")
    if not environment:
        raise ValueError(f"{path}: no 'environment' in the report (written before reports named their "
                         "environment): regenerate it with scripts/coverage.py in that environment")
    return [CoverageRow.from_dict(row) for row in payload["rows"]], environment


def merge_rows(here: list[CoverageRow], there: list[CoverageRow], environment: str) -> list[CoverageRow]:
    """``here`` with each row that did not build replaced by ``there``'s row of the same class
    where that one built, marked ``built_in=environment``; the order and every other row stay."""
    built_there = {row.architecture: row for row in there if row.built}
    merged = []
    for row in here:
        other = built_there.get(row.architecture)
        if row.built or other is None:
            merged.append(row)
            continue
        other = CoverageRow.from_dict(other.as_dict())
        other.built_in = other.built_in or environment
        merged.append(other)
    return merged


def elsewhere_line(rows: list[CoverageRow]) -> str:
    """``Built in another environment: ...``: which rows, where; empty when none."""
    by_environment: dict[str, list[str]] = {}
    for row in rows:
        if row.built_in:
            by_environment.setdefault(row.built_in, []).append(row.architecture)
    if not by_environment:
        return ""
    parts = [f"{', '.join(names)} ({environment})" for environment, names in by_environment.items()]
    return ("Built in another environment (they do not build beside this one's packages, or not on its "
            "transformers; each row is that "
            "environment's sweep, merged with scripts/coverage.py --rows-from): " + "; ".join(parts) + ".")
