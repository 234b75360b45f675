"""Sample inputs for tracing, built from a config: no processor or tokenizer download.

Text samples work for every decoder model. Multimodal builders are registered per
``model_type`` with :func:`register_multimodal_sample` (:mod:`patcher.samples.builders`): model
collections such as the zoo register their own (:mod:`patcher.registry.plugins`), and ``patcher.samples.images``
one per pixel layout for every image-text-to-text family (a collection's win).

This folder holds every model input: :mod:`.builders` (the registry, the text sample),
:mod:`.config_tokens`, :mod:`.sweep` (the coverage sweep's samples), and one package per modality
(``images``, ``video``, ``audio``), each with its ``modality.py`` declaration, which
:mod:`.modalities` finds (docs/architecture.md, "A modality").
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers import PretrainedConfig

from ..registry.plugins import load_collections
from .builders import (  # noqa: F401  (register_multimodal_sample and text_sample are public here too)
    MultimodalBuilder, register_multimodal_sample, registered_builder, registered_model_types, text_sample,
)


def multimodal_builder(model_type: str) -> MultimodalBuilder | None:
    """The builder for ``model_type``: a model collection's if one has it, else ``patcher.samples.images``'s."""
    load_collections()  # first: the collections' builders win
    from . import images  # noqa: F401  (registers a builder per image layout where none is registered)

    return registered_builder(model_type)


def takes_keyword(builder: MultimodalBuilder, name: str) -> bool:
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def multimodal_sample(config: PretrainedConfig, **kwargs) -> dict[str, Any]:
    """A sample with images from the builder registered for the config's model type. ``model=`` is
    dropped for builders that do not take it (they count image tokens from the config)."""
    builder = multimodal_builder(config.model_type)
    if builder is not None and "model" in kwargs and not takes_keyword(builder, "model"):
        kwargs.pop("model")
    if builder is None:
        known = ", ".join(registered_model_types()) or "none yet"
        raise ValueError(
            f"no multimodal sample builder for model_type {config.model_type!r} (known: {known}); "
            "pass your own sample to trace_subgraphs, or register one with patcher.samples.register_multimodal_sample"
        )
    return builder(config, **kwargs)


def is_vision_language(config: PretrainedConfig) -> bool:
    """Whether the model has an image path: a vision sub-config, or a model type that
    transformers maps to image-text-to-text."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return getattr(config, "vision_config", None) is not None or \
        config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def has_multimodal_sample(config: PretrainedConfig) -> bool:
    load_collections()
    return registered_builder(config.model_type) is not None


def text_only_note(config: PretrainedConfig) -> str:
    """What a text-only trace of a vision-language model leaves out, and how to trace the rest."""
    note = (f"note: {config.model_type} is a vision-language model and this sample had no image: the image "
            "path (vision tower, projector, image-token merge) was not traced, and the graph cannot take "
            "images. ")
    if has_multimodal_sample(config):
        return note + "Trace with --multimodal (Python: sample_input(config, multimodal=True)) to include it."
    return note + (f"No multimodal sample builder is registered for {config.model_type!r}: pass your own sample "
                   "with images to trace_subgraphs, or register a builder with "
                   "patcher.samples.register_multimodal_sample.")


def sample_input(config: PretrainedConfig, *, multimodal: bool = False, **kwargs) -> dict[str, Any]:
    return multimodal_sample(config, **kwargs) if multimodal else text_sample(config, **kwargs)
