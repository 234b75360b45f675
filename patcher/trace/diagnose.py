"""Map an exception raised while tracing back to the model source line that caused it.

torch.fx reports untraceable code with messages such as "symbolically traced variables cannot
be used as inputs to control flow", which name neither the file nor the construct. Here the
traceback is walked to the innermost frame of model code (not torch, not tracezoo, not the
standard library), the line is read, and the construct is classified into a symptom of the registry with the
patcher rule that rewrites it and the GUIDE.md section that explains it.
"""

from __future__ import annotations

import linecache
import os
import re
import sysconfig
import traceback
from dataclasses import dataclass

import torch

from ..registry.rules import diagnose_symptom, symptoms

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PATCHER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep
# Decorators wrap every forward; the construct is never in them.
_DECORATOR_FILES = ("transformers/utils/generic.py", "transformers/utils/output_capturing.py")


@dataclass(frozen=True)
class DiagnosedSymptom:
    name: str
    rule: str
    why: str
    fix: str
    guide_section: str


#: Symptom key -> what the error says about it; the texts and patterns live in the rule registry.
SYMPTOMS = {
    symptom.key: DiagnosedSymptom(symptom.title, spec.code, symptom.why, symptom.fix, spec.guide_anchor)
    for symptom, spec in symptoms()
}
#: No rule's symptom: the model's own code raised.
MODEL_ERROR = DiagnosedSymptom(
    "an error raised by the model's own code",
    "",
    "the model's forward raised while it ran with symbolic inputs",
    "check the sample input and the model's arguments; if the error comes from a check on tensor values, wrap it",
    "determining-traceability",
)
SYMPTOMS["model_error"] = MODEL_ERROR

#: ``**value`` in a call: fx asks the proxy for its keys, which it reports as iteration.
_UNPACKED_BY_NAME = re.compile(r"\*\*\s*[A-Za-z_(]")


def unpacked_by_name(function: str) -> DiagnosedSymptom:
    """``f(**outputs)`` on a traced value whose keys the tracer does not know (the output of a leaf
    module it knows from an eager run: :mod:`patcher.trace.leaf_outputs`; anything else not):
    no loop to rewrite, so the way out is to keep the function that unpacks it opaque."""
    if function in ("forward", "<module>"):
        fix = ("wrap the statement in a module-level torch.fx.wrap function that takes the value and returns what "
               "the line builds from it")
    else:
        fix = (f"keep {function}() opaque, so it runs as one call on real values: "
               f"ignore=[*DEFAULT_IGNORE, {function!r}] (patcher trace --ignore {function})")
    return DiagnosedSymptom(
        "`**` unpacking of a traced value",
        "",
        "`**value` needs the keys of value, and a traced value (a module's output, e.g. a ModelOutput) has none "
        "until the graph runs",
        fix,
        "wrapping-functions",
    )


@dataclass(frozen=True)
class UntraceableConstruct:
    """Where and what: enough to find the line, understand it and fix it."""

    filename: str
    lineno: int
    function: str
    code: str
    symptom: DiagnosedSymptom
    module_path: str | None
    fx_message: str
    #: When the construct is in transformers' shared code (``masking_utils.py``, ...), which no
    #: patch of the modeling file changes: the modeling-file call that leads there, as
    #: ``(location, function name to keep opaque)``.
    reached_from: tuple[str, str] | None = None

    @property
    def location(self) -> str:
        return f"{short_path(self.filename)}:{self.lineno}"

    def describe(self, fix: str | None = None) -> str:
        """The construct, where, why and the fix; ``fix`` replaces the symptom's fix line (the fix
        for the caller's situation, e.g. a class that ``load_traceable`` makes traceable)."""
        where = f"  at {self.location} in {self.function}()"
        if self.module_path is not None:
            where += f", while tracing module '{self.module_path or '<root>'}'"
        rule = f" (patcher rule {self.symptom.rule})" if self.symptom.rule else ""
        return "\n".join(
            [
                f"untraceable construct: {self.symptom.name}",
                where,
                f"      {self.code}",
                f"  why: {self.symptom.why}",
                *([f"  fix: {fix}"] if fix is not None else self._fix_lines(rule)),
                f"  raised: {self.fx_message}",
            ]
        )

    def _fix_lines(self, rule: str) -> list[str]:
        if self.reached_from is None:
            return [f"  fix: {self.symptom.fix}{rule}; see GUIDE.md#{self.symptom.guide_section}",
                    *self._ignore_line()]
        location, callee = self.reached_from
        return [
            f"  reached from: {location}, which calls into transformers' shared code",
            f"  fix: keep that call opaque: ignore=[..., {callee!r}] (patcher trace --ignore {callee}); "
            f"rewriting {short_path(self.filename)} would change every model; see GUIDE.md#wrapping-functions",
        ]

    def _ignore_line(self) -> list[str]:
        """The fix's "add the enclosing function to `ignore`", spelled out for this function."""
        if "the enclosing function to `ignore`" not in self.symptom.fix or self.function in ("forward", "<module>"):
            return []
        return [f"  to keep {self.function}() opaque: ignore=[*DEFAULT_IGNORE, {self.function!r}] "
                f"(patcher trace --ignore {self.function})"]


def short_path(filename: str) -> str:
    """``filename`` as messages name a file: from ``site-packages`` on for an installed module
    (``transformers/models/llama/modeling_llama.py``), relative to the working directory for a file
    below it, else as given. The one spelling every error and report that names a line uses."""
    marker = f"{os.sep}site-packages{os.sep}"
    if marker in filename:
        return filename.split(marker, 1)[1]
    if os.path.isabs(filename):
        relative = os.path.relpath(filename)
        return filename if relative.startswith("..") else relative
    return filename


