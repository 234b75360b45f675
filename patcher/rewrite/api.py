"""patch_source / patch_file: the rewriter's public entry points."""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import libcst as cst

from .files import stale_files, write_pair_atomic
from ..registry.normalize import module_entries
from ..registry.locations import Location
from ..registry.locations import decode as decode_locations
from ..registry.origins import line_map
from ..registry.rules import NO_RULE, RULES
from . import file_header as hdr
from .engine import Blocker, Rewrite, run_rules
from .errors import PatchError
from .imports import AbsoluteImports
from .originals import import_originals, unchanged_classes

_MODEL_BASES = ("Module", "PreTrainedModel", "GradientCheckpointingLayer", "GenerationMixin")


@dataclass
class PatchResult:
    """What patching produced.

    ``code``: the patched source (header included); ``rewrites``: one ``Rewrite`` per change;
    ``blockers``: what was found but refused or not handled (``str(b)`` is ``file:line: code
    (kind): reason``); ``manifest``: the JSON-able record written next to the output.
    """

    code: str
    manifest: dict
    rewrites: list[Rewrite] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)
    source: str = ""
    output_path: Path | None = None
    stale: list = field(default_factory=list)  # patch_file(check=True): files.StaleFile per stale output

    @property
    def changed(self) -> bool:
        return bool(self.rewrites)

    def diff(self, fromfile: str = "original", tofile: str = "patched") -> str:
        return "".join(difflib.unified_diff(self.source.splitlines(True), self.code.splitlines(True),
                                            fromfile=fromfile, tofile=tofile))


def _infer_module(path: str | None) -> str | None:
    """Dotted module name from the package directories (those with __init__.py) above `path`."""
    if not path:
        return None
    p = Path(path).resolve()
    parts = [p.stem]
    d = p.parent
    while (d / "__init__.py").exists():
        parts.append(d.name)
        d = d.parent
    return ".".join(reversed(parts)) if len(parts) > 1 else None


def _display_file(path: str | None, module: str | None) -> str:
    """Path relative to the top package when known: the header must not depend on the machine."""
    if not path:
        return "<string>"
    if module and "." in module:
        p = Path(path).resolve()
        depth = module.count(".")
        return "/".join(p.parts[-(depth + 1):])
    return os.path.basename(path)


def patch_source(
    source: str,
    *,
    module_name: str | None = None,
    source_path: str | None = None,
    targets: Sequence[str] = (),
    ignore: Sequence[str] = (),
    locations: Sequence[Location | tuple] = (),
    provenance: Sequence[tuple[str, str]] = (),
    original_classes: bool = False,
    treat_as_changed: Sequence[str] = (),
) -> PatchResult:
    """Rewrite `source` (a modeling file's text) so that torch.fx can trace it.

    `module_name` (e.g. ``transformers.models.llava.modeling_llava``) makes relative imports
    absolute; without it, it is inferred from `source_path`'s packages. `targets`: class names of
    the sequential target modules (never hidden inside wrapped code). `ignore`: extra function or
    method names to call opaquely (added to ``registry.ignore.FORWARDED_BY_REWRITER``: the tracer's
    DEFAULT_IGNORE less its checks and tower helpers). For both, a single string or ``nn.Module``
    subclass is one entry (:mod:`patcher.registry.normalize`). `locations`:
    :class:`~patcher.registry.locations.Location` entries, or the ``(lineno, rule code or symptom
    key)`` pairs they decode from (lines of `source`), from tracer failures: rewritten even where
    static detection sees nothing; a string instead of a line number names a function or method
    to wrap whole. `provenance`: ``(field, value)`` header lines naming what generated the
    file and how to regenerate it (``("recipe", ...)``, ``("regenerate with", ...)``); re-patching
    a patched file keeps its own. `original_classes`: a class the rewrite leaves alone (and that reads
    nothing it changed) is imported from `module_name` instead of defined again, so that the generated
    module's classes are the source module's own wherever they can be (registries keyed on the class
    object find them; :mod:`patcher.rewrite.originals` says when that is safe); needs `module_name`,
    and does nothing to a file that is already generated (its classes are copies, not the source
    module's). `treat_as_changed`: top-level names that keep every class reading them a copy (a
    name the caller rebinds after import, a class it hands out). The manifest's
    ``original_classes`` lists the classes imported. Works on any Python source (no model-class
    check; see `patch_file`).

    >>> r = patch_source("import torch\\ndef f(x: torch.Tensor):\\n    assert x.sum() > 0, 'empty'\\n    return x\\n")
    >>> [(w.code, w.function) for w in r.rewrites]
    [('TZ102', '_check_x_sum')]
    >>> patch_source(r.code).code == r.code
    True
    """
    targets = module_entries(targets, "targets")
    ignore = module_entries(ignore, "ignore", functions=True)
    locations = decode_locations(locations)  # the one place tuples become Locations
    fields, body = hdr.split_header(source)
    offset = source[: len(source) - len(body)].count("\n")  # header lines: locations index `source`
    module_name = module_name or fields.get("source module") or _infer_module(source_path)
    if module_name == "<unknown>":
        module_name = None
    shown_file = fields.get("source file") or _display_file(source_path, module_name)
    filename = os.path.basename(shown_file) if shown_file != "<string>" else (
        (module_name.rsplit(".", 1)[-1] + ".py") if module_name else "<string>")
    provenance = list(provenance) or [(name, fields[name]) for name in hdr.PROVENANCE_FIELDS if name in fields]
    _precheck(body, path=source_path or shown_file, offset=offset)
    try:
        return _patch_parsed(source, body, offset, module_name, shown_file, filename, targets, ignore, locations,
                             source_path, provenance,
                             original_classes and module_name is not None and not fields, tuple(treat_as_changed))
    except RecursionError:
        line = _busiest_line(body) + offset
        raise PatchError("expression too long or too deeply nested for the patcher (Python recursion limit); "
                         "split it into several statements", path=source_path or shown_file, line=line) from None


