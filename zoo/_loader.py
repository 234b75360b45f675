"""Import a zoo entry's generated module, regenerating it when transformers has moved on.

The committed files are generated for the pinned transformers. With another version installed,
the entry is regenerated from its recipe into ``$TRACEZOO_CACHE/zoo/<version>/<entry>`` and
imported from there; the user is told once. If that fails, the error lists the committed
rewrites that no longer apply to the new source, and where they were.
"""

from __future__ import annotations

import importlib
import json
import warnings
from pathlib import Path

import transformers

from ._entries import ZOO_DIR, recipe_file, source_stem

_LOADED: dict[str, object] = {}


class ZooRegenerationError(ImportError):
    """A zoo entry could not be regenerated for the installed transformers."""


class ZooRegeneratedWarning(UserWarning):
    """A zoo entry was regenerated because the installed transformers differs from the pinned one."""


def installed_transformers_version() -> str:
    # One place to read it, so tests can simulate another installed version.
    return transformers.__version__


def regeneration_dir(entry: str, version: str) -> Path:
    """Where ``entry`` regenerated for transformers ``version`` is written and imported from."""
    from patcher.models.traceable import cache_root

    return cache_root() / "zoo" / version / entry


def committed_manifest(entry: str) -> dict:
    path = ZOO_DIR / entry / f"{source_stem(entry)}.manifest.json"
    return json.loads(path.read_text(encoding="utf-8"))


def load_entry(entry: str):
    """The generated modeling module of ``entry`` for the installed transformers."""
    if entry in _LOADED:
        return _LOADED[entry]
    from patcher.models.traceable import adopt_library_loading, build_own_sub_models

    manifest = committed_manifest(entry)
    if manifest["transformers_version"] == installed_transformers_version():
        module = adopt_library_loading(importlib.import_module(f"zoo.{entry}.{source_stem(entry)}"))
    else:
        module = _regenerate(entry, manifest)
    build_own_sub_models(module, manifest["source_module"])
    _LOADED[entry] = module
    return module


def _rewrite_key(rewrite: dict) -> tuple:
    return rewrite.get("rule"), rewrite.get("function"), rewrite.get("qualname")


def vanished_rewrites(old: dict, new: dict) -> list[str]:
    """Committed rewrites with no counterpart in a new manifest, as 'rule name (file:lines): why'."""
    present = {_rewrite_key(rewrite) for rewrite in new.get("rewrites", [])}
    lines = []
    for rewrite in old["rewrites"]:
        if _rewrite_key(rewrite) not in present:
            start, end = rewrite["lines"]
            lines.append(f"{rewrite['rule']} {rewrite.get('function') or rewrite.get('qualname')} "
                         f"({old['source_file']}:{start}-{end} in transformers {old['transformers_version']}): "
                         f"{rewrite.get('reason', '')}")
    return lines


def regenerate(entry: str, manifest: dict | None = None):
    """``(module, vanished)``: ``entry`` generated from its recipe for the installed transformers,
    imported from :func:`regeneration_dir`, every export of the recipe checked to be in it, and the
    committed rewrites that no longer apply (:func:`vanished_rewrites`). Raises
    :class:`ZooRegenerationError` naming those rewrites when any step fails."""
    from patcher.models.traceable import import_generated

    from ._entries import recipe
    from ._generate import generate

    manifest = manifest if manifest is not None else committed_manifest(entry)
    installed = installed_transformers_version()
    generated = None
    try:
        generated = generate(entry)
        module = import_generated(generated.result.code, source_stem(entry), regeneration_dir(entry, installed))
        missing = [name for name in recipe(entry).exports.values() if not hasattr(module, name)]
        if missing:
            raise AttributeError(f"the regenerated module defines no {', '.join(missing)}")
    except Exception as exc:
        vanished = vanished_rewrites(manifest, generated.result.manifest) if generated else []
        detail = "\n".join(f"  - {line}" for line in vanished) or "  (no committed rewrite could be checked)"
        raise ZooRegenerationError(
            f"zoo entry {entry!r} was generated for transformers {manifest['transformers_version']}; regenerating "
            f"it for the installed {installed} failed: {exc.__class__.__name__}: {exc}\n"
            f"Rewrites that no longer apply:\n{detail}\n"
            f"Install transformers=={manifest['transformers_version']} or update {recipe_file(entry)}."
        ) from exc
    return module, vanished_rewrites(manifest, generated.result.manifest)


def _regenerate(entry: str, manifest: dict):
    module, vanished = regenerate(entry, manifest)
    installed = installed_transformers_version()
    note = f" {len(vanished)} committed rewrite(s) no longer apply: " + "; ".join(vanished) if vanished else ""
    warnings.warn(
        f"tracezoo: zoo entry {entry!r} was generated for transformers {manifest['transformers_version']} but "
        f"{installed} is installed; regenerated it from its recipe into {module.__file__}.{note}",
        ZooRegeneratedWarning,
        stacklevel=3,
    )
    return module
