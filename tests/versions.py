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
    """A ``pytest.param`` for a case of class ``name`` (and any further values), skipped, with the
    reason, where the installed transformers lacks the class."""
    values = values or (name,)
    marks = () if has_class(name) else pytest.mark.skip(reason=f"transformers {installed()} has no {name}")
    return pytest.param(*values, marks=marks, id=name if len(values) == 1 else None)
