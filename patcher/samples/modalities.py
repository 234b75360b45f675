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
#: The text-alone stages the report names (summary, text columns), with the summary's words, in the
#: report's order (modalities sharing a stage share its words: the first that gives some).
TEXT_ALONE_NAMED: dict[str, str] = {}
for _modality in MODALITIES:
    if _modality.text_alone_summary is not None:
        TEXT_ALONE_NAMED.setdefault(_modality.text_alone, _modality.text_alone_summary)


def named(name: str) -> Modality:
    """The modality declared in ``patcher/samples/<name>/modality.py`` (``--modality NAME``)."""
    module = importlib.import_module(f"{__package__}.{name}.modality")
    return module.MODALITY


def prepare_config(config, cls) -> None:
    """Every modality's ``prepare_config`` on a config the sweep shrank, in the report's order."""
    for modality in MODALITIES:
        if modality.prepare_config is not None:
            modality.prepare_config(config, cls)


def prepare_model(cls, config, model, seed: int) -> None:
    """Every modality's ``prepare_model`` on a model the sweep built, in ``prepare_order``."""
    for modality in sorted(MODALITIES, key=lambda modality: modality.prepare_order):
        if modality.prepare_model is not None:
            modality.prepare_model(cls, config, model, seed)


def path_fields(cls, config) -> dict[str, bool]:
    """``{path_field: has_path(cls, config)}`` of every modality that records one on the row."""
    return {modality.path_field: bool(modality.has_path(cls, config)) for modality in MODALITIES
            if modality.path_field is not None}

__all__ = ["MIN_INFLUENCE", "MODALITIES", "Modality", "TEXT_ALONE_NAMED", "TEXT_ALONE_STAGES", "built",
           "named", "path_fields", "prepare_config", "prepare_model"]
