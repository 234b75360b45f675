"""Pictures of a partition: the traced graph with its subgraphs drawn as graphviz clusters.

>>> from patcher.render import render_partition, to_dot  # doctest: +SKIP
>>> render_partition(subgraphs, traced, "partition.svg")  # doctest: +SKIP

``to_dot`` is pure Python; writing ``.svg``/``.png``/``.pdf`` runs graphviz's ``dot`` program
(Debian/Ubuntu: ``apt-get install graphviz``). ``.dot`` files need nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .limits import AUTO_COLLAPSE_NODES, AUTO_COLLAPSE_SUBGRAPHS

if TYPE_CHECKING:
    from torch import nn

    from ..partition import Subgraph
    from ..trace.graph_runtime import TracedGraph

# to_dot and should_collapse import torch (seconds): loaded on first use, so that
# `patcher graph --help` stays fast.
_LAZY = {"to_dot", "should_collapse"}


def __getattr__(name: str):
    if name in _LAZY:
        from . import dot

        return getattr(dot, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: Output formats ``dot`` is run for; ``.dot``/``.gv`` are written as text.
GRAPHVIZ_FORMATS = ("svg", "png", "pdf")
TEXT_FORMATS = ("dot", "gv")

INSTALL_HINT = (
    "install Graphviz (Debian/Ubuntu: `sudo apt-get install -y graphviz`; macOS: `brew install graphviz`; "
    "conda: `conda install -c conda-forge graphviz`), or write a .dot file instead and render it elsewhere"
)


class GraphvizNotFoundError(RuntimeError):
    """The ``dot`` program is needed for this output format but is not installed."""


def render_partition(subgraphs: Sequence[Subgraph], traced: TracedGraph | None = None,
                     path: str | os.PathLike | None = None, collapse: str | bool = "auto", *,
                     model: nn.Module | None = None, title: str | None = None, dot: str | None = None,
                     dpi: float | None = None) -> Path:
    """Draw the partition into ``path``; the format comes from its suffix (.svg, .png, .pdf, .dot).

    ``collapse``: ``"auto"`` draws one box per subgraph above ~8 subgraphs or ~300 nodes,
    ``"yes"`` always, ``"no"`` never. ``model`` adds module class and argument names. ``dot`` is the
    graphviz program (default: ``dot`` on PATH); ``dpi`` sets the PNG resolution (graphviz default 96).
    Returns the path written.
    Raises ``GraphvizNotFoundError`` for .svg/.png/.pdf without graphviz.
    """
    if path is None and isinstance(traced, (str, os.PathLike)):
        traced, path = None, traced  # render_partition(subgraphs, "out.svg")
    if path is None:
        raise TypeError("render_partition() needs a path (.svg, .png, .pdf or .dot)")
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in GRAPHVIZ_FORMATS + TEXT_FORMATS:
        raise ValueError(f"cannot tell the format of {str(path)!r}: use a .svg, .png, .pdf or .dot file name")
    from .dot import to_dot

    text = to_dot(subgraphs, traced, collapse=collapse, model=model, title=title)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    if fmt in TEXT_FORMATS:
        from ..rewrite.files import write_atomic

        write_atomic(path, text)
        return path
    run_dot(text, path, fmt, dot=dot, options=[f"-Gdpi={dpi:g}"] if dpi else ())
    return path


def find_dot(dot: str | None = None) -> str | None:
    """The graphviz ``dot`` program: ``dot`` (a path or name), ``$TRACEZOO_DOT``, or ``dot`` on PATH."""
    candidate = dot or os.environ.get("TRACEZOO_DOT") or "dot"
    return shutil.which(candidate)


def run_dot(text: str, path: Path, fmt: str, dot: str | None = None, options: Sequence[str] = (),
            timeout: float = 300) -> None:
    """Run graphviz on DOT ``text``, writing ``path`` in format ``fmt`` (svg, png, pdf).

    Graphviz writes a temporary file next to ``path``, renamed over it once complete: a failed,
    interrupted or killed run leaves ``path`` as it was (see ``patcher.rewrite.files.write_atomic_with``).
    """
    from ..rewrite.files import write_atomic_with

    program = find_dot(dot)
    if program is None:
        raise GraphvizNotFoundError(
            f"cannot write {str(path)!r}: Graphviz's `dot` program is not installed (not found on PATH); "
            + INSTALL_HINT
        )

    def draw(temporary: Path) -> None:
        result = subprocess.run([program, f"-T{fmt}", *options, "-o", str(temporary)], input=text.encode("utf-8"),
                                capture_output=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"graphviz `dot -T{fmt}` failed (exit {result.returncode}) writing {str(path)!r}: "
                               f"{result.stderr.decode('utf-8', 'replace').strip()}")

    write_atomic_with(path, draw)


__all__ = [
    "AUTO_COLLAPSE_NODES", "AUTO_COLLAPSE_SUBGRAPHS", "GraphvizNotFoundError", "find_dot", "render_partition",
    "run_dot", "should_collapse", "to_dot",
]
