"""The audio sample builder: clips shaped for the model's tower, audio tokens placed in the text.

:func:`build_audio_sample` makes, from the config and the built model:

- the clip input the model's ``forward`` names (``input_features`` log-mel or ``input_values``
  waveform, :mod:`patcher.samples.audio.inputs`), one clip per text row, in the arrangement and at a
  length its own audio path runs on: a free length first (``CLIP_LENGTHS``), else the fixed
  length of a Whisper-style tower (``2 * max_source_positions`` frames, padded as the feature
  extractor pads every clip to 30 s);
- each clip's length in waveform samples where ``forward`` takes lengths (``chunk_sample_lengths``:
  valid frames times the config's ``hop_length``);
- the frame mask where ``forward`` takes one (``feature_attention_mask``, ``input_features_mask``);
  on a fixed-length tower the second layout marks only part of the frames as real; left out where
  ``forward`` refuses it but runs without (Granite Speech's mask is over features, not frames);
- for a model that merges audio features into its text (Qwen2-Audio, Voxtral, ...): ``input_ids``
  with one run of audio placeholder tokens per clip, as many as the model's own audio path yields
  for this clip (:func:`patcher.samples.audio.tokens.run_audio_path`), and ``attention_mask``; that count
  per clip where ``forward`` is told it (Phi-4 multimodal's ``audio_embed_sizes``);
- for an encoder-decoder (Whisper, Moonshine, ...): ``decoder_input_ids`` of ordinary text tokens;
  for one whose encoder reads text and whose clip conditions the decoder (MusicGen, MusicGen
  Melody), the given text sample's inputs the whole model runs on beside the clip.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..images.tokens import decoder_rows, pad_token_id, place_spans, text_pool
from .inputs import (FEATURE_INPUTS, audio_config, audio_input, cutoff_input, feature_count_input, feature_variants,
                     forward_names, mask_input, sample_length_input, sample_lengths, samples_per_feature,
                     waveform_variants)
from .tokens import BesideText, audio_token_id, run_audio_path

#: free clip lengths of the two layouts: mel frames (multiples of 100: Qwen3-ASR's encoder takes
#: windows of 100 frames), waveform samples
CLIP_LENGTHS = {"features": (100, 200), "waveform": (4000, 6400)}
#: the factor of the fallback free length (see :func:`clip_inputs`)
LONGER = 4


def fixed_length(config) -> int | None:
    """The one clip length a Whisper-style tower takes: ``max_source_positions`` positions after a
    stride-2 convolution."""
    positions = getattr(audio_config(config), "max_source_positions", None)
    return 2 * int(positions) if isinstance(positions, int) and positions > 0 else None


def _clip(config, name: str, clips: int, length: int, generator, dtype) -> list[torch.Tensor]:
    if name in FEATURE_INPUTS:
        return feature_variants(config, clips, length, generator, dtype)
    return waveform_variants(clips, length, generator, dtype)


def _whole_features(length: int, stride: int, layout: int) -> int:
    """``length`` rounded up to whole features of ``stride`` samples; layout 1 stays longer than
    layout 0 (another number of audio tokens)."""
    if stride <= 1:
        return length
    first = -(-CLIP_LENGTHS["waveform"][0] // stride) * stride
    rounded = -(-length // stride) * stride
    return rounded if layout == 0 else max(rounded, first + stride)


def _mask(clips: int, length: int, valid: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
    mask = torch.zeros(clips, length, dtype=dtype)
    mask[:, :valid] = 1
    return mask


#: A frame mask's dtypes, in the order tried: the 0/1 integers most feature extractors return, then
#: booleans for towers that take nothing else (Gemma 3n's ``input_features_mask``, which it inverts
#: with ``~`` and hands to ``masked_fill``)
MASK_DTYPES = (torch.long, torch.bool)


def clip_inputs(model, layout: int, clips: int, generator: torch.Generator,
                dtype: torch.dtype = torch.float32, text: dict[str, Any] | None = None
                ) -> tuple[dict[str, torch.Tensor], int | BesideText | None]:
    """The clip inputs of layout ``layout`` (0 or 1) for ``clips`` clips and the audio features
    they yield all together (None for an encoder-decoder; :class:`BesideText` for one whose encoder
    reads ``text``): the first arrangement and length the model's audio path runs on. Raises the
    first failure when none runs."""
    config = model.config
    name = audio_input(model)
    if name is None:
        raise ValueError(f"{type(model).__name__}.forward takes no audio input (input_features / input_values)")
    mask = mask_input(model)
    lengths = sample_length_input(model)
    cutoffs = cutoff_input(model)
    kind = "features" if name in FEATURE_INPUTS else "waveform"
    fixed = fixed_length(config)
    # (length, valid frames): a free length; else the fixed one, fully real on the first layout
    # and three quarters real on the second (another number of audio tokens)
    free = CLIP_LENGTHS[kind][layout]
    if kind == "waveform":
        free = _whole_features(free, samples_per_feature(config), layout)
    tries = [(free, free)]
    if fixed is not None:
        tries.append((fixed, fixed if layout == 0 else (3 * fixed) // 4))
    # a free length the tower refuses (Voxtral Realtime folds 4 frames after its stride-2 conv into
    # one feature: 100 frames give 50): four times as long, tried last
    tries.append((LONGER * tries[0][0], LONGER * tries[0][0]))
    # beside a text encoder, every clip is tried without the decoder's ids first: a model that makes
    # its decoder input from the clip when none is given ignores the clip next to given ids (MusicGen
    # encodes input_values into decoder_input_ids only then); then with them (MusicGen Melody
    # prepends the clip to the text encoder's states)
    texts = [None] if text is None else [
        {key: value for key, value in text.items() if not key.startswith("decoder_")}, text]
    first_error = None
    for beside in texts:
        for length, valid in tries:
            state = generator.get_state()
            for value in _clip(config, name, clips, length, generator, dtype):
                for mask_dtype in MASK_DTYPES if mask is not None else MASK_DTYPES[:1]:
                    inputs = {name: value}
                    if mask is not None:
                        inputs[mask] = _mask(clips, length, valid, mask_dtype)
                    if lengths is not None:
                        inputs[lengths] = sample_lengths(config, clips, valid, kind == "waveform")
                    if cutoffs is not None:
                        inputs[cutoffs] = torch.full((clips, 1), valid, dtype=torch.long)
                    try:
                        return inputs, run_audio_path(model, inputs, name, mask, beside)
                    except Exception as exc:  # noqa: BLE001  (a shape the tower does not take: try the next)
                        first_error = first_error or exc
            generator.set_state(state)
    raise first_error


def build_audio_sample(model, *, batch_size: int = 1, seq_len: int = 8, left_padding: int = 0, layout: int = 0,
                       generator: torch.Generator | None = None, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32, text: dict[str, Any] | None = None) -> dict[str, Any]:
    """A sample with one audio clip per row for the built ``model`` (see the module docstring);
    ``layout`` 0 or 1 picks one of two clip lengths (or valid lengths). ``text``: a text sample of
    ``batch_size`` rows, its token ids laid out as ``forward`` takes them, for a model whose clip
    conditions its decoder beside a text encoder (MusicGen): the sample is that text and the clip."""
    config = model.config
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    if not 0 <= left_padding < seq_len:
        raise ValueError(f"left_padding must be in [0, seq_len) (got {left_padding} with seq_len={seq_len})")
    inputs, total = clip_inputs(model, layout, batch_size, generator, dtype, text)
    accepted = set(forward_names(model))
    sample: dict[str, Any] = {}
    if isinstance(total, BesideText):
        sample.update(total.text)
    elif total is None and not getattr(config, "is_encoder_decoder", False):
        # the clip next to ordinary text, no placeholders (CLVP: the clip conditions the text)
        sample["input_ids"], sample["attention_mask"] = place_spans(
            text_pool(config), pad_token_id(config), batch_size, seq_len, [], left_padding, generator)
    elif total is None:  # an encoder-decoder: the decoder reads text, the encoder the clip
        sample["decoder_input_ids"] = decoder_rows(config, batch_size, seq_len, generator)
    else:
        token = audio_token_id(config)
        if total == 0 or total % batch_size:
            raise ValueError(f"{type(model).__name__}'s audio path gave {total} features for {batch_size} clips of "
                             "one length: cannot tell the count per clip")
        if token is None:
            # no placeholder: the audio features are added to the text embeddings position by
            # position (Voxtral Realtime's streaming), so the text is as long as the features
            sample.update(_added_audio_text(model, inputs, total // batch_size, batch_size, left_padding, generator))
        else:
            span = [token] * (total // batch_size)
            counts = feature_count_input(model)
            if counts is not None:
                inputs[counts] = torch.full((batch_size,), total // batch_size, dtype=torch.long)
            pool = text_pool(config)
            pool = pool[pool != token]
            # a pad that is the placeholder (Csm pads with its audio token) would ask for audio features
            # at masked positions: pad with an ordinary token, hidden by the mask all the same
            pad = pad_token_id(config)
            pad = int(pool[0]) if pad == token else pad
            sample["input_ids"], sample["attention_mask"] = place_spans(
                pool, pad, batch_size, seq_len, [span], left_padding, generator)
    sample.update(inputs)
    sample.update(deterministic_flags(model))
    sample = {key: value for key, value in sample.items() if key in accepted}
    sample = _without_a_mask_forward_refuses(model, sample, mask_input(model))
    return {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in sample.items()}


#: forward flags that draw random noise into the audio path when left at their default (VibeVoice's
#: sigma-VAE ``sample=True`` adds Gaussian noise to the acoustic latents): eager would differ from
#: itself run to run, so the sample turns them off, as a calibration run would
NOISE_FLAGS = {"sample": False}


def deterministic_flags(model) -> dict[str, bool]:
    """The :data:`NOISE_FLAGS` the model's ``forward`` takes with a boolean default of the other value."""
    parameters = inspect.signature(model.forward).parameters
    return {name: value for name, value in NOISE_FLAGS.items()
            if name in parameters and isinstance(parameters[name].default, bool) and parameters[name].default != value}


