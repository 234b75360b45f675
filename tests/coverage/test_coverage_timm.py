"""The coverage check on the vision-language models whose vision tower timm builds (a
``TimmWrapperConfig``: FastVLM's FastViT, Gemma 3n's MobileNetV5, PerceptionLM's Perception Encoder ViT).

timm needs a torchvision built for the installed torch, which the main environment's CPU torch has
none of: there these tests skip, and the rows fail at build naming timm (the last test). CI runs them
in its floor environment (torch 2.10, torchvision 0.25, timm 1.0.31; ``scripts/setup_env.sh``):

    /root/.cache/tracezoo/envs/floor/bin/python -m pytest -q tests/coverage/test_coverage_timm.py
"""

from __future__ import annotations

import pytest
import transformers
from transformers.utils import is_timm_available

from patcher.coverage.check import NO_TOWER
from patcher.samples.modalities import MIN_INFLUENCE
from patcher.coverage.shrink import shrink_config

TIMM_VLMS = ["FastVlmForConditionalGeneration", "Gemma3nForConditionalGeneration",
             "PerceptionLMForConditionalGeneration"]
#: Towers that are a pyramid of strided stages, each an ``nn.Sequential`` of blocks: no list of
#: blocks for ``patcher.find_tower_blocks`` (an ``nn.ModuleList``), so no vision-blocks chain.
PYRAMIDS = {"FastVlmForConditionalGeneration": "FastViT", "Gemma3nForConditionalGeneration": "MobileNetV5"}
#: The tiny models' sizes stay far below the sweep's limit (the towers unshrunk: 123M and 296M).
TINY = 5_000_000

needs_timm = pytest.mark.skipif(
    not is_timm_available(),
    reason=f"timm and torchvision are not installed here (transformers {transformers.__version__}): timm needs a "
           "torchvision built for the installed torch, which does not install beside the main environment's CPU torch; "
           "CI runs these in its floor environment: "
           "/root/.cache/tracezoo/envs/floor/bin/python -m pytest -q tests/coverage/test_coverage_timm.py")


@needs_timm
@pytest.mark.parametrize("name", TIMM_VLMS)
def test_builds_tiny_and_equals_eager_on_text_and_images(name, coverage_row):
    row = coverage_row(name)
    assert row.built and row.parameters < TINY, (row.stage, row.error, row.parameters)
    for attempt in (row.text, row.multimodal):
        assert attempt is not None and attempt.traced, (attempt and (attempt.stage, attempt.error,
                                                                      attempt.blocker_location))
        assert attempt.subgraphs == attempt.expected >= 3, attempt
        assert attempt.max_diff == 0.0 and attempt.reuse_diff == 0.0, attempt
        assert attempt.equal, attempt
    assert row.multimodal.influence > MIN_INFLUENCE, row.multimodal


@needs_timm
@pytest.mark.parametrize("name", TIMM_VLMS)
def test_vision_blocks_then_text_layers_equal_eager_where_the_tower_is_a_list_of_blocks(name, coverage_row):
    row = coverage_row(name)
    attempt = row.vision_blocks
    assert attempt is not None, (row.stage, row.error)
    if name in PYRAMIDS:
        assert attempt.stage == NO_TOWER and not attempt.ran and not row.vision_targets, attempt
        return
    assert row.vision_targets, attempt
    assert attempt.traced, (attempt.stage, attempt.error, attempt.blocker_location)
    assert attempt.subgraphs == attempt.expected > row.multimodal.expected, attempt
    assert attempt.max_diff == 0.0 and attempt.reuse_diff == 0.0 and attempt.equal, attempt


def _tower_classes(tower) -> set[str]:
    return {type(module).__name__ for module in tower.modules()}


@needs_timm
@pytest.mark.parametrize("name", TIMM_VLMS)
def test_the_tiny_tower_keeps_every_module_class_of_the_real_one_and_states_its_width(name):
    from patcher.coverage.shrink import _with_vision
    from patcher.models.timm_towers import output_width, tower_on_meta

    config_class = getattr(transformers, name).config_class
    real, tiny = _with_vision(config_class).vision_config, shrink_config(config_class).vision_config
    assert real.architecture == tiny.architecture
    real_tower = tower_on_meta(real.architecture, real.model_args)
    tiny_tower = tower_on_meta(tiny.architecture, tiny.model_args)
    assert _tower_classes(tiny_tower) == _tower_classes(real_tower)
    assert sum(p.numel() for p in tiny_tower.parameters()) < sum(p.numel() for p in real_tower.parameters()) / 50
    if getattr(real, "hidden_size", None) is not None:
        # the projector after the tower is built from the wrapper's hidden_size
        assert real.hidden_size == output_width(real.architecture, real.model_args)
        assert tiny.hidden_size == output_width(tiny.architecture, tiny.model_args)


@needs_timm
def test_a_config_with_block_definitions_builds_any_number_of_models():
    # timm's EfficientNet builder pops each block definition's block_type as it builds: before, the
    # second model built from Gemma 3n's tiny config (the sweep builds three) failed with
    # KeyError: 'block_type'
    import copy

    from patcher.models import build_model

    cls = transformers.Gemma3nForConditionalGeneration
    config = shrink_config(cls.config_class)
    before = copy.deepcopy(config.vision_config.model_args)
    assert any("block_type" in block for stage in before["block_args"] for block in stage)
    for _ in range(2):
        build_model(cls, config, device="meta")
    assert config.vision_config.model_args == before


