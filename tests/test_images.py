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
    for layout_name in ("qwen_vl", "pixtral", "naflex", "idefics"):
        config, model = tiny(LAYOUT_CASES[layout_name])
        without = multimodal_sample(config, batch_size=1, seq_len=4, generator=torch.Generator().manual_seed(0))
        with_model = multimodal_sample(config, batch_size=1, seq_len=4, generator=torch.Generator().manual_seed(0),
                                       model=model)
        assert without["input_ids"].shape == with_model["input_ids"].shape, layout_name


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


def test_llava_next_layout_matches_the_image_processor():
    pytest.importorskip("torchvision")
    config = transformers.LlavaNextConfig()
    size = layout_for("llava_next").default_size(config)
    processed = transformers.LlavaNextImageProcessor()(images=[_image(*size)], return_tensors="pt")
    ours = layout_for("llava_next").pixels(config, [size], torch.Generator().manual_seed(0), torch.float32, set(), 1)
    assert ours["pixel_values"].shape == processed["pixel_values"].shape
    assert ours["image_sizes"].tolist() == processed["image_sizes"].tolist()