#: larger list/tuple/set/dict literals are refused: data, not model code (libcst needs ~0.1 ms and
#: ~15 KB per element: an 800 KB list took 37 s and 2 GB)
MAX_LITERAL_ELEMENTS = 10000

#: deeper ASTs are refused before libcst sees them: its native parser may overflow the C stack
MAX_AST_DEPTH = 200

#: One message for nesting too deep, whichever check finds it: CPython's own parser gives up at a
#: depth that changes between releases (5000 levels fail on 3.11 and 3.12.1, parse on 3.12.3 and
#: 3.13), so which check fires first depends on the interpreter, and the user must not see the
#: difference.
TOO_DEEP = f"too deeply nested for the patcher (more than {MAX_AST_DEPTH} levels); split the expression or function"


def _precheck(body: str, *, path: str, offset: int) -> None:
    """Syntax errors with CPython's exact line, and nesting libcst could not survive."""
    import ast

    try:
        tree = ast.parse(body)
    except SyntaxError as exc:
        raise PatchError(f"syntax error: {exc.msg}", path=path, line=(exc.lineno or 1) + offset) from None
    except (RecursionError, MemoryError):
        raise PatchError(TOO_DEEP, path=path, line=_busiest_line(body) + offset) from None
    stack = [(tree, 0, 1)]
    while stack:
        node, depth, line = stack.pop()
        line = getattr(node, "lineno", line)
        if depth > MAX_AST_DEPTH:
            raise PatchError(TOO_DEEP, path=path, line=line + offset)
        size = len(getattr(node, "elts", None) or getattr(node, "keys", None) or ()) if isinstance(
            node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) else 0
        if size > MAX_LITERAL_ELEMENTS:
            raise PatchError(f"a literal with {size} elements (over {MAX_LITERAL_ELEMENTS}): data, not model code, and "
                             "too slow to rewrite; move it to a data file (JSON, .npy) that the module loads",
                             path=path, line=line + offset)
        stack.extend((child, depth + 1, line) for child in ast.iter_child_nodes(node))


def _busiest_line(body: str) -> int:
    """The first line of the logical line with the most tokens (where a recursion limit is hit)."""
    import io
    import tokenize

    best, best_count, start, count = 1, -1, None, 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(body).readline):
            if start is None:
                start = token.start[0]
            count += 1
            if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if count > best_count:
                    best, best_count = start, count
                start, count = None, 0
    except (tokenize.TokenError, SyntaxError):
        pass
    return best


