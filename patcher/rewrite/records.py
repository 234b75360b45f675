"""What a patch reports: one record per rewrite, one per refusal."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Rewrite:
    code: str
    lines: tuple[int, int]
    function: str | None
    reason: str
    qualname: str

    def as_dict(self) -> dict:
        return {"rule": self.code, "lines": list(self.lines), "function": self.function,
                "reason": self.reason, "qualname": self.qualname}


@dataclass
class Blocker:
    file: str
    line: int
    code: str
    kind: str
    reason: str

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "code": self.code, "kind": self.kind, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.code} ({self.kind}): {self.reason}"
