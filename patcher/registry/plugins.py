"""Model collections that extend the patcher from outside it (the zoo is one), and how they register.

The patcher never imports a collection by name. A collection declares the module that registers
it under the entry-point group :data:`ENTRY_POINT_GROUP` in its ``pyproject.toml``::

    [project.entry-points."tracezoo.models"]
    zoo = "zoo"

and importing that module registers what the collection brings, through public calls only:
:func:`register_tracing_defaults` (sequential targets and extra ignores per ``model_type``),
:func:`register_drop_in` (a traceable class that replaces a transformers class) and
``patcher.samples.register_multimodal_sample`` (sample builders). :func:`load_collections` imports
every declared module once, on the first lookup that needs them.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Iterable, Mapping

ENTRY_POINT_GROUP = "tracezoo.models"


@dataclass(frozen=True)
class TracingDefaults:
    """What a collection traces a model type with: ``targets`` (one subgraph each) and ``ignore``
    (added to ``DEFAULT_IGNORE`` when the targets are these defaults too)."""

    targets: tuple[str, ...]
    ignore: tuple[str, ...]
    collection: str
    #: per modality (``"vision"``, ``"audio"``): the tower's block classes as extra targets, and the
    #: ignores that replace ``ignore`` then (whose entries keep the tower opaque)
    tower_targets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    tower_ignore: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class DropIn:
    """``name`` (e.g. ``TraceableLlavaModel``) replaces the class ``original`` outside ``package``."""

    original: str
    name: str
    package: str


_TRACING_DEFAULTS: dict[str, TracingDefaults] = {}
_DROP_INS: dict[str, DropIn] = {}
_loaded = False


def register_tracing_defaults(model_type: str, *, targets: Iterable[str], ignore: Iterable[str] = (),
                              collection: str, tower_targets: Mapping[str, Iterable[str]] | None = None,
                              tower_ignore: Mapping[str, Iterable[str]] | None = None) -> None:
    _TRACING_DEFAULTS[model_type] = TracingDefaults(
        tuple(targets), tuple(ignore), collection,
        {modality: tuple(names) for modality, names in (tower_targets or {}).items()},
        {modality: tuple(names) for modality, names in (tower_ignore or {}).items()})


def register_drop_in(original: str, name: str, *, package: str) -> None:
    """``name`` is importable from ``package`` and replaces the class named ``original``."""
    _DROP_INS[original] = DropIn(original, name, package)


def tracing_defaults(model_type: str | None) -> TracingDefaults | None:
    load_collections()
    return _TRACING_DEFAULTS.get(model_type) if model_type is not None else None


def drop_in_for(cls: type) -> DropIn | None:
    """The registered drop-in for ``cls``, unless ``cls`` already is one (it lives in the drop-in's package)."""
    load_collections()
    drop_in = _DROP_INS.get(cls.__name__)
    if drop_in is None or cls.__module__ == drop_in.package or cls.__module__.startswith(drop_in.package + "."):
        return None
    # under another transformers than its files were generated for, the package hands out a class of
    # a module regenerated outside it (zoo/_loader.py), which is the drop-in all the same
    package = sys.modules.get(drop_in.package)
    if package is not None and vars(package).get(drop_in.name) is cls:
        return None
    return drop_in


def declared_collections() -> list[str]:
    """The modules declared under :data:`ENTRY_POINT_GROUP`: by the installed distributions, and by
    the ``pyproject.toml`` of the source checkout this package is imported from, if any. The
    checkout's own declaration counts because an editable install keeps the entry points of the
    ``pyproject.toml`` it was installed from until it is reinstalled (and ``PYTHONPATH`` may point
    at another checkout than the installed one)."""
    modules = [entry.module for entry in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    modules += _declared_in_checkout(Path(__file__).resolve().parents[2] / "pyproject.toml")
    return list(dict.fromkeys(modules))


def _declared_in_checkout(pyproject: Path) -> list[str]:
    if not pyproject.is_file():
        return []
    try:
        import tomllib
    except ImportError:  # Python 3.10: only the installed entry points are read
        return []
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    group = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return [value.partition(":")[0].strip() for value in group.values()]


def load_collections() -> None:
    """Import every declared collection once (importing one registers it)."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # first: a collection's own imports may look up registrations while it loads
    for module in declared_collections():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            warnings.warn(f"model collection {module!r} (entry point group {ENTRY_POINT_GROUP}) is declared but "
                          f"cannot be imported: {exc}", RuntimeWarning, stacklevel=2)