def _patch_parsed(source, body, offset, module_name, shown_file, filename, targets, ignore, locations,
                  source_path, provenance, original_classes: bool, treat_as_changed: tuple[str, ...]) -> PatchResult:
    try:
        module = cst.parse_module(body)
    except cst.ParserSyntaxError as exc:
        raise PatchError(f"syntax error: {exc.message}", path=source_path or shown_file,
                         line=exc.raw_line + offset) from None
    except Exception as exc:  # libcst raises a few other types for odd input (e.g. bad encodings)
        raise PatchError(f"cannot parse: {exc}", path=source_path or shown_file, line=1) from None
    package = module_name.rsplit(".", 1)[0] if module_name and "." in module_name else None
    imports = AbsoluteImports(package)
    module = imports.apply(module)
    shifted = [location.shifted(-offset) for location in locations]
    new_module, state = run_rules(module, filename=filename, targets=targets, ignore=ignore, locations=shifted)
    if state.containers_changed:
        new_module = _settle(body, new_module, state, filename=filename, targets=targets, ignore=ignore)
    kept_originals: list[str] = []
    if original_classes:
        kept_originals = unchanged_classes(module.code, new_module.code, treat_as_changed)
        new_module = import_originals(new_module, kept_originals, module_name)
    out_body = hdr.mark_upstream_notes(new_module.code, file=filename)
    for b in state.blockers:
        b.line += offset
    for r in state.rewrites:
        r.lines = (r.lines[0] + offset, r.lines[1] + offset)
    for node in imports.unresolved:
        state.blockers.append(Blocker(filename, 0, NO_RULE, "import",
                                      "relative import left as is: the source module's package is unknown"))
    rules = hdr.rules_in(out_body)
    code = hdr.make_header(module=module_name or "<unknown>", file=shown_file, rules=rules,
                           provenance=provenance) + out_body
    manifest = {
        "source_module": module_name,
        "source_file": shown_file,
        "transformers_version": hdr.transformers_version(),
        "patcher_version": hdr.patcher_version(),
        "rules_applied": rules,
        # the options the file was generated with: a manifest alone says how to regenerate it
        "patch_targets": list(targets),
        "patch_ignore": list(ignore),
        # only the rules this file names (applied, or blocking): a new rule leaves manifests it does
        # not touch as they are
        "rule_descriptions": {code: RULES[code].summary for code in sorted(
            set(rules) | {b.code for b in state.blockers if b.code in RULES}) if code in RULES},
        "imports_made_absolute": imports.changed,
        "original_classes": kept_originals,
        "rewrites": [r.as_dict() for r in state.rewrites],
        "blockers": [b.as_dict() for b in state.blockers],
    }
    return PatchResult(code=code, manifest=manifest, rewrites=list(state.rewrites),
                       blockers=list(state.blockers), source=source)


def _settle(original: str, module: cst.Module, state, *, filename, targets, ignore, passes: int = 3) -> cst.Module:
    """Re-run the rules on the functions where a hoist turned a list into a proxy, until nothing
    new fires: code *before* the hoist (in a loop) may iterate it. Later rewrites are recorded
    with lines of `original`."""
    only = set(state.unsettled)
    for _ in range(passes):
        mapping = line_map(original, module.code)
        new_module, again = run_rules(module, filename=filename, targets=targets, ignore=ignore, locations=(),
                                      only=only, redirect=state.redirect_methods, line_map=mapping)
        if not again.rewrites:
            break
        for r in again.rewrites:
            r.lines = (mapping.get(r.lines[0], r.lines[0]), mapping.get(r.lines[1], r.lines[1]))
            state.rewrites.append(r)
        module = new_module
        if not again.containers_changed:
            break
        only = set(again.unsettled)
    return module


def _locate(module_or_path: str | os.PathLike) -> tuple[Path, str | None]:
    text = os.fspath(module_or_path)
    if text.endswith(".py") or os.sep in text or os.path.exists(text):
        path = Path(text)
        if not path.is_file():
            raise PatchError("no such file", path=text, line=0)
        return path, None
    try:
        spec = importlib.util.find_spec(text)
    except (ImportError, ValueError) as exc:
        raise PatchError(f"cannot find module {text!r}: {exc}", path=text, line=0) from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise PatchError(f"cannot find a Python source file for module {text!r}", path=text, line=0)
    return Path(spec.origin), text


