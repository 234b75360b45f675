"""Processor-free audio samples for speech encoder-decoders and audio-text models, from the config
and the built model (the audio counterpart of :mod:`patcher.samples.images`).

- :mod:`.inputs`: which forward argument carries the clip (``input_features`` log-mel,
  ``input_values`` waveform) and its frame mask; the clip's shape from the config.
- :mod:`.tokens`: the audio placeholder id, and how many audio features a clip yields, counted by
  running the model's own audio path (``get_audio_features``, the tower's output lengths).
- :mod:`.sample`: :func:`build_audio_sample`, two layouts (two clip lengths, or two valid lengths on
  a fixed-length Whisper-style tower), and :func:`with_other_audio` for the audio-influence check.
"""

from __future__ import annotations

from .inputs import audio_input, mask_input
from .sample import build_audio_sample, clip_inputs, with_other_audio
from .tokens import audio_token_id, fill_audio_ids, run_audio_path


def has_audio_path(cls, config=None) -> bool:
    """Whether the class's forward takes an audio clip (and, with ``config``, the config has its
    audio tower: Gemma 4's optional ``audio_config`` left None builds without one)."""
    if audio_input(cls) is None:
        return False
    return config is None or not (hasattr(config, "audio_config") and getattr(config, "audio_config") is None)


__all__ = ["audio_input", "audio_token_id", "build_audio_sample", "clip_inputs", "fill_audio_ids",
           "has_audio_path", "mask_input", "run_audio_path", "with_other_audio"]
