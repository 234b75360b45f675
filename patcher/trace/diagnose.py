"""Map an exception raised while tracing back to the model source line that caused it.

torch.fx reports untraceable code with messages such as "symbolically traced variables cannot
be used as inputs to control flow", which name neither the file nor the construct. Here the
traceback is walked to the innermost frame of model code (not torch, not tracezoo, not the
standard library), the line is read, and the construct is classified into a kind with the
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

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PATCHER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep
# Decorators wrap every forward; the construct is never in them.
_DECORATOR_FILES = ("transformers/utils/generic.py", "transformers/utils/output_capturing.py")


@dataclass(frozen=True)
class ConstructKind:
    name: str
    rule: str
    why: str
    fix: str
    guide_section: str


KINDS = {
    "assert": ConstructKind(
        "assert or check on a tensor value",
        "TZ102",
        "an assert/check needs a concrete bool, but while tracing tensors are symbolic",
        "move the check into a module-level torch.fx.wrap function so it runs when the graph runs",
        "asserts-and-checks",
    ),
    "shape_branch": ConstructKind(
        "control flow on a shape, ndim or dtype",
        "TZ105",
        "shapes of traced values are symbolic, so Python cannot decide the branch",
        "rewrite so the result does not depend on the branch (e.g. always slice), or wrap the statement",
        "shape-and-dtype-inference",
    ),
    "control_flow": ConstructKind(
        "control flow on a tensor value",
        "TZ101",
        "`if`/`while`/`and`/`or`/ternaries need a concrete bool, but traced tensors are symbolic",
        "move the statement into a module-level torch.fx.wrap function, or add the enclosing function to `ignore`",
        "conditional-execution",
    ),
    "starred_shape": ConstructKind(
        "starred unpacking of a shape",
        "TZ104",
        "`*shape` iterates a symbolic shape whose length fx cannot know",
        "index the shape instead (`b, t = x.shape[0], x.shape[1]`; `shape + (-1,)`)",
        "correcting-shape-inference",
    ),
    "iteration": ConstructKind(
        "iteration over a traced value",
        "TZ103",
        "a loop over a tensor (or list(tensor), zip, enumerate) needs its length, which is data",
        "wrap the loop in a module-level torch.fx.wrap function, or index over a range known from the config",
        "wrapping-functions",
    ),
    "data_dependent": ConstructKind(
        "data-dependent Python value (.item(), .tolist(), len())",
        "TZ103",
        "the code turns tensor data into Python values, which do not exist while tracing",
        "wrap the function that uses them (add its name to `ignore`, or let the patcher wrap it)",
        "wrapping-functions",
    ),
    "unsupported_object": ConstructKind(
        "a Python object fx cannot put into the graph",
        "TZ106",
        "a non-tensor object (a cache, a custom class) reached an opaque call or the graph output",
        "trace with the cache off and keep the function that receives it opaque (`ignore`)",
        "wrapping-functions",
    ),
    "model_error": ConstructKind(
        "an error raised by the model's own code",
        "",
        "the model's forward raised while it ran with symbolic inputs",
        "check the sample input and the model's arguments; if the error comes from a check on tensor values, wrap it",
        "determining-traceability",
    ),
}


@dataclass(frozen=True)
class UntraceableConstruct:
    """Where and what: enough to find the line, understand it and fix it."""

    filename: str
    lineno: int
    function: str
    code: str
    kind: ConstructKind
    module_path: str | None
    fx_message: str
    #: When the construct is in transformers' shared code (``masking_utils.py``, ...), which no
    #: patch of the modeling file changes: the modeling-file call that leads there, as
    #: ``(location, function name to keep opaque)``.
    reached_from: tuple[str, str] | None = None

    @property
    def location(self) -> str:
        return f"{_short_path(self.filename)}:{self.lineno}"

    def describe(self) -> str:
        where = f"  at {self.location} in {self.function}()"
        if self.module_path is not None:
            where += f", while tracing module '{self.module_path or '<root>'}'"
        rule = f" (patcher rule {self.kind.rule})" if self.kind.rule else ""
        return "\n".join(
            [
                f"untraceable construct: {self.kind.name}",
                where,
                f"      {self.code}",
                f"  why: {self.kind.why}",
                *self._fix_lines(rule),
                f"  raised: {self.fx_message}",
            ]
        )

    def _fix_lines(self, rule: str) -> list[str]:
        if self.reached_from is None:
            return [f"  fix: {self.kind.fix}{rule}; see GUIDE.md#{self.kind.guide_section}"]
        location, callee = self.reached_from
        return [
            f"  reached from: {location}, which calls into transformers' shared code",
            f"  fix: keep that call opaque: ignore=[..., {callee!r}] (patcher trace --ignore {callee}); "
            f"rewriting {_short_path(self.filename)} would change every model; see GUIDE.md#wrapping-functions",
        ]


def _short_path(filename: str) -> str:
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


_STARRED = re.compile(r"(^|[(\[,=\s])\*(?!\*)\s*[A-Za-z_(]")
_SHAPE_WORDS = re.compile(r"\.(shape|ndim|dim\(\)|size\(|dtype)|\bisinstance\(")


def classify(message: str, code: str) -> ConstructKind:
    """Pick the construct kind from fx's message and the offending source line."""
    stripped = code.strip()
    if "cannot be used as inputs to control flow" in message or "cond must be a bool" in message:
        if stripped.startswith("assert") or "check" in stripped.split("(")[0] or "cond must be a bool" in message:
            return KINDS["assert"]
        if _SHAPE_WORDS.search(stripped):
            return KINDS["shape_branch"]
        return KINDS["control_flow"]
    if "cannot be iterated" in message:
        if _STARRED.search(stripped) and ("shape" in stripped or "size" in stripped or "*" in stripped):
            return KINDS["starred_shape"]
        return KINDS["iteration"]
    if "'len' is not supported" in message or re.search(r"\.(item|tolist)\(", stripped):
        return KINDS["data_dependent"]
    if message.startswith("argument of type"):
        return KINDS["unsupported_object"]
    return KINDS["model_error"]


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
    kind = classify(str(exc), code)
    return UntraceableConstruct(
        filename=frame.filename,
        lineno=frame.lineno,
        function=frame.name,
        code=code.strip(),
        kind=kind,
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
        return f"{_short_path(caller.filename)}:{caller.lineno} in {caller.name}()", name
    return None
