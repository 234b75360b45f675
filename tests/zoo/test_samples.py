"""Zoo recipes: processor-free multimodal samples that the original transformers models accept.

For every zoo recipe, on the tiny models and for drawn batch sizes, text lengths, image counts,
image sizes (the recipe's ``example_image_sizes``: Qwen grids, Mllama aspect ratios / tile counts)
and left padding:
- the sample has the documented layout (``seq_len`` is the text length; each image adds its span),
- the original eager model runs on it and gives logits of shape (batch, length, vocab),
- other pixel values change the logits (the image reaches the output: no dead path);
and the bundled real configs build on ``meta`` with the expected decoder layers.

No ``__init__.py`` here on purpose: ``tests/`` is first on ``sys.path`` (conftest), so a regular
package ``tests/zoo`` would shadow the real ``zoo`` package.
"""

from __future__ import annotations

import collections
import functools
import re
import sys

import pytest
import torch
import transformers
from hypothesis import given
from hypothesis import strategies as st

from patcher.models import build_model, load_config
from patcher.samples import multimodal_sample, sample_input
from zoo import _qwen_vl_samples
from zoo._entries import ENTRIES, recipe
from zoo._recipe import REAL_SAMPLE
from zoo.gemma3 import recipe as gemma3
from zoo.llava import recipe as llava
from zoo.mllama import recipe as mllama
from zoo.qwen2_5_vl import recipe as qwen2_5_vl
from zoo.qwen2_vl import recipe as qwen2_vl

# Every zoo entry, so a new one is checked here from the start: what is its own (how an image sits
# in its sample, its real configs and their counts) is read from its recipe.
RECIPES = {entry: recipe(entry) for entry in ENTRIES}

# bundled config name -> (entry, its RealConfig)
REAL = {real.name: (entry, real) for entry, spec in RECIPES.items() for real in spec.real_configs}


@functools.lru_cache(maxsize=None)
def tiny(name: str, device: str) -> torch.nn.Module:
    return RECIPES[name].tiny_model().to(device)


def image_span(name: str, config, size) -> int:
    """Tokens one image adds to the text: its image tokens and the markers around them."""
    return RECIPES[name].sample_layout.span(config, size)


def image_token_id(name: str, config) -> int:
    return RECIPES[name].sample_layout.image_token_id(config)


def draw_image_sizes(data, name: str, config, num_images: int):
    sizes = RECIPES[name].example_image_sizes(config)
    return [data.draw(st.sampled_from(sizes)) for _ in range(num_images)]


def draw_sample_args(data, name: str, config) -> dict:
    seq_len = data.draw(st.integers(1, 8), label="seq_len")
    num_images = data.draw(st.integers(1, 2), label="num_images")
    return dict(
        batch_size=data.draw(st.integers(1, 2), label="batch_size"),
        seq_len=seq_len,
        num_images=num_images,
        image_size=draw_image_sizes(data, name, config, num_images),
        left_padding=data.draw(st.integers(0, seq_len - 1), label="left_padding"),
        generator=torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="seed")),
    )


def check_layout(name: str, config, sample: dict, args: dict) -> None:
    layout = RECIPES[name].sample_layout
    batch_size, seq_len, num_images = args["batch_size"], args["seq_len"], args["num_images"]
    sizes = args["image_size"]
    length = seq_len + sum(image_span(name, config, size) for size in sizes)
    input_ids, attention_mask = sample["input_ids"], sample["attention_mask"]
    assert input_ids.shape == attention_mask.shape == (batch_size, length)
    expected_mask = torch.ones(batch_size, length, dtype=torch.long)
    expected_mask[0, : args["left_padding"]] = 0
    assert torch.equal(attention_mask.cpu(), expected_mask)
    image_tokens = (input_ids == image_token_id(name, config)).sum(-1)
    per_row = sum(image_span(name, config, size) - len(layout.marker_ids(config)) for size in sizes)
    assert image_tokens.tolist() == [per_row] * batch_size
    # No image token in the left padding.
    assert not (input_ids[0, : args["left_padding"]] == image_token_id(name, config)).any()
    if layout.markers:  # one start and one end marker per image
        start, end = layout.marker_ids(config)
        starts = (input_ids == start).sum(-1)
        ends = (input_ids == end).sum(-1)
        assert starts.tolist() == ends.tolist() == [num_images] * batch_size
    if layout.token_type_key:
        assert torch.equal(sample[layout.token_type_key], (input_ids == image_token_id(name, config)).long())
    CHECK_PIXELS[layout.pixels](config, sample, sizes, batch_size, length)


