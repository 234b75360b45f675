"""The coverage check with images on a fixed, diverse set of vision-language models (the CI slice of
``scripts/coverage.py`` for images): every pixel layout of ``patcher.samples.images`` plus the zoo's, each
row traced with its image sample, equal to eager exactly on two image layouts, with the pixels
reaching the logits (image influence)."""

from __future__ import annotations

import pytest

from patcher.coverage import check_architecture
from patcher.coverage.check import NO_TOWER
from patcher.samples.modalities import MIN_INFLUENCE
from patcher.samples.images.modality import NEEDS_IMAGES
from versions import class_param

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
    "MiniCPMV4_7ForConditionalGeneration",     # NaViT-packed patches, window merger, canvas M-RoPE from markers
    "Inkling2ForConditionalGeneration",        # merged-patch blocks, channels last, grid in tokens
    "FuyuForCausalLM",                         # flat patches, no tower, no vision_config
    "GitForCausalLM",                          # image before the text, no image tokens, two sizes
    "Gemma4ForConditionalGeneration",          # patch positions with padding, an optional vision config
    "Kosmos2_5ForConditionalGeneration",       # flattened patches with grid ids, image_embeds_position_mask
    "GotOcr2ForConditionalGeneration",         # fixed size, SAM tower initialised with std 1e-10
    "MiniMaxM3SparseForConditionalGeneration", # patch grid, a ternary on `outputs.get("image")` in the output
    "Blip2ForConditionalGeneration",           # Q-Former queries, pixel_values required: no text attempt
    "InstructBlipForConditionalGeneration",    # `Output(**vision_outputs)` of a leaf tower: keys from eager
    "Ernie4_5_VLMoeForConditionalGeneration",  # patch grid; h, w, t M-RoPE split from the modeling file (issue 21)
    "UdopForConditionalGeneration",            # page + a box per token, encoder-decoder, no tower (issue 21)
    "Pix2StructForConditionalGeneration",      # flattened patches alone + their mask, encoder-decoder (issue 21)
    "PPFormulaNetForConditionalGeneration",    # pixel_values alone, encoder-decoder (issue 21)
    "Qwen2_5OmniThinkerForConditionalGeneration",  # patch grid, markers only checkpoints set (issue 21)
    "Qwen3OmniMoeThinkerForConditionalGeneration",  # the same, MoE text model
    "Kosmos2ForConditionalGeneration",         # image_embeds_position_mask; a mask helper given input_ids.shape
    "AriaForConditionalGeneration",            # vision blocks behind `inputs_embeds.shape[1] != 1` (decided)
    "UnlimitedOcrForConditionalGeneration",    # vision blocks: SAM tower with an early return on a shape
    "InklingForConditionalGeneration",         # patches as clips of identical frames, channels last, no grid
    "Molmo2ForConditionalGeneration",          # overlapping crops pooled by index; a gated projector; the
                                               # tower's output iterated after a moved attribute set (issue 30)
    "ChameleonForConditionalGeneration",       # pixels into the model's own VQ-VAE, codes as text tokens (issue 30)
    "Emu3ForConditionalGeneration",            # the same, image_sizes, a line-end token per row of codes
    "Granite4VisionForConditionalGeneration",  # any-resolution, features as deepstack_features alone
    "CohereCompassForConditionalGeneration",   # patch grid, deepstack lists (as Qwen3-VL)
]
#: Rows whose forward cannot run without images: the text attempt is "needs images", the row is
#: built and checked by its image attempt.
NEED_IMAGES = {"Blip2ForConditionalGeneration": "pixel_values", "InstructBlipForConditionalGeneration": "pixel_values",
               "UdopForConditionalGeneration": "Bbox",
               "Pix2StructForConditionalGeneration": "flattened_patches",
               "PPFormulaNetForConditionalGeneration": "pixel_values",
               "Kosmos2ForConditionalGeneration": "pixel_values"}


