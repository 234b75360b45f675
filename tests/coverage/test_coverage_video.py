"""The coverage check with video (the CI slice of ``scripts/coverage.py`` for video): one row per
video layout of ``patcher.samples.video``, each built, traced with its video sample, exactly equal to eager
on two video layouts (other frame count and size) and on the first layout with another video, with
the video reaching the logits (video influence)."""

from __future__ import annotations

import pytest
import torch

from patcher.coverage.check import Attempt, CoverageRow, _build, tensor_diff
from patcher.samples.modalities import MIN_INFLUENCE
from patcher.samples.images.modality import NEEDS_IMAGES, with_other_pixels
from patcher.coverage.shrink import shrink_config
from patcher.samples.images.tokens import feature_method_inputs
from patcher.models import resolve_model_class
from patcher.samples.video import second_video_layout, video_layout_for, video_sample, video_token_id

WITH_VIDEO = [
    "Qwen2VLForConditionalGeneration",            # patch rows + video_grid_thw, one marked run per video
    "Qwen3VLForConditionalGeneration",            # the same rows, one marked run per temporal patch
    "LlavaNextVideoForConditionalGeneration",     # (V, F, C, S, S) frames, pooled per frame
    "InstructBlipVideoForConditionalGeneration",  # frames as pixel_values + Q-Former instruction; no text attempt
]


@pytest.mark.parametrize("name", WITH_VIDEO)
def test_traces_with_video_and_equals_eager(name, coverage_row):
    row = coverage_row(name)
    video = row.video
    assert row.built and video is not None, (row.stage, row.error)
    assert video.ran and video.influence is not None and video.influence > MIN_INFLUENCE, video
    assert video.traced, (video.stage, video.error, video.blocker_location)
    assert video.subgraphs == video.expected >= 2, video
    assert video.max_diff == 0.0 and video.reuse_diff == 0.0, video
    assert video.equal, video  # all three samples: the other layout and the other video as well
    if name.startswith("InstructBlipVideo"):
        assert row.text.stage == NEEDS_IMAGES and row.multimodal is None, row.text


_MODELS: dict = {}


def _tiny(name):
    if name not in _MODELS:
        cls = resolve_model_class(name)
        config = shrink_config(cls.config_class)
        _MODELS[name] = config, _build(cls, config, seed=0)
    return _MODELS[name]


@pytest.mark.parametrize("name", ["Qwen2VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
                                  "LlavaNextVideoForConditionalGeneration"])
@pytest.mark.parametrize("second", [False, True])
def test_video_tokens_are_what_the_video_path_yields_and_the_video_reaches_the_logits(name, second):
    config, model = _tiny(name)
    keywords = second_video_layout(config) if second else {}
    sample = video_sample(config, batch_size=2, seq_len=5, left_padding=2, model=model,
                          generator=torch.Generator().manual_seed(4), **keywords)
    pixels = {key: value for key, value in sample.items() if key.startswith(("pixel", "video_grid"))}
    method = model.model.get_video_features
    with torch.no_grad():
        features = method(**feature_method_inputs(model, method, pixels)).pooler_output  # as forward calls it
    total = sum(item.shape[0] for item in features) if isinstance(features, (list, tuple)) else \
        features.reshape(-1, features.shape[-1]).shape[0]
    counts = (sample["input_ids"] == video_token_id(config)).sum(-1)
    assert counts.tolist() == [total // 2] * 2 and int(counts.sum()) == total
    if "mm_token_type_ids" in sample:
        assert torch.equal(sample["mm_token_type_ids"], (sample["input_ids"] == video_token_id(config)).long() * 2)
    assert sample["attention_mask"][0, :2].eq(0).all() and sample["attention_mask"][:, 2:].eq(1).all()
    # the video reaches the logits on either layout
    with torch.no_grad():
        first, other = model(**sample).logits, model(**with_other_pixels(sample, seed=1)).logits
    assert tensor_diff(first, other) > MIN_INFLUENCE


def test_the_two_video_layouts_differ_and_refuse_partial_temporal_patches():
    config, model = _tiny("Qwen2VLForConditionalGeneration")
    layout = video_layout_for(config.model_type)
    assert layout.name == "video_grid" and layout.default(config) != layout.other(config)
    temporal = config.vision_config.temporal_patch_size
    with pytest.raises(ValueError, match="temporal patches"):
        video_sample(config, batch_size=1, seq_len=3, model=model, num_frames=temporal + 1)


def test_video_share_in_the_summary_and_its_column():
    from patcher.coverage.report import blocker, markdown, summary

    def row(name, **video):
        return CoverageRow(name, built=True, text=Attempt("text", ran=True, traced=True, equal=True),
                           video=Attempt("video", ran=True, influence=0.5, **video))

    equal = row("AForConditionalGeneration", traced=True, equal=True, subgraphs=3, expected=3)
    ignored = row("BForConditionalGeneration", stage="influence", blocker_kind="no video influence")
    assert summary([equal, ignored]).endswith("; video: 2 with a video layout, built 1, traced 1, equal 1")
    assert "video" not in summary([CoverageRow("C", built=True, text=Attempt("text", ran=True))])
    assert "| video |" in markdown([equal]) and "equal (influence 5.0e-01)" in markdown([equal])
    assert blocker(equal) is None and blocker(ignored)[0] == "influence: no video influence"


def test_a_video_that_never_reaches_the_logits_fails_the_attempt():
    from patcher.coverage.check import check_influence
    from patcher.samples.video.modality import VIDEO

    class IgnoresVideo(torch.nn.Module):
        def forward(self, input_ids, pixel_values_videos):
            return {"logits": input_ids.float() * 2}

    attempt = Attempt("video", ran=True)
    sample = {"input_ids": torch.ones(1, 3, dtype=torch.long), "pixel_values_videos": torch.randn(1, 2, 3, 4, 4)}
    assert check_influence(attempt, VIDEO, IgnoresVideo(), sample, IgnoresVideo()(**sample), {}, seed=0) is None
    assert attempt.stage == "influence" and attempt.blocker_kind == "no video influence" and attempt.influence == 0
    assert tensor_diff(torch.zeros(2), torch.zeros(2)) == 0
