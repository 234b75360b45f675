"""Helpers shared by the zoo recipes' tiny models and sample builders: a recipe keeps its sizes,
names and token ids, and the part of its sample that is its own model's.

Sample conventions every zoo recipe's ``build_sample`` follows (:func:`multimodal_sample_builder`
applies the shared ones; the tests check all of them against the recipe's ``sample_layout``):

- ``seq_len`` is the *text* length, left padding included and the image spans excluded: each image
  adds its span to it, so ``input_ids.shape[1] == seq_len + num_images * span``. An image's span is
  its image tokens plus the markers around them if the model has some
  (``SampleLayout.span``: Qwen2-VL's ``t*h*w / spatial_merge_size**2`` image tokens between
  ``vision_start`` and ``vision_end``; Mllama's single ``<|image|>`` token).
- every row holds ``num_images`` images, at random positions among its text tokens (after the left
  padding, which only row 0 gets); pixel values are in row-major image order, the order of the
  image tokens in ``input_ids``.
- ``image_size`` is the image's pixel size ``(height, width)`` (an int for a square), or a list of
  those, one per image of a row; which sizes a model takes is its own (``example_image_sizes``).
- ``generator=None`` uses a fresh generator seeded with 0, so multimodal samples are reproducible.
- ``multimodal=False`` returns exactly ``patcher.samples.text_sample(config, batch_size=...,
  seq_len=..., left_padding=..., device=..., generator=...)`` (its own ``generator=None`` rule).
- ``device="meta"``: built on CPU and moved to ``meta`` (tracing needs shapes, not values).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import transformers

from patcher.models import random_model
from patcher.samples.images.tokens import check_counts, pad_token_id, place_spans
from patcher.samples import text_sample


def resolve(model_class: type | str) -> type:
    return getattr(transformers, model_class) if isinstance(model_class, str) else model_class


def tiny_model(model_class: type | str, config, seed: int, dtype: torch.dtype) -> torch.nn.Module:
    """A random model of ``model_class`` (a class or a ``transformers`` class name) in eval mode.
    The same seed gives the same weights to any class with the same module structure (original and
    zoo class); every all-zero parameter is woken so no path is dead."""
    return random_model(resolve(model_class), config, seed, dtype)


def tiny_config_parts(overrides: dict, text: dict, vision: dict, top: dict | None = None) -> tuple[dict, dict, dict]:
    """A recipe's tiny defaults with ``tiny_config(**overrides)`` merged in: the ``text_config``,
    ``vision_config`` and top-level dicts. The ``text_config`` / ``vision_config`` overrides are
    popped from ``overrides``, so what is left there is what the caller set at top level."""
    text = {**text, **overrides.pop("text_config", {})}
    vision = {**vision, **overrides.pop("vision_config", {})}
    return text, vision, {**(top or {}), **overrides}


def make_tiny_model(default_class: str, tiny_config: Callable) -> Callable[..., torch.nn.Module]:
    """A recipe's ``tiny_model(seed=0, dtype=torch.float32, model_class=None, **overrides)``: a
    :func:`tiny_model` of ``tiny_config(**overrides)``, of ``default_class`` unless ``model_class``
    says otherwise."""

    def recipe_tiny_model(seed: int = 0, dtype: torch.dtype = torch.float32, model_class: type | str | None = None,
                          **overrides) -> torch.nn.Module:
        return tiny_model(model_class or default_class, tiny_config(**overrides), seed, dtype)

    recipe_tiny_model.__name__ = recipe_tiny_model.__qualname__ = "tiny_model"
    recipe_tiny_model.__module__ = tiny_config.__module__
    recipe_tiny_model.__doc__ = (
        f"A tiny random model in eval mode: ``{default_class}`` unless ``model_class`` (a class or a "
        "``transformers`` class name) says otherwise. The same seed gives the same weights to any class "
        "with the same module structure."
    )
    return recipe_tiny_model


def pair(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    height, width = size
    return int(height), int(width)


def image_sizes(image_size, num_images: int, default) -> list[tuple[int, int]]:
    """One ``(height, width)`` per image of a row (a pair of ints is always one size)."""
    if image_size is None:
        return [pair(default)] * num_images
    if isinstance(image_size, int) or (len(image_size) == 2 and all(isinstance(v, int) for v in image_size)):
        return [pair(image_size)] * num_images
    sizes = [pair(size) for size in image_size]
    if len(sizes) != num_images:
        raise ValueError(f"image_size lists {len(sizes)} sizes for num_images={num_images}: give one per image")
    return sizes


def token_rows(config, batch_size: int, seq_len: int, spans: list[list[int]], left_padding: int,
                special: list[int | None], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` / ``attention_mask``: per row, ``seq_len`` text tokens (row 0 starts with
    ``left_padding`` pads) with the image ``spans`` inserted in order at random text positions."""
    vocab_size = config.get_text_config().vocab_size
    allowed = torch.ones(vocab_size, dtype=torch.bool)
    allowed[[token for token in special if token is not None and 0 <= token < vocab_size]] = False
    text_pool = allowed.nonzero().flatten()
    return place_spans(text_pool, pad_token_id(config), batch_size, seq_len, spans, left_padding, generator)



ImageInputs = Callable[..., dict[str, torch.Tensor]]


def multimodal_sample_builder(default_image_size: Callable) -> Callable[[ImageInputs], Callable[..., dict[str, Any]]]:
    """Decorator: a recipe's ``build_sample`` from the part that is its model's own,
    ``image_inputs(config, sizes, *, batch_size, seq_len, left_padding, generator, dtype) -> dict``
    (``sizes``: one ``(height, width)`` per image of a row). The conventions every zoo recipe shares
    (the module docstring) are applied here: ``multimodal=False`` is
    ``patcher.samples.text_sample``; ``generator=None`` is a fresh generator seeded with 0; the counts
    are checked; ``image_size`` (None: ``default_image_size(config)``) becomes ``sizes``; the tensors
    are built on CPU and moved to ``device``. The builder keeps ``image_inputs``' name and docstring."""

    def decorate(image_inputs: ImageInputs) -> Callable[..., dict[str, Any]]:
        def build_sample(
            config,
            *,
            batch_size: int = 1,
            seq_len: int = 16,
            num_images: int = 1,
            image_size: int | Sequence[int] | Sequence[Sequence[int]] | None = None,
            left_padding: int = 0,
            device: str | torch.device = "cpu",
            generator: torch.Generator | None = None,
            multimodal: bool = True,
            dtype: torch.dtype = torch.float32,
        ) -> dict[str, Any]:
            if not multimodal:
                return text_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                                   device=device, generator=generator)
            generator = generator if generator is not None else torch.Generator().manual_seed(0)
            check_counts(batch_size, seq_len, num_images, left_padding)
            sizes = image_sizes(image_size, num_images, default_image_size(config))
            sample = image_inputs(config, sizes, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                                  generator=generator, dtype=dtype)
            return {name: value.to(device) for name, value in sample.items()}

        # Named and documented as the recipe's function; no ``__wrapped__``, so ``inspect.signature``
        # (``patcher.samples.takes_keyword``) reads the builder's own keywords.
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(build_sample, attribute, getattr(image_inputs, attribute))
        return build_sample

    return decorate