def _emu3_forward_drops_the_pixels() -> bool:
    # transformers 5.10's Emu3ForConditionalGeneration.forward hands its model everything but
    # pixel_values and image_sizes: the image never reaches the logits (5.17 hands them on)
    import inspect

    import transformers

    return "pixel_values=pixel_values" not in inspect.getsource(transformers.Emu3ForConditionalGeneration.forward)


def _granite4_vision_text_config_is_llama() -> bool:
    # transformers 5.10 and 5.17 default Granite4VisionConfig's text_config to a LlamaConfig, which
    # lacks the attention_multiplier its text attention reads: no Granite 4 Vision can be built there
    import transformers

    from patcher.coverage import shrink_config

    return type(shrink_config(transformers.Granite4VisionConfig).text_config).__name__ == "LlamaConfig"


#: Rows the installed transformers itself breaks, where ``(whether it does, how the row must fail)``
#: says so: loudly, never equal. Checked on every version of the matrix (no skip).
BROKEN_UPSTREAM = {
    "Emu3ForConditionalGeneration": (_emu3_forward_drops_the_pixels, lambda row: (
        row.built and row.multimodal.stage == "influence" and "the image never reaches them" in row.multimodal.error
        and not row.multimodal.equal and row.vision_blocks is None)),
    "Granite4VisionForConditionalGeneration": (_granite4_vision_text_config_is_llama, lambda row: (
        not row.built and "attention_multiplier" in row.error and row.multimodal is None)),
}


def _broken_upstream(name: str, row) -> bool:
    """True (after checking that the row fails loudly) where the installed transformers breaks it."""
    if name not in BROKEN_UPSTREAM or not BROKEN_UPSTREAM[name][0]():
        return False
    assert BROKEN_UPSTREAM[name][1](row), row
    return True


@pytest.mark.parametrize("name", [class_param(name) for name in WITH_IMAGES])
def test_traces_with_images_and_equals_eager(name, coverage_row):
    row = coverage_row(name)
    if _broken_upstream(name, row):
        return
    images = row.multimodal
    assert row.built and images is not None, (row.stage, row.error)
    assert images.influence is not None and images.influence > MIN_INFLUENCE, images
    assert images.traced, (images.stage, images.error, images.blocker_location)
    assert images.subgraphs == images.expected >= 2, images
    assert images.max_diff == 0.0 and images.reuse_diff == 0.0, images
    assert images.equal
    if name in NEED_IMAGES:
        assert row.text.stage == NEEDS_IMAGES and not row.text.ran and NEED_IMAGES[name] in row.text.error, row.text
    else:
        assert row.text.ran and row.text.stage != NEEDS_IMAGES, row.text


def test_a_text_failure_is_needs_images_only_where_the_image_sample_runs(monkeypatch):
    # Ernie 4.5-VL with the generic M-RoPE split (h and w sections of unequal width, which its rotary
    # embedding stacks) fails eager on the text and on the image sample alike: a build failure,
    # never "needs images".
    from patcher.coverage import shrink

    monkeypatch.delitem(shrink.CHECKPOINT_FIELDS, "ernie4_5_vl_moe_text")
    row = check_architecture("Ernie4_5_VL_MoeForConditionalGeneration")
    assert not row.built and row.text.stage == "eager" and row.multimodal.stage == "eager", row
    assert "stack expects each tensor to be equal size" in row.text.error, row.text


def test_needs_images_is_counted_apart_and_is_no_blocker():
    from patcher.coverage.check import Attempt, CoverageRow
    from patcher.coverage.report import blocker, markdown, summary

    row = CoverageRow("NeedsForConditionalGeneration", built=True,
                      text=Attempt("text", stage=NEEDS_IMAGES, error="TypeError: missing 'pixel_values'"),
                      multimodal=Attempt("multimodal", ran=True, traced=True, equal=True, subgraphs=3, expected=3))
    assert blocker(row) is None
    assert "text: ran 0 (1 need images), traced 0" in summary([row]) and summary([row]).endswith("equal 1")
    line = next(line for line in markdown([row]).splitlines() if line.startswith("| Needs"))
    assert [cell.strip() for cell in line.split(" | ")][1:3] == ["yes", NEEDS_IMAGES], line
    row.multimodal = Attempt("multimodal", ran=True, traced=True, subgraphs=3, expected=3, max_diff=0.5,
                             stage="compare")
    assert blocker(row)[0] == "compare: not equal"  # the image attempt still fails the row


