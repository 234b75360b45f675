"""Audio tokens in text rows: which id, and how many a clip yields.

The number of features a clip yields depends on the tower's convolutions, pooling, chunking and
projector; hand-counting it per model goes stale. With a model at hand,
:func:`run_audio_path` runs the model's own audio path eagerly on the synthetic clip and
:func:`features_per_clip` counts what comes out: ``get_audio_features`` (text-width features),
else the tower's own ``_get_feat_extract_output_lengths`` on the frame mask (Qwen2-Audio merges
inside ``forward``); an encoder-decoder's encoder is run only to check it takes the clip.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from ..config_tokens import special_tokens
from ..images.tokens import first_field

TOKEN_FIELDS = ("audio_token_id", "audio_token_index")


def audio_token_id(config) -> int | None:
    """The placeholder id the model replaces by audio features (None: the model takes no audio
    tokens, e.g. an encoder-decoder)."""
    token = first_field(config, TOKEN_FIELDS)
    if token is None:
        from .inputs import audio_config

        token = first_field(audio_config(config), TOKEN_FIELDS)
    return None if token is None else int(token)


def fill_audio_ids(config, cls=None) -> list[str]:
    """Give an audio placeholder the class leaves None (Voxtral's ``audio_token_id``; checkpoints set
    it from their tokenizer) a free id of the text vocabulary, in place: with the placeholder None
    the model matches no token and no clip could reach its logits. Returns the fields set."""
    from .inputs import audio_input

    if cls is not None and audio_input(cls) is None:
        return []
    filled = []
    vocab = config.get_text_config(decoder=True).vocab_size  # MusicGen: a text encoder and a decoder
    used = special_tokens(config)
    for name in TOKEN_FIELDS:
        if name in config.to_dict() and getattr(config, name, None) is None:
            candidate = vocab - 1
            while candidate in used:
                candidate -= 1
            setattr(config, name, candidate)
            used.add(candidate)
            filled.append(name)
            break
    return filled


def _method(model, name: str):
    for owner in (model, getattr(model, "model", None)):
        method = getattr(owner, name, None) if owner is not None else None
        if callable(method):
            return method
    return None


def audio_tower(model):
    for owner in (model, getattr(model, "model", None)):
        tower = getattr(owner, "audio_tower", None) if owner is not None else None
        if isinstance(tower, torch.nn.Module):
            return tower
    return None


def _call(method, inputs: dict[str, Any]):
    accepted = inspect.signature(method).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    named = {name: value for name, value in inputs.items() if name in accepted}
    with torch.no_grad():
        try:
            return method(**{name: value for name, value in inputs.items() if name in accepted or takes_kwargs})
        except TypeError:
            if not takes_kwargs:
                raise
            return method(**named)


def _features(output: Any):
    if hasattr(output, "pooler_output") and output.pooler_output is not None:
        return output.pooler_output
    if hasattr(output, "keys") and not isinstance(output, torch.Tensor):
        return next(iter(output.values()))
    if isinstance(output, tuple) and output:
        return output[0]
    return output


def _with_forward_defaults(model, method, clip: dict[str, Any]):
    """``method`` ready to count features on ``clip``: a parameter it requires that the clip lacks is
    given the default the model's ``forward`` gives it (None: forward hands None on when the user
    passes nothing, as MOSS's ``padding_mask``). None when a required input has no such default
    (Music Flamingo's ``input_ids``, read for the audio placeholders this count is for): the count
    then comes from the tower."""
    forward = inspect.signature(model.forward).parameters
    # the head's method often hands **kwargs on to the inner model's, which names what it requires
    inner = getattr(getattr(model, "model", None), "get_audio_features", None)
    required = dict(inspect.signature(method).parameters)
    if callable(inner) and inner is not method:
        required.update(inspect.signature(inner).parameters)
    for name, parameter in required.items():
        if parameter.default is not inspect.Parameter.empty or name in clip or parameter.kind in (
                inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            continue
        if name == "input_ids" or name not in forward or forward[name].default is not None:
            return None
        clip[name] = None
    return method


def _count_by_config_tower(model, inputs: dict[str, Any], name: str, mask: str | None) -> int | None:
    """The frames the audio tower yields for all clips together, for a model whose ``forward`` is
    told each clip's feature count (:data:`patcher.samples.audio.inputs.FEATURE_COUNT_INPUTS`: Phi-4
    multimodal's ``audio_embed_sizes``) and has no ``get_audio_features`` to count them: its tower
    is the module built from the audio sub-config (:func:`patcher.models.towers.find_towers`), run on the
    clip and its frame mask; each output frame becomes one text-width feature. None where the
    model takes no feature counts or has no such tower."""
    from ...models.towers import find_towers
    from .inputs import feature_count_input

    if feature_count_input(model) is None:
        return None
    towers = find_towers(model, "audio")
    if not towers:
        return None
    tower = model.get_submodule(towers[0])
    value = inputs[name]
    frame_mask = inputs[mask].bool() if mask and mask in inputs else None
    if frame_mask is not None and not frame_mask.all():
        # the tower's output keeps padded frames: their count is no count of the clip's features
        raise ValueError(f"{type(model).__name__}: cannot count the features of a partly masked clip on its tower")
    with torch.no_grad():
        output = _features(tower(value, frame_mask))
    return int(output.shape[0] * output.shape[1])


@dataclass(frozen=True)
class BesideText:
    """What :func:`run_audio_path` returns for a clip that conditions the decoder of an
    encoder-decoder whose encoder reads text, not the clip (MusicGen's audio prompt, MusicGen
    Melody's chroma): ``text``, the inputs of the given text sample the clip ran beside."""

    text: dict[str, Any]


def _beside_text(model, inputs: dict[str, Any], text: dict[str, Any]) -> BesideText | None:
    """``text`` as :class:`BesideText` when the whole model runs on it beside the clip ``inputs``."""
    try:
        _call(model.forward, {**text, **inputs})
    except Exception:  # noqa: BLE001  (the model does not take the clip this way)
        return None
    return BesideText(text)


def _count_by_codec(model, inputs: dict[str, Any], name: str, mask: str | None) -> int | None:
    """The code frames a codec yields for all clips together, for a model that turns its clip into
    audio codes whose embeddings replace its audio placeholders (Csm: ``codec_model``, Mimi): the
    codec encodes the clips (raising on an arrangement it does not take) and its own
    ``get_audio_codes_mask`` counts the frames of each clip's valid samples. None where the model
    has no such codec or no placeholder."""
    codec = getattr(model, "codec_model", None)
    if not callable(getattr(codec, "get_audio_codes_mask", None)) or audio_token_id(model.config) is None:
        return None
    value = inputs[name]
    sample_mask = (inputs[mask] if mask and mask in inputs
                   else torch.ones(value.shape[0], value.shape[-1], dtype=torch.long))
    with torch.no_grad():
        codec.encode(value)
        return int(codec.get_audio_codes_mask(sample_mask).sum())


#: config fields fixing how many audio tokens a clip takes in the text, whatever its tower yields:
#: the forward pads each clip's features out to that many (Gemma 3n pads to 188 with the audio
#: embedding's last token)
TOKENS_PER_CLIP_FIELDS = ("audio_soft_tokens_per_image",)


def _padded_per_clip(config, clips: int, counted: int) -> int:
    for field in TOKENS_PER_CLIP_FIELDS:
        per_clip = getattr(config, field, None)
        if isinstance(per_clip, int) and not isinstance(per_clip, bool) and per_clip * clips >= counted:
            return per_clip * clips
    return counted


def run_audio_path(model, inputs: dict[str, Any], name: str, mask: str | None,
                   text: dict[str, Any] | None = None) -> int | BesideText | None:
    """Run the model's own audio path on the clip ``inputs`` (forward argument names) and return
    how many text-width features all clips yield together (None for an encoder-decoder, whose
    decoder takes no audio tokens, and for a model that takes the clip next to its text, with no
    audio path of its own to count features: CLVP). An encoder-decoder whose encoder refuses the
    clip is run whole on it: beside ``text`` (a text sample of as many rows as clips, token ids laid
    out as its forward takes them), :class:`BesideText` when that runs. Raises when the path rejects
    the clip."""
    method = _method(model, "get_audio_features")
    clip = dict(inputs)
    if method is not None:
        # get_audio_features names the mask as forward does (input_features_mask), or plainly
        parameters = inspect.signature(method).parameters
        if mask and mask in clip and mask not in parameters and "attention_mask" in parameters:
            clip["attention_mask"] = clip[mask]
        method = _with_forward_defaults(model, method, clip)
    if method is not None:
        features = _features(_call(method, clip))
        width = model.get_input_embeddings().embedding_dim
        items = list(features) if isinstance(features, (list, tuple)) else [features]
        counted = sum(item.numel() // width for item in items if isinstance(item, torch.Tensor))
        return _padded_per_clip(model.config, inputs[name].shape[0], counted)
    tower = audio_tower(model)
    if tower is not None:
        value = inputs[name]
        # the tower reads the frame mask where it takes one (Music Flamingo's input_features_mask)
        takes_mask = mask and mask in inputs and mask in inspect.signature(tower.forward).parameters
        with torch.no_grad():
            tower(value, **({mask: inputs[mask]} if takes_mask else {}))
        lengths = (inputs[mask].sum(-1) if mask and mask in inputs
                   else torch.full((value.shape[0],), value.shape[-1], dtype=torch.long))
        counted = tower._get_feat_extract_output_lengths(lengths)
        counted = counted[-1] if isinstance(counted, tuple) else counted
        return int(counted.sum())
    counted = _count_by_config_tower(model, inputs, name, mask)
    if counted is not None:
        return counted
    counted = _count_by_codec(model, inputs, name, mask)
    if counted is not None:
        return counted
    if getattr(model.config, "is_encoder_decoder", False) and callable(getattr(model, "get_encoder", None)):
        encoder = model.get_encoder()
        clip = {name: inputs[name]}
        if mask and mask in inputs:
            clip["attention_mask"] = inputs[mask]
        try:
            _call(encoder.forward, clip)
        except (TypeError, ValueError):
            beside = _beside_text(model, inputs, text) if text is not None else None
            if beside is not None:
                return beside
            # the head maps the clip onto its encoder's input itself (Pop2Piano hands its
            # input_features to the T5 encoder as inputs_embeds): run the whole model on it
            start = getattr(model.config, "decoder_start_token_id", None) or 0
            decoder = torch.full((inputs[name].shape[0], 1), int(start), dtype=torch.long)
            _call(model.forward, {**inputs, "decoder_input_ids": decoder})
        return None
    from .inputs import forward_names

    if "input_ids" in forward_names(model):
        # the clip conditions the model next to its own text (CLVP's conditioning encoder puts the
        # mel embeddings before the text's): run the whole model on the clip and a few text tokens
        from ..images.tokens import text_pool

        pool = text_pool(model.config)
        ids = pool[torch.arange(4) % len(pool)].expand(inputs[name].shape[0], -1)
        _call(model.forward, {**inputs, "input_ids": ids})
        return None
    raise ValueError(f"{type(model).__name__}: no get_audio_features, audio_tower or encoder to run the clip through")