def _added_audio_text(model, inputs: dict[str, Any], length: int, batch_size: int, left_padding: int,
                      generator) -> dict[str, torch.Tensor]:
    """``input_ids`` of ordinary tokens, one per audio feature, and their ``attention_mask``, for a
    model with no audio placeholder; checked by running ``model`` on them with the clip (else the
    config names no placeholder to put audio features at)."""
    config = model.config
    pool = text_pool(config)
    ids = pool[torch.randint(len(pool), (batch_size, length), generator=generator)]
    mask = torch.ones(batch_size, length, dtype=torch.long)
    mask[0, :min(left_padding, length - 1)] = 0
    sample = {"input_ids": ids, "attention_mask": mask}
    extra = {"use_cache": False} if "use_cache" in forward_names(model) else {}
    try:
        with torch.no_grad():
            model(**sample, **inputs, **extra)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{config.model_type}: the config names no audio_token_id, so there is no placeholder to put "
                         f"audio features at (and {length} text tokens, one per audio feature, did not run: "
                         f"{type(exc).__name__}: {exc})") from None
    return sample


def _without_a_mask_forward_refuses(model, sample: dict[str, Any], mask: str | None) -> dict[str, Any]:
    """The sample, less its frame mask where the model's forward refuses it but runs without: some
    models name a mask over the audio *features* as others name the frame mask (Granite Speech's
    ``input_features_mask`` selects projected features). The first error when neither runs."""
    if mask is None or mask not in sample:
        return sample
    extra = {"use_cache": False} if "use_cache" in forward_names(model) else {}
    try:
        with torch.no_grad():
            model(**sample, **extra)
        return sample
    except Exception as exc:  # noqa: BLE001
        without = {key: value for key, value in sample.items() if key != mask}
        try:
            with torch.no_grad():
                model(**without, **extra)
        except Exception:  # noqa: BLE001
            raise exc from None
        return without


def with_other_audio(sample: dict[str, Any], seed: int) -> dict[str, Any]:
    """The sample with other clip values of the same shape and scale; tokens and masks unchanged."""
    generator = torch.Generator().manual_seed(seed + 7919)
    other = dict(sample)
    for name, value in sample.items():
        if name in (*FEATURE_INPUTS, "input_values") and isinstance(value, torch.Tensor) and value.is_floating_point():
            scale = value.std() if value.numel() > 1 else torch.tensor(1.0)
            other[name] = (torch.randn(value.shape, generator=generator) * scale).to(value.dtype)
    return other