#: Rows whose chain with the vision blocks fails, loudly, and why (the report names the rest):
#: ``name -> (stage, where the blocker is, why)``.
VISION_BLOCKS_FAIL: dict[str, tuple[str, str, str]] = {}
#: VLMs whose patches reach the text model through a projection, with no tower of blocks to split.
#: UDOP adds each patch embedding to the tokens whose box it holds, with no tower of blocks.
#: Chameleon and Emu3 tokenize images with a VQ-VAE (convolutions, no blocks of a tower).
WITHOUT_TOWER = {"FuyuForCausalLM", "UdopForConditionalGeneration", "ChameleonForConditionalGeneration",
                 "Emu3ForConditionalGeneration"}


@pytest.mark.parametrize("name", [class_param(name) for name in WITH_IMAGES])
def test_vision_blocks_then_text_layers_equal_eager(name, coverage_row):
    # The sweep's vision-blocks attempt: the tower's blocks (found like the decoder layers) and the
    # text layers in one chain, one subgraph per block, exact on both image layouts.
    row = coverage_row(name)
    if _broken_upstream(name, row):
        return
    attempt = row.vision_blocks
    assert attempt is not None, (row.stage, row.error)
    if name in WITHOUT_TOWER:
        assert attempt.stage == NO_TOWER and not attempt.ran and not row.vision_targets, attempt
        return
    assert row.vision_targets, attempt
    if name in VISION_BLOCKS_FAIL:
        stage, where, _why = VISION_BLOCKS_FAIL[name]
        assert not attempt.equal and attempt.stage == stage, attempt
        assert where in (attempt.blocker_location or "") or where in (attempt.error or ""), attempt
        return
    assert attempt.traced, (attempt.stage, attempt.error, attempt.blocker_location)
    assert attempt.subgraphs == attempt.expected > row.multimodal.expected, attempt
    assert attempt.max_diff == 0.0 and attempt.reuse_diff == 0.0, attempt
    assert attempt.equal


def test_vision_blocks_share_in_the_summary():
    from patcher.coverage.check import Attempt, CoverageRow
    from patcher.coverage.report import markdown, summary

    def row(name, equal):
        return CoverageRow(name, built=True, text=Attempt("text", ran=True, traced=True, equal=True),
                           multimodal=Attempt("multimodal", ran=True, traced=True, equal=True),
                           vision_blocks=Attempt("vision_blocks", ran=True, traced=equal, equal=equal, subgraphs=5,
                                                 expected=5, stage=None if equal else "trace"))

    rows = [row("AForConditionalGeneration", True), row("BForConditionalGeneration", False)]
    assert summary(rows).endswith("equal 2; vision blocks: 1 of 2 exact")
    assert "| vision blocks |" in markdown(rows) and "equal (5)" in markdown(rows)
    assert "vision blocks" not in summary([CoverageRow("C", built=True, text=Attempt("text", ran=True))])
    # a model without a tower of blocks is counted apart, neither exact nor failed
    towerless = row("DForCausalLM", True)
    towerless.vision_blocks = Attempt("vision_blocks", ran=False, stage=NO_TOWER)
    assert summary(rows + [towerless]).endswith("vision blocks: 1 of 2 exact (1 without a tower)")
    assert f"| {NO_TOWER} |" in markdown([towerless])


