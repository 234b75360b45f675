"""Audio samples built for tiny models of real config classes (random weights, nothing downloaded):
the clip inputs a tower needs besides the clip itself, and a clip that reaches the logits."""

from __future__ import annotations

import torch

from patcher.samples.audio import build_audio_sample, fill_audio_ids, with_other_audio
from patcher.samples.modalities import MIN_INFLUENCE
from patcher.coverage.check import _build
from patcher.coverage.shrink import shrink_config
from versions import require_classes


def _tiny(cls):
    config = shrink_config(cls.config_class)
    fill_audio_ids(config, cls)
    return config, _build(cls, config, 0)


def _logits(model, sample):
    with torch.no_grad():
        return model(**sample, use_cache=False).logits


def test_stacked_frames_widen_each_feature_frame():
    require_classes("FunAsrNanoForConditionalGeneration")
    from transformers import FunAsrNanoForConditionalGeneration

    config, model = _tiny(FunAsrNanoForConditionalGeneration)
    sample = build_audio_sample(model, batch_size=2)
    audio = config.audio_config
    assert sample["input_features"].shape[-1] == audio.num_mel_bins * audio.num_stacked_frames


def test_clip_lengths_in_waveform_samples_match_the_frames():
    require_classes("Dots3NoteForConditionalGeneration")
    from transformers import Dots3NoteForConditionalGeneration

    config, model = _tiny(Dots3NoteForConditionalGeneration)
    sample = build_audio_sample(model, batch_size=2)
    frames = sample["input_features"].shape[-1]
    assert sample["chunk_sample_lengths"].tolist() == [frames * config.audio_config.hop_length] * 2
    assert (sample["input_ids"] == config.audio_token_id).sum() > 0


def test_feature_counts_told_to_the_model_match_its_audio_tokens():
    from transformers import Phi4MultimodalForCausalLM

    config, model = _tiny(Phi4MultimodalForCausalLM)
    sample = build_audio_sample(model, batch_size=2)
    per_row = (sample["input_ids"] == config.audio_config.audio_token_id).sum(-1)
    assert per_row.tolist() == sample["audio_embed_sizes"].tolist() and per_row.min() > 0
    other = with_other_audio(sample, 0)
    assert (_logits(model, sample) - _logits(model, other)).abs().max() > MIN_INFLUENCE


def test_a_fastconformer_subsampling_carries_the_clip_to_the_logits():
    # three stacked convolutions at std 0.02 under woken biases left ~1e-6 of the clip in the logits
    require_classes("CanaryForConditionalGeneration")
    from transformers import CanaryForConditionalGeneration

    _config, model = _tiny(CanaryForConditionalGeneration)
    sample = build_audio_sample(model, batch_size=2)
    other = with_other_audio(sample, 0)
    assert (_logits(model, sample) - _logits(model, other)).abs().max() > MIN_INFLUENCE
