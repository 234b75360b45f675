"""Image tokens in text rows: which id, how many per image, where they go.

The number of features an image yields depends on the vision tower, the projector (pixel shuffle,
pooling, merging, newline tokens) and the image size; hand-counting it per model goes stale. When a
model is at hand, :func:`features_per_image` runs the model's own ``get_image_features`` eagerly on
the synthetic pixels and counts what comes out; without a model, the family's config-derived count
is used (see each family's ``config_count``).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..config_tokens import special_tokens
from ...registry.normalize import sample_shape


def first_field(config, names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def image_token_id(config) -> int:
    """The placeholder id the model replaces by image features (``image_token_id`` or the older
    ``image_token_index``)."""
    token = first_field(config, ("image_token_id", "image_token_index"))
    if token is None:
        raise ValueError(f"{config.model_type}: the config has no image_token_id / image_token_index, so there is "
                         "no placeholder to put image features at; pass your own sample")
    return int(token)


def pad_token_id(config) -> int:
    for candidate in (getattr(config.get_text_config(), "pad_token_id", None), getattr(config, "pad_token_id", None)):
        if candidate is not None:
            return int(candidate)
    return 0


def check_counts(batch_size: int, seq_len: int, num_images: int, left_padding: int) -> None:
    if batch_size < 1 or num_images < 1:
        raise ValueError(f"batch_size and num_images must be >= 1 (got {batch_size}, {num_images}); "
                         "use multimodal=False for a text-only sample")
    if not 0 <= left_padding < seq_len:
        raise ValueError(f"left_padding must be in [0, seq_len) (got {left_padding} with seq_len={seq_len})")
    sample_shape(batch_size, seq_len)  # the text tokens alone within MAX_SAMPLE_TOKENS, before any is built


def token_rows(config, batch_size: int, seq_len: int, spans: list[list[int]], left_padding: int,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` / ``attention_mask``: per row, ``seq_len`` ordinary text tokens (no special
    token of the config; row 0 starts with ``left_padding`` pads) with the image ``spans``
    inserted in order at random text positions."""
    return place_spans(text_pool(config), pad_token_id(config), batch_size, seq_len, spans, left_padding, generator)


def text_pool(config) -> torch.Tensor:
    """The ids of ordinary text tokens: the text vocabulary less every special token of the config."""
    vocab_size = config.get_text_config().vocab_size
    allowed = torch.ones(vocab_size, dtype=torch.bool)
    special = [token for token in special_tokens(config) if 0 <= token < vocab_size]
    if special:
        allowed[special] = False
    return allowed.nonzero().flatten()