def test_a_chain_that_traced_but_failed_to_run_names_its_error_in_the_cell():
    # MiniCPM-V's vision-block chain traced 5/5 and then raised in running; the cell showed only
    # "traced 5/5 /" (no diff, no cause) instead of the stage, error and place.
    from patcher.coverage.check import Attempt, CoverageRow
    from patcher.coverage.report import markdown

    failed = dict(ran=True, traced=True, subgraphs=5, expected=5, stage="run", blocker_kind="TypeError",
                  error="TypeError: unsupported operand type(s) for //: 'NoneType' and 'int'",
                  blocker_location="patcher/partition/subgraph.py:70")
    row = CoverageRow("RunFailsForConditionalGeneration", built=True,
                      text=Attempt("text", ran=True, traced=True, equal=True),
                      multimodal=Attempt("multimodal", **failed), vision_blocks=Attempt("vision_blocks", **failed))
    line = next(line for line in markdown([row]).splitlines() if line.startswith("| RunFails"))
    cells = [cell.strip() for cell in line.split(" | ")]
    assert cells[7] == cells[8] == "run: TypeError @ patcher/partition/subgraph.py:70", cells
    compared = Attempt("vision_blocks", ran=True, traced=True, subgraphs=5, expected=5, max_diff=0.5,
                       reuse_diff=0.25, stage="compare")
    row.vision_blocks = compared
    assert "traced 5/5 5.0e-01/2.5e-01" in markdown([row])


def test_a_sample_whose_pixels_never_reach_the_logits_fails_the_row_as_influence():
    import torch

    from patcher.coverage.check import Attempt, CoverageRow, check_influence
    from patcher.samples.images.modality import IMAGES
    from patcher.coverage.report import blocker, summary

    class IgnoresPixels(torch.nn.Module):
        def forward(self, input_ids, pixel_values):
            return {"logits": input_ids.float() * 2}

    attempt = Attempt("multimodal", ran=True)
    sample = {"input_ids": torch.arange(6).view(2, 3), "pixel_values": torch.randn(2, 3, 4, 4)}
    assert check_influence(attempt, IMAGES, IgnoresPixels(), sample, IgnoresPixels()(**sample), {}, seed=0) is None
    assert attempt.stage == "influence" and attempt.influence == 0.0 and not attempt.equal
    row = CoverageRow("BlindForConditionalGeneration", built=True, text=Attempt("text", ran=True, traced=True, equal=True),
                      multimodal=attempt)
    assert blocker(row)[0].startswith("influence")
    assert summary([row]).endswith("images: 1 with a sample builder, built 0, traced 0, equal 0")


def _attempt(**fields):
    from patcher.coverage.check import Attempt

    return Attempt("multimodal", **fields)


def _fake_row(name, *, built=True, image_path=True, multimodal=None):
    from patcher.coverage.check import Attempt, CoverageRow

    return CoverageRow(name, built=built, image_path=image_path, multimodal=multimodal,
                       text=Attempt("text", ran=built, traced=built, equal=built))


def test_a_sample_stage_failure_shows_its_error_and_location_in_the_blocker_column():
    from patcher.coverage.report import blocker, markdown

    failed = _attempt(stage="sample", error="ValueError: image size (5, 7) must be multiples of 4",
                      blocker_kind="ValueError", blocker_location="patcher/samples/images/flat_patches.py:31")
    row = _fake_row("OddForConditionalGeneration", multimodal=failed)
    kind, location, _, message = blocker(row)
    assert kind == "sample: ValueError" and location == "patcher/samples/images/flat_patches.py:31"
    assert message == failed.error
    line = next(line for line in markdown([row]).splitlines() if line.startswith("| OddFor"))
    assert "image size (5, 7) must be multiples of 4" in line and "patcher/samples/images/flat_patches.py:31" in line