@needs_timm
def test_timm_is_never_asked_for_pretrained_weights(monkeypatch):
    import huggingface_hub
    import timm

    from patcher.coverage.check import _build

    calls = []
    create = timm.create_model

    def recording(*args, **kwargs):
        calls.append(kwargs.get("pretrained", args[1] if len(args) > 1 else False))
        return create(*args, **kwargs)

    def no_download(*args, **kwargs):
        raise AssertionError(f"a download was attempted: {args} {kwargs}")

    monkeypatch.setattr(timm, "create_model", recording)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_download)
    for name in TIMM_VLMS:
        cls = getattr(transformers, name)
        _build(cls, shrink_config(cls.config_class), seed=0)
    assert calls and not any(calls), calls


def test_the_knobs_are_lowered_by_name_and_a_stage_keeps_its_striding_block_every_block_type_and_its_last(monkeypatch):
    # No timm needed: the entry point's arguments and the towers' widths are given.
    from patcher.coverage import shrink_timm
    from patcher.coverage.shrink import _Shrinker

    def block(kind, stride=1, **more):
        return {"block_type": kind, "out_chs": 640, "stride": stride, **more}

    mqa = dict(num_heads=12, key_dim=64)
    stage = [block("uir", 2), block("uir"), block("mqa", **mqa), block("uir"), block("mqa", **mqa),
             block("uir", exp_ratio=2.0)]
    arguments = {"block_args": [stage], "depth": 23, "layers": (2, 12), "embed_dim": 1024, "img_size": (448, 448),
                 "patch_size": 14, "ref_feat_shape": (32, 32), "mlp_ratio": 4.0}
    monkeypatch.setattr(shrink_timm, "constructor_arguments", lambda architecture, model_args: dict(arguments))
    monkeypatch.setattr(shrink_timm, "output_width", lambda architecture, model_args: 64 if model_args else 2048)
    data = {"architecture": "some_timm_net", "model_args": None, "hidden_size": 2048}
    shrink_timm.shrink_timm_level(dict(data), data, _Shrinker()._scalar)

    args = data["model_args"]
    kept = args["block_args"][0]
    assert [(item["block_type"], item["stride"]) for item in kept] == [("uir", 2), ("mqa", 1), ("uir", 1)]
    assert kept[-1]["exp_ratio"] == 2.0  # the stage's own last block, not the first other uir
    assert {item["out_chs"] for item in kept} == {64} and (kept[1]["num_heads"], kept[1]["key_dim"]) == (4, 16)
    assert (args["depth"], args["layers"], args["embed_dim"]) == (2, (1, 1), 64)
    assert (args["img_size"], args["ref_feat_shape"]) == ((28, 28), (2, 2))  # two patches a side, and its grid
    assert "mlp_ratio" not in args and "patch_size" not in args  # knobs left as they are stay the entry point's
    assert data["hidden_size"] == 64  # the tiny tower's output width, as the real one's 2048 was


@pytest.mark.skipif(is_timm_available(), reason="timm is installed here: the rows build")
@pytest.mark.parametrize("name", TIMM_VLMS)
def test_without_timm_the_row_fails_at_build_naming_timm(name):
    from patcher.coverage import check_architecture

    row = check_architecture(name)
    assert not row.built and row.stage == "size" and "requires the timm library" in row.error, row
    assert row.error_location, row


@needs_timm
def test_gemma3n_equals_eager_with_audio_too(coverage_row):
    """Gemma 3n's audio row: its tower takes a boolean frame mask (it inverts it with ``~``), its
    forward pads every clip to ``audio_soft_tokens_per_image`` tokens, and it pads through its audio
    embedding with the text vocabulary's last id, which the tiny config's stacked sub-vocabularies
    must own (each of these made the audio sample fail to build before)."""
    row = coverage_row("Gemma3nForConditionalGeneration")
    attempt = row.audio
    assert attempt is not None and attempt.traced, (attempt and (attempt.stage, attempt.error,
                                                                  attempt.blocker_location))
    assert attempt.max_diff == 0.0 and attempt.reuse_diff == 0.0 and attempt.equal, attempt
    assert attempt.influence > MIN_INFLUENCE, attempt


@needs_timm
def test_a_timm_tower_beside_an_audio_tower_keeps_its_own_redraw():
    # Gemma 3n has both: audio's unit-gain redraw of every convolution runs first, images' redraw
    # inside the timm tower after it (Modality.prepare_order), as _build did before the declarations
    # held the preparation; the other order leaves the tower audio's weights
    import torch

    from patcher.coverage.check import _build
    from patcher.models import random_model
    from patcher.samples.audio.modality import unit_gain_convolutions
    from patcher.samples.images.modality import rectifier_gain_timm_convolutions
    from patcher.samples.modalities import prepare_config

    cls = transformers.Gemma3nForConditionalGeneration
    config = shrink_config(cls.config_class)
    prepare_config(config, cls)
    built = _build(cls, config, seed=0).state_dict()
    in_order, flipped = random_model(cls, config, 0), random_model(cls, config, 0)
    unit_gain_convolutions(in_order, 0)
    rectifier_gain_timm_convolutions(in_order, 0)
    rectifier_gain_timm_convolutions(flipped, 0)
    unit_gain_convolutions(flipped, 0)
    assert all(torch.equal(value, in_order.state_dict()[name]) for name, value in built.items())
    assert not all(torch.equal(value, flipped.state_dict()[name]) for name, value in built.items())
