"""Images: a class with a registered sample builder (``patcher.samples.images``' layouts, or the zoo's)
gets two image layouts, another image size where the family takes several, else two images per
row, so the graph is reused on a new layout."""

from __future__ import annotations

import inspect

import torch

from ..declaration import Modality

#: The stage of the text attempt of a model whose forward cannot run without images: BLIP's and
#: InstructBLIP's required ``pixel_values`` (and ``qformer_input_ids``), Kosmos-2's "``pixel_values``
#: or ``image_embeds``", InstructBLIP-Video's frames. Decided by evidence, not by a list: eager raised
#: on the text sample and ran on the image or video sample (the same kind of text, plus the layout's
#: pixel inputs). The text attempt then keeps its error and is neither a failure nor a success; the
#: row is built, traced and compared by its image (or video) attempts alone (and the report counts it
#: apart, "need images"). A text sample that fails while the image sample fails too stays a build
#: failure.
NEEDS_IMAGES = "needs images"


def rectifier_gain_timm_convolutions(model, seed: int) -> None:
    """Redraw every convolution weight inside a vision tower that timm builds (a module whose
    ``config`` wraps a timm architecture, ``patcher.models.timm_towers``) with He's std ``sqrt(2 / fan_in)``,
    so that each convolution and the rectifier after it carry the image on at about its own scale, as
    in a trained tower.

    timm leaves most convolutions at torch's default init (std ``1 / sqrt(3 * fan_in)``) and
    transformers' TimmWrapper re-initialises only its linear layers. Tiny FastViT (FastVLM's tower,
    reparameterised as its checkpoints: no residual around the convolutions) stacks a dozen
    convolutions each followed by a GELU: each pair passed ~0.3 of the image on, ~1e-7 of it reached
    the logits, under the influence check's threshold; a tower whose image is drowned out would hide
    a graph that drops it."""
    from ...models.timm_towers import timm_level

    generator = torch.Generator().manual_seed(seed + 4)
    with torch.no_grad():
        for tower in model.modules():
            if timm_level(getattr(tower, "config", None)) is None:
                continue
            for module in tower.modules():
                if isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
                    weight = module.weight
                    value = torch.randn(weight.shape, generator=generator) * (2 / weight[0].numel()) ** 0.5
                    weight.copy_(value.to(weight.dtype))


def unit_gain_gated_projectors(model, seed: int) -> None:
    """Redraw every linear weight of a ``multi_modal_projector`` that holds a gated MLP (``gate_proj``
    and ``up_proj``: ``act(gate(x)) * up(x)``) with std ``1 / sqrt(fan_in)``, so that the projector
    carries the image into the text at about its own scale, as a trained one does.

    A gated MLP scales its output by the square of its input's scale. The init std 0.02 is
    calibrated for widths in the thousands, where each linear layer keeps its input's scale; at the
    sweep's widths (64) each passes ~0.16 of it on. Molmo2's adapter (pooling attention, then a gated
    MLP) took its patch features from ~0.5 to ~2e-2, its gated MLP to ~1.5e-6: the logits moved by
    ~1.5e-5 when only the pixels changed, under the influence check's threshold, though the image
    reached them; a tower whose image is drowned out would hide a graph that drops it. Projectors
    without a gated MLP keep their init: their image already reaches the logits."""
    generator = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        for name, projector in model.named_modules():
            if name.rsplit(".", 1)[-1] != "multi_modal_projector" or not any(map(_gated_mlp, projector.modules())):
                continue
            for module in projector.modules():
                if isinstance(module, torch.nn.Linear):
                    weight = module.weight
                    weight.copy_((torch.randn(weight.shape, generator=generator) / weight.shape[1] ** 0.5)
                                 .to(weight.dtype))


def _gated_mlp(module) -> bool:
    return all(isinstance(getattr(module, name, None), torch.nn.Linear) for name in ("gate_proj", "up_proj"))


def _prepare_model(cls, config, model, seed: int) -> None:
    rectifier_gain_timm_convolutions(model, seed)
    unit_gain_gated_projectors(model, seed)


def image_samples(config, model, seed: int) -> list[dict]:
    from . import second_layout
    from ..sweep import coverage_multimodal_sample

    return [coverage_multimodal_sample(config, batch_size=2, seq_len=8, left_padding=1, seed=seed, model=model),
            coverage_multimodal_sample(config, batch_size=1, seq_len=13, seed=seed + 1, model=model,
                                       **second_layout(config))]