def _has_model_classes(module: cst.Module) -> bool:
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef):
            for base in stmt.bases:
                code = cst.Module([]).code_for_node(base.value)
                if code.endswith(_MODEL_BASES) or code.endswith("PreTrainedModel"):
                    return True
    return False


def read_source(path: Path) -> str:
    """A source file's text: its ``coding:`` line honoured, line endings (CRLF) kept byte for byte.

    A non-UTF-8 coding line is rewritten to ``utf-8``, since the output is written in UTF-8."""
    import io
    import tokenize

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PatchError(f"cannot read ({exc.strerror or exc}); check the path and its permissions",
                         path=str(path), line=0) from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError) as exc:
        raise PatchError(f"cannot read: {exc}; fix the coding line", path=str(path), line=1) from None
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PatchError(f"cannot decode byte {data[exc.start]:#04x} as {encoding}: save the file as UTF-8 or "
                         "declare its encoding with a '# -*- coding: NAME -*-' line", path=str(path), line=line) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf-8-sig"):
        lines = text.splitlines(True)
        for index in range(min(2, len(lines))):
            if re.match(r"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+", lines[index]):
                lines[index] = re.sub(r"(coding[:=][ \t]*)[-\w.]+", r"\g<1>utf-8", lines[index], count=1)
                break
        text = "".join(lines)
    return text


def output_paths(source_path: Path, output_dir: str | os.PathLike) -> tuple[Path, Path]:
    out = Path(output_dir) / f"{source_path.stem}.py"
    return out, out.with_name(f"{source_path.stem}.manifest.json")


def patch_file(
    module_or_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    targets: Sequence[str] = (),
    ignore: Sequence[str] = (),
    force: bool = False,
    check: bool = False,
    locations: Sequence[Location | tuple] = (),
    provenance: Sequence[tuple[str, str]] = (),
    original_classes: bool = True,
) -> PatchResult:
    """Patch a modeling file and write ``<output_dir>/<stem>.py`` and ``<stem>.manifest.json``.

    `module_or_path`: a module name (``transformers.models.llava.modeling_llava``) or a path.
    Both files are written atomically (temp file + ``os.replace``). An existing output without
    the generated header, or edited since it was written (its hash differs from the one its
    manifest records), is not overwritten unless `force`. With `check`, nothing is written:
    ``result.output_path`` says where it would go, and ``result.manifest["up_to_date"]`` whether
    both files there already equal what would be written (``result.stale``: those that do not).
    `provenance`: header lines naming what made the file (see `patch_source`); without it, an
    existing generated output keeps its own. `original_classes` (on by default: the written file is a
    module to use): classes the rewrite leaves alone are imported from the source module (see
    `patch_source`). Raises `PatchError` (nothing written) for a
    missing file, a syntax error, a module without nn.Module/PreTrainedModel classes, or an
    output that is not ours (or no longer is: edited by hand).

    >>> r = patch_file("transformers.models.llava.modeling_llava", "/tmp/tz-doctest")  # doctest: +SKIP
    >>> r.output_path.name, sorted({w.code for w in r.rewrites})  # doctest: +SKIP
    ('modeling_llava.py', ['TZ102', 'TZ103', 'TZ106'])
    """
    path, module_name = _locate(module_or_path)
    source = read_source(path)
    result = patch_source(source, module_name=module_name, source_path=str(path), targets=targets,
                          ignore=ignore, locations=locations, provenance=provenance, original_classes=original_classes)
    _, body = hdr.split_header(source)
    if not _has_model_classes(cst.parse_module(body)):
        raise PatchError("no model classes (no nn.Module / PreTrainedModel subclasses) in this module",
                         path=str(path), line=1)
    out, manifest_path = output_paths(path, output_dir)
    result.output_path = out
    _check_output_folder(Path(output_dir))
    if out.resolve() == path.resolve() and not hdr.has_header(source):
        raise PatchError("output would overwrite the source file; choose another -o folder", path=str(out), line=0)
    for target in (out, manifest_path):
        if target.exists() and not target.is_file():
            raise PatchError("output path exists and is not a file: move it away or choose another -o folder",
                             path=str(target), line=0)
    existing = _read_existing(out)
    if not provenance and existing is not None:  # regenerating a file keeps what it says made it
        fields, _ = hdr.split_header(existing)
        provenance = [(name, fields[name]) for name in hdr.PROVENANCE_FIELDS if name in fields]
        if provenance:
            result = patch_source(source, module_name=module_name, source_path=str(path), targets=targets,
                                  ignore=ignore, locations=locations, provenance=provenance,
                                  original_classes=original_classes)
            result.output_path = out
    manifest_text = _read_existing(manifest_path)
    generated = generated_files(result, out)
    if check:
        # the pair is current only if both files are what would be written now (a kill between
        # the two renames leaves a new .py with the old manifest, whose code_sha256 differs: stale)
        result.stale = stale_files(generated)
        result.manifest["up_to_date"] = not result.stale
        result.source = existing if existing is not None else ""
        return result
    if existing is not None and not hdr.has_header(existing) and not force:
        raise PatchError("output file exists and was not generated by the patcher; move it away, choose another "
                         "-o folder, or overwrite it with --force (force=True)", path=str(out), line=1)
    if manifest_text is not None and not _is_our_manifest(manifest_text) and not force:
        raise PatchError("manifest file exists and was not written by the patcher; move it away, choose another "
                         "-o folder, or overwrite it with --force (force=True)", path=str(manifest_path), line=1)
    if not force and _edited_since_written(existing, manifest_text, generated[out]):
        raise PatchError(f"edited after tracezoo wrote it (its hash differs from the one {manifest_path.name} "
                         "records); overwrite it with --force (force=True), or move your edits away first",
                         path=str(out), line=0)
    try:
        # the .py first: a kill between the two renames leaves the new .py with the old manifest,
        # which the same command then rewrites (its .py is what it generates: no edit to keep)
        write_pair_atomic([(out, generated[out]), (manifest_path, generated[manifest_path])])
    except OSError as exc:
        raise PatchError(f"cannot write the output ({exc.strerror or exc}): check the folder's permissions and "
                         "free space, or choose another -o folder; nothing was written",
                         path=str(exc.filename or out), line=0) from None
    return result


