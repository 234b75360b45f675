"""What the installed transformers has, for tests that run on every version of CI's matrix.

CI runs the slice marked ``versions`` (``.ci/run``) on the pinned transformers and on the other
versions of its matrix (the floor, the one llm-compressor pins, the newest). A test of a class the
installed transformers does not have skips, naming the version; a class it has is never skipped.
"""

from __future__ import annotations

import pytest
import transformers


def installed() -> str:
    return transformers.__version__


def has_class(name: str) -> bool:
    """Whether ``name`` (a model or config class) is in the installed transformers."""
    try:
        return hasattr(transformers, name)
    except Exception:  # noqa: BLE001  (a lazy import of a class whose module fails: not usable here)
        return False


def require_classes(*names: str) -> None:
    """Skip the calling test when the installed transformers lacks one of ``names``."""
    missing = [name for name in names if not has_class(name)]
    if missing:
        pytest.skip(f"transformers {installed()} has no {', '.join(missing)}")


def class_param(name: str, *values):
    """A ``pytest.param`` of ``values`` (default: ``name`` alone) for a case of class ``name``,
    skipped, with the reason, where the installed transformers lacks the class."""
    values = values or (name,)
    marks = () if has_class(name) else pytest.mark.skip(reason=f"transformers {installed()} has no {name}")
    return pytest.param(*values, marks=marks, id=name if len(values) == 1 else None)


def source_line(module: str, code: str) -> str:
    """``"<file name>:<line>"`` of the one line of the installed transformers module ``module``
    (``transformers.models.x.modeling_x``) that reads ``code`` (stripped), for expectations that
    name a place in transformers' source: its lines move from release to release."""
    import importlib
    import inspect
    from pathlib import Path

    path = inspect.getsourcefile(importlib.import_module(module))
    lines = [number for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1)
             if line.strip() == code]
    assert len(lines) == 1, f"{module} has {len(lines)} lines reading {code!r}: the expectation needs updating"
    return f"{Path(path).name}:{lines[0]}"
