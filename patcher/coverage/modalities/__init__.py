"""The inputs the sweep feeds besides text, one :class:`Modality` declaration each.

A class the sweep gives a modality gets one attempt of that modality next to its text attempt:
the modality's samples (two layouts) are traced once and run through the same chain of subgraphs,
each compared with eager; and eager's output must change when only the modality's input changes
(its influence, :func:`patcher.coverage.check.check_influence`), or the attempt stops at
``influence``: a sample whose image, video or clip never reaches the logits would prove nothing.
The check (``check.py``), the attempt's row field and the report (``report.py``: its column, its
share of the summary, its "Per modality" line) iterate over :data:`MODALITIES`; a new modality is
one module here declaring it, one line below, and the package that builds its samples.
"""

from __future__ import annotations

from .audio import AUDIO
from .base import MIN_INFLUENCE, Modality, built
from .images import IMAGES
from .robot import ROBOT
from .video import VIDEO

#: In the report's order (columns, summary, "Per modality" lines, which attempt is the blocker).
MODALITIES: tuple[Modality, ...] = (IMAGES, VIDEO, AUDIO, ROBOT)
#: The text attempt's stages that say "needs another input", not "failed".
TEXT_ALONE_STAGES = frozenset(modality.text_alone for modality in MODALITIES)

__all__ = ["AUDIO", "IMAGES", "MIN_INFLUENCE", "MODALITIES", "Modality", "ROBOT", "TEXT_ALONE_STAGES", "VIDEO", "built"]
