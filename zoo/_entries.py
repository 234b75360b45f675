"""The zoo's entries: folder name -> recipe module."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

ENTRIES: dict[str, str] = {
    "qwen2_vl": "zoo.qwen2_vl.recipe",
    "qwen2_5_vl": "zoo.qwen2_5_vl.recipe",
    "mllama": "zoo.mllama.recipe",
    "llava": "zoo.llava.recipe",
    "gemma3": "zoo.gemma3.recipe",
}

ZOO_DIR = Path(__file__).parent


def recipe(entry: str) -> ModuleType:
    return importlib.import_module(ENTRIES[entry])


def source_stem(entry: str) -> str:
    """Generated files are named after the modeling module they come from."""
    return recipe(entry).SOURCE_MODULE.rsplit(".", 1)[-1]


def export_names() -> dict[str, tuple[str, str]]:
    """``TraceableX`` -> (entry, class name in the generated module)."""
    return {name: (entry, cls) for entry in ENTRIES for name, cls in recipe(entry).EXPORTS.items()}
