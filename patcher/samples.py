"""Sample inputs for tracing, built from a config: no processor or tokenizer download.

Text samples work for every decoder model. Multimodal builders are registered per
``model_type`` with :func:`register_multimodal_sample`: the zoo registers its own, and
``patcher.images`` one per pixel layout for every image-text-to-text family (the zoo's win).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from transformers import PretrainedConfig

MultimodalBuilder = Callable[..., dict[str, Any]]
_MULTIMODAL_BUILDERS: dict[str, MultimodalBuilder] = {}


def register_multimodal_sample(model_type: str):
    """Decorator: register ``builder(config, *, batch_size, seq_len, left_padding, device, generator,
    **kw) -> dict``. Optional keywords a builder may take: ``num_images``, ``image_size`` and
    ``model`` (a built model whose own vision path counts the image tokens); callers pass ``model``
    only to builders that declare it."""

    def register(builder: MultimodalBuilder) -> MultimodalBuilder:
        _MULTIMODAL_BUILDERS[model_type] = builder
        return builder

    return register


def text_sample(
    config: PretrainedConfig,
    *,
    batch_size: int = 1,
    seq_len: int = 16,
    left_padding: int = 0,
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` (left padding on the first row when asked)."""
    vocab_size = config.get_text_config().vocab_size
    input_ids = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    if left_padding:
        attention_mask[0, :left_padding] = 0
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


def multimodal_builder(model_type: str) -> MultimodalBuilder | None:
    """The builder for ``model_type``: the zoo's if it has one, else ``patcher.images``'s."""
    try:
        import zoo  # noqa: F401  (registers the zoo's builders first: they win)
    except ImportError:
        pass
    from . import images  # noqa: F401  (registers a builder per image layout where none is registered)

    return _MULTIMODAL_BUILDERS.get(model_type)


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
        known = ", ".join(sorted(_MULTIMODAL_BUILDERS)) or "none yet"
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
    if config.model_type not in _MULTIMODAL_BUILDERS:
        try:
            import zoo  # noqa: F401  (registers the zoo's builders)
        except ImportError:
            pass
    return config.model_type in _MULTIMODAL_BUILDERS


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
