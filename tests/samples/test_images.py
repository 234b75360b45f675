"""Processor-free image samples (patcher.samples.images): the layout of each family, image tokens counted by
the model's own vision path, and the eager model accepting the sample on any drawn layout."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn
from hypothesis import given
from hypothesis import strategies as st

from patcher.coverage.check import _build, tensor_diff
from patcher.samples.modalities import MIN_INFLUENCE
from patcher.samples.images.modality import image_layout, with_other_pixels
from patcher.coverage.shrink import shrink_config
from patcher.samples.images import layout_for, second_layout
from patcher.samples.images.layout import forward_inputs
from patcher.samples.images.tokens import features_per_image, image_token_id
from patcher.samples import multimodal_builder, multimodal_sample
from versions import has_class, require_classes

# One architecture per pixel layout that the fast run can afford.
LAYOUT_CASES = {
    "anyres": "LlavaNextForConditionalGeneration",
    "qwen_vl": "Glm4vForConditionalGeneration",
    "idefics": "Idefics3ForConditionalGeneration",
    "pixtral": "Mistral3ForConditionalGeneration",
    "square": "PaliGemmaForConditionalGeneration",
    "naflex": "Lfm2VlForConditionalGeneration",
    "flat_patches": "FuyuForCausalLM",
    "patch_positions": "Gemma4ForConditionalGeneration",
    "navit_packed": "MiniCPMV4_7ForConditionalGeneration",
    "merged_patches": "Inkling2ForConditionalGeneration",
    "temporal_patches": "InklingForConditionalGeneration",
    "overlapping_crops": "Molmo2ForConditionalGeneration",
}
# Document / OCR models, each with a layout detail of its own family: a tile mask of (B, N) and a
# pixel shuffle in the vision config (Granite-Docling), patches of two frames named `patch_temporal`
# (MuseGlimmer), the pixels entering the first of two stacked towers (Unlimited-OCR: SAM, then CLIP).
DETAIL_CASES = {
    "idefics": "GraniteDoclingForConditionalGeneration",
    "qwen_vl": "MuseGlimmerForConditionalGeneration",
    "square": "UnlimitedOcrForConditionalGeneration",
    "merged_patches": "Inkling2ForConditionalGeneration",
}
_MODELS: dict[str, tuple] = {}


def tiny(name: str):
    require_classes(name)
    if name not in _MODELS:
        cls = getattr(transformers, name)
        config = shrink_config(cls.config_class)
        _MODELS[name] = (config, _build(cls, config, seed=0))
    return _MODELS[name]


def test_every_family_layout_is_registered_without_the_zoo_winning_over_it_elsewhere():
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    for layout_name, name in LAYOUT_CASES.items():
        if not has_class(name):  # a layout whose only case the installed transformers lacks
            continue
        config, _ = tiny(name)
        assert layout_for(config.model_type).name == layout_name
        assert multimodal_builder(config.model_type) is not None
    # the zoo keeps its own builders for its model types
    import zoo.llava.recipe as llava_recipe

    assert multimodal_builder("llava") is llava_recipe.build_sample
    assert "llava" in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


@pytest.mark.parametrize("layout_name", sorted(LAYOUT_CASES))
@given(batch_size=st.integers(1, 3), seq_len=st.integers(2, 9), second=st.booleans(), data=st.data())
def test_sample_places_as_many_image_tokens_as_the_vision_path_yields(layout_name, batch_size, seq_len, second, data):
    config, model = tiny(LAYOUT_CASES[layout_name])
    left_padding = data.draw(st.integers(0, seq_len - 1))
    layout = second_layout(config) if second else {}
    num_images = layout.get("num_images", 1)
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    sample = multimodal_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                               generator=generator, model=model, **layout)
    token = image_token_id(config)
    per_image = features_per_image(model, {k: v for k, v in sample.items() if k not in ("input_ids", "attention_mask")},
                                   batch_size * num_images)
    counts = (sample["input_ids"] == token).sum(-1)
    assert counts.tolist() == [num_images * per_image] * batch_size
    assert sample["attention_mask"][0, :left_padding].eq(0).all() and sample["attention_mask"][:, left_padding:].eq(1).all()
    for name in ("token_type_ids", "mm_token_type_ids"):
        if name in sample:
            assert torch.equal(sample[name].bool(), sample["input_ids"] == token)
    with torch.no_grad():
        logits = model(**sample).logits  # the model's own count check passes
    assert logits.shape[:2] == sample["input_ids"].shape


@pytest.mark.parametrize("layout_name", sorted(LAYOUT_CASES))
def test_the_pixels_reach_the_logits(layout_name):
    config, model = tiny(LAYOUT_CASES[layout_name])
    sample = multimodal_sample(config, batch_size=2, seq_len=5, generator=torch.Generator().manual_seed(1), model=model)
    with torch.no_grad():
        first, second = model(**sample).logits, model(**with_other_pixels(sample, seed=3)).logits
    assert tensor_diff(first, second) > MIN_INFLUENCE


def test_without_a_model_the_config_count_matches_the_model_count_where_the_config_can_tell():
    cases = [LAYOUT_CASES[name] for name in ("qwen_vl", "pixtral", "naflex", "idefics", "merged_patches", "navit_packed",
                                             "flat_patches", "patch_positions", "temporal_patches",
                                             "overlapping_crops")]
    cases += [DETAIL_CASES[name] for name in ("idefics", "qwen_vl")]  # Granite's scale_factor sits in the tower
    for layout_name in [name for name in cases if has_class(name)]:
        config, model = tiny(layout_name)
        without = multimodal_sample(config, batch_size=1, seq_len=4, generator=torch.Generator().manual_seed(0))
        with_model = multimodal_sample(config, batch_size=1, seq_len=4, generator=torch.Generator().manual_seed(0),
                                       model=model)
        assert without["input_ids"].shape == with_model["input_ids"].shape, layout_name


@pytest.mark.parametrize("name", ["MiniCPMOcrForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration"])
@pytest.mark.parametrize("second", [False, True])
def test_navit_packed_pixels_are_one_row_of_patches_and_the_count_follows_the_downsample_mode(name, second):
    # MiniCPM-OCR reads in "4x" mode (no window merger: 4x the tokens of "16x"), MiniCPM-V 4.6 in
    # "16x": the config-derived count must follow the mode the vision path really runs in.
    config, model = tiny(name)
    layout = second_layout(config) if second else {}
    sample = multimodal_sample(config, batch_size=2, seq_len=3, generator=torch.Generator().manual_seed(0),
                               model=model, **layout)
    size = layout.get("image_size") or layout_for(config.model_type).default_size(config)
    patch = config.vision_config.patch_size
    grid = (size[0] // patch, size[1] // patch)
    assert sample["target_sizes"].tolist() == [list(grid)] * 2
    assert sample["pixel_values"].shape == (1, config.vision_config.num_channels, patch, 2 * grid[0] * grid[1] * patch)
    per_image = features_per_image(model, {key: sample[key] for key in ("pixel_values", "target_sizes")}, 2)
    assert per_image == layout_for(config.model_type).config_count(config, size)
    assert (sample["input_ids"] == image_token_id(config)).sum(-1).tolist() == [per_image] * 2


def test_navit_packed_images_are_framed_by_the_image_markers_of_the_config():
    # MiniCPM-V 4.7 lays out its canvas positions from <image> ... </image> around each crop; the
    # markers are text (mm_token_type_ids 0), the placeholders image (1).
    config, model = tiny("MiniCPMV4_7ForConditionalGeneration")
    sample = multimodal_sample(config, batch_size=1, seq_len=4, num_images=2,
                               generator=torch.Generator().manual_seed(2), model=model)
    ids = sample["input_ids"][0].tolist()
    token = image_token_id(config)
    starts = [index for index, value in enumerate(ids) if value == config.image_start_id]
    assert len(starts) == 2
    for start in starts:
        end = ids.index(config.image_end_id, start)
        assert set(ids[start + 1:end]) == {token}
    assert torch.equal(sample["mm_token_type_ids"][0].bool(), sample["input_ids"][0] == token)


@pytest.mark.parametrize("layout_name", sorted(DETAIL_CASES))
def test_document_models_take_their_family_sample_and_see_its_pixels(layout_name):
    config, model = tiny(DETAIL_CASES[layout_name])
    assert layout_for(config.model_type).name == layout_name
    sample = multimodal_sample(config, batch_size=2, seq_len=5, left_padding=1,
                               generator=torch.Generator().manual_seed(1), model=model)
    with torch.no_grad():
        first, second = model(**sample).logits, model(**with_other_pixels(sample, seed=3)).logits
    assert first.shape[:2] == sample["input_ids"].shape
    assert tensor_diff(first, second) > MIN_INFLUENCE


@pytest.mark.parametrize("layout_name", ["qwen_vl", "merged_patches"])
def test_the_family_pixels_need_no_variant(layout_name):
    # MuseGlimmer names its two frames `patch_temporal`: read, the first arrangement fits the patch
    # embedding (a variant that happens to fit would hide a wrong patch size); Inkling2 has no variants
    config, model = tiny(DETAIL_CASES[layout_name])
    layout = layout_for(config.model_type)
    pixels = layout.pixels(config, [layout.default_size(config)] * 2, torch.Generator().manual_seed(0),
                           torch.float32, set(), 2)
    assert features_per_image(model, pixels, 2) == layout.config_count(config, layout.default_size(config))


def test_merged_patches_are_one_channels_last_block_per_token_and_refuse_partial_blocks():
    config, _ = tiny(LAYOUT_CASES["merged_patches"])
    layout = layout_for(config.model_type)
    vision = config.vision_config
    step = vision.patch_size * vision.spatial_merge_size
    sizes = [layout.default_size(config), layout.other_size(config)]
    pixels = layout.pixels(config, sizes, torch.Generator().manual_seed(0), torch.float32, set(), 1)
    assert pixels["image_grid_thw"].tolist() == [[1, h // step, w // step] for h, w in sizes]
    tokens = sum(h // step * (w // step) for h, w in sizes)
    assert pixels["pixel_values"].shape == (tokens, step, step, vision.num_channels)
    with pytest.raises(ValueError, match="multiples"):
        layout.pixels(config, [(step + 1, step)], torch.Generator().manual_seed(0), torch.float32, set(), 1)


def test_temporal_patches_are_clips_of_one_still_frame_cut_as_the_processor_cuts():
    # InklingImageProcessor (torchvision only) cuts ceil(h / patch) rows of w // patch + 1 columns
    # and repeats the image into both frames of each clip; the check against it skips without torchvision
    config, _ = tiny(LAYOUT_CASES["temporal_patches"])
    layout = layout_for(config.model_type)
    vision = config.vision_config
    patch = vision.patch_size
    pixels = layout.pixels(config, [(2 * patch + 1, 3 * patch)], torch.Generator().manual_seed(0), torch.float32,
                           set(), 1)["pixel_values"]
    assert pixels.shape == (3 * 4, vision.temporal_patch_size, patch, patch, vision.num_channels)
    assert all(torch.equal(pixels[:, 0], pixels[:, frame]) for frame in range(vision.temporal_patch_size))


@pytest.mark.parametrize("tiles", [(1, 1), (1, 2), (2, 3)])
def test_overlapping_crops_pool_every_canvas_patch_once_from_one_crop(tiles):
    # At the real crop size (27 patches a side, margins of 4): the low-resolution view pools each of
    # its patches once, the canvas each of its patches once, from the crops after the view, the
    # overlap between neighbours taken from one of them; edges padded with -1.
    from patcher.samples.images import overlapping_crops

    config = _molmo2_at_the_real_crop_size()
    layout = layout_for(config.model_type)
    patch, crop = config.vision_config.patch_size, config.vision_config.image_size[0]
    size = overlapping_crops._canvas(config, tiles)
    pixels = layout.pixels(config, [size], torch.Generator().manual_seed(0), torch.float32, set(), 1)
    per_crop = (crop // patch) ** 2
    assert pixels["image_num_crops"].tolist() == [1 + tiles[0] * tiles[1]]
    assert pixels["pixel_values"].shape == (1 + tiles[0] * tiles[1], per_crop, 3 * patch * patch)
    low_rows, low_columns, high_rows, high_columns = pixels["image_grids"][0].tolist()
    pooling = pixels["image_token_pooling"]
    assert pooling.shape == (low_rows * low_columns + high_rows * high_columns, 4)
    low, high = pooling[: low_rows * low_columns], pooling[low_rows * low_columns:]
    assert sorted(low[low >= 0].tolist()) == list(range(per_crop))
    canvas_patches = high[high >= 0]
    assert len(canvas_patches) == len(set(canvas_patches.tolist())) == (size[0] // patch) * (size[1] // patch)
    assert canvas_patches.min() >= per_crop and canvas_patches.max() < (1 + tiles[0] * tiles[1]) * per_crop
    assert layout.config_count(config, size) == len(pooling)
    with pytest.raises(ValueError, match="canvas of whole overlapping crops"):
        layout.pixels(config, [(size[0] + patch, size[1])], torch.Generator().manual_seed(0), torch.float32, set(), 1)


def test_unit_gain_reaches_only_projectors_with_a_gated_mlp():
    from patcher.samples.images.modality import unit_gain_gated_projectors

    class GatedMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj = nn.Linear(64, 256), nn.Linear(64, 256), nn.Linear(256, 64)

    def model_with(projector):
        model = nn.Module()
        model.model = nn.Module()
        model.model.multi_modal_projector = projector
        model.model.language_model = GatedMLP()  # a gated MLP elsewhere keeps its init
        for parameter in model.parameters():
            nn.init.normal_(parameter, std=0.02)
        return model

    gated = model_with(nn.Sequential(nn.Linear(128, 64), GatedMLP()))
    plain = model_with(nn.Sequential(nn.Linear(128, 64), nn.GELU(), nn.Linear(64, 64)))
    before = {id(model): {name: value.clone() for name, value in model.state_dict().items()} for model in (gated, plain)}
    for model in (gated, plain):
        unit_gain_gated_projectors(model, seed=0)
    for name, weight in gated.model.multi_modal_projector.named_parameters():
        if name.endswith("weight"):
            assert weight.std().item() == pytest.approx(weight.shape[1] ** -0.5, rel=0.1), name
    for model in (gated, plain):
        for name, value in model.state_dict().items():
            if not name.startswith("model.multi_modal_projector") or model is plain or not name.endswith("weight"):
                assert torch.equal(value, before[id(model)][name]), name


def test_the_fixed_size_of_stacked_towers_is_the_first_towers():
    from patcher.samples.images.square import pixel_tower_config

    config, _ = tiny(DETAIL_CASES["square"])
    sam = config.vision_config.sam_config
    assert pixel_tower_config(config) is sam  # not encoder_config: CLIP takes SAM's features, not pixels
    assert layout_for(config.model_type).default_size(config) == (sam.image_size, sam.image_size)
    llava = shrink_config(transformers.LlavaConfig)
    assert pixel_tower_config(llava) is llava.vision_config


# Square-layout architectures whose image sample needed more than the tower's image_size: a
# projector keyed by patch counts (Aria), a pixel-shuffle adapter (Llama 4), a second high-resolution
# tower (DeepSeek-VL hybrid), the vision tower inside the encoder's config (T5Gemma2, encoder-decoder),
# a convolutional pyramid that states no image size (Florence-2's DaViT), SAM then a learned-query
# encoder and a view separator after each image (DeepSeek-OCR-2, the global view).
SQUARE_CASES = ["AriaForConditionalGeneration", "Llama4ForConditionalGeneration",
                "DeepseekVLHybridForConditionalGeneration", "T5Gemma2ForConditionalGeneration",
                "Florence2ForConditionalGeneration", "DeepseekOcr2ForConditionalGeneration"]


@pytest.mark.parametrize("name", SQUARE_CASES)
@pytest.mark.parametrize("batch_size,seq_len,left_padding,num_images", [(1, 4, 0, 1), (2, 7, 2, 2)])
def test_square_sample_has_one_token_per_feature_and_its_pixels_reach_the_logits(name, batch_size, seq_len,
                                                                                left_padding, num_images):
    config, model = tiny(name)
    sample = multimodal_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                               num_images=num_images, generator=torch.Generator().manual_seed(seq_len), model=model)
    pixels = sample["pixel_values"]
    assert pixels.shape[0] == batch_size * num_images and pixels.shape[1] == 3
    per_image = features_per_image(model, {k: v for k, v in sample.items() if "pixel" in k}, batch_size * num_images)
    assert (sample["input_ids"] == image_token_id(config)).sum(-1).tolist() == [num_images * per_image] * batch_size
    with torch.no_grad():
        first = model(**sample).logits  # the model's own token/feature count check passes
        second = model(**with_other_pixels(sample, seed=3)).logits
    assert tensor_diff(first, second) > MIN_INFLUENCE


def test_a_vision_tower_in_the_encoder_config_is_found_and_the_decoder_gets_text():
    from patcher.samples.sweep import special_tokens
    from patcher.samples.images.layout import vision_config, vision_owner

    config, model = tiny("T5Gemma2ForConditionalGeneration")
    assert getattr(config, "vision_config", None) is None
    assert vision_owner(config) is config.encoder and vision_config(config) is config.encoder.vision_config
    sample = multimodal_sample(config, batch_size=2, seq_len=6, generator=torch.Generator().manual_seed(0), model=model)
    decoder = sample["decoder_input_ids"]
    assert decoder.shape == (2, 3)
    assert not torch.isin(decoder, torch.tensor(sorted(special_tokens(config)))).any()
    # without a model, the count stated next to the vision tower (the encoder's mm_tokens_per_image)
    without = multimodal_sample(config, batch_size=2, seq_len=6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(without["input_ids"], sample["input_ids"])


def test_the_high_resolution_tower_gets_pixels_at_its_own_size():
    config, _ = tiny("DeepseekVLHybridForConditionalGeneration")
    sample = multimodal_sample(config, batch_size=2, seq_len=4, generator=torch.Generator().manual_seed(0))
    low, high = config.vision_config.image_size, config.high_res_vision_config.image_size
    assert sample["pixel_values"].shape == (2, 3, low, low)
    assert sample["high_res_pixel_values"].shape == (2, 3, high, high)


def test_a_config_without_any_vision_config_names_the_cause():
    from patcher.samples.images.layout import vision_config

    with pytest.raises(ValueError, match="no vision_config"):
        vision_config(transformers.LlamaConfig())


def test_a_config_without_an_image_token_names_the_cause():
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="no image_token_id"):
        image_token_id(SimpleNamespace(model_type="blip-2", image_token_index=None))


# -- the synthetic layout against the real image processors -----------------------------------------
# Each family's sample is checked against the image processor of one of its model types, built from
# its defaults (no hub download) with the shrunk config's sizes where the two must agree, and run on a
# random image; the sample is then drawn at the size the processor resized the image to. transformers'
# PIL backends run without torchvision; a processor that has only the torchvision backend skips,
# naming the class. One image in one text row on both sides: how several images are batched or packed
# (padded to the largest image, packed into one row) is the processor's choice per batch and differs
# from ours by design, so what is compared is the layout of one image.

TEXT_INPUTS = {"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids", "image_embeds_position_mask",
               "decoder_input_ids"}


def _random_image(height: int, width: int):
    image = pytest.importorskip("PIL.Image")
    import numpy as np

    return image.fromarray(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8))


def _shrunk(name: str):
    require_classes(name)
    return shrink_config(getattr(transformers, name).config_class)


def _torchvision_only(class_name: str):
    pytest.importorskip("torchvision", reason=f"{class_name} has no PIL backend in transformers "
                                              f"{transformers.__version__}: it needs torchvision")


def _processor_inputs(processed, config, passthrough=()) -> dict:
    """The processor's outputs that the model's forward takes; the rest (patch counts, grids of the
    crops) are the processor's own notes for laying out the text. ``passthrough``: outputs that are
    no pixel input although forward has an argument of that name (handed back unused, or replaced
    by the text's)."""
    accepted = forward_inputs(config)
    return {name: value for name, value in processed.items() if name in accepted and name not in passthrough}


def _synthetic_inputs(family: str, config, size, model=None) -> dict:
    # the family's own sample, not a zoo builder that replaces it for the model type
    assert multimodal_builder(config.model_type).layout.name == family
    sample = multimodal_sample(config, batch_size=1, seq_len=2, image_size=size,
                               generator=torch.Generator().manual_seed(0), model=model)
    # tensors only: a flag such as GIT's interpolate_pos_encoding is no pixel input
    return {name: value for name, value in sample.items()
            if name not in TEXT_INPUTS and isinstance(value, torch.Tensor)}


def _assert_same_layout(ours: dict, theirs: dict) -> None:
    """The same input names, dtypes and shapes; inputs that are not pixels (grids, sizes, masks,
    positions: every integer or bool input) the same values."""
    assert sorted(ours) == sorted(theirs)
    for name, expected in theirs.items():
        got = ours[name]
        assert got.dtype == expected.dtype, (name, got.dtype, expected.dtype)
        assert got.shape == expected.shape, (name, tuple(got.shape), tuple(expected.shape))
        if not expected.is_floating_point():
            assert torch.equal(got, expected), name


def _without_padding(ours: dict, theirs: dict, real: int) -> tuple[dict, dict]:
    """Inputs padded along dim 1 to a patch budget: the processor pads to its budget, ours by a
    little or not at all (by design: the padding count is the processor's per batch); past the
    ``real`` rows both must hold padding, the processor's one padding row. Returns both cut to the
    ``real`` rows."""
    for name, expected in theirs.items():
        pad, our_pad = expected[:, real:], ours[name][:, real:]
        assert pad.shape[1] > 0 and ours[name].shape[1] >= real, name
        assert (pad == pad[:, :1]).all() and (our_pad == pad[:, :1]).all(), name
    cut = lambda inputs: {name: value[:, :real] for name, value in inputs.items()}  # noqa: E731
    return cut(ours), cut(theirs)


@pytest.mark.parametrize("name,processor_class", [("PaliGemmaForConditionalGeneration", "SiglipImageProcessorPil"),
                                                  ("VipLlavaForConditionalGeneration", "CLIPImageProcessorPil")])
def test_square_layout_matches_the_image_processor(name, processor_class):
    config = _shrunk(name)
    side = layout_for(config.model_type).default_size(config)[0]
    size = {"height": side, "width": side} if processor_class.startswith("Siglip") else {"shortest_edge": side}
    processor = getattr(transformers, processor_class)(size=size, crop_size={"height": side, "width": side})
    processed = processor(images=[_random_image(2 * side + 3, side + 5)], return_tensors="pt")
    theirs = _processor_inputs(processed, config)
    _assert_same_layout(_synthetic_inputs("square", config, tuple(theirs["pixel_values"].shape[-2:])), theirs)


def test_square_layout_matches_deepseek_ocr2_global_view():
    # stacked towers (SAM, then a query encoder): the pixels enter SAM at its image_size
    config = _shrunk("DeepseekOcr2ForConditionalGeneration")
    side = layout_for(config.model_type).default_size(config)[0]
    assert side == config.vision_config.sam_config.image_size
    processor = transformers.DeepseekOcr2ImageProcessorPil(size={"height": side, "width": side})
    # within the processor's tile size: no local crops, the global view alone (resized, padded square)
    processed = processor(images=[_random_image(side + 5, 2 * side)], return_tensors="pt")
    assert processed["num_local_patches"].tolist() == [0] and "pixel_values_local" not in processed
    # a count of no crops: the model reads it only with pixel_values_local, as it reads None
    theirs = _processor_inputs(processed, config, passthrough=("num_local_patches",))
    _assert_same_layout(_synthetic_inputs("square", config, tuple(theirs["pixel_values"].shape[-2:])), theirs)


def test_pixtral_layout_matches_the_image_processor():
    config = _shrunk("Mistral3ForConditionalGeneration")
    processor = transformers.PixtralImageProcessorPil(patch_size=config.vision_config.patch_size)
    theirs = _processor_inputs(processor(images=[_random_image(40, 70)], return_tensors="pt"), config)
    (size,) = theirs["image_sizes"].tolist()  # rounded up to whole patches
    _assert_same_layout(_synthetic_inputs("pixtral", config, tuple(size)), theirs)


@pytest.mark.parametrize("name,processor_class", [("Qwen3VLForConditionalGeneration", "Qwen2VLImageProcessorPil"),
                                                  ("Glm4vForConditionalGeneration", "Glm4vImageProcessorPil"),
                                                  ("Qwen4ExpForConditionalGeneration", "Qwen2VLImageProcessorPil"),
                                                  ("Dots3NoteForConditionalGeneration", "Qwen2VLImageProcessorPil"),
                                                  ("CohereCompassForConditionalGeneration",
                                                   "CohereCompassImageProcessorPil")])
def test_qwen_vl_layout_matches_the_image_processor(name, processor_class):
    config = _shrunk(name)
    vision = config.vision_config
    # Dots3-Note's vision config states no temporal patch: its patch embedding is a 2-D convolution
    # of one frame, which a processor must feed with temporal_patch_size=1
    processor = getattr(transformers, processor_class)(patch_size=vision.patch_size,
                                                       merge_size=vision.spatial_merge_size,
                                                       temporal_patch_size=getattr(vision, "temporal_patch_size", 1))
    theirs = _processor_inputs(processor(images=[_random_image(50, 90)], return_tensors="pt"), config)
    (_, rows, columns), = theirs["image_grid_thw"].tolist()  # the processor's smart resize picks the size
    size = (rows * vision.patch_size, columns * vision.patch_size)
    _assert_same_layout(_synthetic_inputs("qwen_vl", config, size), theirs)


def test_merged_patches_layout_matches_the_image_processor():
    _torchvision_only("Inkling2ImageProcessor")
    config = _shrunk("Inkling2ForConditionalGeneration")
    step = config.vision_config.patch_size * config.vision_config.spatial_merge_size
    # size: the block of one image token; the processor pads the image to whole blocks
    processor = transformers.Inkling2ImageProcessor(size={"height": step, "width": step})
    theirs = _processor_inputs(processor(images=[_random_image(90, 130)], return_tensors="pt"), config)
    (_, rows, columns), = theirs["image_grid_thw"].tolist()  # in merged patches (image tokens)
    _assert_same_layout(_synthetic_inputs("merged_patches", config, (rows * step, columns * step)), theirs)


def test_temporal_patches_layout_matches_the_image_processor():
    _torchvision_only("InklingImageProcessor")
    config = _shrunk("InklingForConditionalGeneration")
    patch = config.vision_config.patch_size
    processor = transformers.InklingImageProcessor(size={"height": patch, "width": patch})
    # a ragged size: the processor pads the partial patches and keeps the image's size
    size = (2 * patch + 7, 3 * patch - 5)
    theirs = _processor_inputs(processor(images=[_random_image(*size)], return_tensors="pt"), config)
    _assert_same_layout(_synthetic_inputs("temporal_patches", config, size), theirs)


def _molmo2_at_the_real_crop_size():
    """The shrunk Molmo2 config with the class's crop size: the shrunk tower's crop of a few patches
    has no room for the processor's overlap margins (the layout takes none there)."""
    config = _shrunk("Molmo2ForConditionalGeneration")
    config.vision_config.image_size = list(transformers.Molmo2VisionConfig().image_size)
    return config


def test_overlapping_crops_layout_matches_the_image_processor():
    _torchvision_only("Molmo2ImageProcessor")
    from transformers.models.molmo2.image_processing_molmo2 import compute_crop_geometry

    config = _molmo2_at_the_real_crop_size()
    patch, crop = config.vision_config.patch_size, config.vision_config.image_size[0]
    processor = transformers.Molmo2ImageProcessor(patch_size=patch, size={"height": crop, "width": crop})
    # an image the processor tiles 2 x 3: overlap margins between crops in both directions
    height, width = 2 * crop - 150, 3 * crop - 430
    theirs = _processor_inputs(processor(images=[_random_image(height, width)], return_tensors="pt"), config)
    *tiles, canvas_height, canvas_width = compute_crop_geometry(height, width, processor.max_crops,
                                                                processor.overlap_margins, crop, patch)
    assert tiles == [2, 3]
    _assert_same_layout(_synthetic_inputs("overlapping_crops", config, (canvas_height, canvas_width)), theirs)


def test_idefics_layout_matches_the_image_processor():
    config = _shrunk("Idefics3ForConditionalGeneration")
    side = config.vision_config.image_size
    # one tile at the tower's size: no splitting into sub-images
    try:
        processor = transformers.Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": side},
                                                           max_image_size={"longest_edge": side})
    except ImportError as error:  # transformers 5.10's "PIL" backend needs torchvision all the same
        if "Torchvision" not in str(error):
            raise
        pytest.skip(f"Idefics3ImageProcessorPil needs torchvision in transformers {transformers.__version__}")
    theirs = _processor_inputs(processor(images=[_random_image(side + 9, side + 9)], return_tensors="pt"), config)
    _assert_same_layout(_synthetic_inputs("idefics", config, tuple(theirs["pixel_values"].shape[-2:])), theirs)