def with_other_pixels(sample: dict, seed: int, layout=None) -> dict:
    """The sample with other pixel values: the image layout's own ``other_pixels`` where it has one
    (patch rows carrying their grid position), else every floating-point image input
    (``pixel_values``, ``image_patches``, ``flattened_patches``, ...) replaced by other random values
    of the same shape; tokens, sizes and masks unchanged."""
    generator = torch.Generator().manual_seed(seed + 7919)
    if layout is not None and layout.other_pixels is not None:
        return layout.other_pixels(sample, generator)
    other = dict(sample)
    for name, value in sample.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() \
                and any(word in name for word in ("pixel", "image", "patches")):
            other[name] = torch.randn(value.shape, generator=generator).to(value.dtype)
    return other


def _builder(config):
    from .. import multimodal_builder

    return multimodal_builder(config.model_type) if config is not None else None


def image_layout(config):
    """The image layout (``patcher.samples.images``) whose builder makes the config's samples; None for
    other builders (the zoo's)."""
    return getattr(_builder(config), "layout", None)


def builder_location(config) -> str | None:
    """``file:line`` of the image sample builder used for the config (where a broken sample is made)."""
    from ...trace.diagnose import short_path

    builder = _builder(config)
    layout = getattr(builder, "layout", None)
    target = layout.pixels if layout is not None else builder
    try:
        return f"{short_path(inspect.getsourcefile(target))}:{inspect.getsourcelines(target)[1]}"
    except (TypeError, OSError):
        return None


def pixel_inputs(cls) -> list[str]:
    """The forward arguments of ``cls`` that carry pixels (``pixel_values``, ``pixel_values_videos``,
    Fuyu's ``image_patches``, Kosmos-2.5's ``flattened_patches``)."""
    try:
        names = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return []
    return [name for name in names if "pixel" in name or name.endswith("patches")]


def has_image_path(cls, config) -> bool:
    """Whether the class takes images at all: a pixel input in its forward, or a vision part in its
    config (a vision tower fed another way, e.g. precomputed encoder outputs, still counts)."""
    return bool(pixel_inputs(cls)) or getattr(config, "vision_config", None) is not None


def video_frames_only(cls) -> bool:
    """Whether the class's only pixels are video frames: a ``get_video_features`` and no
    ``get_image_features``, and its ``forward`` takes the frames as ``pixel_values`` (no separate
    ``pixel_values_videos``). InstructBLIP-Video: ``pixel_values (batch, frames, C, H, W)``, whose
    processor's ``images`` are videos; an image sample has nothing to fill (the video layout does)."""
    return (callable(getattr(cls, "get_video_features", None)) and getattr(cls, "get_image_features", None) is None
            and pixel_inputs(cls) == ["pixel_values"])


def why_no_image_sample(cls) -> str | None:
    if video_frames_only(cls):
        return ("the class takes no still images, its pixel_values are video frames (batch, frames, channels, "
                "height, width), it has get_video_features and no get_image_features")
    return None


def command_sample(config, model, **options) -> tuple[dict, str | None]:
    """``--multimodal``'s sample (``--modality images``): the image tokens counted by the model's own
    vision path on the meta device (:func:`patcher.models.attempt.counted_image_sample`)."""
    from ...models.attempt import counted_image_sample

    return counted_image_sample(config, model, **options)


def _has_builder(cls, config) -> bool:
    from ..sweep import has_multimodal_builder

    return has_multimodal_builder(config)


IMAGES = Modality(
    label="images", noun="image", attempt="multimodal", given="with a sample builder", varied="the pixels",
    hint="check the sample's image tokens and pixel layout, and that the tiny vision tower's output depends on "
         "its pixels",
    text_alone=NEEDS_IMAGES,
    takes=_has_builder,
    samples=image_samples,
    vary=lambda sample, seed, config: with_other_pixels(sample, seed, image_layout(config)),
    # The chain is compared on the two layouts only; the varied sample shows eager's change.
    chain_runs_varied=False,
    order=0,
    input_name="pixel_values",
    # every model the sweep builds: the hooks redraw only inside the timm towers and the gated
    # projectors they find
    prepare_model=_prepare_model,
    # after audio's redraw of every convolution, so that a timm tower's own wins inside it
    prepare_order=1,
    # the image-text-to-text metric counts the classes that take images at all
    path_field="image_path",
    has_path=has_image_path,
    text_alone_summary="need images",
    command_sample=command_sample,
    sample_location=builder_location,
    vision_blocks=True,
    carries_images=True,
    why_not_given=why_no_image_sample,
)

#: what :mod:`patcher.samples.modalities` finds
MODALITY = IMAGES
