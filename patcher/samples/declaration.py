"""The :class:`Modality` declaration, and what every modality shares.

A modality is declared by ``MODALITY = Modality(...)`` in ``patcher/samples/<modality>/modality.py``,
beside the package that builds its samples; :mod:`patcher.samples.modalities` finds it there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

#: Eager's output must move by more than this when only a modality's input changes.
MIN_INFLUENCE = 1e-4


@dataclass(frozen=True)
class Modality:
    #: the report's name for it: "images: built ..." (summary, "Per modality")
    label: str
    #: one item of it: "no image influence", "the image never reaches them", "image sample"
    noun: str
    #: the ``Attempt.mode``, the ``CoverageRow`` field and the report column of its attempts
    attempt: str
    #: what the classes given it have, in the summary: "images: 75 with a sample builder"
    given: str
    #: what ``vary`` changes, in words: "... when only the pixels changed"
    varied: str
    #: where to look when its input never reaches eager's output
    hint: str
    #: the text attempt's stage when eager fails on text alone but runs on this modality's sample:
    #: the class needs this input, so its text failure is not the row's blocker
    text_alone: str
    #: ``takes(cls, config)``: whether the class is given this modality
    takes: Callable[[type, Any], bool]
    #: ``samples(config, model, seed)``: the samples the chain is traced on (the first) and run on
    samples: Callable[[Any, Any, int], list[dict]]
    #: ``vary(sample, seed, config)``: the sample with only this modality's input changed
    vary: Callable[[dict, int, Any], dict]
    #: whether the chain must also give eager's output on the varied sample (not only eager change)
    chain_runs_varied: bool
    #: its place in the report (columns, summary, "Per modality" lines, which attempt is the
    #: blocker): :data:`patcher.samples.modalities.MODALITIES` is sorted by it
    order: int
    #: the forward input that carries it in most families, the one ``vary`` changes
    #: (``pixel_values``): what the one-interface test feeds a model that ignores or reads it
    input_name: str
    #: ``prepare_config(config, cls)``: what the sweep sets in every shrunk config before it builds
    #: the class (the audio placeholder ids a tiny config lacks); None: nothing
    prepare_config: Callable[[Any, type], None] | None = None
    #: ``prepare_model(cls, config, model, seed)``: what the sweep changes in every model it builds,
    #: the original and its traceable copies alike (weights redrawn so that a tiny tower carries its
    #: input on); the hook decides which classes it applies to; None: nothing
    prepare_model: Callable[[type, Any, Any, int], None] | None = None
    #: when ``prepare_model`` runs among the modalities' (lowest first, then the report's order):
    #: where two redraw the same weights, the later wins there
    prepare_order: int = 0
    #: the ``CoverageRow`` field (``image_path``) that records ``has_path(cls, config)``: whether
    #: the class takes this input at all, even where the sweep cannot feed it; None: no such field
    path_field: str | None = None
    has_path: Callable[[type, Any], bool] | None = None
    #: the summary's words for the built rows whose text attempt stopped at ``text_alone``
    #: ("text: ran 296 (8 need images)"), whose text columns then show that stage; None: neither
    #: (their text columns read "no", the modality's column says how the row went)
    text_alone_summary: str | None = None
    #: ``command_sample(config, model, **options)``: the sample ``patcher trace --modality <name>``
    #: (``graph``, ``repair``, ``plan``) traces, and a note for the user or None; ``model`` is on the
    #: meta device, ``options`` are ``sample_input``'s (``device``, a batch and length); None: the
    #: commands refuse the modality, naming it
    command_sample: Callable[..., tuple[dict, str | None]] | None = None
    #: ``sample_location(config)``: ``file:line`` where a sample whose input never reaches the
    #: output is made, named as the influence failure's location (None: not known)
    sample_location: Callable[[Any], str | None] = lambda config: None
    #: whether its samples are run again with the vision tower's blocks as targets too
    vision_blocks: bool = False
    #: whether its samples carry images (a policy's camera images): an equal attempt counts as
    #: equal with images in the image-text-to-text metric
    carries_images: bool = False
    #: ``why_not_given(cls) -> str | None``: why a class with a path to this modality is given no
    #: sample of it, where the class itself says so (InstructBLIP-Video's pixels are video frames,
    #: no image); the report's reason for the missing attempt. None: not known
    why_not_given: Callable[[type], str | None] | None = None

    def __post_init__(self) -> None:
        if (self.path_field is None) != (self.has_path is None):
            raise TypeError(f"Modality {self.label!r}: path_field and has_path are declared together (the row field "
                            "and what fills it), or neither")

    def given_to(self, rows) -> list:
        """The attempts of this modality in ``rows`` (rows of classes not given it have none)."""
        return [attempt for attempt in (getattr(row, self.attempt, None) for row in rows) if attempt is not None]


def built(attempt) -> bool:
    """A modality's sample is built when eager ran on it and its input reached eager's output."""
    return attempt.ran and attempt.stage not in ("sample", "eager", "influence")