@pytest.mark.parametrize("name", [LAYOUT_CASES["anyres"], "Granite4VisionForConditionalGeneration"])
def test_anyres_layout_matches_the_image_processor(name):
    # Granite 4 Vision's processor is LLaVA-NeXT's (transformers' auto mapping)
    config, model = tiny(name)  # the token count of a tiled image needs the model
    side = config.vision_config.image_size
    processor = transformers.LlavaNextImageProcessorPil(image_grid_pinpoints=config.image_grid_pinpoints,
                                                        size={"shortest_edge": side},
                                                        crop_size={"height": side, "width": side})
    theirs = _processor_inputs(processor(images=[_random_image(side + 2, 2 * side - 3)], return_tensors="pt"), config)
    (size,) = theirs["image_sizes"].tolist()  # the original size: the model unpads its features by it
    _assert_same_layout(_synthetic_inputs("anyres", config, tuple(size), model=model), theirs)


def test_naflex_layout_matches_the_image_processor():
    _torchvision_only("Lfm2VlImageProcessor")
    config = _shrunk("Lfm2VlForConditionalGeneration")
    processor = transformers.Lfm2VlImageProcessor(do_image_splitting=False, downsample_factor=config.downsample_factor,
                                                  encoder_patch_size=config.vision_config.patch_size)
    theirs = _processor_inputs(processor(images=[_random_image(70, 100)], return_tensors="pt"), config)
    (rows, columns), = theirs["spatial_shapes"].tolist()
    patch = config.vision_config.patch_size
    ours = _synthetic_inputs("naflex", config, (rows * patch, columns * patch))
    # the patches and their mask are padded to the processor's patch budget; spatial_shapes is not
    shapes = {"ours": ours.pop("spatial_shapes", None), "theirs": theirs.pop("spatial_shapes")}
    ours, theirs = _without_padding(ours, theirs, rows * columns)
    _assert_same_layout({**ours, "spatial_shapes": shapes["ours"]}, {**theirs, "spatial_shapes": shapes["theirs"]})


