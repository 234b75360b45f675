"""The coverage check with images on a fixed, diverse set of vision-language models (the CI slice of
``scripts/coverage.py`` for images): every pixel layout of ``patcher.images`` plus the zoo's, each
row traced with its image sample, equal to eager exactly on two image layouts, with the pixels
reaching the logits (image influence)."""

from __future__ import annotations

import pytest

from patcher.coverage import check_architecture
from patcher.coverage.check import MIN_IMAGE_INFLUENCE

# layout in brackets: what each adds to the slice
WITH_IMAGES = [
    "LlavaNextForConditionalGeneration",       # any-resolution tiles + image_sizes
    "LlavaOnevisionForConditionalGeneration",  # any-resolution, len() of traced image sizes
    "Idefics3ForConditionalGeneration",        # pixel_attention_mask, a per-image feature list
    "Qwen3VLForConditionalGeneration",         # patch grid, deepstack lists, attribute assignment
    "Glm4vForConditionalGeneration",           # patch grid with start/end markers
    "PaliGemmaForConditionalGeneration",       # fixed size, token_type_ids
    "Mistral3ForConditionalGeneration",        # Pixtral tower, image_sizes, two sizes
    "Lfm2VlForConditionalGeneration",          # SigLIP2 NaFlex: spatial_shapes + patch mask
    "InternVLForConditionalGeneration",        # fixed size, pixel shuffle
    "Qwen2VLForConditionalGeneration",         # the zoo's builder
    "GotOcr2ForConditionalGeneration",         # fixed size, SAM tower initialised with std 1e-10
    "MiniMaxM3SparseForConditionalGeneration", # patch grid, a ternary on `outputs.get("image")` in the output
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("generated")


@pytest.mark.parametrize("name", WITH_IMAGES)
def test_traces_with_images_and_equals_eager(name, cache_dir):
    row = check_architecture(name, cache_dir=cache_dir)
    images = row.multimodal
    assert row.built and images is not None, (row.stage, row.error)
    assert images.influence is not None and images.influence > MIN_IMAGE_INFLUENCE, images
    assert images.traced, (images.stage, images.error, images.blocker_location)
    assert images.subgraphs == images.expected >= 2, images
    assert images.max_diff == 0.0 and images.reuse_diff == 0.0, images
    assert images.equal


def test_a_sample_whose_pixels_never_reach_the_logits_fails_the_row_as_influence():
    import torch

    from patcher.coverage.check import Attempt, CoverageRow, _check_image_influence
    from patcher.coverage.report import blocker, summary

    class IgnoresPixels(torch.nn.Module):
        def forward(self, input_ids, pixel_values):
            return {"logits": input_ids.float() * 2}

    attempt = Attempt("multimodal", ran=True)
    sample = {"input_ids": torch.arange(6).view(2, 3), "pixel_values": torch.randn(2, 3, 4, 4)}
    _check_image_influence(attempt, IgnoresPixels(), sample, {}, seed=0)
    assert attempt.stage == "influence" and attempt.influence == 0.0 and not attempt.equal
    row = CoverageRow("BlindForConditionalGeneration", built=True, text=Attempt("text", ran=True, traced=True, equal=True),
                      multimodal=attempt)
    assert blocker(row)[0].startswith("influence")
    assert summary([row]).endswith("images: 1 with a sample builder, built 0, traced 0, equal 0")