def decoder_rows(config, batch_size: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    """``decoder_input_ids`` for an encoder-decoder model (the images go to the encoder):
    ``max(2, seq_len // 2)`` ordinary text tokens per row, as in the coverage text sample."""
    pool = text_pool(config)
    return pool[torch.randint(len(pool), (batch_size, max(2, seq_len // 2)), generator=generator)]


def place_spans(text_pool: torch.Tensor, pad: int, batch_size: int, seq_len: int, spans: list[list[int]],
                left_padding: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` / ``attention_mask``: per row, ``seq_len`` tokens drawn from ``text_pool`` (row 0
    starts with ``left_padding`` pads) with the ``spans`` inserted in order at random positions."""
    rows, masks = [], []
    for row in range(batch_size):
        padding = left_padding if row == 0 else 0
        num_text = seq_len - padding
        text = text_pool[torch.randint(len(text_pool), (num_text,), generator=generator)].tolist()
        cuts = sorted(torch.randint(0, num_text + 1, (len(spans),), generator=generator).tolist())
        tokens, previous = [pad] * padding, 0
        for cut, span in zip(cuts, spans):
            tokens += text[previous:cut] + span
            previous = cut
        tokens += text[previous:]
        rows.append(tokens)
        masks.append([0] * padding + [1] * (len(tokens) - padding))
    return torch.tensor(rows, dtype=torch.long), torch.tensor(masks, dtype=torch.long)


def image_feature_method(model, name: str = "get_image_features"):
    """``get_image_features`` (or the method ``name``: ``get_video_features``) of the model or of its
    inner ``model``; None when it has none."""
    for owner in (model, getattr(model, "model", None)):
        method = getattr(owner, name, None) if owner is not None else None
        if callable(method):
            return method
    return None


def _features(output: Any):
    """The image features of a ``get_image_features`` result: ``pooler_output`` of a model output
    (transformers 5), else the features of the first ``deepstack_features`` entry where only those
    are given, else the value itself or the first item of a tuple."""
    if hasattr(output, "pooler_output") and output.pooler_output is not None:
        return output.pooler_output
    deepstack = getattr(output, "deepstack_features", None)
    if deepstack:
        return _deepstack_entry_features(deepstack[0])
    if hasattr(output, "keys") and not isinstance(output, torch.Tensor):
        return next(iter(output.values()))
    if isinstance(output, tuple) and output and isinstance(output[0], (torch.Tensor, list, tuple)):
        return output[0] if not all(isinstance(item, torch.Tensor) and item.ndim == 2 for item in output) else output
    return output


def _deepstack_entry_features(entry: Any):
    """One ``deepstack_features`` entry's image features. Granite 4 Vision gives no pooler_output: its
    image features are the entries, ``(llm_layer, per-image features)`` pairs, every entry as many
    features per image as image tokens (its forward checks the first against the placeholders).
    Taking the first non-None output field instead counted the vision tower's hidden states, which
    are as wide as the tiny text model's embeddings."""
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], int):
        return entry[1]
    return entry


#: Arguments a model's ``forward`` fills from its config when they are None
#: (transformers' ``merge_with_config_defaults``) and hands on to the feature methods, which do not
#: fill them themselves in every release: in transformers 5.17, Llama 4's ``get_image_features``
#: requires ``vision_feature_select_strategy`` and LLaVA-NeXT-Video's ``get_video_features`` iterates
#: a ``vision_feature_layer`` that defaults to None. Called alone, they get what ``forward`` gives.
CONFIG_DEFAULT_ARGUMENTS = ("vision_feature_layer", "vision_feature_select_strategy", "vision_aspect_ratio")


def config_defaults(model, accepted, given: dict[str, Any]) -> dict[str, Any]:
    """The :data:`CONFIG_DEFAULT_ARGUMENTS` a feature method takes (``accepted``: its parameters)
    and ``given`` leaves out or None: the model config's value, else None where the method requires
    the argument (``forward`` hands on its own, None by default: Llama 4's config has no
    ``vision_feature_select_strategy``, and its ``get_image_features`` ignores it)."""
    config = getattr(model, "config", None)
    defaults = {}
    for name in CONFIG_DEFAULT_ARGUMENTS:
        if name not in accepted or given.get(name) is not None:
            continue
        value = getattr(config, name, None)
        if value is not None or accepted[name].default is inspect.Parameter.empty:
            defaults[name] = value
    return defaults


#: Pixel inputs ``forward`` hands its feature method by position, under the method's own name:
#: transformers 5.17's LLaVA-NeXT-Video ``get_video_features(pixel_values, ...)`` takes forward's
#: ``pixel_values_videos``, Fuyu's ``get_image_features(pixel_values)`` its ``image_patches``.
_PIXELS_BY_POSITION = {"pixel_values_videos": "pixel_values", "image_patches": "pixel_values"}


def feature_method_inputs(model, method, pixel_inputs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``forward`` would hand the feature ``method`` for ``pixel_inputs``
    (named as ``forward`` takes them): those it accepts, its config defaults, and the pixels under
    the method's own name for them."""
    accepted = inspect.signature(method).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    # a pass-through `get_image_features(*args, **kwargs)` (MiniCPM's outer class) takes everything
    kwargs = {name: value for name, value in pixel_inputs.items() if name in accepted or takes_kwargs}
    for name, own in _PIXELS_BY_POSITION.items():
        if name in kwargs and name not in accepted and own in accepted and own not in kwargs:
            kwargs[own] = kwargs.pop(name)
    kwargs.update(config_defaults(model, accepted, kwargs))
    return kwargs


def features_per_image(model, pixel_inputs: dict[str, Any], num_images: int,
                       method_name: str = "get_image_features") -> int:
    """Run the model's own vision path (``get_image_features``; ``get_video_features`` for videos)
    once on ``pixel_inputs`` and return how many text-embedding-sized features each of the
    ``num_images`` images yields (the images of one sample have one size, so the total divides
    evenly)."""
    method = image_feature_method(model, method_name)
    if method is None:
        raise ValueError(f"{type(model).__name__} has no {method_name}: pass the image token count instead")
    accepted = inspect.signature(method).parameters
    kwargs = feature_method_inputs(model, method, pixel_inputs)
    with torch.no_grad():
        try:
            output = method(**kwargs)
        except TypeError as error:  # an input the method does not take through **kwargs
            named = {name: value for name, value in kwargs.items() if name in accepted}
            if named == kwargs:
                raise
            try:
                output = method(**named)
            except TypeError:
                raise error from None  # the first error names what the vision path really lacks
    features = _features(output)
    width = model.get_input_embeddings().embedding_dim
    items = list(features) if isinstance(features, (list, tuple)) else [features]
    total = sum(item.numel() // width for item in items if isinstance(item, torch.Tensor))
    if total == 0 or total % num_images:
        raise ValueError(f"{type(model).__name__}.{method_name} gave {total} features of width {width} for "
                         f"{num_images} images of one size: cannot tell the count per image")
    return total // num_images
