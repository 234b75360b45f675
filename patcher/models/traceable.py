"""Generated traceable modules: ``load_traceable`` and trace-guided ``repair``.

``load_traceable(cls)`` patches the modeling file that defines ``cls``, writes the result into a
cache directory, imports it, and returns the class of the same name: ready to build from a
config or ``from_pretrained`` the same checkpoints.

Classes of a user's own module (a script run as ``__main__``, or any module outside transformers
and the zoo) work too. Their module's top level is *not* run again: the generated module starts
from the original module's globals and runs only the patched file's imports, functions and
classes, so a script that calls ``load_traceable`` at its top level patches once.

``repair(cls, config, sample, targets)`` closes the loop with the tracer: it traces the patched
class, maps each failure back to the statement in the original source, asks the patcher to
rewrite that statement, and repeats until the model traces or no rule fits. Then it reports every
remaining blocker at once.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping, Sequence

from ..rewrite.files import write_atomic
from . import build_model, import_module_file, resolve_model_class
from ..registry.normalize import ModuleEntries, module_entries
from ..registry.ignore import resolve_ignore
from ..registry.locations import Location
from ..registry.origins import original_line
from ..trace import DEFAULT_IGNORE, UntraceableCodeError, trace_graph
from ..trace.diagnose import UntraceableConstruct
from ..trace.matching import class_name_entries


def cache_root() -> Path:
    """``$TRACEZOO_CACHE``, else ``~/.cache/tracezoo``."""
    return Path(os.environ.get("TRACEZOO_CACHE") or Path.home() / ".cache" / "tracezoo")


GENERATED_PREFIX = "_tracezoo_generated_"
_MAX_STEM = 40  # cache file names stay short whatever the source file is called


class TraceableLoadError(ValueError):
    """``load_traceable`` cannot make a traceable variant of this class (and says why)."""


def import_generated(code: str, stem: str, directory: Path | None = None, *,
                     user_module: ModuleType | None = None) -> ModuleType:
    """Write ``code`` to ``<directory>/<stem>_<hash>.py`` (once) and import it.

    The content hash in the name lets different variants of one modeling file coexist.
    With ``user_module`` (the module the code was patched from, e.g. a script's ``__main__``),
    the generated module starts from that module's globals and runs only the code's imports,
    functions and classes (and what the patcher added): the user's top-level statements, already
    run once, are not run again.
    """
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    stem = stem[:_MAX_STEM]
    module_name = f"{GENERATED_PREFIX}{stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = (directory or cache_root() / "generated") / f"{stem}_{digest}.py"
    if not path.is_file() or path.read_text(encoding="utf-8") != code:
        write_atomic(path, code)
    execute = None if user_module is None else (lambda module: _exec_definitions(code, path, module, user_module))
    module = import_module_file(module_name, path, execute)
    return module if user_module is not None else adopt_library_loading(module)


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _exec_definitions(code: str, path: Path, module: ModuleType, user_module: ModuleType) -> None:
    """Run the definitions of ``code`` in ``module``, on top of ``user_module``'s globals.

    Line numbers are kept (statements are dropped from the syntax tree, not the text), so
    tracebacks and the tracer's diagnostics point at the generated file's lines.
    """
    original = Path(inspect.getsourcefile(user_module)).read_text(encoding="utf-8")
    for name, value in vars(user_module).items():
        if not (name.startswith("__") and name.endswith("__")):
            module.__dict__.setdefault(name, value)
    tree = ast.parse(code, filename=str(path))
    tree.body = [node for node in tree.body if isinstance(node, _DEFINITIONS)
                 or (ast.get_source_segment(code, node) or "") not in original]  # added by the patcher
    exec(compile(tree, str(path), "exec"), module.__dict__)


def _library_code(cls) -> bool:
    return False


def adopt_library_loading(module: ModuleType) -> ModuleType:
    """Make the generated classes load checkpoints exactly like transformers' own classes.

    transformers applies its checkpoint key conversions (e.g. Llava's legacy
    ``language_model.model.*`` keys) only to classes defined under ``transformers.``; anything else
    counts as custom code and loads without them, leaving weights uninitialised. Generated modules
    are the library's code, rewritten, so they answer ``is_custom_code() -> False``.
    """
    from transformers import PreTrainedModel

    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, PreTrainedModel) and value.__module__ == module.__name__:
            value.is_custom_code = classmethod(_library_code)
    return module


class _TraceableAutoClass:
    """Stands in for ``AutoModel`` & co. inside a generated module.

    Composite models build sub-models with ``AutoModel.from_config(config.text_config)``, which
    would return the *original* transformers class and bypass every rewrite made to it. Here the
    class the Auto class would choose is swapped for its traceable variant: from the same
    generated module when it is defined there, else generated from its own modeling file
    (``options``: the ``load_traceable`` options), or, with ``options`` None, left the library's.
    """

    def __init__(self, auto: type, generated: ModuleType, source_module: str, options: dict | None):
        self._auto = auto
        self._generated = generated
        self._source_module = source_module
        self._options = options

    def from_config(self, config, **kwargs):
        original = self._auto._model_mapping[type(config)]
        if original.__module__ == self._source_module:
            traceable = getattr(self._generated, original.__name__)
        elif self._options is None:
            return self._auto.from_config(config, **kwargs)
        else:
            traceable = load_traceable(original, **self._options)
        return traceable._from_config(config, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._auto, name)


def _auto_class_names(namespace: Mapping[str, Any]) -> list[str]:
    """The names in ``namespace`` bound to transformers' Auto model classes (``AutoModel``, ...)."""
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    return [name for name, value in namespace.items()
            if isinstance(value, type) and issubclass(value, _BaseAutoModelClass)]


def _redirect_auto_classes(module: ModuleType, source_module: str, options: dict | None) -> None:
    for name in _auto_class_names(vars(module)):
        setattr(module, name, _TraceableAutoClass(getattr(module, name), module, source_module, options))


def build_own_sub_models(module: ModuleType, source_module: str) -> ModuleType:
    """Make the Auto classes of the generated ``module`` build its own classes for sub-models whose
    class ``source_module`` defines (Gemma 3's ``AutoModel.from_config(config.text_config)``: the
    rewritten ``Gemma3TextModel``, not transformers'); sub-models of other modeling files stay the
    library's. A zoo entry is one generated file, so this is its share of what ``load_traceable``
    redirects."""
    _redirect_auto_classes(module, source_module, None)
    return module


def _source_of(cls: type) -> tuple[str, str, str]:
    module = sys.modules.get(cls.__module__)
    try:
        path = inspect.getsourcefile(module) if module is not None else None
    except TypeError:
        path = None
    if path is None or not Path(path).is_file():
        raise TraceableLoadError(
            f"cannot make {cls.__qualname__} traceable: its module {cls.__module__!r} has no source file "
            "(defined in an interactive session, `python -c` or a notebook?). Move the class into a .py file "
            "and import it from there.")
    return Path(path).read_text(encoding="utf-8"), cls.__module__, path


def _library_module(module_name: str) -> bool:
    """Modules made of definitions only, whose generated variant runs as a whole."""
    return module_name.split(".")[0] in ("transformers", "zoo")


def load_traceable(
    model_class: str | type,
    *,
    targets: Sequence[str] = (),
    ignore: Sequence[str] = (),
    locations: Sequence[Location | tuple] = (),
    cache_dir: str | os.PathLike | None = None,
) -> type:
    """Return a traceable variant of ``model_class``: same name, same config class, same weights.

    ``targets`` are never hidden inside wrapped code; ``ignore`` names extra functions or
    methods to wrap (both read by :mod:`patcher.registry.normalize`: a single string or module class is
    one entry); ``locations`` are lines of the original file to rewrite, with the rule or symptom each
    asks for (:class:`~patcher.registry.locations.Location`, or a ``(line, rule)`` pair; ``repair``
    fills them). The patch result (manifest, rewrites, blockers) is attached as
    ``cls.__tracezoo_patch__``.

    ``model_class`` may live in a user's own file (a script run as ``__main__`` included): the
    file is patched once and its top-level statements are not run again (see the module
    docstring). A class given that is already a generated one is returned as it is. Raises
    ``TraceableLoadError`` when no traceable variant can be made: no source file, a class not
    defined at its module's top level.

    >>> cls = load_traceable("LlavaForConditionalGeneration")  # doctest: +SKIP
    >>> cls.__name__, cls.__module__.startswith("_tracezoo_generated_modeling_llava")  # doctest: +SKIP
    ('LlavaForConditionalGeneration', True)
    """
    from ..rewrite import patch_source

    targets = module_entries(targets, "targets")
    ignore = module_entries(ignore, "ignore", functions=True)
    cls = resolve_model_class(model_class, pretrained=False)
    if cls.__module__.startswith(GENERATED_PREFIX):
        if targets or ignore or locations:
            raise TraceableLoadError(
                f"{cls.__name__} is already a generated traceable class ({cls.__module__}); to patch with other "
                "options, pass the original class")
        return cls  # e.g. a script's top level calling load_traceable, run again in the generated module
    if cls.__qualname__ != cls.__name__:
        raise TraceableLoadError(
            f"cannot make {cls.__qualname__} traceable: it is not defined at the top level of {cls.__module__}, so "
            "the patched module would not define it. Move the class to the module's top level.")
    source, module_name, path = _source_of(cls)
    # Classes the rewrite leaves alone stay the source module's own (llm-compressor finds Llama 4's
    # experts by class identity), except the one returned, which carries the patch result and is
    # the generated module's, and those reading an Auto class, which is redirected after import.
    result = patch_source(source, module_name=module_name, source_path=path, targets=targets, ignore=ignore,
                          locations=locations, original_classes=True,
                          treat_as_changed=[cls.__name__, *_auto_class_names(vars(sys.modules[module_name]))])
    directory = Path(cache_dir) if cache_dir is not None else None
    user_module = None if _library_module(module_name) else sys.modules[module_name]
    module = import_generated(result.code, Path(path).stem, directory, user_module=user_module)
    if not getattr(module, "_tracezoo_auto_redirected", False):
        # Sub-models from other modeling files get their traceable variants too (same options,
        # minus locations, which are lines of this file only).
        _redirect_auto_classes(module, module_name, {"targets": targets, "ignore": ignore, "cache_dir": cache_dir})
        module._tracezoo_auto_redirected = True
    traceable = getattr(module, cls.__name__, None)
    if not isinstance(traceable, type) or traceable.__module__ != module.__name__:
        raise TraceableLoadError(
            f"cannot make {cls.__name__} traceable: the patched {Path(path).name} does not define it at its top level "
            f"(generated module {module.__name__})")
    traceable.__tracezoo_patch__ = result
    return traceable


@dataclass
class RepairStep:
    construct: UntraceableConstruct
    original_line: int | None
    action: str


@dataclass
class RepairResult:
    """The outcome of ``repair``: the traceable class (or None) and what it took."""

    model_class: type | None
    steps: list[RepairStep] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    locations: list[Location] = field(default_factory=list)

    @property
    def traced(self) -> bool:
        return self.model_class is not None and not self.blockers

    def report(self, verdict: bool = True) -> str:
        """The rounds and the blockers; ``verdict=False`` leaves out the closing "the model traces"
        (``patcher repair -o`` says whether the *written file* traces instead)."""
        lines = [f"{len(self.steps)} trace-guided rewrite round(s)"]
        lines += [f"  - line {step.original_line} of the original ({step.construct.symptom.name}): {step.action}"
                  for step in self.steps]
        if self.blockers:
            lines.append(f"{len(self.blockers)} blocker(s) remain:")
            lines += [f"  {blocker}" for blocker in self.blockers]
        elif verdict:
            lines.append("the model traces")
        return "\n".join(lines)


def _same_file(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a).resolve() == Path(b).resolve()


def _innermost_frame_in(exc: BaseException, filename: str) -> int | None:
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == filename]
    return frames[-1].lineno if frames else None


