"""Processor-free image samples (patcher.images): the layout of each family, image tokens counted by
the model's own vision path, and the eager model accepting the sample on any drawn layout."""

from __future__ import annotations

import pytest
import torch
import transformers
from hypothesis import given
from hypothesis import strategies as st

from patcher.coverage.check import MIN_IMAGE_INFLUENCE, _build, tensor_diff, with_other_pixels
from patcher.coverage.shrink import shrink_config
from patcher.images import layout_for, second_layout
from patcher.images.tokens import features_per_image, image_token_id
from patcher.samples import multimodal_builder, multimodal_sample

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
    if name not in _MODELS:
        cls = getattr(transformers, name)
        config = shrink_config(cls.config_class)
        _MODELS[name] = (config, _build(cls, config, seed=0))
    return _MODELS[name]


def test_every_family_layout_is_registered_without_the_zoo_winning_over_it_elsewhere():
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    for layout_name, name in LAYOUT_CASES.items():
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
    assert tensor_diff(first, second) > MIN_IMAGE_INFLUENCE


def test_without_a_model_the_config_count_matches_the_model_count_where_the_config_can_tell():
    cases = [LAYOUT_CASES[name] for name in ("qwen_vl", "pixtral", "naflex", "idefics", "merged_patches", "navit_packed", "flat_patches", "patch_positions")]
    cases += [DETAIL_CASES[name] for name in ("idefics", "qwen_vl")]  # Granite's scale_factor sits in the tower
    for layout_name in cases:
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
    assert tensor_diff(first, second) > MIN_IMAGE_INFLUENCE


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


def test_the_fixed_size_of_stacked_towers_is_the_first_towers():
    from patcher.images.square import pixel_tower_config

    config, _ = tiny(DETAIL_CASES["square"])
    sam = config.vision_config.sam_config
    assert pixel_tower_config(config) is sam  # not encoder_config: CLIP takes SAM's features, not pixels
    assert layout_for(config.model_type).default_size(config) == (sam.image_size, sam.image_size)
    llava = shrink_config(transformers.LlavaConfig)
    assert pixel_tower_config(llava) is llava.vision_config


# Square-layout architectures whose image sample needed more than the tower's image_size: a
# projector keyed by patch counts (Aria), a pixel-shuffle adapter (Llama 4), a second high-resolution
# tower (DeepSeek-VL hybrid), the vision tower inside the encoder's config (T5Gemma2, encoder-decoder).
SQUARE_CASES = ["AriaForConditionalGeneration", "Llama4ForConditionalGeneration",
                "DeepseekVLHybridForConditionalGeneration", "T5Gemma2ForConditionalGeneration"]


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
    assert tensor_diff(first, second) > MIN_IMAGE_INFLUENCE


def test_a_vision_tower_in_the_encoder_config_is_found_and_the_decoder_gets_text():
    from patcher.coverage.samples import special_tokens
    from patcher.images.layout import vision_config, vision_owner

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
    from patcher.images.layout import vision_config

    with pytest.raises(ValueError, match="no vision_config"):
        vision_config(transformers.LlamaConfig())


def test_a_config_without_an_image_token_names_the_cause():
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="no image_token_id"):
        image_token_id(SimpleNamespace(model_type="blip-2", image_token_index=None))


# -- the synthetic layout against the real image processors (they need torchvision) ---------------

def _image(height: int, width: int):
    import numpy as np

    return (np.random.default_rng(0).random((height, width, 3)) * 255).astype("uint8")


def test_qwen_vl_layout_matches_the_image_processor():
    pytest.importorskip("torchvision")
    config = transformers.Qwen2VLConfig()
    size = layout_for("qwen2_vl").default_size(config)
    processed = transformers.Qwen2VLImageProcessor()(images=[_image(*size)], return_tensors="pt")
    ours = layout_for("qwen2_vl").pixels(config, [size], torch.Generator().manual_seed(0), torch.float32, set(), 1)
    assert ours["pixel_values"].shape == processed["pixel_values"].shape
    assert torch.equal(ours["image_grid_thw"], processed["image_grid_thw"])


def test_merged_patches_layout_matches_the_image_processor():
    pytest.importorskip("torchvision")
    config = transformers.Inkling2Config()
    layout = layout_for("inkling2")
    sizes = [layout.default_size(config), layout.other_size(config)]
    processed = transformers.Inkling2ImageProcessor()(images=[_image(*size) for size in sizes], return_tensors="pt")
    ours = layout.pixels(config, sizes, torch.Generator().manual_seed(0), torch.float32, set(), 1)
    assert ours["pixel_values"].shape == processed["pixel_values"].shape
    assert torch.equal(ours["image_grid_thw"], processed["image_grid_thw"])


def test_llava_next_layout_matches_the_image_processor():
    pytest.importorskip("torchvision")
    config = transformers.LlavaNextConfig()
    size = layout_for("llava_next").default_size(config)
    processed = transformers.LlavaNextImageProcessor()(images=[_image(*size)], return_tensors="pt")
    ours = layout_for("llava_next").pixels(config, [size], torch.Generator().manual_seed(0), torch.float32, set(), 1)
    assert ours["pixel_values"].shape == processed["pixel_values"].shape
    assert ours["image_sizes"].tolist() == processed["image_sizes"].tolist()


def test_navit_packed_layout_matches_the_image_processor():
    pytest.importorskip("torchvision")
    config = transformers.MiniCPMV4_6Config()
    patch = config.vision_config.patch_size
    processor = transformers.MiniCPMV4_6ImageProcessor(patch_size=patch, downsample_mode=config.downsample_mode,
                                                       slice_mode=False)
    processed = processor(images=[_image(300, 200)], return_tensors="pt")
    # the processor picks the size (it resizes to its scale resolution); one crop, no slices
    (rows, cols), = processed["target_sizes"].tolist()
    size = (rows * patch, cols * patch)
    ours = layout_for("minicpmv4_6").pixels(config, [size], torch.Generator().manual_seed(0), torch.float32, set(), 1)
    assert ours["pixel_values"].shape == processed["pixel_values"].shape
    assert ours["target_sizes"].dtype == processed["target_sizes"].dtype
    assert torch.equal(ours["target_sizes"], processed["target_sizes"])


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
        assert tensor_diff(first, second) > MIN_IMAGE_INFLUENCE


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
    from patcher.coverage.check import _layout

    config, model = tiny("Kosmos2_5ForConditionalGeneration")
    sample = multimodal_sample(config, batch_size=2, seq_len=5, generator=torch.Generator().manual_seed(1), model=model)
    other = with_other_pixels(sample, seed=3, layout=_layout(config))
    before, after = sample["flattened_patches"], other["flattened_patches"]
    assert torch.equal(before[..., :2], after[..., :2])  # row/column ids
    real = before[..., :2].ne(0).all(-1)
    assert (after[~real] == 0).all() and not torch.equal(before[real], after[real])
    with torch.no_grad():
        first, second = model(**sample).logits, model(**other).logits
    assert tensor_diff(first, second) > MIN_IMAGE_INFLUENCE


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