def _is_model_frame(filename: str) -> bool:
    # tracezoo's own machinery never holds the construct; generated modules live outside patcher/
    if filename.startswith((_TORCH_DIR, _STDLIB_DIR, _PATCHER_DIR)) or filename.startswith("<"):
        return False
    return not filename.replace(os.sep, "/").endswith(_DECORATOR_FILES)


def innermost_model_frame(exc: BaseException) -> traceback.FrameSummary | None:
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if _is_model_frame(frame.filename)]
    return frames[-1] if frames else None


def classify(message: str, code: str) -> DiagnosedSymptom:
    """Pick the diagnosed symptom from fx's message and the offending source line."""
    found = diagnose_symptom(message, code.strip())
    return MODEL_ERROR if found is None else SYMPTOMS[found[0].key]


def diagnose(exc: BaseException, module_path: str | None = None) -> UntraceableConstruct | None:
    """Return the construct that made tracing fail, or None when no model frame is involved."""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and frames[-1].filename.startswith(_PATCHER_DIR):
        return None  # raised by tracezoo itself: a bug to report as is, not the model's fault
    frame = innermost_model_frame(exc)
    if frame is None:
        return None
    reached_from = _modeling_caller(exc) if _is_shared_transformers_file(frame.filename) else None
    code = (linecache.getline(frame.filename, frame.lineno) or frame.line or "").rstrip()
    message = f"{type(exc).__name__}: {exc}".strip()
    symptom = classify(str(exc), code)
    if symptom is SYMPTOMS["iteration"] and _UNPACKED_BY_NAME.search(code):
        symptom = unpacked_by_name(frame.name)
    return UntraceableConstruct(
        filename=frame.filename,
        lineno=frame.lineno,
        function=frame.name,
        code=code.strip(),
        symptom=symptom,
        module_path=module_path,
        fx_message=message.splitlines()[0] if message else type(exc).__name__,
        reached_from=reached_from,
    )


def _is_shared_transformers_file(filename: str) -> bool:
    path = filename.replace(os.sep, "/")
    return "/transformers/" in path and "/transformers/models/" not in path


def _modeling_caller(exc: BaseException) -> tuple[str, str] | None:
    """The deepest model-file frame before shared code, and the function to keep opaque: that frame's
    own function when it is a helper, else the shared function it calls (never ``forward``)."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if _is_model_frame(frame.filename)]
    for caller, callee in zip(reversed(frames[:-1]), reversed(frames[1:])):
        if _is_shared_transformers_file(caller.filename):
            continue
        name = caller.name if caller.name not in ("forward", "<module>") else callee.name
        return f"{short_path(caller.filename)}:{caller.lineno} in {caller.name}()", name
    return None


def in_transformers_models(filename: str) -> bool:
    """A modeling file of the installed transformers (``transformers/models/...``): not the user's
    to edit, and what ``load_traceable`` rewrites."""
    path = filename.replace(os.sep, "/")
    return "/transformers/models/" in path


def failing_code(exc: BaseException, construct: UntraceableConstruct):
    """The code object of the frame whose line ``construct`` names (None if it is not in the traceback)."""
    found = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == construct.filename and lineno == construct.lineno:
            found = frame.f_code
    return found


def moved_none_symptom(name: str, function: str, origin: str | None, why: str) -> DiagnosedSymptom:
    """A trace that failed on code taking ``name`` for not None, where ``name`` comes from an opaque
    call of moved code (``function``, moved from ``origin``) and is None when the graph runs."""
    moved = f"code the patcher moved from {origin}" if origin else "code the patcher moved"
    return DiagnosedSymptom(
        "a value of moved code that is None when the model runs, but a traced value while tracing",
        "",
        f"`{name}` is handed back by {function}() ({moved}), which runs as one opaque call while tracing: "
        f"there `{name}` is a traced value, never None, but when the model runs it can be None ({why}). "
        f"Code after the call that tests `{name} is None` took the branch for a given `{name}`, not the one "
        "the model takes, and failed here; the sample lacks nothing",
        "nothing in the sample or the arguments: tracezoo keeps this moved code as one call because it cannot "
        "decide its branches while tracing, and so cannot tell which of its results are None; report the model "
        "(a gap of the rewrite, not of your input)",
        "what-the-rules-do-not-handle-yet",
    )


def library_class_fix(model_class: type, construct: UntraceableConstruct) -> str | None:
    """The fix for a transformers class whose own modeling file holds a construct a patcher rule
    rewrites: not the rule (that would mean editing the installed transformers), but the class
    made traceable by ``load_traceable``, or a collection's drop-in (the zoo's) where one exists.
    None where that is not the situation (a generated or zoo class, a user's own file, shared code)."""
    from ..registry.plugins import drop_in_for

    if (not construct.symptom.rule or construct.reached_from is not None
            or not model_class.__module__.startswith("transformers.") or not in_transformers_models(construct.filename)):
        return None
    name = model_class.__name__
    drop_in = drop_in_for(model_class)
    zoo = (f" or the {drop_in.package}'s drop-in {drop_in.name} (from {drop_in.package} import {drop_in.name})"
           if drop_in is not None else "")
    both = "both rewrite" if drop_in is not None else "it rewrites"
    return (f"load the model with load_traceable({name}) (from patcher import load_traceable; "
            f"load_traceable({name}).from_pretrained(path) loads the same checkpoints){zoo}: {both} this line "
            f"(patcher rule {construct.symptom.rule}). Do not edit the line itself: it is the installed "
            f"transformers; see GUIDE.md#{construct.symptom.guide_section}")
