"""The inputs the sweep feeds besides text, one :class:`Modality` declaration each.

A class the sweep gives a modality gets one attempt of that modality next to its text attempt:
the modality's samples (two layouts) are traced once and run through the same chain of subgraphs,
each compared with eager; and eager's output must change when only the modality's input changes
(its influence, :func:`patcher.coverage.check.check_influence`), or the attempt stops at
``influence``: a sample whose image, video or clip never reaches the logits would prove nothing.
The check (``check.py``), the attempt's row field and the report (``report.py``: its column, its
share of the summary, its "Per modality" line) iterate over :data:`MODALITIES`.

A modality plugs in as one package ``patcher/samples/<modality>/`` that builds its samples and
declares ``MODALITY = Modality(...)`` in its ``modality.py``: every such declaration is found here,
so nothing else is edited.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from .declaration import MIN_INFLUENCE, Modality, built


def declared(folder: Path = Path(__file__).parent, package: str = __package__) -> tuple[Modality, ...]:
    """``MODALITY`` of every ``<folder>/<modality>/modality.py`` (``package`` is ``folder``'s dotted
    name), in the report's order."""
    found = []
    for declaration in sorted(folder.glob("*/modality.py")):
        module = importlib.import_module(f"{package}.{declaration.parent.name}.modality")
        modality = getattr(module, "MODALITY", None)
        if not isinstance(modality, Modality):
            raise TypeError(f"{declaration}: a modality's declaration module defines MODALITY = Modality(...), "
                            f"found {type(modality).__name__}; declare it there, or rename the module")
        found.append(modality)
    orders = sorted(modality.order for modality in found)
    if len(set(orders)) != len(orders):
        raise ValueError(f"patcher/samples/*/modality.py: two modalities share a place in the report's order "
                         f"({orders}); give each its own Modality.order")
    return tuple(sorted(found, key=lambda modality: modality.order))


#: In the report's order (columns, summary, "Per modality" lines, which attempt is the blocker).
MODALITIES: tuple[Modality, ...] = declared()
#: The text attempt's stages that say "needs another input", not "failed".
TEXT_ALONE_STAGES = frozenset(modality.text_alone for modality in MODALITIES)

__all__ = ["MIN_INFLUENCE", "MODALITIES", "Modality", "TEXT_ALONE_STAGES", "built"]
