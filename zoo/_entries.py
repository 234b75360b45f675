"""The zoo's entries: folder name -> recipe module, and their declared, validated recipes."""

from __future__ import annotations

import functools
from pathlib import Path

from ._recipe import Recipe, load_recipe

ENTRIES: dict[str, str] = {
    "qwen2_vl": "zoo.qwen2_vl.recipe",
    "qwen2_5_vl": "zoo.qwen2_5_vl.recipe",
    "mllama": "zoo.mllama.recipe",
    "llava": "zoo.llava.recipe",
    "gemma3": "zoo.gemma3.recipe",
}

ZOO_DIR = Path(__file__).parent


@functools.cache
def recipe(entry: str) -> Recipe:
    """The entry's ``RECIPE``, validated (a ``RecipeError`` names the recipe file and the field)."""
    return load_recipe(ENTRIES[entry])


def recipe_file(entry: str) -> str:
    """The recipe's path relative to the repository, as generated files name it."""
    return f"zoo/{entry}/recipe.py"


def source_stem(entry: str) -> str:
    """Generated files are named after the modeling module they come from."""
    return recipe(entry).source_stem


def export_names() -> dict[str, tuple[str, str]]:
    """``TraceableX`` -> (entry, class name in the generated module)."""
    return {name: (entry, cls) for entry in ENTRIES for name, cls in recipe(entry).exports.items()}