def test_the_image_metric_counts_the_mapping_and_names_classes_without_an_image_path():
    from patcher.coverage.report import image_text_to_text, image_text_to_text_line, markdown

    equal = _attempt(ran=True, traced=True, equal=True)
    rows = [_fake_row("AForConditionalGeneration", multimodal=equal),
            _fake_row("BForConditionalGeneration", multimodal=_attempt(ran=True, traced=True, stage="compare")),
            _fake_row("CForConditionalGeneration"),                    # no sample builder: not equal, counted
            _fake_row("TextOnlyForCausalLM", image_path=False),        # in the mapping, takes no images
            _fake_row("DForConditionalGeneration", built=False),       # does not build: outside the metric
            _fake_row("OtherForConditionalGeneration", multimodal=equal)]  # not in the mapping
    mapping = {"AForConditionalGeneration", "BForConditionalGeneration", "CForConditionalGeneration",
               "TextOnlyForCausalLM", "DForConditionalGeneration", "EForConditionalGeneration"}
    metric = image_text_to_text(rows, mapping)
    assert metric["built"] == 4 and metric["with_image_path"] == 3 and metric["equal_with_images"] == 1
    assert metric["without_image_path"] == ["TextOnlyForCausalLM"]
    assert metric["not_equal_with_images"] == ["BForConditionalGeneration", "CForConditionalGeneration"]
    # each named with its reason, in the markdown too
    reasons = metric["not_equal_reasons"]
    assert list(reasons) == metric["not_equal_with_images"]
    assert reasons["BForConditionalGeneration"].startswith("compare")
    assert reasons["CForConditionalGeneration"].startswith("never run with images: no image sample builder")
    from patcher.coverage.report import not_equal_with_images_lines
    assert not_equal_with_images_lines(rows, mapping)[2:4] == [
        f"- {name}: {reason}" for name, reason in reasons.items()]
    assert image_text_to_text_line(rows, mapping) == (
        "image-text-to-text: 5 of the 6 in the mapping swept, 4 build, 1 without an image path "
        "(TextOnlyForCausalLM), 1 equal with images of 3 (33%)")
    # an older report without image_path: counted as having one (no failure hidden)
    rows[3].image_path = None
    assert image_text_to_text(rows, mapping)["with_image_path"] == 4
    # the default mapping is transformers' own, and the markdown states the metric
    assert image_text_to_text_line([rows[0]]).startswith("image-text-to-text: 0 of the ")
    assert "image-text-to-text:" in markdown(rows)


def test_a_class_whose_only_pixels_are_video_frames_is_named_so_with_its_video_attempt():
    # InstructBLIP-Video's pixel_values are (batch, frames, C, H, W) and it has no get_image_features:
    # "no image sample builder" would send someone to write one for a model that takes no image
    from patcher.coverage.check import Attempt
    from patcher.coverage.report import image_text_to_text

    name = "InstructBlipVideoForConditionalGeneration"
    row = _fake_row(name)
    row.model_type, row.video = "instructblipvideo", Attempt("video", ran=True, traced=True, equal=True, influence=0.01)
    reason = image_text_to_text([row], {name})["not_equal_reasons"][name]
    assert reason.startswith("never run with images: the class takes no still images, its pixel_values are video "
                             "frames") and reason.endswith("; video: equal (influence 1.0e-02)")
    # still counted as not equal with images: the metric is unchanged, the reason is precise
    assert image_text_to_text([row], {name})["equal_with_images"] == 0
    # a class with an image path of its own keeps the reason that names the missing builder
    other = _fake_row("LlavaNextVideoForConditionalGeneration")
    other.model_type = "llava_next_video"
    assert image_text_to_text([other], {other.architecture})["not_equal_reasons"][other.architecture].startswith(
        "never run with images: no image sample builder")


@pytest.mark.parametrize("name, takes_images", [
    class_param("Mistral4ForCausalLM", "Mistral4ForCausalLM", False),  # in the mapping, a text model
    class_param("FuyuForCausalLM", "FuyuForCausalLM", True),  # pixels, but no vision_config
    class_param("Kosmos2_5ForConditionalGeneration", "Kosmos2_5ForConditionalGeneration", True),  # flattened_patches
    # a vision config, images as precomputed encoder outputs
    class_param("DiffusionGemmaForBlockDiffusion", "DiffusionGemmaForBlockDiffusion", True),
])
def test_image_path_is_a_pixel_input_or_a_vision_config(name, takes_images):
    import transformers

    from patcher.samples.images.modality import has_image_path
    from patcher.coverage.shrink import shrink_config

    cls = getattr(transformers, name)
    assert has_image_path(cls, shrink_config(cls.config_class)) is takes_images
