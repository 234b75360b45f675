"""The zoo's entries: folder name -> recipe module, and their declared, validated recipes.

An entry is a folder of ``zoo/`` with a ``recipe.py``: that file is the one place the zoo, its
generator and its tests learn about the model from, so adding an entry edits no list here.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ._recipe import Recipe, load_recipe

ZOO_DIR = Path(__file__).parent


def discover_entries(zoo_dir: Path = ZOO_DIR, package: str = __package__) -> dict[str, str]:
    """Entry folder name -> recipe module, for every folder of ``zoo_dir`` (the package ``package``)
    holding a ``recipe.py``, sorted by name (listings and test ids do not follow the file system's
    order)."""
    return {folder.name: f"{package}.{folder.name}.recipe" for folder in sorted(zoo_dir.iterdir())
            if folder.is_dir() and (folder / "recipe.py").is_file()}


ENTRIES: dict[str, str] = discover_entries()


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
