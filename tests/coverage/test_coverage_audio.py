"""The coverage check with audio on a fixed set of speech and audio-text models (the CI slice of
``scripts/coverage.py`` for audio): each row built from its real config class, fed a
processor-free clip (``patcher.samples.audio``), traced, and equal to eager exactly on two clip layouts and
on another clip, with the clip reaching the logits (audio influence)."""

from __future__ import annotations

import pytest
import torch

from patcher.coverage import check_architecture
from patcher.samples.modalities import MIN_INFLUENCE
from patcher.samples.audio.modality import AUDIO_ONLY
from versions import class_param, require_classes

# what each adds to the slice
WITH_AUDIO = {
    # speech encoder-decoders: no text-only forward, the decoder reads decoder_input_ids
    "WhisperForConditionalGeneration": True,      # fixed 2 * max_source_positions frames, (B, mel, T)
    "MoonshineForConditionalGeneration": True,    # raw waveform input_values, two lengths
    "Speech2TextForConditionalGeneration": True,  # (B, T, mel) features, two lengths
    "MoonshineStreamingForConditionalGeneration": True,  # num_key_value_heads filled (== heads)
    "VoxtralRealtimeForConditionalGeneration": True,  # no placeholder: one text token per audio feature
    "ClvpModelForConditionalGeneration": True,    # the clip next to ordinary text; 2 heads of 32 for its rotary
    "CanaryForConditionalGeneration": True,       # FastConformer subsampling: unit-gain convolutions carry the clip
    # audio-text LMs: audio placeholder tokens counted by the model's own get_audio_features
    "VoxtralForConditionalGeneration": False,     # audio_token_id left None by the class: a free id
    "AudioFlamingo3ForConditionalGeneration": False,  # input_features_mask, fewer valid frames on layout 2
    "GlmAsrForConditionalGeneration": False,      # free length, frame mask
    "Qwen3ASRForConditionalGeneration": False,    # windows of 100 frames
    "GraniteSpeechForConditionalGeneration": False,  # (B, T, mel), a mask over features, not frames
    "FunAsrNanoForConditionalGeneration": False,  # 7 stacked mel frames per feature frame
    "Phi4MultimodalForCausalLM": False,           # told each clip's feature count (audio_embed_sizes)
    "Qwen2AudioForConditionalGeneration": False,  # the legacy merge's `labels`, None for the sample, decided
    # from it (None in the graph, checked at every run): the loss branch is not traced
    # a clip beside a text encoder: the text sample's inputs, decoder codes in codebook layout
    "MusicgenMelodyForConditionalGeneration": False,  # chroma prepended to the T5 states, decoder ids given
    "MusicgenForConditionalGeneration": False,    # EnCodec codes of the clip are the decoder ids; codebooks
    # drawn from the first clip's frames
}

@pytest.mark.parametrize("name", [class_param(name) for name in WITH_AUDIO])
def test_traces_with_audio_and_equals_eager(name, coverage_row):
    row = coverage_row(name)
    audio = row.audio
    assert row.built and audio is not None, (row.stage, row.error)
    assert audio.ran, (audio.stage, audio.error)
    assert audio.influence is not None and audio.influence > MIN_INFLUENCE, audio
    assert audio.traced, (audio.stage, audio.error, audio.blocker_location)
    assert audio.subgraphs == audio.expected >= 2, audio
    assert audio.max_diff == 0.0 and audio.reuse_diff == 0.0, audio
    assert audio.equal  # the third sample (another clip) is equal too
    if WITH_AUDIO[name]:
        # a speech model needs its clip: the text sample fails in eager, and says why
        assert not row.text.ran and row.text.stage == AUDIO_ONLY, row.text
    else:
        assert row.text.equal, row.text


