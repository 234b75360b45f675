"""The environment of a child Python process that must import this checkout.

The checkout goes first on ``PYTHONPATH`` and the parent's own ``PYTHONPATH`` stays after it:
where packages are installed with ``pip --target`` into folders on ``PYTHONPATH`` (the GPU
machine's libcst and transformers, ``scripts/gpu_check``), a child given the checkout alone
could not import them.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    inherited = os.environ.get("PYTHONPATH")
    path = str(REPO) + (os.pathsep + inherited if inherited else "")
    return dict(os.environ, PYTHONPATH=path, **extra)
