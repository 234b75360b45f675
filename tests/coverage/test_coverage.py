"""The coverage check on a fixed sample of architectures (the CI slice of scripts/coverage.py).

Each architecture is built tiny from its config class's defaults (``patcher.coverage.shrink``), its
decoder layers are found automatically, and the patched model's subgraph chain must match the eager
original exactly on the traced sample and on a sample of another batch size and length. Only
architectures that really pass are listed here; the full sweep's report lists the others.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import transformers

from patcher.coverage import architectures, check_architecture, find_targets, shrink_config, tensor_diff
from patcher.samples.modalities import MIN_INFLUENCE, MODALITIES
from patcher.coverage.report import markdown, summary, top_blockers
from patcher.coverage.runner import run_architectures
from patcher.samples.sweep import coverage_text_sample, special_tokens
from patcher.coverage.shrink import MIN_INIT_STD
from versions import class_param, require_classes

# Diverse on purpose: dense, GQA, MoE, MLA, sliding windows, alternating layer types, encoder-decoder,
# old-style blocks (Bloom, GPT-NeoX, Falcon, OPT), Mamba hybrids (Bamba, Zamba2 with nested layer
# classes), convolution hybrids (LFM2), and two multimodal models with sample builders.
MUST_BE_EQUAL = [
    "BambaForCausalLM",
    "BartForConditionalGeneration",
    "BloomForCausalLM",
    "Cohere2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "FalconForCausalLM",
    "GPTNeoXForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "GptOssForCausalLM",
    "Lfm2ForCausalLM",
    "LlamaForCausalLM",
    "LlavaForConditionalGeneration",
    "MistralForCausalLM",
    "MixtralForCausalLM",
    "MllamaForConditionalGeneration",
    "OPTForCausalLM",
    "Phi3ForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3MoeForCausalLM",
    "T5ForConditionalGeneration",
    "Zamba2ForCausalLM",
    # built since the shrinking learned them (issue 21): tester-set fields (Dbrx), kv-sharing layers
    # (Gemma 3n), a shared block in two layers (Zamba), an indexer's rotary part (DeepSeek-V3.2),
    # heads x head_dim == hidden (Helium), a top-k named like a token (Bailing hybrid), per-layer
    # overrides (Dots 3)
    "BailingHybridForCausalLM",
    "DbrxForCausalLM",
    "DeepseekV32ForCausalLM",
    "Dots3NoteForCausalLM",
    "Gemma3nForCausalLM",
    "HeliumForCausalLM",
    "ZambaForCausalLM",
    # an encoder that takes only embeddings: inputs_embeds for input_ids (sweep_samples.EMBEDS_ONLY)
    "SeamlessM4TTextToUnitForConditionalGeneration",
    # patch boundaries from an entropy model's predictions (a torch.distributions object, a helper
    # returning from a branch on values); tests/trace/test_data_dependent_shapes.py varies the patch count
    "BltForCausalLM",
]
MULTIMODAL = {"LlavaForConditionalGeneration", "MllamaForConditionalGeneration"}


def _dbrx_router_takes_the_ffn_width() -> bool:
    from transformers.models.dbrx import modeling_dbrx

    return "self.hidden_size = config.ffn_hidden_size" in inspect.getsource(modeling_dbrx.DbrxRouter.__init__)


#: Rows the installed transformers' own code cannot run, read from its source: ``name -> (test of the
#: installed source, stage, error, why)``; the row must fail there, loudly, for that reason.
BROKEN_UPSTREAM = {
    "DbrxForCausalLM": (_dbrx_router_takes_the_ffn_width, "eager", "mat1 and mat2 shapes cannot be multiplied",
                        "transformers 5.10's DbrxRouter is a Linear over ffn_hidden_size features, but the layer "
                        "hands it the hidden states (no real checkpoint loads either); 5.17 reads hidden_size"),
}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("generated")


@pytest.mark.parametrize("name", [class_param(name) for name in MUST_BE_EQUAL])
def test_architecture_traces_and_equals_eager(name, cache_dir):
    row = check_architecture(name, cache_dir=cache_dir)
    if name in BROKEN_UPSTREAM and BROKEN_UPSTREAM[name][0]():
        _, stage, error, _why = BROKEN_UPSTREAM[name]
        assert not row.built and row.stage == stage and error in row.error, (row.stage, row.error)
        return
    assert row.built, (row.stage, row.error)
    assert row.text.traced, (row.text.stage, row.text.error, row.text.blocker_location)
    assert row.text.subgraphs == row.text.expected >= 2, row.text
    assert row.text.max_diff == 0.0 and row.text.reuse_diff == 0.0, row.text
    assert row.text.equal
    if name in MULTIMODAL:
        assert row.multimodal is not None and row.multimodal.equal, row.multimodal


def test_a_failing_architecture_gives_a_failure_row(cache_dir):
    # UDOP cannot run without bounding boxes, which the text sample does not give (its image sample
    # does, patcher.samples.images.documents): text alone, a row, not an exception.
    row = check_architecture("UdopForConditionalGeneration", cache_dir=cache_dir, multimodal=False)
    assert not row.built and row.stage == "eager"
    assert "Bbox is required" in row.error
    assert not row.traced and not row.equal


def test_runner_records_failures_and_timeouts_instead_of_crashing():
    rows = run_architectures(["NoSuchModelForCausalLM"], jobs=1, timeout=120)
    assert rows[0].stage == "class" and "NoSuchModelForCausalLM" in rows[0].error
    rows = run_architectures(["LlamaForCausalLM"], jobs=1, timeout=0.2)  # killed long before it can finish
    assert rows[0].stage == "timeout" and not rows[0].built
    text = markdown(rows)
    assert "LlamaForCausalLM" in text and "timeout" in text


def test_shrinking_keeps_layer_types_consistent_and_every_kind():
    config = shrink_config(transformers.Gemma3TextConfig)
    assert config.num_hidden_layers == len(config.layer_types) <= 4
    assert set(config.layer_types) == {"sliding_attention", "full_attention"}
    assert config.hidden_size <= 64 and config.vocab_size <= 256


def test_shrinking_keeps_sub_vocabularies_at_the_top_of_the_text_vocabulary():
    """Gemma 3n's vision and audio embeddings own the top of the text vocabulary (offsets 262144 and
    262272 of 262400) and the forward pads audio through the audio embedding with the text
    vocabulary's last id: shrunk, the ranges stay stacked against the tiny vocabulary's top."""
    from transformers import Gemma3nConfig

    config = shrink_config(Gemma3nConfig)
    vocab = config.text_config.vocab_size
    audio, vision = config.audio_config, config.vision_config
    assert audio.vocab_offset + audio.vocab_size == vocab, (audio.vocab_offset, audio.vocab_size, vocab)
    assert vision.vocab_offset + vision.vocab_size == audio.vocab_offset, (vision.vocab_offset, vision.vocab_size)
    assert 0 < vision.vocab_offset and vision.vocab_offset >= vocab // 2


def test_shrinking_keeps_vision_windows_in_pixels_at_least_a_merged_patch():
    # Qwen2.5-VL's vision window_size is in pixels (window_size // spatial_merge_size // patch_size
    # merged patches a side): lowered like a token window (4) it gave windows 0 patches wide, and the
    # eager multimodal run divided by zero. Never raised above the real value.
    vision = shrink_config(transformers.Qwen2_5_VLConfig).vision_config
    merged_patch = vision.patch_size * vision.spatial_merge_size
    assert vision.window_size // merged_patch >= 1
    assert vision.window_size <= transformers.Qwen2_5_VLVisionConfig().window_size


def test_shrinking_keeps_pooled_image_tokens_within_the_patch_grid():
    # Gemma3 pools image_size / patch_size patches a side to sqrt(mm_tokens_per_image) a side: 256
    # tokens over a shrunk tower made the pooling kernel 0 wide (an eager error, not a trace result).
    config = shrink_config(transformers.Gemma3Config)
    side = config.vision_config.image_size // config.vision_config.patch_size
    tokens_side = round(config.mm_tokens_per_image**0.5)
    assert tokens_side**2 == config.mm_tokens_per_image and 1 <= tokens_side <= side and side % tokens_side == 0


def test_shrinking_keeps_a_pixel_shuffle_of_the_vision_config_at_least_a_token_wide():
    require_classes("GraniteDoclingConfig")
    # Granite-Docling's connector (in the tower) shuffles pixels by vision_config.scale_factor: a tower
    # of 2 patches a side under a factor of 4 shuffled to 0 columns (an eager error on every image)
    vision = shrink_config(transformers.GraniteDoclingConfig).vision_config
    side = vision.image_size // vision.patch_size
    assert side % vision.scale_factor == 0 and side // vision.scale_factor >= 2
    assert vision.image_size <= transformers.GraniteDoclingConfig().vision_config.image_size


def test_shrinking_keeps_a_merged_patch_width_the_tower_width_times_the_merge():
    require_classes("MuseGlimmerConfig")
    # MuseGlimmer's adapter takes out_hidden_size = vision hidden * merge_size**2 features (pixel shuffle)
    config = shrink_config(transformers.MuseGlimmerConfig)
    assert config.out_hidden_size == config.vision_config.hidden_size * config.vision_config.merge_size**2
    llava = shrink_config(transformers.LlavaConfig)  # no merge: no width is tied to the tower's
    assert llava.text_config.hidden_size == 64


def test_shrinking_keeps_the_sam_neck_as_wide_as_the_tower_after_it():
    require_classes("UnlimitedOcrConfig")
    # Unlimited-OCR feeds SAM's neck (downsample_channels[-1] channels) to CLIP as its patch embeddings
    real = transformers.UnlimitedOcrConfig().vision_config
    vision = shrink_config(transformers.UnlimitedOcrConfig).vision_config
    assert real.sam_config.downsample_channels[-1] == real.encoder_config.hidden_size
    assert vision.sam_config.downsample_channels[-1] == vision.encoder_config.hidden_size
    assert all(new <= old for new, old in zip(vision.sam_config.downsample_channels, real.sam_config.downsample_channels))


def test_shrinking_gives_towers_that_init_at_almost_zero_a_live_init():
    # SAM-style towers init at 1e-10 (their weights come from the checkpoint): a random tiny one passes
    # nothing of its pixels on. Ordinary inits stay as they are.
    assert transformers.GotOcr2Config().vision_config.initializer_range < MIN_INIT_STD
    assert shrink_config(transformers.GotOcr2Config).vision_config.initializer_range > MIN_INIT_STD
    llava = transformers.LlavaConfig()
    assert shrink_config(transformers.LlavaConfig).text_config.initializer_range == llava.text_config.initializer_range


def test_shrinking_renumbers_layer_index_lists():
    config = shrink_config(transformers.MllamaConfig)
    text = config.text_config
    assert text.cross_attention_layers and all(0 <= i < text.num_hidden_layers for i in text.cross_attention_layers)
    vision = config.vision_config
    assert all(0 <= i < vision.num_hidden_layers for i in vision.intermediate_layers_indices)
    # spelled "indexes": DeepSeek-VL hybrid reads hidden_states[global_attn_indexes[0] + 1] of its SAM
    # tower (past the shrunk tower before); Qwen2.5-VL's full-attention blocks, Qwen3-VL's deepstack
    high = shrink_config(transformers.DeepseekVLHybridConfig).high_res_vision_config
    assert high.global_attn_indexes and all(0 <= i < high.num_hidden_layers for i in high.global_attn_indexes)
    for vision in (shrink_config(transformers.Qwen2_5_VLConfig).vision_config,
                   shrink_config(transformers.Qwen3VLConfig).vision_config):
        indexes = getattr(vision, "fullatt_block_indexes", None) or vision.deepstack_visual_indexes
        assert indexes and all(0 <= i < vision.depth for i in indexes)


@pytest.mark.parametrize("name", [class_param(name) for name in (
    "BltForCausalLM", "FlaubertWithLMHeadModel", "Florence2ForConditionalGeneration", "JanusForConditionalGeneration",
    "MuseSparkForConditionalGeneration", "VibeVoiceForConditionalGeneration", "VibeVoiceAsrForConditionalGeneration")])
def test_shrinking_lowers_conv_stacks_stage_widths_and_hashed_vocabularies(name):
    # over 50M parameters after shrinking before: VQGAN/audio-tokenizer base channels doubled stage by
    # stage, per-stage width lists, emb_dim, BLT's 500002-entry hash vocabulary
    from patcher.coverage.check import MAX_PARAMETERS
    from patcher.models import build_model, resolve_model_class

    cls = resolve_model_class(name)
    model = build_model(cls, shrink_config(cls.config_class), device="meta")
    assert sum(parameter.numel() for parameter in model.parameters()) < MAX_PARAMETERS


def test_shrinking_lowers_per_stage_and_per_layer_size_lists():
    vision = shrink_config(transformers.Florence2Config).vision_config
    assert max(vision.embed_dim) <= 64 and max(vision.num_heads) <= 4
    assert all(width % heads == 0 for width, heads in zip(vision.embed_dim, vision.num_heads))
    text = shrink_config(transformers.Gemma3nTextConfig)
    assert len(text.intermediate_size) == text.num_hidden_layers and max(text.intermediate_size) <= 128
    assert text.vocab_size_per_layer_input <= 256


def test_shrinking_keeps_kv_sharing_layers_of_every_kind():
    # Gemma 3n: the last num_kv_shared_layers layers reuse the kv of the last earlier layer of their
    # kind; cut to the first two layers, 15 shared layers left none producing a cache
    real, config = transformers.Gemma3nTextConfig(), shrink_config(transformers.Gemma3nTextConfig)
    assert 0 < real.num_kv_shared_layers < real.num_hidden_layers
    assert 0 < config.num_kv_shared_layers < config.num_hidden_layers <= 4
    first_shared = config.num_hidden_layers - config.num_kv_shared_layers
    assert set(config.layer_types[:first_shared]) == set(config.layer_types[first_shared:]) == set(real.layer_types)
    if hasattr(type(config), "kv_sharing_modes"):  # transformers' own check, where it has one (not 5.10's)
        assert "reuse" in config.kv_sharing_modes  # raises on an inconsistent config


def test_shrinking_keeps_a_shared_block_in_two_layers():
    # Zamba's hybrid layers call one shared attention block, tied by a key that needs a second one;
    # the other kind ("linear_attention", "mamba" in transformers 5.10) is kept too
    config = shrink_config(transformers.ZambaConfig)
    assert config.layers_block_type.count("hybrid") == 2
    assert set(config.layers_block_type) == set(transformers.ZambaConfig().layers_block_type)


def test_shrinking_fills_what_the_class_leaves_none_and_the_modeling_needs():
    dbrx = shrink_config(transformers.DbrxConfig)
    assert dbrx.attn_config.rope_theta and dbrx.attn_config.clip_qkv
    assert set(shrink_config(transformers.Lfm2MoeConfig).layer_types) == {"full_attention", "conv"}
    dots1 = shrink_config(transformers.Dots1Config)
    assert dots1.n_routed_experts and dots1.n_shared_experts and 0 < dots1.num_experts_per_tok <= dots1.n_routed_experts
    assert shrink_config(transformers.XmodConfig).default_language in transformers.XmodConfig().languages


def test_shrinking_fills_rope_parameters_per_layer_type():
    require_classes("CohereCompassTextConfig")
    compass = shrink_config(transformers.CohereCompassTextConfig)
    assert {"rope_type", "rope_theta"} <= set(compass.rope_parameters["full_attention"])


def test_shrinking_keeps_a_top_k_named_like_a_token_a_count():
    require_classes("BailingHybridConfig")
    # "num_experts_per_token" ends like a token-id field; kept at 8 it picked 8 of 4 experts
    config = shrink_config(transformers.BailingHybridConfig)
    assert 0 < config.num_experts_per_tok <= config.num_experts
    assert config.num_experts % config.n_group == 0


def test_shrinking_keeps_head_relations_the_modeling_code_assumes():
    # Helium's o_proj takes hidden_size inputs from heads * head_dim features
    helium = shrink_config(transformers.HeliumConfig)
    assert helium.num_attention_heads * helium.head_dim == helium.hidden_size


def test_shrinking_keeps_an_indexer_head_wider_than_its_rotary_part():
    # DeepSeek-V3.2's indexer heads split into a rotary part and a rest
    require_classes("DeepseekV32Config")
    v32 = shrink_config(transformers.DeepseekV32Config)
    assert v32.index_head_dim > v32.qk_rope_head_dim


def test_shrinking_keeps_per_layer_head_overrides_consistent():
    # Dots 3's sliding layers override heads and head dims: kv heads stay the heads, head_dim nope + rope
    require_classes("Dots3NoteConfig")
    dots3 = shrink_config(transformers.Dots3NoteConfig).text_config
    for layer_type in set(dots3.layer_types):
        layer = dots3.per_layer_config[layer_type]
        assert layer.num_key_value_heads == layer.num_attention_heads


def test_shrinking_keeps_an_adapter_feature_layer_inside_the_tower():
    require_classes("Molmo2Config")
    config = shrink_config(transformers.Molmo2Config)
    layers = config.adapter_config.vision_feature_layer
    assert len(set(layers)) == len(layers) == 2
    assert all(0 <= index < config.vision_config.num_hidden_layers for index in layers)


def test_shrinking_lowers_an_image_size_pair_and_the_position_table_of_its_patches():
    # Molmo2's tower adds one position embedding per patch of its [height, width] crop
    require_classes("Molmo2Config")
    real = transformers.Molmo2Config().vision_config
    vision = shrink_config(transformers.Molmo2Config).vision_config
    assert all(side < real_side for side, real_side in zip(vision.image_size, real.image_size))
    patch = vision.patch_size
    assert vision.num_position_embeddings == (vision.image_size[0] // patch) * (vision.image_size[1] // patch)


@pytest.mark.parametrize("config_class", [transformers.ChameleonConfig, transformers.Emu3Config])
def test_shrinking_gives_a_vq_model_a_vocabulary_map_on_the_tiny_vocabulary(config_class):
    from patcher.models import build_model

    config = shrink_config(config_class)
    codes = getattr(config.vq_config, "num_embeddings", None) or config.vq_config.codebook_size
    ids = list(config.vocabulary_map.values())
    vocab = config.get_text_config().vocab_size
    assert len(set(ids)) == len(ids) == codes + 2 and all(0 <= i < vocab for i in ids)
    assert config.image_token_id == config.vocabulary_map["<image>"]
    assert not set(ids) & (special_tokens(config) - {config.image_token_id})
    model_class = getattr(transformers, config_class.__name__.replace("Config", "ForConditionalGeneration"))
    build_model(model_class, config, device="meta")  # the model reads the map as it is built


def test_special_tokens_move_into_the_tiny_vocabulary():
    config = shrink_config(transformers.LlavaConfig)
    vocab = config.text_config.vocab_size
    assert 0 <= config.image_token_index < vocab
    sample = coverage_text_sample(config, batch_size=2, seq_len=9)
    assert not torch.isin(sample["input_ids"], torch.tensor(sorted(special_tokens(config)))).any()


def test_targets_are_the_decoder_layers():
    from patcher.models import build_model

    model = build_model(transformers.LlavaForConditionalGeneration, shrink_config(transformers.LlavaConfig))
    assert find_targets(model) == ["LlamaDecoderLayer"]  # not the CLIP encoder layers


def test_architectures_selection_is_fixed_and_filtered():
    everything = architectures()
    assert "LlamaForCausalLM" in everything and "AutoModelForCausalLM" not in everything
    assert architectures(sample=5, seed=0) == architectures(sample=5, seed=0)
    assert all("llama" in name.lower() for name in architectures("*Llama*"))


def test_tensor_diff_treats_nan_and_shape_mismatches_as_unequal():
    a = torch.tensor([1.0, float("nan")])
    assert tensor_diff(a, a.clone()) == 0.0
    assert math.isinf(tensor_diff(a, torch.tensor([1.0, 2.0])))
    assert math.isinf(tensor_diff(a, a[:1]))


def test_summary_counts(cache_dir):
    rows = [check_architecture("LlamaForCausalLM", cache_dir=cache_dir),
            check_architecture("NoSuchModelForCausalLM")]
    line = summary(rows)
    assert line.startswith("2 architectures: built 1 (50%)") and "equal 1" in line
    assert top_blockers(rows)[0][1] == 1


@pytest.mark.parametrize("modality", MODALITIES, ids=lambda modality: modality.label)
def test_every_modality_is_checked_and_reported_through_one_interface(modality):
    # One influence check and one report path for every modality: an input that never reaches the
    # output stops the attempt at "influence", the row names it as its blocker, and the summary,
    # the column and the "Per modality" line count it; the same input read by the model passes.
    from patcher.coverage.check import Attempt, CoverageRow, check_influence
    from patcher.coverage.report import blocker

    class Ignores(torch.nn.Module):
        def forward(self, input_ids, **inputs):
            return {"logits": input_ids.float() * 2}

    class Reads(torch.nn.Module):
        def forward(self, input_ids, **inputs):
            return {"logits": input_ids.float() * inputs[modality.input_name].sum()}

    sample = {"input_ids": torch.ones(2, 3, dtype=torch.long),
              modality.input_name: torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0))}
    attempt = Attempt(modality.attempt, ran=True)
    assert check_influence(attempt, modality, Ignores(), sample, Ignores()(**sample), {}, seed=0) is None
    assert attempt.stage == "influence" and attempt.influence == 0.0
    assert attempt.blocker_kind == f"no {modality.noun} influence" and f"only {modality.varied} changed" in attempt.error

    row = CoverageRow("BlindForConditionalGeneration", built=True,
                      text=Attempt("text", ran=True, traced=True, equal=True), **{modality.attempt: attempt})
    assert blocker(row)[0] == f"influence: no {modality.noun} influence"
    assert f"; {modality.label}: 1 {modality.given}, built 0, traced 0, equal 0" in summary([row])
    table = markdown([row])
    assert f"| {modality.attempt} |" in table and f"- {modality.label}: built 0, traced 0, equal 0 (of 1" in table
    assert CoverageRow.from_dict(row.as_dict()) == row

    reads = Attempt(modality.attempt, ran=True)
    varied, output = check_influence(reads, modality, Reads(), sample, Reads()(**sample), {}, seed=0)
    assert reads.stage is None and reads.influence > MIN_INFLUENCE
    changed = [name for name in sample if not torch.equal(sample[name], varied[name])]
    assert changed == [modality.input_name] and torch.equal(output["logits"], Reads()(**varied)["logits"])


def test_shrinking_scales_grid_pinpoints_with_the_vision_tower():
    # LLaVA-NeXT's pinpoints are pixel resolutions tiled by the tower's image_size: kept at the real
    # 336-pixel scale over a shrunk tower, one image became hundreds of tiles.
    real = transformers.LlavaNextConfig()
    config = shrink_config(transformers.LlavaNextConfig)
    tile, real_tile = config.vision_config.image_size, real.vision_config.image_size
    tiles = {(h // tile, w // tile) for h, w in config.image_grid_pinpoints}
    assert tiles == {(round(h / real_tile), round(w / real_tile)) for h, w in real.image_grid_pinpoints}
    assert all(h % tile == 0 and w % tile == 0 for h, w in config.image_grid_pinpoints)


def test_shrinking_keeps_vision_feature_layers_inside_the_shrunk_tower():
    # VipLLaVA concatenates the hidden states of several layers ([-2, -5, -8, -11, 6]); the list keeps
    # its length (the projector is sized by it) and every index stays within layers + 1 states.
    config = shrink_config(transformers.VipLlavaConfig)
    states = config.vision_config.num_hidden_layers + 1
    layers = config.vision_feature_layers
    assert len(layers) == len(transformers.VipLlavaConfig().vision_feature_layers)
    assert all(-states <= index < states for index in layers)


def test_shrinking_lowers_a_projector_width_named_after_the_vision_width():
    # Kimi-K2.5's projector normalises vision features of `projection_hidden_size` (the real tower's
    # 1152): kept while the tower shrank, the eager image path could not run.
    require_classes("Kimi_K25Config")
    config = shrink_config(transformers.Kimi_K25Config)
    assert config.projection_hidden_size == config.vision_config.hidden_size


def test_shrinking_gives_image_placeholders_and_markers_left_none_free_ids():
    # MiniCPM-V's config classes leave image_token_id (and 4.7's <image>/<slice>/newline marker ids)
    # None, set from the tokenizer in checkpoints: with None the model never reads its pixels.
    require_classes("MiniCPMV4_7Config")
    config = shrink_config(transformers.MiniCPMV4_7Config)
    names = ("image_token_id", "video_token_id", "image_start_id", "image_end_id", "slice_start_id",
             "slice_end_id", "newline_id")
    ids = [getattr(config, name) for name in names]
    vocab = config.text_config.vocab_size
    assert all(isinstance(value, int) and 0 <= value < vocab for value in ids) and len(set(ids)) == len(ids)
    assert set(ids) <= special_tokens(config)  # so text samples never draw them


@pytest.mark.parametrize("config_class", [transformers.Qwen2_5OmniThinkerConfig, transformers.Qwen3OmniMoeThinkerConfig])
def test_shrinking_gives_the_omni_thinkers_their_vision_markers_in_the_tiny_vocabulary(config_class):
    # the thinker's rope index reads config.vision_start_token_id, a field the class does not have
    # (the checkpoints' thinker_config sets it): eager failed on every sample (issue 21)
    config = shrink_config(config_class)
    vocab = config.get_text_config().vocab_size
    ids = [config.vision_start_token_id, config.vision_end_token_id, config.image_token_id, config.audio_start_token_id]
    assert all(0 <= value < vocab for value in ids) and len(set(ids)) == len(ids), ids
    assert set(ids) <= special_tokens(config)  # so text samples never draw them


def test_shrinking_keeps_a_single_layer_index_inside_the_shrunk_stack():
    # MiniCPM-V's window merger runs after vision layer insert_layer_id (6, copied from the top level
    # into the vision config): past the shrunk tower it never ran, and that path went unchecked.
    config = shrink_config(transformers.MiniCPMV4_6Config)
    vision = config.vision_config
    assert 0 <= config.insert_layer_id == vision.insert_layer_id < vision.num_hidden_layers


def test_shrinking_keeps_a_patch_count_map_on_the_shrunk_tower_grid():
    # Aria's projector takes only images whose patch count is a key of projector_patch_to_query_dict
    # ({1225: 128, 4900: 256}: 35 and 70 patches a side); the shrunk tower's grid must be one of them
    config = shrink_config(transformers.AriaConfig)
    grid = (config.vision_config.image_size // config.vision_config.patch_size) ** 2
    counts = config.projector_patch_to_query_dict
    assert grid in counts and len(counts) == len(transformers.AriaConfig().projector_patch_to_query_dict)
    assert all(0 < queries <= count for count, queries in counts.items())
    assert config.max_value_projector_patch_to_query_dict == max(counts.values())


def test_shrinking_leaves_a_map_not_keyed_by_square_patch_counts_alone():
    from patcher.coverage.shrink import shrink_dict

    data = {"model_type": "x", "vision_config": {"model_type": "v", "image_size": 448, "patch_size": 14},
            "patch_to_query": {1225: 128, 4900: 256}, "patch_sizes": {3: 1, 5: 2}}
    shrunk = shrink_dict(data)
    side = shrunk["vision_config"]["image_size"] // shrunk["vision_config"]["patch_size"]
    assert shrunk["patch_to_query"] == {side**2: min(128, side**2), (2 * side) ** 2: min(256, (2 * side) ** 2)}
    assert shrunk["patch_sizes"] == {3: 1, 5: 2}  # 3 and 5 are no patch grids of square images


def test_shrinking_keeps_a_pixel_shuffle_adapter_consistent():
    # Llama 4's adapter takes the pixel-shuffled patches (hidden / ratio**2 wide) as intermediate_size
    # and feeds the projector (vision_output_dim): the class defaults disagree, so the tiny model's
    # image path could not run
    vision = shrink_config(transformers.Llama4Config).vision_config
    assert vision.intermediate_size == round(vision.hidden_size / vision.pixel_shuffle_ratio**2)
    assert vision.vision_output_dim == vision.projector_output_dim <= 64


def test_shrinking_gives_an_optional_vision_sub_config_its_defaults():
    # Gemma 4's config builds text-only by default (vision_config is an optional sub-config): the tiny
    # model would have no vision tower and no image path to check.
    assert transformers.Gemma4Config().vision_config is None
    config = shrink_config(transformers.Gemma4Config)
    assert isinstance(config.vision_config, transformers.Gemma4VisionConfig)
    assert config.vision_config.hidden_size <= 64


def test_shrinking_lowers_the_image_queries_below_the_positions():
    # Kosmos-2.5 turns each image into latent_query_num (2048) text positions: kept, one image
    # would not fit the tiny text model.
    config = shrink_config(transformers.Kosmos2_5Config)
    assert config.latent_query_num < config.text_config.max_position_embeddings


def test_shrinking_raises_a_near_zero_init_std_and_keeps_the_others():
    # GOT-OCR2's SAM tower initialises with std 1e-10 (a stand-in for trained weights): built tiny
    # so, its output hardly depended on its pixels and the image never reached the logits.
    from patcher.coverage.shrink import INIT_STD

    assert transformers.GotOcr2Config().vision_config.initializer_range < 1e-6
    config = shrink_config(transformers.GotOcr2Config)
    assert config.vision_config.initializer_range == INIT_STD
    for config_class in (transformers.LlamaConfig, transformers.GotOcr2Config):
        real, tiny = config_class().get_text_config(), shrink_config(config_class).get_text_config()
        assert tiny.initializer_range == real.initializer_range  # ordinary stds stay as they are


def test_markdown_has_one_line_per_modality_fed():
    from patcher.coverage.check import Attempt, CoverageRow
    from patcher.coverage.report import markdown

    equal = Attempt("x", ran=True, subgraphs=3, expected=3, max_diff=0.0, reuse_diff=0.0)
    rows = [CoverageRow("A", built=True, text=Attempt("text", ran=True), multimodal=equal,
                        video=Attempt("video", ran=True, stage="influence"), audio=equal),
            CoverageRow("B", built=True, text=Attempt("text", ran=True), multimodal=Attempt("multimodal", ran=True))]
    text = markdown(rows)
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert lines[0].startswith(f"- images: built 2, traced {int(equal.traced)}, equal {int(equal.equal)} (of 2")
    assert lines[1].startswith("- video: built 0, traced 0, equal 0 (of 1")
    assert lines[2].startswith(f"- audio: built 1, traced {int(equal.traced)}, equal {int(equal.equal)} (of 1")
    assert "Per modality" not in markdown([CoverageRow("C", built=True, text=Attempt("text", ran=True))])


def test_counts_named_like_tokens_are_not_token_ids():
    """`num_experts_per_token` (Bailing, Kimi-Linear: 8) is a count; taken for an id, the shrinker kept
    it at 8 of 4 experts and the samples never drew token 8."""
    from patcher.samples.config_tokens import is_token_key

    assert not is_token_key("num_experts_per_token") and not is_token_key("num_image_tokens")
    assert is_token_key("pad_token_id") and is_token_key("image_token_index") and is_token_key("eos_token")


def test_overall_line_counts_every_input_and_unbuilt_samples_as_not_equal():
    from patcher.coverage.check import Attempt, CoverageRow
    from patcher.coverage.report import overall_line

    equal = dict(ran=True, traced=True, equal=True, subgraphs=3, expected=3)
    text_only = CoverageRow("A", built=True, text=Attempt("text", **equal))
    with_images = CoverageRow("B", built=True, text=Attempt("text", **equal), multimodal=Attempt("multimodal", **equal))
    # the image sample could not be built: the row is no answer for images, so it is not equal
    unfed = CoverageRow("C", built=True, text=Attempt("text", **equal),
                        multimodal=Attempt("multimodal", stage="sample", blocker_kind="ValueError", error="no size"))
    unequal = CoverageRow("D", built=True, text=Attempt("text", ran=True, traced=True, stage="compare", max_diff=1.0))
    unbuilt = CoverageRow("E", built=False)
    line = overall_line([text_only, with_images, unfed, unequal, unbuilt])
    assert line.startswith("Equal on every input: 2 of 5 (40%)"), line


def test_shrinking_cuts_per_layer_kinds_of_a_config_without_a_count_field():
    # NemotronH's layer count is a property of layers_block_type: nested in Nemotron transcribe it has
    # 52 kinds and no count field, and was left at 52 layers (the row timed out)
    from patcher.models import resolve_model_class

    require_classes("Nemotron3_5TranscribeForConditionalGeneration")
    real = resolve_model_class("Nemotron3_5TranscribeForConditionalGeneration").config_class().text_config
    text = shrink_config(resolve_model_class("Nemotron3_5TranscribeForConditionalGeneration").config_class).text_config
    assert len(real.layers_block_type) > 10 and "num_hidden_layers" not in real.to_dict()
    assert set(text.layers_block_type) == set(real.layers_block_type)  # every kind kept
    assert len(text.layers_block_type) == text.num_hidden_layers <= 4


def test_the_reuse_sample_runs_on_the_chain_traced_on_the_first():
    """The sweep's second sample proves that the chain traced on the first runs another input of its
    kind. ``run_subgraphs`` on what ``trace_subgraphs`` returns traces a batch of another kind anew
    (``patcher.partition.paths``), which would prove nothing: the sweep runs one path, so a second
    sample of another kind fails at "reuse", as before."""
    from patcher.coverage.check import Attempt, _attempt, _Generated
    from patcher.verify import run_eagerly
    from patcher.verify.compare import sweep_tolerance
    from tiny_models import tiny_model

    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    padded = coverage_text_sample(model.config, batch_size=2, seq_len=6, left_padding=2, seed=0)
    samples = [padded, {"input_ids": padded["input_ids"]}]
    expected = [run_eagerly(model, sample) for sample in samples]
    attempt = Attempt("text", ran=True)
    _attempt(attempt, model, model, ["LlamaDecoderLayer"], samples, expected, 2, _Generated(), None,
             sweep_tolerance())
    assert attempt.traced and attempt.max_diff == 0
    assert attempt.stage == "reuse" and attempt.blocker_kind == "MissingInputError", attempt
