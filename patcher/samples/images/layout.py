"""The shared sample builder: a family says how pixels look; this places the image tokens.

A family (one module per pixel layout) is an :class:`ImageLayout`: the default image size, the
pixel inputs for a list of images, and a count of image tokens from the config alone for when no
model is at hand. :func:`build_image_sample` does the rest for every family: the image token span
per image (counted by the model's own vision path when ``model`` is given), the text rows, and the
token-type inputs the model's ``forward`` takes.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..builders import register_multimodal_sample, registered_builder, text_sample
from .tokens import check_counts, decoder_rows, features_per_image, first_field, image_feature_method, image_token_id, token_rows

Size = tuple[int, int]


@dataclass(frozen=True)
class ImageLayout:
    """How one family of models takes images.

    ``pixels(config, sizes, generator, dtype, accepted, rows)`` returns the pixel inputs for images of
    the given ``(height, width)`` sizes (all images of all ``rows`` text rows, row-major);
    ``accepted`` is the set of the model's forward argument names. ``default_size(config)`` and ``other_size(config)`` (a
    second valid size, or None where the family takes one size only) give image sizes;
    ``config_count(config, size)`` the image tokens per image from the config alone.
    ``markers(config)`` are the tokens around each image's run (``<vision_start>``...).
    ``placeholder(config)`` is the id of the tokens the model replaces by image features.
    ``prefix``: the model puts the image features before the text itself (GIT): the text holds no
    image tokens, and each row takes exactly one image.
    """

    name: str
    model_types: tuple[str, ...]
    pixels: Callable[..., dict[str, torch.Tensor]]
    default_size: Callable[[Any], Size]
    config_count: Callable[[Any, Size], int]
    other_size: Callable[[Any], Size | None] = lambda config: None
    markers: Callable[[Any], tuple[list[int], list[int]]] = lambda config: ([], [])
    #: ``variants(config, pixels) -> [pixels, ...]``: other arrangements of the same pixels that
    #: towers of the family take (patch shapes differ across the family); with a model at hand, the
    #: first arrangement its ``get_image_features`` accepts is used.
    variants: Callable[[Any, dict], list[dict]] = lambda config, pixels: []
    placeholder: Callable[[Any], int] = image_token_id
    #: ``other_pixels(sample, generator) -> sample``: the same images with other pixel values, for
    #: the image-influence check, where replacing every float image input would break the sample
    #: (patch rows that carry their grid position); None: every float image input is redrawn.
    other_pixels: Callable[[dict, torch.Generator], dict] | None = None
    prefix: bool = False
    registered: list[str] = field(default_factory=list, compare=False)


def pair(size: int | Sequence[int]) -> Size:
    if isinstance(size, int):
        return size, size
    height, width = size
    return int(height), int(width)


def vision_owner(config):
    """The config that holds the ``vision_config``: ``config`` itself, else the nearest sub-config that
    has one (T5Gemma2 keeps its vision tower in ``config.encoder``), searched breadth-first."""
    queue, seen = [config], set()
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if getattr(current, "vision_config", None) is not None:
            return current
        for name in getattr(current, "sub_configs", None) or {}:
            child = getattr(current, name, None)
            if child is not None and hasattr(child, "to_dict"):
                queue.append(child)
    raise ValueError(f"{config.model_type}: the config has no vision_config (nor has any sub-config), so there is "
                     "no image input to build")


def vision_config(config):
    return vision_owner(config).vision_config


def forward_inputs(config, model=None) -> set[str]:
    """Argument names of the model's ``forward`` (of the image-text-to-text class of the config's
    model type when no model is given)."""
    if model is None:
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

        name = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(config.model_type)
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if cls is None:
            return set()
        forward = cls.forward
    else:
        forward = model.forward
    try:
        return set(inspect.signature(forward).parameters)
    except (TypeError, ValueError):
        return set()


def build_image_sample(
    layout: ImageLayout,
    config,
    *,
    batch_size: int = 1,
    seq_len: int = 16,
    num_images: int = 1,
    image_size: int | Sequence[int] | None = None,
    left_padding: int = 0,
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
    multimodal: bool = True,
    dtype: torch.dtype = torch.float32,
    model: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """``input_ids`` / ``attention_mask`` ``(B, seq_len + num_images * span)`` with ``num_images``
    images per row (all of ``image_size``, default the layout's), the layout's pixel inputs, and
    ``token_type_ids`` / ``mm_token_type_ids`` (1 on image tokens) where ``forward`` takes them, and
    ``decoder_input_ids`` (ordinary text) for an encoder-decoder model whose encoder takes the images.
    With ``model``, the tokens per image are what the model's ``get_image_features`` yields for these
    pixels; without, the layout's config-derived count."""
    if not multimodal:
        return text_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                           device=device, generator=generator)
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    check_counts(batch_size, seq_len, num_images, left_padding)
    size = pair(image_size) if image_size is not None else layout.default_size(config)
    accepted = forward_inputs(config, model)
    total = batch_size * num_images
    if layout.prefix and num_images != 1:
        raise ValueError(f"{config.model_type} puts one image before each text row (got num_images={num_images})")
    pixels = layout.pixels(config, [size] * total, generator, dtype, accepted, batch_size)
    if layout.prefix:
        spans = []
    else:
        if model is not None and image_feature_method(model) is not None:
            pixels, count = _first_accepted(model, [pixels, *layout.variants(config, pixels)], total)
        else:  # no get_image_features to count with (Kosmos-2.5): the family's count from the config
            count = layout.config_count(config, size)
        token = layout.placeholder(config)
        before, after = layout.markers(config)
        spans = [before + [token] * count + after] * num_images
    input_ids, attention_mask = token_rows(config, batch_size, seq_len, spans, left_padding, generator)
    sample: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
    # 1 on image tokens, under the names forward takes them by (Kosmos: where image features go)
    for name in ("token_type_ids", "mm_token_type_ids", "image_embeds_position_mask"):
        if name in accepted and spans:
            sample[name] = (input_ids == token).long()
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in accepted:
        sample["decoder_input_ids"] = decoder_rows(config, batch_size, seq_len, generator)
    sample.update(pixels)
    return {name: value.to(device) if isinstance(value, torch.Tensor) else value for name, value in sample.items()}


def _first_accepted(model, candidates: list[dict], total: int) -> tuple[dict, int]:
    """The first pixel arrangement the model's vision path runs on, and its features per image; the
    first arrangement's error when none runs."""
    first_error = None
    for pixels in candidates:
        try:
            return pixels, features_per_image(model, pixels, total)
        except Exception as exc:  # noqa: BLE001  (a shape the tower does not take: try the next)
            first_error = first_error or exc
    raise first_error


def register_layout(layout: ImageLayout) -> ImageLayout:
    """Register the layout's builder for each of its model types that has no builder yet (the zoo's
    own builders, registered when the zoo is loaded, replace these for its model types)."""

    def builder(config, **kwargs):
        return build_image_sample(layout, config, **kwargs)

    builder.__name__ = f"build_{layout.name}_sample"
    builder.__doc__ = build_image_sample.__doc__
    builder.layout = layout  # type: ignore[attr-defined]
    for model_type in layout.model_types:
        if registered_builder(model_type) is None:
            register_multimodal_sample(model_type)(builder)
            layout.registered.append(model_type)
    return layout


def num_channels(vision) -> int:
    return int(first_field(vision, ("num_channels", "in_channels", "in_chans"), 3))


def side(value) -> int:
    return int(value[0]) if isinstance(value, (list, tuple)) else int(value)