def check_patch_grid(config, sample, sizes, batch_size, length):
    """Qwen VL: flattened patches of every image, in order, and their ``image_grid_thw``."""
    vision = config.vision_config
    grids = [_qwen_vl_samples.image_grid(config, size) for size in sizes] * batch_size
    assert sample["image_grid_thw"].tolist() == [list(grid) for grid in grids]
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    assert sample["pixel_values"].shape == (sum(t * h * w for t, h, w in grids), patch_dim)


def check_tiles(config, sample, sizes, batch_size, length):
    """Mllama: tiles padded to ``max_num_tiles``, aspect ratios, and the cross-attention mask."""
    vision = config.vision_config
    tiles, num_images = vision.max_num_tiles, len(sizes)
    input_ids = sample["input_ids"]
    assert sample["pixel_values"].shape == (batch_size, num_images, tiles, vision.num_channels,
                                            vision.image_size, vision.image_size)
    counts = [(h // vision.image_size) * (w // vision.image_size) for h, w in sizes]
    assert sample["aspect_ratio_ids"].tolist() == [[mllama.aspect_ratio_id(config, s) for s in sizes]] * batch_size
    assert sample["aspect_ratio_mask"].tolist() == [[[1] * c + [0] * (tiles - c) for c in counts]] * batch_size
    mask = sample["cross_attention_mask"]
    assert mask.shape == (batch_size, length, num_images, tiles)
    for row in range(batch_size):
        positions = (input_ids[row] == config.image_token_index).nonzero().flatten().tolist()
        assert not mask[row, : positions[0]].any()  # text before the first image sees none
        for index, position in enumerate(positions):  # an image token sees its own image's tiles
            assert mask[row, position, index].tolist() == [1] * counts[index] + [0] * (tiles - counts[index])
        assert mask[row, -1, -1, : counts[-1]].all()  # the last image is seen to the end
        for index, count in enumerate(counts):  # padding tiles are never attended
            assert not mask[row, :, index, count:].any()


def check_fixed_size(config, sample, sizes, batch_size, length):
    """A fixed-size tower (CLIP, SigLIP): one ``(C, S, S)`` image per image, in row-major order."""
    vision = config.vision_config
    assert sample["pixel_values"].shape == (batch_size * len(sizes), vision.num_channels,
                                            vision.image_size, vision.image_size)


#: ``SampleLayout.pixels`` -> the checks of that pixel layout (one per ``zoo._recipe.PIXEL_LAYOUTS``).
CHECK_PIXELS = {"patch_grid": check_patch_grid, "tiles": check_tiles, "fixed_size": check_fixed_size}


def test_every_pixel_layout_is_checked():
    from zoo._recipe import PIXEL_LAYOUTS

    assert set(CHECK_PIXELS) == set(PIXEL_LAYOUTS)


@pytest.mark.parametrize("name", sorted(RECIPES))
@given(data=st.data())
def test_eager_model_runs_on_sample_and_sees_the_image(name, device, data):
    model = tiny(name, device)
    config = model.config
    args = draw_sample_args(data, name, config)
    sample = RECIPES[name].build_sample(config, device=device, **args)
    check_layout(name, config, sample, args)

    other = dict(sample)
    other["pixel_values"] = sample["pixel_values"] + torch.randn_like(sample["pixel_values"])
    with torch.no_grad():
        logits = model(**sample).logits
        other_logits = model(**other).logits
    batch_size, length = sample["input_ids"].shape
    assert logits.shape == (batch_size, length, config.get_text_config().vocab_size)
    assert torch.isfinite(logits).all()

    changed = (logits - other_logits).abs().amax(-1)  # (batch, length)
    image_token = image_token_id(name, config)
    for row in range(batch_size):
        first = int((sample["input_ids"][row] == image_token).nonzero()[0])
        # Every token from the first image token on depends on the image.
        assert (changed[row, first:] > 1e-6).all(), changed[row]
        if not RECIPES[name].sample_layout.image_reaches_earlier_text:
            # Causal: text before the first image does not. (Mllama's text tokens before their image
            # still cross-attend: transformers' row mask only zeroes the gated MLP, not attention.)
            assert (changed[row, :first] == 0).all(), changed[row]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_sample_is_reproducible_and_text_only_is_text_sample(name):
    config = RECIPES[name].tiny_config()
    first = RECIPES[name].build_sample(config, batch_size=2, seq_len=5, num_images=2, left_padding=1)
    second = multimodal_sample(config, batch_size=2, seq_len=5, num_images=2, left_padding=1)  # registered
    assert first.keys() == second.keys()
    assert all(torch.equal(first[key], second[key]) for key in first)
    text = RECIPES[name].build_sample(config, batch_size=2, seq_len=5, left_padding=1, multimodal=False,
                                      generator=torch.Generator().manual_seed(3))
    expected = sample_input(config, batch_size=2, seq_len=5, left_padding=1,
                            generator=torch.Generator().manual_seed(3))
    assert text.keys() == {"input_ids", "attention_mask"}
    assert all(torch.equal(text[key], expected[key]) for key in text)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_tiny_model_is_seeded_awake_and_takes_a_class(name):
    recipe = RECIPES[name]
    model = recipe.tiny_model(seed=1)
    again = recipe.tiny_model(seed=1, model_class=recipe.model_class)
    assert type(model).__name__ == recipe.model_class and not model.training
    zero = [n for n, p in model.named_parameters() if not p.any()]
    assert not zero, f"dead parameters: {zero}"
    for (name_a, a), (name_b, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert name_a == name_b and torch.equal(a, b)
    assert recipe.tiny_model(dtype=torch.bfloat16).lm_head.weight.dtype == torch.bfloat16


def test_bad_arguments_are_refused():
    qwen, ml, lv = qwen2_vl.tiny_config(), mllama.tiny_config(), llava.tiny_config()
    with pytest.raises(ValueError, match="left_padding"):
        qwen2_vl.build_sample(qwen, seq_len=3, left_padding=3)
    with pytest.raises(ValueError, match="multiple"):
        qwen2_vl.build_sample(qwen, image_size=(8, 12))
    with pytest.raises(ValueError, match="one per image"):
        qwen2_vl.build_sample(qwen, num_images=2, image_size=[(8, 8), (8, 8), (8, 8)])
    with pytest.raises(ValueError, match="multiple"):
        qwen2_5_vl.build_sample(qwen2_5_vl.tiny_config(), image_size=(8, 12))
    with pytest.raises(ValueError, match="out_hidden_size"):
        qwen2_5_vl.tiny_config(vision_config={"out_hidden_size": 16})
    with pytest.raises(ValueError, match="supported aspect ratios"):
        mllama.build_sample(ml, image_size=(24, 24))  # 3x3 tiles
    with pytest.raises(ValueError, match="only"):
        llava.build_sample(lv, image_size=16)
    with pytest.raises(ValueError, match="num_images"):
        llava.build_sample(lv, num_images=0)
    with pytest.raises(ValueError, match="only"):
        gemma3.build_sample(gemma3.tiny_config(), image_size=8)


@pytest.mark.parametrize("config_name", sorted(REAL))
def test_real_config_builds_on_meta_with_its_layers(config_name):
    name, real = REAL[config_name]
    config = load_config(config_name)
    assert config.model_type == RECIPES[name].model_type == name
    model = build_model(getattr(transformers, RECIPES[name].model_class), config, "meta")
    counts = collections.Counter(type(module).__name__ for module in model.modules())
    assert {layer: counts[layer] for layer in real.layers} == real.layers
    targets = RECIPES[name].default_targets
    # One text subgraph per default target, plus the one before the first (`patcher trace`'s count).
    assert sum(counts[target] for target in targets) == real.text_subgraphs - 1
    modeling = sys.modules[type(model).__module__]
    for entry in RECIPES[name].default_ignore:  # entries name real modules, methods or functions
        if entry.startswith("re:"):
            assert any(re.fullmatch(entry[3:], qualified) for qualified, _ in model.named_modules()), entry
        else:
            assert hasattr(modeling, entry) or hasattr(model.model, entry), entry


@pytest.mark.parametrize("config_name", sorted(REAL))
def test_real_config_sample_on_meta(config_name):
    _, real = REAL[config_name]
    config = load_config(config_name)
    sample = multimodal_sample(config, device="meta", **REAL_SAMPLE)
    assert all(value.device.type == "meta" for value in sample.values())
    batch_size, seq_len, num_images = REAL_SAMPLE["batch_size"], REAL_SAMPLE["seq_len"], REAL_SAMPLE["num_images"]
    assert sample["input_ids"].shape == (batch_size, seq_len + num_images * real.image_span)
    assert "pixel_values" in real.sample_shapes
    for key, shape in real.sample_shapes.items():
        assert sample[key].shape == shape, key