def repair(
    model_class: str | type,
    config,
    sample_input: Mapping[str, Any],
    sequential_targets: ModuleEntries,
    ignore: ModuleEntries | None = DEFAULT_IGNORE,
    max_rounds: int = 12,
    cache_dir: str | os.PathLike | None = None,
    unused_inputs: Iterable[str] | str = (),
) -> RepairResult:
    """Patch, trace, map the failure to the original source, rewrite it, repeat.

    The model is built on the ``meta`` device from ``config``; ``sample_input`` only needs the
    right keys and shapes. Stops when the model traces, when a failure repeats at a line already
    rewritten, or when the failure lies outside the patched file and no statement of the patched
    file leads to it. Targets, ignore entries and ``unused_inputs`` read as in
    :func:`~patcher.trace.trace_graph` (a single string or module class is one entry;
    :mod:`patcher.registry.normalize`).
    """
    cls = resolve_model_class(model_class)
    source, _, source_path = _source_of(cls)
    targets = module_entries(sequential_targets, "sequential_targets")
    ignore = resolve_ignore(ignore)
    target_classes = class_name_entries(targets)
    result = RepairResult(model_class=None)
    tried: set[int] = set()
    for _ in range(max_rounds):
        traceable = load_traceable(cls, targets=target_classes, locations=result.locations, cache_dir=cache_dir)
        generated_file = inspect.getsourcefile(sys.modules[traceable.__module__])
        generated = Path(generated_file).read_text(encoding="utf-8")
        model = build_model(traceable, config, device="meta")
        try:
            trace_graph(model, sample_input, targets, ignore, unused_inputs)
        except UntraceableCodeError as error:
            construct = error.construct
            original_exc = error.__cause__ or error
            if construct.filename == generated_file:
                line_in_generated = construct.lineno
                action = f"rewrite with {construct.symptom.rule}"
                original = original_line(source, generated, line_in_generated)
            elif _same_file(construct.filename, source_path):
                # In a class the rewrite had left alone, which the generated module imports from
                # the source: its lines are the source's own.
                line_in_generated = original = construct.lineno
                action = f"rewrite with {construct.symptom.rule}"
            else:
                # The construct is in another file; wrap the statement of ours that leads there.
                line_in_generated = _innermost_frame_in(original_exc, generated_file)
                action = f"wrap the call at this file's line that reaches {construct.location}"
                original = original_line(source, generated, line_in_generated) if line_in_generated else None
            if original is None or original in tried or not construct.symptom.rule:
                reason = ("already rewritten, still untraceable" if original in tried else
                          "inside code the patcher generated" if line_in_generated and original is None else
                          "no rule applies")
                origin = f"\n  in the original source: {source_path}:{original}" if original else ""
                result.blockers.append(f"{construct.describe()}{origin}\n  repair stopped: {reason}")
                # Tracing stops at the first failure; the patcher's own findings cover the rest.
                result.blockers += [f"{blocker} (found by the patcher; see GUIDE.md#what-the-rules-do-not-handle-yet)"
                                    for blocker in traceable.__tracezoo_patch__.blockers]
                result.model_class = traceable
                return result
            tried.add(original)
            result.locations.append(Location(original, wanted=construct.symptom.rule))
            result.steps.append(RepairStep(construct, original, action))
            continue
        result.model_class = traceable
        return result
    result.blockers.append(f"gave up after {max_rounds} rounds")
    return result
