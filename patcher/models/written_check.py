"""Trace a file that ``patcher repair -o`` wrote, the way a user would load it.

``repair`` traces its patched class in memory, where ``AutoModel.from_config`` is redirected to
the traceable variants of sub-models (see ``traceable._TraceableAutoClass``). The written file
has no such redirect: imported on its own, ``AutoModel.from_config(config.text_config)`` builds
transformers' original class (Qwen3-VL's language model), so the file may not trace although the
in-memory class did. What repair reports about the file must be what the file does, so the file
itself is imported and traced.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import import_module_file


@dataclass
class WrittenTrace:
    """The outcome of tracing a written file: ``error`` is None when it traces."""

    path: Path
    class_name: str
    error: str | None = None
    unpatched: tuple[str, ...] = ()  # "module.path (Class)" built from the library's original class

    @property
    def traced(self) -> bool:
        return self.error is None

    def report(self) -> str:
        where = f"{self.path}:{self.class_name}"
        if self.traced:
            return f"checked: the written file traces ({where})"
        lines = [f"the written file does NOT trace ({where}), although the model patched in memory did:",
                 self.error]
        if self.unpatched:
            lines.append("  cause: these sub-models are built from transformers' original (unpatched) classes, "
                         "because AutoModel.from_config looks classes up in transformers' registry, not in the "
                         "written file: " + ", ".join(self.unpatched))
            lines.append("  workaround: load the class with patcher.load_traceable(...) in Python, which builds "
                         "the patched sub-models too")
        return "\n".join(lines)


def _import_file(path: Path):
    """Import ``path`` under a name unique to its content (a rewritten file is imported afresh)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    module_name = f"_tracezoo_written_{path.stem}_{digest}"
    return import_module_file(module_name, path)


def _unpatched_submodules(model, module) -> tuple[str, ...]:
    """Sub-modules whose class the written module patched, built from the original class instead."""
    found = []
    for name, sub in model.named_modules():
        cls = type(sub)
        patched = getattr(module, cls.__name__, None)
        if cls.__module__ != module.__name__ and isinstance(patched, type) and patched.__module__ == module.__name__:
            found.append(f"'{name}' ({cls.__name__} from {cls.__module__})")
    # Only the outermost: the layers of an unpatched language model are unpatched too.
    outer = [f for f in found if not any(f != o and f.split("'")[1].startswith(o.split("'")[1] + ".") for o in found)]
    return tuple(outer)


def trace_written_file(path: str | Path, class_name: str, config, sample: Mapping[str, Any],
                       targets: Sequence[str], ignore: Sequence[str],
                       unused_inputs: Sequence[str] = ()) -> WrittenTrace:
    """Import ``class_name`` from the written ``path``, build it on meta from ``config`` and trace it."""
    from . import build_model
    from ..trace import TracingError, trace_graph

    path = Path(path)
    result = WrittenTrace(path, class_name)
    module = _import_file(path)
    model = build_model(getattr(module, class_name), config, device="meta")
    result.unpatched = _unpatched_submodules(model, module)
    try:
        trace_graph(model, sample, list(targets), list(ignore), unused_inputs)
    except TracingError as exc:
        construct = getattr(exc, "construct", None)
        result.error = construct.describe() if construct is not None else f"  {exc}"
    return result
