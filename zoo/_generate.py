"""Generate a zoo entry's files from its recipe, in memory.

Four files per entry: the traceable modeling module (with the patcher's generated header, which
names the recipe and the command that regenerates it), its rewrite manifest (the recipe's patch
targets and ignores included), a README table of the rewrites, and the empty ``__init__.py``
that makes the folder a package setuptools ships. The module and the manifest are exactly what
``patcher patch`` writes with the recipe's options, and ``scripts/check_zoo`` compares them with
what is committed through the same check as ``patcher patch --check``.

One file is shared by all entries: README.md's list of the zoo's classes (:func:`shared_files`),
between two markers, so a new entry edits no list by hand.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

from ._entries import ENTRIES, ZOO_DIR, recipe, recipe_file

README = ZOO_DIR.parent / "README.md"
ZOO_LIST_START = "<!-- zoo classes: generated from zoo/*/recipe.py by `bash scripts/check_zoo --fix`; do not edit -->"
ZOO_LIST_END = "<!-- end of zoo classes -->"


@dataclass
class GeneratedEntry:
    entry: str
    files: dict[str, str]  # file name in the entry's folder -> content
    result: object  # patcher.rewrite.PatchResult

    def paths(self) -> dict[Path, str]:
        return {ZOO_DIR / self.entry / name: text for name, text in self.files.items()}


def regenerate_command(entry: str) -> str:
    """The command that regenerates ``entry``'s files, as the generated header states it."""
    return f"bash scripts/check_zoo --fix {entry}"


def generate(entry: str) -> GeneratedEntry:
    from patcher.rewrite import patch_source
    from patcher.rewrite.api import generated_files

    spec = recipe(entry)
    module = importlib.import_module(spec.source_module)
    path = inspect.getsourcefile(module)
    source = Path(path).read_text(encoding="utf-8")
    provenance = [("recipe", recipe_file(entry)), ("regenerate with", regenerate_command(entry))]
    result = patch_source(source, module_name=spec.source_module, source_path=path,
                          targets=spec.patch_targets, ignore=spec.patch_ignore, provenance=provenance,
                          original_classes=True)
    files = {path.name: text for path, text in generated_files(result, Path(f"{spec.source_stem}.py")).items()}
    files["README.md"] = render_readme(entry, spec, result.manifest)
    # ``[tool.setuptools.packages.find]`` ships folders with an ``__init__.py`` only; generated so
    # that the recipe is the one file of the entry written by hand.
    files["__init__.py"] = ""
    return GeneratedEntry(entry, files, result)


def zoo_list(indent: str = "  ", width: int = 100) -> str:
    """README.md's list of the zoo's traceable classes, one per entry, wrapped at ``width``."""
    import textwrap

    names = ", ".join(f"`{recipe(entry).traceable_class}`" for entry in ENTRIES)
    return textwrap.fill(names, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


def with_zoo_list(readme: str) -> str:
    """``readme`` with the text between the zoo-list markers replaced by :func:`zoo_list`."""
    if readme.count(ZOO_LIST_START) != 1 or readme.count(ZOO_LIST_END) != 1:
        raise ValueError(f"README.md must hold each zoo-list marker once: {ZOO_LIST_START!r}, {ZOO_LIST_END!r}")
    head, rest = readme.split(ZOO_LIST_START, 1)
    _, tail = rest.split(ZOO_LIST_END, 1)
    indent = head[head.rfind("\n") + 1:]  # the start marker's own indentation
    return f"{head}{ZOO_LIST_START}\n{zoo_list(indent)}\n{indent}{ZOO_LIST_END}{tail}"


def shared_files() -> dict[Path, str]:
    """Files that list every entry, as they would be now: README.md's zoo list."""
    return {README: with_zoo_list(README.read_text(encoding="utf-8"))}


def render_readme(entry: str, spec, manifest: dict) -> str:
    rows = []
    for rewrite in manifest["rewrites"]:
        start, end = rewrite["lines"]
        where = f"{manifest['source_file'].rsplit('/', 1)[-1]}:{start}" + (f"-{end}" if end != start else "")
        function = f"`{rewrite['function']}`" if rewrite.get("function") else "(rewritten in place)"
        reason = str(rewrite.get("reason", "")).replace("|", "\\|").replace("\n", " ")
        rows.append(f"| {rewrite['rule']} | {where} ({rewrite.get('qualname', '')}) | {function} | {reason} |")
    blockers = [f"- {b['file']}:{b['line']}: {b['code']} ({b['kind']}): {b['reason']}" for b in manifest["blockers"]]
    exports = ", ".join(f"`{name}`" for name in spec.exports)
    return "\n".join(
        [
            f"<!-- Generated from {recipe_file(entry)} by `{regenerate_command(entry)}`; do not edit. -->",
            f"# zoo/{entry}",
            "",
            f"Traceable {spec.model_class}, generated from `{manifest['source_module']}` of transformers "
            f"{manifest['transformers_version']} by patcher {manifest['patcher_version']}.",
            f"Exports: {exports}. Default sequential targets: {', '.join(spec.default_targets)}.",
            "",
            "What is untraceable in this model, and what the patcher did about it:",
            "",
            "| rule | where (original) | wrapped as | why |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
            "Left as they were (the patcher refused or could not handle them):" if blockers else "No blockers left.",
            *blockers,
            "",
            *([f"Imported from `{manifest['source_module']}`, not copied: the rewrite leaves these classes and "
               "everything they read alone, so they stay transformers' own classes (registries keyed on the class "
               "object find them; `patcher/rewrite/originals.py`): "
               + ", ".join(f"`{name}`" for name in manifest["original_classes"]) + ".", ""]
              if manifest["original_classes"] else []),
        ]
    )
