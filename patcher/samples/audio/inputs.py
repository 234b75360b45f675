"""Which forward arguments carry audio, and what a processor-free clip looks like for them.

Two kinds of audio input, named by the model's ``forward``:

- log-mel features (``input_features``, Phi-4's ``audio_input_features``): ``(clips, mel_bins,
  frames)`` as Whisper's feature extractor gives them, or ``(clips, frames, mel_bins)`` (Parakeet,
  Gemma 3n, Granite Speech); the number of mel bins comes from the audio part of the config;
- raw waveforms (``input_values``): ``(clips, samples)``.

Which of the two arrangements a tower takes is not in the config: with a model at hand, the first
arrangement its own audio path runs on is used (:mod:`patcher.samples.audio.tokens`).
"""

from __future__ import annotations

import inspect

import torch

#: forward arguments holding log-mel features, and those holding raw waveforms
FEATURE_INPUTS = ("input_features", "audio_input_features")
WAVEFORM_INPUTS = ("input_values",)
#: forward arguments holding the clip's frame mask (1 on real frames)
MASK_INPUTS = ("feature_attention_mask", "input_features_mask", "audio_attention_mask", "input_values_mask",
               "padding_mask")
#: forward arguments holding each clip's length in waveform samples (Dots3-Note's audio chunks),
#: where a tower takes lengths instead of a frame mask
SAMPLE_LENGTH_INPUTS = ("chunk_sample_lengths",)
#: forward arguments holding where each clip ends in its row's waveform, ``(rows, clips per row)``,
#: -1 where a row has fewer clips (Csm's ``input_values_cutoffs``: a row's clips are concatenated);
#: one clip per row here: ``[[valid samples]]``
CUTOFF_INPUTS = ("input_values_cutoffs",)
#: forward arguments telling the model how many audio features of each clip to keep (Phi-4
#: multimodal's ``audio_embed_sizes``: its extractor computes them; the model does not)
FEATURE_COUNT_INPUTS = ("audio_embed_sizes",)
#: sub-configs that describe the audio tower, nearest first
AUDIO_CONFIGS = ("audio_config", "encoder_config", "speech_config", "audio_encoder_config")
#: config fields giving the width of one feature frame (mel bins)
MEL_FIELDS = ("num_mel_bins", "input_feat_per_channel", "feature_size", "n_mels", "input_size", "input_dim",
              "input_feat_size",  # Gemma 3n's USM audio tower
              "num_mel_filters", "num_chroma", "d_model")
#: config fields counting the mel frames a low-frame-rate feature extractor stacks into one feature
#: frame (Fun-ASR's LFR: 7 frames of 80 bins make one 560-wide frame)
STACKED_FRAME_FIELDS = ("num_stacked_frames",)


def forward_names(model_or_cls) -> list[str]:
    forward = model_or_cls.forward
    try:
        return list(inspect.signature(forward).parameters)
    except (TypeError, ValueError):
        return []


def audio_input(model_or_cls) -> str | None:
    """The forward argument that carries the audio clip (None: the class takes no audio)."""
    names = forward_names(model_or_cls)
    for name in (*FEATURE_INPUTS, *WAVEFORM_INPUTS):
        if name in names:
            return name
    return None


def mask_input(model_or_cls) -> str | None:
    names = forward_names(model_or_cls)
    return next((name for name in MASK_INPUTS if name in names), None)


def feature_count_input(model_or_cls) -> str | None:
    names = forward_names(model_or_cls)
    return next((name for name in FEATURE_COUNT_INPUTS if name in names), None)


def sample_length_input(model_or_cls) -> str | None:
    names = forward_names(model_or_cls)
    return next((name for name in SAMPLE_LENGTH_INPUTS if name in names), None)


def cutoff_input(model_or_cls) -> str | None:
    names = forward_names(model_or_cls)
    return next((name for name in CUTOFF_INPUTS if name in names), None)


def sample_lengths(config, clips: int, valid_frames: int, waveform_input: bool) -> torch.Tensor:
    """Each clip's length in waveform samples: ``valid_frames`` samples of a waveform, else that many
    feature frames times the config's hop length (the extractor's stride between frames)."""
    hop = 1 if waveform_input else getattr(audio_config(config), "hop_length", None)
    if not isinstance(hop, int) or hop <= 0:
        raise ValueError(f"{config.model_type}: forward takes clip lengths in waveform samples, but the audio config "
                         "has no hop_length to turn feature frames into samples")
    return torch.full((clips,), int(valid_frames) * int(hop), dtype=torch.long)


def audio_config(config):
    """The sub-config of the audio tower (the config itself where it has none: Whisper)."""
    for name in AUDIO_CONFIGS:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            return sub
    return config


def _sub_configs(config) -> list:
    return [getattr(config, name) for name in getattr(config, "sub_configs", {}) or {}
            if hasattr(getattr(config, name, None), "to_dict")]


def mel_bins(config) -> int:
    """The width of one feature frame: the mel bins of the audio tower's config, else of the config,
    else of any other sub-config (CLVP's conditioning encoder reads ``decoder_config.feature_size``),
    else of the audio config's own sub-configs (Nemotron transcribe: ``audio_config.asr_config
    .num_mel_bins``), times the frames a low-frame-rate extractor stacks into one."""
    audio = audio_config(config)
    for owner in (audio, config, *_sub_configs(config), *(_sub_configs(audio) if audio is not config else [])):
        for name in MEL_FIELDS:
            value = getattr(owner, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                channels = getattr(owner, "input_channels", 1) if name == "input_feat_per_channel" else 1
                stacked = next((getattr(owner, field) for field in STACKED_FRAME_FIELDS
                                if isinstance(getattr(owner, field, None), int)), 1)
                return int(value) * int(channels or 1) * int(stacked or 1)
    raise ValueError(f"{config.model_type}: no mel-bin count in the audio config (looked for {', '.join(MEL_FIELDS)})")


def feature_variants(config, clips: int, frames: int, generator: torch.Generator, dtype) -> list[torch.Tensor]:
    """One log-mel clip batch in the two arrangements towers take: ``(clips, mel, frames)`` first
    (Whisper's), then ``(clips, frames, mel)``; the same values in both."""
    mel = mel_bins(config)
    features = torch.randn(clips, mel, frames, generator=generator).to(dtype)
    return [features, features.transpose(1, 2).contiguous()]


def waveform_variants(clips: int, samples: int, generator: torch.Generator, dtype) -> list[torch.Tensor]:
    """One waveform batch in the two arrangements towers take: ``(clips, samples)`` first, then
    ``(clips, 1, samples)`` (a channel axis: VibeVoice's convolutional tokenizers); the same values."""
    values = (0.1 * torch.randn(clips, samples, generator=generator)).to(dtype)
    return [values, values.unsqueeze(1)]


#: audio-config fields whose product is the number of waveform samples one audio feature covers
#: (a tower that refuses a clip that is no whole number of features: Muse Spark)
STRIDE_FIELDS = ("patch_sizes", "downsampling_ratios")


def samples_per_feature(config) -> int:
    """How many waveform samples the audio tower folds into one feature (1 when the config does
    not say): clip lengths are rounded to a multiple of it."""
    owners = [audio_config(config), config, *_sub_configs(config)]
    for owner in owners:
        for name in STRIDE_FIELDS:
            value = getattr(owner, name, None)
            if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and v > 0 for v in value):
                product = 1
                for v in value:
                    product *= v
                return product
    return 1