def test_audio_tokens_are_what_the_audio_path_yields():
    from patcher.samples.audio import build_audio_sample, run_audio_path
    from patcher.coverage.check import _build
    from patcher.coverage.shrink import shrink_config
    from patcher.samples.audio import fill_audio_ids
    from transformers import VoxtralForConditionalGeneration

    # the class leaves audio_token_id None (checkpoints set it): the shrunk config has a free id, so a
    # sample can be built from it alone, and there is nothing left to fill
    assert VoxtralForConditionalGeneration.config_class().audio_token_id is None
    config = shrink_config(VoxtralForConditionalGeneration.config_class)
    assert config.audio_token_id is not None and not fill_audio_ids(config, VoxtralForConditionalGeneration)
    assert config.audio_token_id < config.text_config.vocab_size
    model = _build(VoxtralForConditionalGeneration, config, 0)
    sample = build_audio_sample(model, batch_size=2, seq_len=8, left_padding=1)
    per_row = (sample["input_ids"] == config.audio_token_id).sum(-1)
    yielded = run_audio_path(model, {"input_features": sample["input_features"]}, "input_features", None)
    assert per_row.tolist() == [yielded // 2] * 2 and yielded > 0
    assert sample["attention_mask"][0, 0] == 0 and sample["input_features"].shape[:2] == (2, config.audio_config.num_mel_bins)
    # one placeholder short: eager refuses the sample (the count is not a guess that happens to pass)
    short = sample["input_ids"].clone()
    short[0, (short[0] == config.audio_token_id).nonzero()[0]] = 5
    with pytest.raises(Exception):
        with torch.no_grad():
            model(**{**sample, "input_ids": short})


def test_a_clip_that_never_reaches_the_logits_fails_the_attempt(monkeypatch, tmp_path):
    # the influence gate: if the "other clip" were the same clip (audio dropped), the row must fail
    import patcher.samples.audio as audio

    monkeypatch.setattr(audio, "with_other_audio", lambda sample, seed: dict(sample))
    row = check_architecture("MoonshineForConditionalGeneration", cache_dir=tmp_path)
    assert row.audio.ran and row.audio.influence == 0.0
    assert row.audio.stage == "influence" and not row.audio.traced and not row.audio.equal


def test_audio_column_and_summary_share():
    from patcher.coverage.check import Attempt, CoverageRow
    from patcher.coverage.report import blocker, markdown, summary

    speech = CoverageRow("AForConditionalGeneration", built=True,
                         text=Attempt("text", stage=AUDIO_ONLY, error="AttributeError: x"),
                         audio=Attempt("audio", ran=True, traced=True, equal=True, subgraphs=3, expected=3,
                                       influence=0.5))
    silent = CoverageRow("BForConditionalGeneration", built=True, text=Attempt("text", ran=True, traced=True, equal=True),
                         audio=Attempt("audio", ran=True, stage="influence", influence=0.0,
                                       blocker_kind="no audio influence", error="eager 'logits' changed by 0"))
    assert summary([speech, silent]).endswith("; audio: 2 with an audio input, built 1, traced 1, equal 1")
    assert blocker(speech) is None  # the text failure of a model that needs a clip is not its blocker
    assert blocker(silent)[0] == "influence: no audio influence"
    table = markdown([speech, silent])
    assert "| audio |" in table and "equal (influence 5.0e-01)" in table
    assert "audio" not in summary([CoverageRow("C", built=True, text=Attempt("text", ran=True))])
    assert CoverageRow.from_dict(speech.as_dict()).audio == speech.audio


def test_shrinking_keeps_a_downsampled_window_a_multiple_of_the_rate():
    from transformers import GraniteSpeechConfig

    from patcher.coverage.shrink import shrink_config

    config = shrink_config(GraniteSpeechConfig)
    assert config.window_size % config.downsample_rate == 0 and config.window_size // config.downsample_rate >= 1


#: Audio-code models that build since issue 21, and how far their text attempt gets: "equal", or
#: the stage where it stops, loudly. What made each build:
CODEBOOK_ROWS = {
    # token ids laid out as forward takes codebooks (patcher.samples.sweep._codebook_layout)
    "MusicgenForCausalLM": "equal",                     # (batch * num_codebooks, seq) input_ids
    "MusicgenMelodyForCausalLM": "equal",
    "MusicgenMelodyForConditionalGeneration": "equal",  # + text-encoder input_ids (text_sample)
    "MusicgenForConditionalGeneration": "equal",       # + its __init__'s relative import made absolute
    "DiaForConditionalGeneration": "equal",             # (batch, seq, channels); cross_* sizes shrunk
    "KyutaiSpeechToTextForConditionalGeneration": "equal",  # (batch, seq, 1 + codebooks); Mimi groups
    "MoshiForConditionalGeneration": "equal",           # two audio-code streams; Mimi groups; the depth
    # decoder (run only with labels) is not counted as swallowed by a moved helper that reads embed_tokens
    "CsmForConditionalGeneration": "equal",             # Mimi's upsample_groups follow hidden_size; 2-D ids:
    # the moved `input_ids.ndim == 2` branch is traced through (its None result), the rank checked at every run
}


@pytest.mark.parametrize("name", list(CODEBOOK_ROWS))
def test_codebook_models_build(name, coverage_row):
    row = coverage_row(name)
    assert row.built, (row.stage, row.error, row.error_location)
    text = row.text
    assert text.ran, (text.stage, text.error)
    if CODEBOOK_ROWS[name] == "equal":
        assert text.traced and text.equal, (text.stage, text.error)
    else:
        assert not text.equal and text.stage == CODEBOOK_ROWS[name] and text.error, text


def _tiny(name: str):
    from patcher.samples.audio import fill_audio_ids
    from patcher.coverage.check import _build
    from patcher.coverage.shrink import shrink_config
    from patcher.models import resolve_model_class

    require_classes(name)
    cls = resolve_model_class(name)
    config = shrink_config(cls.config_class)
    fill_audio_ids(config, cls)
    return _build(cls, config, 0)


def test_a_waveform_is_a_whole_number_of_features_where_the_tower_folds_samples():
    # Muse Spark folds prod(patch_sizes) samples into one feature and refuses any other length
    from patcher.samples.audio import build_audio_sample

    model = _tiny("MuseSparkForConditionalGeneration")
    stride = 1
    for size in model.config.audio_config.patch_sizes:
        stride *= size
    lengths = [build_audio_sample(model, batch_size=1, layout=layout)["input_values"].shape[-1] for layout in (0, 1)]
    assert all(length % stride == 0 for length in lengths) and lengths[0] < lengths[1], (lengths, stride)


def test_a_required_audio_argument_forward_defaults_to_none_is_given_none():
    # MOSS's inner get_audio_features requires padding_mask, which its forward passes on as None
    from patcher.samples.audio import build_audio_sample

    model = _tiny("MossTranscribeDiarizeForConditionalGeneration")
    sample = build_audio_sample(model, batch_size=2, seq_len=8, left_padding=1)
    placeholders = (sample["input_ids"] == model.config.audio_token_id).sum()
    with torch.no_grad():
        features = model.get_audio_features(sample["input_features"], sample["input_features_mask"],
                                            padding_mask=None).pooler_output
    assert placeholders == features.shape[0] > 0


def test_a_noisy_audio_path_is_sampled_deterministically():
    # VibeVoice ASR adds sigma-VAE noise unless sample=False; its tokenizer takes (clips, 1, samples)
    # and a padding_mask over samples
    from patcher.samples.audio import build_audio_sample

    model = _tiny("VibeVoiceAsrForConditionalGeneration")
    sample = build_audio_sample(model, batch_size=2, seq_len=8)
    assert sample["sample"] is False and sample["input_values"].dim() == 3
    assert sample["padding_mask"].shape == (2, sample["input_values"].shape[-1])
    with torch.no_grad():
        first, second = model(**sample).logits, model(**sample).logits
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def _influence(model, sample) -> float:
    from patcher.samples.audio.modality import _with_other_audio

    with torch.no_grad():
        first = model(**sample).logits
        other = model(**_with_other_audio(sample, 0, model.config)).logits
    return float((first - other).abs().max())


def test_a_clip_beside_a_text_encoder_comes_with_the_text_sample_in_codebook_layout():
    # MusicGen Melody: T5 reads input_ids, the chroma clip (batch, frames, num_chroma) is prepended to
    # its states, the decoder reads (batch * num_codebooks, seq) codes
    from patcher.samples.audio.modality import audio_samples

    model = _tiny("MusicgenMelodyForConditionalGeneration")
    codebooks = model.config.decoder.num_codebooks
    for sample in audio_samples(model.config, model, 0):
        batch = sample["input_ids"].shape[0]
        assert sample["attention_mask"].shape == sample["input_ids"].shape
        assert sample["decoder_input_ids"].shape[0] == batch * codebooks
        assert sample["input_features"].shape[0] == batch
        assert sample["input_features"].shape[-1] == model.config.num_chroma
        assert _influence(model, sample) > MIN_INFLUENCE


def test_a_clip_that_becomes_the_decoder_input_is_given_no_decoder_ids():
    # MusicGen encodes input_values with EnCodec into decoder_input_ids only when none are given:
    # next to given ids the clip would be ignored. Its codebooks, zeros as built, are drawn from the
    # first clip's frames by audio_samples, else every clip gives the same codes
    from patcher.samples.audio.modality import audio_samples

    model = _tiny("MusicgenForConditionalGeneration")
    for sample in audio_samples(model.config, model, 0):
        assert "decoder_input_ids" not in sample and sample["input_values"].dim() == 3
        assert sample["input_ids"].shape[0] == sample["input_values"].shape[0]
        assert _influence(model, sample) > MIN_INFLUENCE


def test_codec_codes_fill_the_audio_placeholders_and_the_cutoffs_end_each_clip():
    # Csm: each clip's end in its row (input_values_cutoffs), one audio placeholder per Mimi code
    # frame, and a pad (its audio token) that asks for no audio at masked positions
    from patcher.samples.audio.modality import audio_samples

    model = _tiny("CsmForConditionalGeneration")
    token = model.config.audio_token_id
    for sample in audio_samples(model.config, model, 0):
        clips, _channels, samples = sample["input_values"].shape
        assert sample["input_values_cutoffs"].tolist() == [[samples]] * clips
        frames = model.codec_model.get_audio_codes_mask(torch.ones(clips, samples)).sum(-1)
        assert (sample["input_ids"] == token).sum(-1).tolist() == frames.tolist()
        assert _influence(model, sample) > MIN_INFLUENCE