def test_navit_packed_layout_matches_the_image_processor():
    config = _shrunk("MiniCPMV4_7ForConditionalGeneration")
    from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil

    patch = config.vision_config.patch_size
    # one crop (the thumbnail, no detail slices): the layout's images
    processor = MiniCPMV4_6ImageProcessorPil(patch_size=patch, downsample_mode=config.downsample_mode, slice_mode=False)
    theirs = _processor_inputs(processor(images=[_random_image(60, 90)], return_tensors="pt"), config)
    (rows, columns), = theirs["target_sizes"].tolist()  # the processor resizes to its scale resolution
    _assert_same_layout(_synthetic_inputs("navit_packed", config, (rows * patch, columns * patch)), theirs)


def test_flat_patches_layout_matches_the_processor():
    config = _shrunk("FuyuForCausalLM")
    patch = config.patch_size
    image_processor = transformers.FuyuImageProcessorPil(patch_size={"height": patch, "width": patch})
    processed = image_processor(images=[_random_image(2 * patch - 7, 3 * patch - 1)], return_tensors="np")
    # The image processor pads to its canvas; FuyuProcessor._process_images then cuts the image's whole
    # patches out of it and patchifies them: its steps, here (the method itself hands torch tensors to
    # patchify_image, which in the PIL backend takes numpy arrays only).
    height, width = int(processed["image_unpadded_heights"][0][0]), int(processed["image_unpadded_widths"][0][0])
    rounded = (-(-height // patch) * patch, -(-width // patch) * patch)
    canvas = processed["images"][0][0]
    patches = image_processor.patchify_image(canvas[None, :, : rounded[0], : rounded[1]])
    theirs = {"pixel_values": torch.from_numpy(patches)}
    _assert_same_layout(_synthetic_inputs("flat_patches", config, rounded), theirs)


def test_prefix_layout_matches_the_image_processor():
    config = _shrunk("GitForCausalLM")
    side = config.vision_config.image_size
    processor = transformers.CLIPImageProcessorPil(size={"shortest_edge": side},
                                                   crop_size={"height": side, "width": side})
    theirs = _processor_inputs(processor(images=[_random_image(side + 7, 2 * side)], return_tensors="pt"), config)
    _assert_same_layout(_synthetic_inputs("prefix", config, tuple(theirs["pixel_values"].shape[-2:])), theirs)


def test_patch_positions_layout_matches_the_image_processor():
    config = _shrunk("Gemma4ForConditionalGeneration")
    vision = config.vision_config
    # max_soft_tokens: the smallest budget the processor takes, to keep the padded patches few
    processor = transformers.Gemma4ImageProcessorPil(patch_size=vision.patch_size,
                                                     pooling_kernel_size=vision.pooling_kernel_size, max_soft_tokens=70)
    theirs = _processor_inputs(processor(images=[_random_image(100, 150)], return_tensors="pt"), config)
    positions = theirs["image_position_ids"][0]
    real = int(positions.ne(-1).all(-1).sum())
    columns, rows = (positions[:real].max(0).values + 1).tolist()  # (x, y)
    ours = _synthetic_inputs("patch_positions", config, (rows * vision.patch_size, columns * vision.patch_size))
    _assert_same_layout(*_without_padding(ours, theirs, real))


def test_patch_positions_merged_in_the_processor_match_the_image_processor():
    _torchvision_only("Gemma4UnifiedImageProcessor")
    config = _shrunk("Gemma4UnifiedForConditionalGeneration")
    vision = config.vision_config
    processor = transformers.Gemma4UnifiedImageProcessor(patch_size=vision.patch_size, max_soft_tokens=70,
                                                         pooling_kernel_size=vision.pooling_kernel_size)
    theirs = _processor_inputs(processor(images=[_random_image(100, 150)], return_tensors="pt"), config)
    positions = theirs["image_position_ids"][0]
    real = int(positions.ne(-1).all(-1).sum())
    columns, rows = (positions[:real].max(0).values + 1).tolist()
    patch = config.vision_config.model_patch_size
    ours = _synthetic_inputs("patch_positions", config, (rows * patch, columns * patch))
    _assert_same_layout(*_without_padding(ours, theirs, real))


def test_pix2struct_layout_matches_the_image_processor():
    config = _shrunk("Kosmos2_5ForConditionalGeneration")
    patch = layout_for(config.model_type).default_size(config)[0] // 2
    processor = transformers.Kosmos2_5ImageProcessorPil(patch_size={"height": patch, "width": patch}, max_patches=8)
    processed = processor(images=[_random_image(40, 50)], return_tensors="pt")
    # width / height (the original size) go into forward only to be handed back in its output
    # (the image attention_mask is replaced by the text's in Kosmos2_5Processor)
    theirs = _processor_inputs(processed, config, passthrough=("width", "height", "attention_mask"))
    rows, columns = processed["rows"].item(), processed["cols"].item()  # the grid that fits max_patches
    ours = _synthetic_inputs("pix2struct", config, (rows * patch, columns * patch))
    ours, theirs = _without_padding(ours, theirs, rows * columns)
    _assert_same_layout(ours, theirs)
    # the 1-based row / column ids that open each patch row
    assert torch.equal(ours["flattened_patches"][..., :2], theirs["flattened_patches"][..., :2])


# -- layouts the generic tests above cannot state: no token id, merged patches, no image tokens -----

def test_gemma4_unified_takes_processor_merged_patches_one_token_each():
    # Gemma 4 Unified has no tower to pool: the processor merges pooling_kernel_size**2 patches into one
    # model_patch_size-wide patch, and each becomes one image token (the config count says so too).
    config, model = tiny("Gemma4UnifiedForConditionalGeneration")
    layout = layout_for(config.model_type)
    assert layout.name == "patch_positions"
    vision = config.vision_config
    for size in (layout.default_size(config), layout.other_size(config)):
        sample = multimodal_sample(config, batch_size=2, seq_len=4, generator=torch.Generator().manual_seed(0),
                                   model=model, image_size=size)
        real = (size[0] // vision.model_patch_size) * (size[1] // vision.model_patch_size)
        assert sample["pixel_values"].shape[-1] == 3 * vision.model_patch_size ** 2
        assert (sample["image_position_ids"][0] != -1).all(-1).sum() == real
        assert (sample["input_ids"] == config.image_token_id).sum(-1).tolist() == [real, real]
        assert layout.config_count(config, size) == real
        with torch.no_grad():
            first, second = model(**sample).logits, model(**with_other_pixels(sample, seed=3)).logits
        assert tensor_diff(first, second) > MIN_INFLUENCE


def test_patch_positions_are_x_y_row_major_with_padding_at_minus_one():
    config, _ = tiny("Gemma4ForConditionalGeneration")
    layout = layout_for(config.model_type)
    patch, pool = config.vision_config.patch_size, config.vision_config.pooling_kernel_size
    height, width = 2 * patch * pool, 3 * patch * pool
    pixels = layout.pixels(config, [(height, width)], torch.Generator().manual_seed(0), torch.float32, set(), 1)
    positions = pixels["image_position_ids"][0]
    real = (height // patch) * (width // patch)
    assert positions[:real, 0].max() == width // patch - 1 and positions[:real, 1].max() == height // patch - 1
    assert positions[1].tolist() == [1, 0]  # x moves first
    assert (positions[real:] == -1).all() and len(positions) == real + pool**2
    assert (pixels["pixel_values"][0, real:] == 0).all()


@pytest.mark.parametrize("second", [False, True])
def test_kosmos2_5_sample_marks_the_latent_queries_and_numbers_the_patches(second):
    config, model = tiny("Kosmos2_5ForConditionalGeneration")
    layout = layout_for(config.model_type)
    assert layout.name == "pix2struct"
    sizes = second_layout(config) if second else {}
    assert "num_images" not in sizes  # one image per row: the second layout is another patch grid
    sample = multimodal_sample(config, batch_size=2, seq_len=5, left_padding=1,
                               generator=torch.Generator().manual_seed(0), model=model, **sizes)
    mask = sample["image_embeds_position_mask"]
    assert mask.sum(-1).tolist() == [config.latent_query_num] * 2
    assert torch.equal(mask.bool(), sample["input_ids"] == config.text_config.bos_token_id)
    size = sizes.get("image_size", layout.default_size(config))
    patch = int((config.vision_config.patch_embed_hidden_size // 3) ** 0.5)
    rows, columns = size[0] // patch, size[1] // patch
    patches = sample["flattened_patches"]
    assert patches.shape == (2, rows * columns + columns, 2 + config.vision_config.patch_embed_hidden_size)
    ids = patches[0, : rows * columns, :2].long()
    assert ids[0].tolist() == [1, 1] and ids[1].tolist() == [1, 2] and ids[-1].tolist() == [rows, columns]
    assert (patches[:, rows * columns:] == 0).all()
    with torch.no_grad():
        logits = model(**sample).logits
    assert logits.shape[:2] == sample["input_ids"].shape


def test_kosmos2_5_other_pixels_keep_the_grid_and_reach_the_logits():
    config, model = tiny("Kosmos2_5ForConditionalGeneration")
    sample = multimodal_sample(config, batch_size=2, seq_len=5, generator=torch.Generator().manual_seed(1), model=model)
    other = with_other_pixels(sample, seed=3, layout=image_layout(config))
    before, after = sample["flattened_patches"], other["flattened_patches"]
    assert torch.equal(before[..., :2], after[..., :2])  # row/column ids
    real = before[..., :2].ne(0).all(-1)
    assert (after[~real] == 0).all() and not torch.equal(before[real], after[real])
    with torch.no_grad():
        first, second = model(**sample).logits, model(**other).logits
    assert tensor_diff(first, second) > MIN_INFLUENCE


def test_git_puts_one_image_before_each_row_and_no_image_tokens_in_the_text():
    config, model = tiny("GitForCausalLM")
    layout = layout_for(config.model_type)
    assert layout.prefix and "num_images" not in second_layout(config)
    image_size = config.vision_config.image_size
    for size in (layout.default_size(config), layout.other_size(config)):
        sample = multimodal_sample(config, batch_size=2, seq_len=6, left_padding=2,
                                   generator=torch.Generator().manual_seed(0), model=model, image_size=size)
        assert sample["input_ids"].shape == (2, 6)  # the text alone
        assert sample["pixel_values"].shape[0] == 2 and tuple(sample["pixel_values"].shape[-2:]) == size
        with torch.no_grad():
            logits = model(**sample).logits
        patches = (size[0] // config.vision_config.patch_size) * (size[1] // config.vision_config.patch_size)
        assert logits.shape[1] == 6 + patches + 1  # the model prepends the image features (and CLS)
    assert layout.default_size(config) == (image_size, image_size)  # the native size is one of the two
    with pytest.raises(ValueError, match="one image"):
        multimodal_sample(config, batch_size=1, seq_len=4, num_images=2, model=model)


def test_position_mask_layout_matches_the_image_processor():
    config = _shrunk("Kosmos2ForConditionalGeneration")
    side = config.vision_config.image_size
    processor = transformers.CLIPImageProcessorPil(size={"shortest_edge": side},
                                                   crop_size={"height": side, "width": side})
    theirs = _processor_inputs(processor(images=[_random_image(side + 7, 2 * side)], return_tensors="pt"), config)
    _assert_same_layout(_synthetic_inputs("position_mask", config, tuple(theirs["pixel_values"].shape[-2:])), theirs)


@pytest.mark.parametrize("num_images", [1, 2])
def test_kosmos2_features_go_exactly_where_the_position_mask_says(num_images):
    # Kosmos-2's forward cannot run without images; its features replace the embeddings where
    # image_embeds_position_mask is 1: latent_query_num runs of BOS per image, never in the text.
    config, model = tiny("Kosmos2ForConditionalGeneration")
    assert layout_for(config.model_type).name == "position_mask"
    sample = multimodal_sample(config, batch_size=2, seq_len=6, left_padding=1, num_images=num_images,
                               generator=torch.Generator().manual_seed(0), model=model)
    mask = sample["image_embeds_position_mask"]
    assert mask.sum(-1).tolist() == [num_images * config.latent_query_num] * 2
    assert torch.equal(mask.bool(), sample["input_ids"] == config.text_config.bos_token_id)
    with torch.no_grad():
        first, second = model(**sample).logits, model(**with_other_pixels(sample, seed=3)).logits
    assert tensor_diff(first, second) > MIN_INFLUENCE


@pytest.mark.parametrize("name", ["InstructBlipForConditionalGeneration", "Blip2ForConditionalGeneration"])
def test_blip2_family_gets_a_placeholder_and_instructblip_its_qformer_instruction(name):
    # The classes leave image_token_index None (checkpoints set it from their tokenizer): the shrunk
    # config gets a free id, and num_query_tokens image tokens per image go in the text.
    config, model = tiny(name)
    assert config.image_token_index is not None
    sample = multimodal_sample(config, batch_size=2, seq_len=5, num_images=2, generator=torch.Generator().manual_seed(0),
                               model=model)
    assert (sample["input_ids"] == config.image_token_index).sum(-1).tolist() == [2 * config.num_query_tokens] * 2
    assert ("qformer_input_ids" in sample) == name.startswith("Instruct")
    if "qformer_input_ids" in sample:
        assert sample["qformer_input_ids"].shape[0] == 4  # one instruction per image
        assert int(sample["qformer_input_ids"].max()) < config.qformer_config.vocab_size
    with torch.no_grad():
        first, second = model(**sample).logits, model(**with_other_pixels(sample, seed=3)).logits
    assert tensor_diff(first, second) > MIN_INFLUENCE


# -- images the model tokenizes itself, and the deepstack families -----------------------------------

def test_vq_tokens_layout_matches_chameleons_image_processor():
    config = _shrunk("ChameleonForConditionalGeneration")
    side = layout_for(config.model_type).default_size(config)[0]
    processor = transformers.ChameleonImageProcessorPil(size={"shortest_edge": side},
                                                        crop_size={"height": side, "width": side})
    theirs = _processor_inputs(processor(images=[_random_image(side + 9, 2 * side)], return_tensors="pt"), config)
    _assert_same_layout(_synthetic_inputs("vq_tokens", config, tuple(theirs["pixel_values"].shape[-2:])), theirs)


def test_vq_tokens_layout_matches_emu3s_image_processor():
    from patcher.samples.images.vq_tokens import factor

    config = _shrunk("Emu3ForConditionalGeneration")
    step = factor(config)
    # the tiny VQ-VAE's downsampling, and pixel bounds of a few codes (the processor's: 512**2 to 1024**2)
    processor = transformers.Emu3ImageProcessor(spatial_factor=step, min_pixels=4 * step**2, max_pixels=12 * step**2)
    theirs = _processor_inputs(processor(images=[_random_image(5 * step, 9 * step - 3)], return_tensors="pt"), config)
    (size,) = theirs["image_sizes"].tolist()  # the processor's smart resize picks the size
    _assert_same_layout(_synthetic_inputs("vq_tokens", config, tuple(size)), theirs)


NEW_FAMILY_CASES = {"ChameleonForConditionalGeneration": "vq_tokens", "Emu3ForConditionalGeneration": "vq_tokens",
                    "Granite4VisionForConditionalGeneration": "anyres",
                    "CohereCompassForConditionalGeneration": "qwen_vl"}


@pytest.mark.parametrize("name", sorted(NEW_FAMILY_CASES))
@pytest.mark.parametrize("second", [False, True])
def test_vq_and_deepstack_families_take_their_sample_and_see_its_pixels(name, second):
    # Chameleon and Emu3 encode the pixels with their VQ-VAE into tokens of their own vocabulary (Emu3
    # ends each row of codes with a line-end token); Granite 4 Vision hands its image features to the
    # decoder only as deepstack_features (no pooler_output to count), Cohere Compass as Qwen3-VL does
    config, model = tiny(name)
    layout = layout_for(config.model_type)
    assert layout.name == NEW_FAMILY_CASES[name] and multimodal_builder(config.model_type).layout is layout
    sizes = second_layout(config) if second else {}
    num_images = sizes.get("num_images", 1)
    sample = multimodal_sample(config, batch_size=2, seq_len=5, left_padding=1, generator=torch.Generator().manual_seed(1),
                               model=model, **sizes)
    pixels = {key: value for key, value in sample.items() if key not in TEXT_INPUTS}
    per_image = features_per_image(model, pixels, 2 * num_images)
    assert (sample["input_ids"] == image_token_id(config)).sum(-1).tolist() == [num_images * per_image] * 2
    if layout.name == "vq_tokens":  # the count from the config alone says the same
        size = sizes.get("image_size", layout.default_size(config))
        assert per_image == layout.config_count(config, size)
    with torch.no_grad():
        first, other = model(**sample).logits, model(**with_other_pixels(sample, seed=3)).logits
    assert first.shape[:2] == sample["input_ids"].shape
    assert tensor_diff(first, other) > MIN_INFLUENCE


def test_vq_tokens_refuses_sizes_the_vq_vae_cannot_encode():
    from patcher.samples.images.vq_tokens import factor

    config, _ = tiny("Emu3ForConditionalGeneration")
    step = factor(config)
    with pytest.raises(ValueError, match="multiples of the VQ-VAE's downsampling"):
        layout_for(config.model_type).pixels(config, [(step + 1, step)], torch.Generator().manual_seed(0),
                                             torch.float32, set(), 1)
