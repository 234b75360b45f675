"""Errors the rewriter raises for input it cannot patch at all."""

from __future__ import annotations


class PatchError(Exception):
    """Bad input for the patcher: nothing was written.

    The message always starts with ``file:line: `` so editors and CI logs can jump to it.

    >>> str(PatchError("cause", path="modeling_x.py", line=3))
    'modeling_x.py:3: cause'
    """

    def __init__(self, cause: str, *, path: str | None = None, line: int | None = None):
        self.cause = cause
        self.path = path or "<string>"
        self.line = line or 0
        super().__init__(f"{self.path}:{self.line}: {cause}")