def generated_files(result: PatchResult, out: Path) -> dict[Path, str]:
    """What patching writes: ``out`` (the code) and its manifest, which records the code's hash so
    that a pair torn apart by a kill between the two renames is seen as stale."""
    manifest = dict(result.manifest, code_sha256=_sha256(result.code))
    manifest.pop("up_to_date", None)
    result.manifest["code_sha256"] = manifest["code_sha256"]
    manifest_path = out.with_name(f"{out.stem}.manifest.json")
    return {manifest_path: json.dumps(manifest, indent=2, sort_keys=True) + "\n", out: result.code}


def _sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _read_existing(path: Path) -> str | None:
    """An existing file's text (undecodable bytes kept as surrogates), or None if there is none."""
    if not path.is_file():
        return None
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError as exc:
        raise PatchError(f"cannot read the existing output ({exc.strerror or exc}); check its permissions",
                         path=str(path), line=0) from None


def _edited_since_written(existing: str | None, manifest_text: str | None, generated: str) -> bool:
    """Whether the generated file on disk was changed after it was written: its hash differs from
    the one its manifest records (None, no manifest or one without a hash: unknown, so not edited),
    and it is not the text about to be written (then overwriting it loses nothing)."""
    if existing is None or manifest_text is None or existing == generated:
        return False
    recorded = (_manifest_json(manifest_text) or {}).get("code_sha256")
    return isinstance(recorded, str) and recorded != _sha256(existing)


def _manifest_json(text: str):
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _is_our_manifest(text: str) -> bool:
    data = _manifest_json(text)
    return data is not None and "patcher_version" in data and "rules_applied" in data


def _check_output_folder(folder: Path) -> None:
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise PatchError("the -o folder is (or is inside) an existing file, not a folder; choose a folder",
                                 path=str(parent), line=0)
            if not os.access(parent, os.W_OK | os.X_OK):
                raise PatchError("the -o folder is not writable; fix its permissions or choose another folder",
                                 path=str(parent), line=0)
            return
