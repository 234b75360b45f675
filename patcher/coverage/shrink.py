"""Shrink any transformers config to a tiny one, by field names alone.

``shrink_config(config_class)`` starts from the class's defaults (the real model's sizes), walks
its ``to_dict()`` (sub-configs included: text, vision, audio, ...) and lowers every size it
recognises by name: widths, layer counts, heads, head dims, intermediate sizes, experts, vocab,
positions, image sizes. Per-layer lists (``layer_types``, ``mlp_only_layers``, ...) are cut to the
new layer count while keeping every kind of layer that occurs, and lists of layer indices
(``cross_attention_layers``, ...) are renumbered. Special token ids beyond the tiny vocabulary are
moved into it (the same old id gets the same new id everywhere); image placeholder and marker ids
a multimodal config leaves None get free ids in it. Sizes are only ever lowered; an init standard
deviation near zero (``initializer_range=1e-10``) is raised, so that random weights carry their
inputs on as trained ones do.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ..samples.audio.tokens import TOKEN_FIELDS as _AUDIO_PLACEHOLDERS
from ..samples.config_tokens import ints, is_token_key, is_visual_id_key
from ..models.timm_towers import MODEL_ARGS, timm_level
from .shrink_timm import shrink_timm_level

HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 128
MOE_INTERMEDIATE = 32
EXPERTS = 4
TOP_K = 2
VOCAB = 256
POSITIONS = 256
LORA_RANK = 16
STATE = 16
WINDOW = 4
VQ_CODES = 32  # image codes of a VQ-VAE codebook that maps them to tokens (Chameleon, Emu3)

_WIDTH = {
    "hidden_size", "d_model", "n_embd", "n_embed", "embed_dim", "dim", "model_dim", "hidden_dim",
    "word_embed_proj_dim", "projection_dim", "vision_hidden_size", "text_hidden_size", "out_hidden_size",
    "encoder_hidden_size", "decoder_hidden_size", "audio_hidden_size", "output_dim", "projector_hidden_size",
    "hidden_size_per_layer_input", "vocab_size_per_layer_input_dim", "embedding_size", "d_embed",
    "text_embed_dim", "vision_embed_dim", "cross_attention_hidden_size", "proj_dim", "mm_hidden_size",
    "projection_hidden_size", "projector_input_dim", "projector_output_dim", "emb_dim", "hidden_size_global",
    "hidden_sizes", "condition_dim", "adapter_in_dim", "adapter_out_dim", "adapter_input_size",
    "cross_hidden_size",  # Dia's decoder: the width of the encoder states it cross-attends to
    "backbone_hidden_size",  # Gemma 4's assistants, Csm's depth decoder: the target's (backbone's) width
    # Phi-4 multimodal's audio conformer: its convolution module's output channels, which its blocks
    # add back onto their hidden states (1024 with hidden_size 1024)
    "ext_pw_out_channel", "depthwise_separable_out_channel",
}
_LAYERS = {
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers", "decoder_layers",
    "encoder_layers", "num_encoder_layers", "depth", "num_global_layers", "num_text_layers",
    "num_vision_layers", "text_num_hidden_layers", "num_blocks",
    "encoder_num_hidden_layers", "decoder_num_hidden_layers",  # Moonshine
}
_HEADS = {
    "num_attention_heads", "n_head", "n_heads", "num_heads", "decoder_attention_heads",
    "encoder_attention_heads", "attention_heads", "encoder_num_attention_heads", "index_n_heads",
    "linear_num_value_heads", "mamba_n_heads",
    "decoder_num_attention_heads",  # Moonshine
    "cross_num_attention_heads",  # Dia
}
_KV_HEADS = {"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num", "linear_num_key_heads",
             "n_head_kv", "num_kv_groups",
             "encoder_num_key_value_heads", "decoder_num_key_value_heads",  # Moonshine
             "cross_num_key_value_heads"}  # Dia
_HEAD_DIM = {"head_dim", "rotary_dim", "mamba_headdim", "linear_head_dim", "rotary_emb_dim", "attention_head_dim",
             "kv_channels", "v_head_dim", "index_head_dim", "linear_key_head_dim", "linear_value_head_dim", "d_kv", "d_head", "mamba_d_head", "attention_head_size",
             "global_head_dim", "cross_head_dim"}
_HALF_HEAD_DIM = {"qk_rope_head_dim", "qk_nope_head_dim"}
_INTERMEDIATE = {
    "intermediate_size", "ffn_dim", "n_inner", "decoder_ffn_dim", "encoder_ffn_dim", "d_ff", "ffn_hidden_size",
    "mlp_dim", "inner_dim", "dense_intermediate_size", "mlp_hidden_size", "intermediate_dim",
    "vision_intermediate_size",
}
_MOE_INTERMEDIATE = {"moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
                     "moe_ffn_hidden_size", "expert_ffn_hidden_size", "moe_shared_expert_intermediate_size"}
_EXPERTS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts_total",
            "num_routed_experts", "n_experts"}
_TOP_K = {"num_experts_per_tok", "top_k", "moe_topk", "num_experts_per_token", "moe_k", "router_top_k",
          "num_selected_experts", "moe_top_k", "top_k_experts"}
_POSITIONS = {"max_position_embeddings", "n_positions", "max_seq_len", "max_source_positions",
              "max_target_positions", "n_ctx", "max_sequence_length", "seq_length", "max_len",
              "text_max_position_embeddings", "context_length", "model_max_length"}
_LORA = {"kv_lora_rank", "q_lora_rank", "o_lora_rank"}
_STATE = {"state_size", "ssm_state_size", "mamba_d_state", "d_state", "time_step_rank", "mamba_dt_rank"}
#: learned queries that become the image tokens of one image (Kosmos: 2048 of them would not fit
#: the tiny text model's positions)
_IMAGE_QUERIES = {"latent_query_num"}
IMAGE_QUERIES = 16
_WINDOW = {"sliding_window", "attention_chunk_size", "local_attention_window", "window_size"}
_PERIOD = {"attn_layer_period", "expert_layer_period", "sliding_window_pattern", "_sliding_window_pattern",
           "global_attn_every_n_layers", "no_rope_layer_interval", "decoder_sparse_step", "moe_layer_freq",
           "interleave_moe_layer_step", "full_attention_interval", "layer_group_size", "moe_every_n_layers"}
_OFFSET = {"attn_layer_offset", "expert_layer_offset", "first_k_dense_replace", "first_dense_layers",
           "num_dense_layers", "first_k_dense", "n_dense_layers", "dense_layers"}
# Standard deviations of the random init; one below MIN_INIT_STD is raised to INIT_STD.
_INIT_STD = {"initializer_range", "init_std"}
MIN_INIT_STD = 1e-3
INIT_STD = 0.02
#: convolution group counts (depthwise where they equal the hidden size: kept equal to it)
_DEPTHWISE_GROUPS = {"upsample_groups"}
_RATIO_TO_HIDDEN = {"attention_hidden_size", "embedding_dim"}
#: lists of per-stage widths (DeepSeek-OCR's SAM neck: its last entry is the CLIP tower's width)
_WIDTH_LISTS = {"downsample_channels"}
#: the channels of a convolution stack's first stage, doubled (or multiplied) stage by stage: VQGAN
#: encoders (Janus, Chameleon: ``base_channels`` 128 times ``channel_multiplier`` up to 4), audio
#: tokenizers (VibeVoice: ``num_filters`` 32 doubled over 6 downsamplings to 2048), vocoders
#: (BigVGAN's ``upsample_initial_channel`` 1536, Qwen3-Omni code2wav's ``decoder_dim`` 1536, halved
#: per upsampling). Lowered to a few channels (a multiple of 32, the VQGAN's GroupNorm groups,
#: where it was one).
_BASE_CHANNELS = {"base_channels": 32, "num_filters": 4, "upsample_initial_channel": 64, "decoder_dim": 64}
#: factors a vision tower's patch grid is divided by a side before the text model sees it
_MERGE = ("spatial_merge_size", "merge_size", "scale_factor")
_SIZE_KEYS = _WIDTH | _HEADS | _KV_HEADS | _HEAD_DIM | _HALF_HEAD_DIM | _INTERMEDIATE | _MOE_INTERMEDIATE | _LORA
#: per-layer kind lists that give the layer count of a config without a count field
_LAYER_KIND_LISTS = ("layers_block_type", "layer_types")
_PER_LAYER_NAMES = ("layer", "idx", "indices", "indexes", "block_type", "pattern", "mlp_only", "blocks")
#: Name endings of a single layer index (MiniCPM-V's ``insert_layer_id``).
_LAYER_INDEX_SUFFIXES = ("_layer_id", "_layer_idx", "_layer_index")
#: a count of trailing layers that reuse an earlier layer's kv cache (all of them in Gemma 4's assistant)
_KV_SHARED = "num_kv_shared_layers"
#: Modeling code that assumes ``num_attention_heads * head_dim == hidden_size``
_HEADS_TIMES_HEAD_DIM = ("config.hidden_size // self.num_heads",
                         "self.o_proj = nn.Linear(config.hidden_size, config.hidden_size")
#: Layer kinds kept twice, by ``model_type`` and per-layer list: Zamba's "hybrid" layers all call
#: one shared attention block, tied by a key that needs a second hybrid layer to tie to (one alone:
#: "There is an issue with your definition of `tie_weights_keys`"); two also check the sharing.
_TWICE: dict[str, dict[str, tuple[str, ...]]] = {"zamba": {"layers_block_type": ("hybrid",)}}


#: Fields a config class leaves None (or out) that its modeling code needs: every checkpoint sets
#: them, transformers' own model tester sets them (the values below are the tester's, or sized like
#: the tiny config), the class defaults alone build no model. Keyed by ``model_type``; a field is
#: only filled where the shrunk config has it None or lacks it. Only what no name-based rule can
#: know belongs here.
CHECKPOINT_FIELDS: dict[str, dict[str, Any]] = {
    # DbrxAttention reads attn_config.rope_theta and clamps q, k, v by clip_qkv unconditionally
    # (tests/models/dbrx: rope_theta=500000, clip_qkv=8)
    "dbrx": {"attn_config": {"rope_theta": 500000, "clip_qkv": 8}},
    # the decoder layers index layer_types (tests/models/lfm2_moe: ["full_attention", "conv"])
    "lfm2_moe": {"layer_types": ["full_attention", "conv"]},
    # the decoder layers index mlp_layer_types ("dense" or "sparse", per the docstring)
    "deepseek_ocr2_text": {"mlp_layer_types": ["dense", "sparse"]},
    # the default layer types include "indexed_attention", whose QSA indexer needs all five
    # (tests/models/qwen4_exp: 2 heads, 1 kv head, budget 4, compress ratio 2; head dim 16 so the
    # rotary dims fit it)
    # RoPE parameters per layer type, none by default (tests/models/cohere_compass: full_attention,
    # default rope, theta 10000)
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    # the model builds a sliding-window mask even without sliding layers (tests/models/step3p7:
    # "sliding_window required by create_sliding_window_causal_mask even when no sliding layers")
    "step3p5": {"sliding_window": WINDOW},
    # without lang_ids the model takes the default language's adapters; none by default (the
    # class's only language, "en_XX": what set_default_language("en_XX") sets)
    "xmod": {"default_language": "en_XX"},
    # the talker's sparse MoE block builds a shared expert of this size; the class has no such field
    # (the checkpoints' config.json sets it)
    "qwen3_omni_moe_talker_text": {"shared_expert_intermediate_size": MOE_INTERMEDIATE},
    # deepstack projectors per (vision layer, LLM layer) pair and the Window Q-Former's rate, None by
    # default; the checkpoint's: [[-19, 9], [-13, 6], [-7, 3], [-1, 0]] and "4/8" (here the last two
    # vision layers into the two LLM layers). "4/8": 4x4 queries per 8x8 window of the checkpoint's
    # 24x24 patch grid (3x3 windows); the shrunk tower's grid is 2x2 patches (two a side, _fix_groups),
    # where no 8x8 window fits and no image could run: the same rate on a window that fits it, "1/2",
    # one query for the 2x2 window
    "granite4_vision": {"deepstack_layer_map": [[-1, 0], [-2, 1]], "downsample_rate": "1/2"},
    # the rotary embedding stacks the h and w sections and needs them equal; the generic M-RoPE
    # default ([16, 24, 24], t first) shrunk gave h 2, w 3. The modeling file's (and checkpoints') own
    # split, h and w first, is rescaled to the tiny head
    "ernie4_5_vl_moe_text": {"rope_parameters": {"mrope_section": [22, 22, 20]}},
    # the thinker's rope index finds images by the marker before them (config.vision_start_token_id)
    # and counts one after; the classes have no such fields, the checkpoints' thinker_config sets them
    "qwen2_5_omni_thinker": {"vision_start_token_id": 151652, "vision_end_token_id": 151653},
    "qwen3_omni_moe_thinker": {"vision_start_token_id": 151652, "vision_end_token_id": 151653},
    # the decoder's attention reads num_key_value_heads, a field the top-level config class lacks
    # (only its encoder config has one; the checkpoints' config.json sets it); its attention views
    # the queries with num_key_value_heads too, so it must equal the heads (no grouping)
    "moonshine_streaming": {"num_key_value_heads": HEADS},
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": HEAD_DIM,
                       "indexer_budget": 4, "indexer_compress_ratio": 2},
}


#: Class defaults no checkpoint has, replaced (by ``model_type``, after shrinking), with the tester's
#: choice. Kept to what the default cannot run at all.
CHECKPOINT_OVERRIDES: dict[str, dict[str, Any]] = {
    # all layers Mamba by default: the model's own forward then asks its cache for a sequence length
    # only attention layers know (get_seq_length raises); the checkpoints and tests/models/
    # granitemoehybrid mix Mamba and attention layers
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    # the adaptor's intermediate size must be the text model's hidden size // 4 (validate_architecture;
    # the class's sub-config defaults: 1024 // 4), lowered alone it is 128
    "fun_asr_nano": {"adaptor_config": {"intermediate_size": HIDDEN // 4}},
    # the rotary part of a head is at least 32 dims (ClvpRotaryPositionalEmbedding: max(projection_dim
    # // (heads * 2), 32)); 4 heads of 16 dims are too narrow for it, 2 heads of 32 fit
    "clvp_encoder": {"num_attention_heads": 2},
    # LLM layers of the four spatial offset groups, [12, 15, 18, 21] of 40: within the two tiny ones
    "granite4_vision": {"spatial_target_layers": [0, 0, 1, 1]},
    # the VQ-VAE's attention blocks (at level 3, attn_resolutions [3]) take that level's channels,
    # base_channels * channel_multiplier[3], as hidden_size (the class defaults: 256 * 4 = 1024);
    # lowered alone to HIDDEN it no longer matched the shrunk 32 * 4 and no image could be encoded
    "emu3_vqgan": {"hidden_size": _BASE_CHANNELS["base_channels"] * 4},
    # an audio prompt (input_values) is encoded by EnCodec into the decoder's input ids, so EnCodec
    # must give as many codebooks as the decoder reads, each of the decoder's vocabulary (the
    # checkpoints' audio_encoder: codebook_size 2048 == decoder vocab_size, target_bandwidths [2.2]
    # giving its 4 codebooks). The class defaults are EnCodec-24kHz's (1024 codes, 2 codebooks at
    # 1.5 kbps), and codebook_dim, set from hidden_size before shrinking, is left at the old width.
    # Bandwidth: codebooks * log2(codebook_size) bits * 75 frames per second (24 kHz, hop 320)
    # the codec's codes are embedded in the backbone's per-codebook tables of codebook_size
    # (vocab_size) rows: the codec's codebook must not be larger (the checkpoint: Mimi's 2048 codes,
    # Csm's 2051 rows); shrunk, Csm's tables have VOCAB rows and Mimi keeps 2048. The backbone's
    # audio-code table is tied to the depth decoder's, as wide as its backbone_hidden_size (the
    # checkpoint: both 2048)
    "csm": {"codec_config": {"codebook_size": VOCAB}, "depth_decoder_config": {"backbone_hidden_size": HIDDEN}},
    # the fast Mamba path by default, which transformers 5.10 refuses on a CPU ("Fast Mamba kernels
    # are not available ... set use_mamba_kernels=False"; tests/models/zamba sets it False); 5.17
    # falls back to the PyTorch path by itself and later versions ignore the flag
    "zamba": {"use_mamba_kernels": False},
    "musicgen": {"audio_encoder": {"codebook_size": VOCAB, "codebook_dim": HIDDEN,
                                   "target_bandwidths": [4 * 8 * 75 / 1000]}},
}


#: The same for config classes without a ``model_type`` of their own (sub-configs), by class name.
CHECKPOINT_CLASS_FIELDS: dict[str, dict[str, Any]] = {
    # its rope index reads spatial_merge_size (the vision tower's, 2; the checkpoints' talker config has it)
    "Qwen3OmniMoeTalkerConfig": {"spatial_merge_size": 2},
}


def _fill_class_fields(config, data: dict) -> None:
    """CHECKPOINT_CLASS_FIELDS into ``data`` (a config's shrunk ``to_dict()``) at every level whose
    config object (``config`` or a sub-config of it) is of a listed class."""
    _fill_checkpoint_fields(data, CHECKPOINT_CLASS_FIELDS.get(type(config).__name__, {}))
    for key, value in data.items():
        if _is_config(value) and isinstance(key, str):
            sub = vars(config).get(key)
            if hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
                _fill_class_fields(sub, value)


def _override(data: dict, fields: dict) -> None:
    for key, value in fields.items():
        if isinstance(value, dict) and _is_config(data.get(key)):
            _override(data[key], value)
        elif not isinstance(value, list) or not _is_natural(data.get("num_hidden_layers")) \
                or len(value) == data["num_hidden_layers"]:  # a per-layer list only where it fits
            data[key] = copy.deepcopy(value)


def _fill_checkpoint_fields(data: dict, fields: dict) -> None:
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            _fill_checkpoint_fields(data[key], value)
        elif data.get(key) is None:
            data[key] = copy.deepcopy(value)


def _is_config(value: Any) -> bool:
    return isinstance(value, dict) and "model_type" in value


def _lower(value: Any, target: int) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return value
    return min(value, target)


# Field-name groups and the size each is lowered to, checked in this order (vocab in between).
_SIZE_LIMITS = (
    (_WIDTH, HIDDEN), (_HEADS, HEADS), (_KV_HEADS, KV_HEADS), (_HEAD_DIM, HEAD_DIM),
    (_HALF_HEAD_DIM, HEAD_DIM // 2), (_INTERMEDIATE, INTERMEDIATE), (_MOE_INTERMEDIATE, MOE_INTERMEDIATE),
    (_EXPERTS, EXPERTS), (_TOP_K, TOP_K),
)
_MORE_SIZE_LIMITS = (
    (_POSITIONS, POSITIONS), (_IMAGE_QUERIES, IMAGE_QUERIES), (_LORA, LORA_RANK), (_STATE, STATE), (_WINDOW, WINDOW),
    (_PERIOD, 2), (_OFFSET, 1),
)


class _Shrinker:
    def __init__(self, mrope: bool = False) -> None:
        self.mrope = mrope
        self.token_map: dict[int, int] = {}
        self.used_ids: set[int] = set()

    # -- special tokens -------------------------------------------------------------------------
    def collect_tokens(self, data: Any) -> None:
        if isinstance(data, dict):
            for key, value in data.items():
                if is_token_key(key):
                    for token in ints(value):
                        if 0 <= token < VOCAB:
                            self.used_ids.add(token)
                else:
                    self.collect_tokens(value)
        elif isinstance(data, list):
            for item in data:
                self.collect_tokens(item)

    def remap(self, token: int) -> int:
        if not isinstance(token, int) or isinstance(token, bool) or token < VOCAB:
            return token
        if token not in self.token_map:
            self.token_map[token] = self.fresh_id()
        return self.token_map[token]

    # -- one config level -----------------------------------------------------------------------
    def shrink(self, data: dict) -> dict:
        data = dict(data)
        original = dict(data)
        original_hidden = data.get("hidden_size")
        layer_keys = [key for key in _LAYERS if isinstance(data.get(key), int) and not isinstance(data[key], bool)]
        old_layers = max((data[key] for key in layer_keys), default=None)
        if old_layers is None:
            # no count to shrink: the count is the length of the per-layer kinds (NemotronH's
            # num_hidden_layers is a property of layers_block_type; 52 layers in Nemotron transcribe)
            old_layers = max((len(value) for key, value in data.items() if key in _LAYER_KIND_LISTS
                              and isinstance(value, list) and value and all(isinstance(item, str) for item in value)),
                             default=None)
        keep = self._layers_to_keep(data, old_layers) if old_layers else None
        for key, value in list(data.items()):
            if _is_config(value):
                data[key] = self.shrink(value)
            elif isinstance(value, list) and value and all(_is_config(item) for item in value):
                data[key] = [self.shrink(item) for item in value]
            elif is_token_key(key):
                data[key] = [self.remap(item) for item in value] if isinstance(value, list) else self.remap(value)
            elif key == MODEL_ARGS and timm_level(data) is not None:
                continue  # a timm tower's knobs, shrunk by what they are (shrink_timm) below
            elif isinstance(value, dict) and keep is not None and _is_layer_dict(key, value, old_layers):
                data[key] = {str(keep.index(int(index))) if isinstance(index, str) else keep.index(index):
                             self._shrink_plain_dict(item) if isinstance(item, dict) else item
                             for index, item in value.items() if int(index) in keep}
            elif isinstance(value, dict):
                data[key] = self._shrink_plain_dict(value)
            elif key in _RATIO_TO_HIDDEN and isinstance(value, int) and isinstance(original_hidden, int) \
                    and original_hidden > HIDDEN and value % original_hidden == 0:
                data[key] = value // original_hidden * HIDDEN
            elif key in _WIDTH_LISTS and isinstance(value, list):
                data[key] = [_lower(item, HIDDEN) for item in value]
            elif keep is not None and isinstance(value, list) and key not in ("id2label", "label2id"):
                data[key] = self._size_list(key, self._per_layer(key, value, old_layers, keep))
            elif isinstance(value, list):
                data[key] = self._size_list(key, value)
            else:
                data[key] = self._scalar(key, value)
        if keep is not None:
            for key in layer_keys:
                # several layer counts in one config (encoder/decoder): each becomes len(keep) or less
                data[key] = min(data[key], len(keep)) if data[key] != old_layers else len(keep)
            shared = original.get(_KV_SHARED)
            if _is_natural(shared) and shared > 0:  # the kept layers at or after the first sharing one
                data[_KV_SHARED] = sum(index >= old_layers - shared for index in keep)
        filled = CHECKPOINT_FIELDS.get(data.get("model_type"), {})
        _fill_checkpoint_fields(data, filled)
        for key in filled:  # token ids the checkpoints set: into the tiny vocabulary too
            if is_token_key(key) and key not in _TOP_K and key in data:
                data[key] = [self.remap(item) for item in data[key]] if isinstance(data[key], list) \
                    else self.remap(data[key])
        if keep is not None:
            self._fix_per_layer_items(original, data, keep, old_layers)
        _override(data, CHECKPOINT_OVERRIDES.get(data.get("model_type"), {}))
        self._keep_equalities(original, data)
        self._keep_depthwise_groups(original, data)
        self._keep_derived_head_dim(original, data)
        self._keep_index_head_rotary(original, data)
        self._fix_groups(data)
        self._fix_pixel_window(original, data)
        self._fix_pooled_image_tokens(data)
        self._fix_grid_pinpoints(original, data)
        self._fix_patch_count_maps(data)
        self._fix_feature_layers(data)
        self._fix_adapter_feature_layers(original, data)
        self._fix_layer_index(data)
        self._fill_visual_ids(data)
        self._fill_vocabulary_map(data)
        self._fix_merged_widths(original, data)
        self._fix_downsampled_window(original, data)
        self._fix_parent_merged_image_size(original, data)
        self._stack_sub_vocabularies(original, data)
        shrink_timm_level(original, data, self._scalar)
        return data

    def fresh_id(self) -> int:
        """An id of the tiny vocabulary that no special token of the config uses yet."""
        candidate = VOCAB - 1
        while candidate in self.used_ids:
            candidate -= 1
        self.used_ids.add(candidate)
        return candidate

    def _fill_visual_ids(self, data: dict) -> None:
        """Image placeholder and marker ids that the class leaves None (MiniCPM-V: ``image_token_id``,
        ``image_start_id``, ...; the checkpoints set them from their tokenizer) get free ids: with the
        placeholder None the model never looks at its pixels, so no image sample could reach it. The
        same for the audio placeholder beside an audio sub-config (Voxtral's ``audio_token_id``): a
        caller building an audio sample from the shrunk config alone (llm-compressor's tests) got
        "the config names no audio_token_id"."""
        if _is_config(data.get("vision_config")):
            for key in sorted(data):
                if data[key] is None and is_visual_id_key(key):
                    data[key] = self.fresh_id()
        if _is_config(data.get("audio_config")):
            key = next((key for key in _AUDIO_PLACEHOLDERS if key in data), None)
            if key is not None and data[key] is None:
                data[key] = self.fresh_id()

    def _fill_vocabulary_map(self, data: dict) -> None:
        """Chameleon and Emu3 map their VQ-VAE's image codes to tokens through ``vocabulary_map``
        (the tokenizer's vocabulary; None in the class, the model cannot be built without it). A map
        like transformers' testers build: ``<image>`` (and Emu3's ``<|extra_200|>`` line end) and one
        token per code of the codebook, lowered to VQ_CODES codes, all on free ids of the tiny
        vocabulary, named as the model parses them."""
        vq = data.get("vq_config")
        size = next((key for key in ("num_embeddings", "codebook_size")
                     if isinstance(vq, dict) and _is_natural(vq.get(key))), None)
        if data.get("vocabulary_map", ...) is not None or size is None:
            return
        vq[size] = min(vq[size], VQ_CODES)
        names = {"<image>": self.fresh_id(), "<|extra_200|>": self.fresh_id()}
        for code in range(vq[size]):
            if data.get("model_type") == "emu3":
                name = f"<|visual token{code:06d}|>"
            else:  # Chameleon: the code's digits as letters between IMGIMG and a last character
                name = "IMGIMG" + "".join(chr(ord("A") + int(digit)) for digit in str(code)) + "Z"
            names[name] = self.fresh_id()
        data["vocabulary_map"] = names
        if data.get("image_token_id", ...) is None:  # the class derives it from the map, unless passed None
            data["image_token_id"] = names["<image>"]

    @staticmethod
    def _fix_layer_index(data: dict) -> None:
        """A single layer index (MiniCPM-V's ``insert_layer_id``: the vision layer after which the window
        merger runs) beyond the shrunk layers would never be reached, and the path it guards would go
        unchecked. Clamped to the last layer of the level's stack, or of the shortest stack below it
        (a top-level copy of a sub-config's index)."""
        def layer_counts(level: dict) -> list[int]:
            return [level[key] for key in _LAYERS if _is_natural(level.get(key))]

        counts = layer_counts(data) or [count for value in data.values() if _is_config(value)
                                        for count in layer_counts(value)]
        if not counts:
            return
        last = min(counts) - 1
        for key, value in data.items():
            if isinstance(key, str) and key.endswith(_LAYER_INDEX_SUFFIXES) and _is_natural(value) and value > last:
                data[key] = last

    @staticmethod
    def _fix_merged_widths(original: dict, data: dict) -> None:
        """A width that in the real config is the vision tower's width times ``merge**2`` is the width
        of merged (pixel-shuffled) patch features (MuseGlimmer's ``out_hidden_size`` = 1536 * 2**2):
        lowered on its own to 64 it no longer matches the 4 * 64 features the merge yields. It
        stays the tiny tower's width times the tiny ``merge**2``."""
        vision, real = data.get("vision_config"), original.get("vision_config")
        if not isinstance(vision, dict) or not isinstance(real, dict):
            return
        merge, real_merge = _merge_factor(vision), _merge_factor(real)
        width, real_width = vision.get("hidden_size"), real.get("hidden_size")
        if real_merge < 2 or not all(isinstance(value, int) and not isinstance(value, bool) and value > 0
                                     for value in (width, real_width)):
            return
        for key, value in original.items():
            if key in _WIDTH and key != "hidden_size" and value == real_width * real_merge**2:
                data[key] = width * merge**2
        # the text model's width times merge**2: MiniMax-M3-VL's merged_hidden_size, derived by the
        # class, but kept from the real config by transformers 5.17 (its __post_init__ derives it
        # before the stored value overrides it): the projector took 24576 features, not 4 * 64
        text, real_text = data.get("text_config"), original.get("text_config")
        text_width = text.get("hidden_size") if isinstance(text, dict) else None
        real_text_width = real_text.get("hidden_size") if isinstance(real_text, dict) else None
        if _is_natural(text_width) and _is_natural(real_text_width) and real_text_width > 0:
            for key, value in original.items():
                if isinstance(key, str) and key.startswith("merged_") and key.endswith("hidden_size") \
                        and value == real_text_width * real_merge**2:
                    data[key] = text_width * merge**2

    @staticmethod
    def _fix_parent_merged_image_size(original: dict, data: dict) -> None:
        """A tower whose merge factor is its parent's ``spatial_merge_size`` (Mistral3's Pixtral)
        keeps an image size of two merged patches a side, as a tower with its own factor does
        (``_fix_groups``): cut to two patches, Pixtral's ``image_size`` (its largest image) was below
        the image sample's sizes, which transformers 5.10 indexes its rotary table with (an
        IndexError on every image). Never above the real size."""
        merge, vision, real = data.get("spatial_merge_size"), data.get("vision_config"), original.get("vision_config")
        if not _is_natural(merge) or merge < 2 or not isinstance(vision, dict) or not isinstance(real, dict) \
                or _merge_factor(vision) > 1:
            return
        size, patch, real_size = vision.get("image_size"), vision.get("patch_size"), real.get("image_size")
        if all(_is_natural(value) and value > 0 for value in (size, patch, real_size)):
            vision["image_size"] = max(size, min(real_size, 2 * patch * merge))

    @staticmethod
    def _fix_patch_count_maps(data: dict) -> None:
        """A map keyed by patch counts (Aria's ``projector_patch_to_query_dict``: ``{1225: 128, 4900: 256}``,
        35x35 and 70x70 patches) names the image sizes the projector takes: with the tower shrunk to a
        few patches a side, no image it takes has a listed count. The smallest listed grid becomes the
        shrunk tower's grid (``image_size // patch_size`` a side), the others scale with it; each
        value (queries per image) is kept at most the new patch count."""
        vision = data.get("vision_config")
        size, patch = (vision.get(key) for key in ("image_size", "patch_size")) if isinstance(vision, dict) else (None, None)
        if not isinstance(size, int) or not isinstance(patch, int) or patch <= 0 or size // patch <= 0:
            return
        grid = size // patch
        for key, value in list(data.items()):
            counts = _square_count_map(value) if isinstance(key, str) and "patch" in key.lower() else None
            if not counts:
                continue
            smallest = min(math.isqrt(count) for count in counts)
            rescaled: dict[int, int] = {}
            for count, queries in sorted(counts.items()):
                new_count = max(1, round(math.isqrt(count) * grid / smallest)) ** 2
                rescaled.setdefault(new_count, min(queries, new_count))
            data[key] = rescaled
            if isinstance(data.get(f"max_value_{key}"), int):  # derived and stored by to_dict(): sizes the queries
                data[f"max_value_{key}"] = max(rescaled.values())

    @staticmethod
    def _fix_feature_layers(data: dict) -> None:
        """A list ``vision_feature_layer`` (VipLLaVA: ``[-2, -5, -8, -11, 6]``) indexes the vision tower's
        hidden states (``layers + 1`` of them): with the tower cut to a few layers the indices would
        run past them. Each is clamped into range; the list keeps its length (the projector is sized
        by it)."""
        vision = data.get("vision_config")
        count = vision.get("num_hidden_layers") if isinstance(vision, dict) else None
        for key in ("vision_feature_layer", "vision_feature_layers"):
            layers = data.get(key)
            if isinstance(layers, (list, tuple)) and isinstance(count, int) \
                    and all(isinstance(index, int) for index in layers):
                data[key] = [max(index, -(count + 1)) if index < 0 else min(index, count) for index in layers]

    @staticmethod
    def _fix_adapter_feature_layers(original: dict, data: dict) -> None:
        """A ``vision_feature_layer`` list in a sibling of ``vision_config`` (Molmo 2's adapter config:
        ``[24, 18]`` of 25 layers) indexes the vision layers: each keeps its distance from the last
        layer, within the shrunk tower (``[1, 0]`` of 2)."""
        vision, real = data.get("vision_config"), original.get("vision_config")
        count = vision.get("num_hidden_layers") if isinstance(vision, dict) else None
        real_count = real.get("num_hidden_layers") if isinstance(real, dict) else None
        if not _is_natural(count) or not _is_natural(real_count) or count == 0:
            return
        for key, value in data.items():
            layers = value.get("vision_feature_layer") if _is_config(value) and key != "vision_config" else None
            if isinstance(layers, list) and layers and all(isinstance(index, int) for index in layers):
                value["vision_feature_layer"] = [max(0, count - (real_count - index)) if index >= 0
                                                 else max(index, -count) for index in layers]

    @staticmethod
    def _fix_grid_pinpoints(original: dict, data: dict) -> None:
        """LLaVA-NeXT's ``image_grid_pinpoints`` are resolutions in pixels, tiled by tiles of the
        vision tower's ``image_size``: kept at the real 336-pixel scale over a 28-pixel tower, one image
        became hundreds of tiles. Scaled by the same factor as the tower's image size."""
        pinpoints = data.get("image_grid_pinpoints")
        before = (original.get("vision_config") or {}).get("image_size")
        after = (data.get("vision_config") or {}).get("image_size")
        if not isinstance(pinpoints, list) or not isinstance(before, int) or not isinstance(after, int) \
                or after >= before or not all(isinstance(point, list) and len(point) == 2 for point in pinpoints):
            return
        scaled = []
        for height, width in pinpoints:
            point = [max(1, round(height / before)) * after, max(1, round(width / before)) * after]
            if point not in scaled:
                scaled.append(point)
        data["image_grid_pinpoints"] = scaled

    @staticmethod
    def _fix_pooled_image_tokens(data: dict) -> None:
        """Gemma3's projector pools the vision tower's ``image_size / patch_size`` patches a side to
        ``sqrt(mm_tokens_per_image)`` tokens a side: with the tower shrunk and 256 tokens kept, the
        pooling kernel would be 0 wide. One token per patch, or the real count if smaller."""
        vision = data.get("vision_config")
        tokens = data.get("mm_tokens_per_image")
        if not isinstance(vision, dict) or not isinstance(tokens, int) or tokens <= 0:
            return
        size, patch = vision.get("image_size"), vision.get("patch_size")
        if isinstance(size, int) and isinstance(patch, int) and patch > 0 and size // patch > 0:
            side = min(int(tokens**0.5), size // patch)
            while (size // patch) % side:  # the kernel must tile the patch grid
                side -= 1
            data["mm_tokens_per_image"] = side * side

    @staticmethod
    def _fix_pixel_window(original: dict, data: dict) -> None:
        """A vision ``window_size`` next to ``patch_size`` and ``spatial_merge_size`` is in pixels
        (Qwen2.5-VL: ``window_size // spatial_merge_size // patch_size`` merged patches a side), not
        in tokens: lowered like a token window it would be 0 windows wide (a division by zero).
        Keep two merged patches a side, or the real value if smaller."""
        patch, merge, window = (original.get(key) for key in ("patch_size", "spatial_merge_size", "window_size"))
        if all(isinstance(value, int) and not isinstance(value, bool) and value > 0 for value in (patch, merge, window)) \
                and isinstance(data.get("patch_size"), int) and isinstance(data.get("spatial_merge_size"), int):
            data["window_size"] = min(window, 2 * data["patch_size"] * data["spatial_merge_size"])

    @staticmethod
    def _fix_downsampled_window(original: dict, data: dict) -> None:
        """A ``window_size`` pooled by ``downsample_rate`` (Granite Speech's projector: ``window_size //
        downsample_rate`` queries a window) stays a multiple of it: lowered like a token window, 15 // 5
        became 4 // 5 = 0 queries. Keep at most two queries a window."""
        window, rate = original.get("window_size"), original.get("downsample_rate")
        if all(isinstance(value, int) and not isinstance(value, bool) and value > 0 for value in (window, rate)) \
                and window % rate == 0 and isinstance(data.get("window_size"), int):
            data["window_size"] = rate * min(window // rate, 2)

    @staticmethod
    def _keep_derived_head_dim(original: dict, data: dict) -> None:
        """In a model whose attention assumes ``num_attention_heads * head_dim == hidden_size`` (BLT
        computes its heads' width as ``hidden_size // num_heads``, Helium's ``o_proj`` takes
        ``hidden_size`` inputs), a ``head_dim`` that is ``hidden_size // num_attention_heads`` in the
        real config stays so. Lowered on its own it breaks the identity once the heads go down with
        the kv heads (to 2, kept equal to them): 2 heads of 16 are 32 wide, not 64. Models whose
        attention reads the config's ``head_dim`` throughout are left alone."""
        if not any(_model_type_mentions(original.get("model_type"), text) for text in _HEADS_TIMES_HEAD_DIM):
            return

        def derived(level: dict):
            hidden, heads, head_dim = (level.get(key) for key in ("hidden_size", "num_attention_heads", "head_dim"))
            if all(_is_natural(value) and value > 0 for value in (hidden, heads, head_dim)):
                return hidden, heads, head_dim
            return None

        before, after = derived(original), derived(data)
        if before and after and before[0] == before[1] * before[2] and after[0] % after[1] == 0:
            data["head_dim"] = after[0] // after[1]

    def _fix_per_layer_items(self, original: dict, data: dict, keep: list[int], old_layers: int) -> None:
        """Per-layer overrides (``per_layer_config``: Dots 3's sliding layers with 64 heads of their
        own) are sizes like the level's: equal ones stay equal (kv heads == heads), and an MLA
        ``head_dim`` that is ``qk_nope_head_dim + qk_rope_head_dim`` stays so, the level's values
        filling in what an override leaves out. Only the overrides themselves change."""
        for key, value in original.items():
            if not (isinstance(value, dict) and _is_layer_dict(key, value, old_layers) and isinstance(data.get(key), dict)):
                continue
            real_items = {int(index): item for index, item in value.items()}
            for new_index, item in data[key].items():
                real = real_items.get(keep[int(new_index)])
                if not isinstance(item, dict) or not isinstance(real, dict):
                    continue
                level = {name: item for name, item in data.items() if not isinstance(item, (dict, list))}
                real_level = {name: item for name, item in original.items() if not isinstance(item, (dict, list))}
                merged, real_merged = {**level, **item}, {**real_level, **real}
                self._keep_equalities(real_merged, merged)
                parts = ("head_dim", "qk_nope_head_dim", "qk_rope_head_dim")
                if all(_is_natural(real_merged.get(name)) for name in parts) and all(_is_natural(merged.get(name)) for name in parts) \
                        and real_merged["head_dim"] == real_merged["qk_nope_head_dim"] + real_merged["qk_rope_head_dim"]:
                    merged["head_dim"] = merged["qk_nope_head_dim"] + merged["qk_rope_head_dim"]
                for name, size in merged.items():
                    if name in item or size != level.get(name):
                        item[name] = size

    @staticmethod
    def _keep_index_head_rotary(original: dict, data: dict) -> None:
        """A sparse-attention indexer's heads (``index_head_dim``: DeepSeek-V3.2, Dots 3) carry a
        rotary part ``qk_rope_head_dim`` wide and a pass-through rest: lowered on their own (128 to 2,
        kept equal to the 128 heads) they would be narrower than their rotary part (a split of
        ``[4, -2]``). Kept as many rotary parts wide as in the real config."""
        index, rope = original.get("index_head_dim"), original.get("qk_rope_head_dim")
        new_index, new_rope = data.get("index_head_dim"), data.get("qk_rope_head_dim")
        if all(_is_natural(value) and value > 0 for value in (index, rope, new_index, new_rope)) and index >= rope:
            data["index_head_dim"] = max(new_index, new_rope * (index // rope))

    @staticmethod
    def _stack_sub_vocabularies(original: dict, data: dict) -> None:
        """Sub-configs that own a range of the text vocabulary (``vocab_offset``, ``vocab_size``:
        Gemma 3n's vision and audio embeddings, stacked at its top) keep owning its top when the text
        vocabulary shrinks: the model indexes them with text ids (``vocab_size - 1`` pads the audio
        features through the audio embedding), so offsets left at the real 262144 index out of range."""
        text = data.get("text_config")
        vocab = text.get("vocab_size") if isinstance(text, dict) else None
        real_text = original.get("text_config")
        real_vocab = real_text.get("vocab_size") if isinstance(real_text, dict) else None
        owners = sorted((key for key, value in original.items() if isinstance(value, dict)
                         and isinstance(value.get("vocab_offset"), int) and isinstance(value.get("vocab_size"), int)),
                        key=lambda key: original[key]["vocab_offset"])
        if not owners or not isinstance(vocab, int) or not isinstance(real_vocab, int):
            return
        end = real_vocab
        for key in reversed(owners):  # only ranges stacked against the top, each against the next
            if original[key]["vocab_offset"] + original[key]["vocab_size"] != end:
                return
            end = original[key]["vocab_offset"]
        size = max(1, vocab // (4 * len(owners)))  # three quarters of the tiny vocabulary stay text
        end = vocab
        for key in reversed(owners):
            data[key]["vocab_size"] = size
            data[key]["vocab_offset"] = end - size
            end -= size

    @staticmethod
    def _keep_equalities(original: dict, data: dict) -> None:
        """Sizes equal in the real config stay equal (MLA's head_dim == qk_rope_head_dim,
        multi-head attention's kv heads == heads, ...): both take the smaller new value."""
        sized = [key for key, value in original.items() if key in _SIZE_KEYS and isinstance(value, int)
                 and not isinstance(value, bool) and value >= 2 and isinstance(data.get(key), int)]
        for _ in range(2):
            for first in sized:
                for second in sized:
                    if first < second and original[first] == original[second] and data[first] != data[second]:
                        data[first] = data[second] = min(data[first], data[second])

    @staticmethod
    def _keep_depthwise_groups(original: dict, data: dict) -> None:
        """Convolution groups equal to the real hidden size (Mimi's depthwise ``upsample_groups``
        512 over 512 channels) become the new hidden size: a conv's channels must stay divisible
        by its groups ("in_channels must be divisible by groups")."""
        hidden, new_hidden = original.get("hidden_size"), data.get("hidden_size")
        if not _is_natural(hidden) or not _is_natural(new_hidden) or not new_hidden:
            return
        for key, value in original.items():
            if key.endswith("_groups") and key in _DEPTHWISE_GROUPS and value == hidden:
                data[key] = new_hidden

    def _shrink_plain_dict(self, value: dict) -> dict:
        out = {}
        for key, item in value.items():
            if isinstance(item, dict):
                out[key] = self._shrink_plain_dict(item)
            elif key in ("short_factor", "long_factor") and isinstance(item, list):
                out[key] = item[: max(1, HEAD_DIM // 2)]
            elif key == "mrope_interleaved":
                out[key] = item
            else:
                out[key] = self._scalar(key, item)
        return out

    def _size_list(self, key, value: list) -> list:
        """A list of sizes under a size name (per-stage widths and heads of a conv/Swin tower,
        Florence-2's ``embed_dim`` ``[128, 256, 512, 1024]``; per-layer intermediate sizes, Gemma 3n's
        ``intermediate_size``): each lowered like the single size."""
        if not isinstance(key, str) or not value or not all(_is_natural(item) for item in value) \
                or not any(key in names for names, _ in _SIZE_LIMITS):
            return value
        return [self._scalar(key, item) for item in value]

    def _scalar(self, key, value: Any) -> Any:
        if not isinstance(key, str):
            return value
        if key in _BASE_CHANNELS:
            return _lower(value, _BASE_CHANNELS[key])
        for names, limit in _SIZE_LIMITS:
            if key in names:
                return _lower(value, limit)
        if key == "vocab_size" or key.endswith(("_vocab_size", "_vocab")) or key.startswith("vocab_size_"):
            # also hashed n-gram vocabularies (BLT's ``encoder_hash_byte_group_vocab``) and per-layer
            # input vocabularies (Gemma 3n's ``vocab_size_per_layer_input``), indexed by the token ids
            return _lower(value, VOCAB)
        for names, limit in _MORE_SIZE_LIMITS:
            if key in names:
                return _lower(value, limit)
        if key in ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"):
            return _lower(value, 1)
        if key in ("n_group", "num_expert_group"):
            return _lower(value, 2)
        if key == "topk_group":
            return _lower(value, 1)
        if key == "query_pre_attn_scalar":
            return _lower(value, HEAD_DIM)
        if key in _INIT_STD and isinstance(value, float) and 0 < value < MIN_INIT_STD:
            # SAM-style towers (GOT-OCR2, BLIP-2, ...) initialise with std 1e-10, standing in for
            # trained weights: a tiny tower built so passes (almost) nothing of its pixels on
            return INIT_STD
        if key == "image_size" and isinstance(value, int):
            return value  # fixed up with the patch size in _fix_groups
        return value

    def _layers_to_keep(self, data: dict, old: int) -> list[int]:
        """Old layer indices to keep: the first of every layer kind and of every index list."""
        keep: set[int] = set()
        for key, value in data.items():
            if not isinstance(value, list) or not value or key in ("id2label", "label2id"):
                continue
            if len(value) == old and all(isinstance(item, (str, int, bool)) or item is None for item in value):
                firsts: dict = {}
                for index, item in enumerate(value):
                    firsts.setdefault(repr(item), index)
                keep.update(firsts.values())
            elif _is_index_list(key, value, old):
                keep.add(value[0])
        # the last ``num_kv_shared_layers`` layers reuse the kv cache of the last earlier layer of
        # their kind (Gemma 3n, Gemma 4): the first layer of every kind before and after that point
        shared, needed = data.get(_KV_SHARED), set()
        if _is_natural(shared) and 0 < shared < old:
            types = data.get("layer_types")
            types = types if isinstance(types, list) and len(types) == old else [None] * old
            firsts = {}
            for index, kind in enumerate(types):
                firsts.setdefault((repr(kind), index >= old - shared), index)
            needed = set(firsts.values())
        for key, kinds in _TWICE.get(data.get("model_type"), {}).items():
            value = data.get(key)
            if isinstance(value, list) and len(value) == old:
                for kind in kinds:
                    needed.update([index for index, item in enumerate(value) if item == kind][:2])
        keep = sorted(needed | set(sorted(keep - needed)[:max(0, 4 - len(needed))]))
        index = 0
        while len(keep) < min(2, old):
            if index not in keep:
                keep.append(index)
            index += 1
        return sorted(keep)

    def _per_layer(self, key: str, value: list, old: int, keep: list[int]) -> list:
        if len(value) == old and all(isinstance(item, (str, int, bool, float)) or item is None for item in value):
            return [value[index] for index in keep]
        if _is_index_list(key, value, old):
            return [keep.index(item) for item in value if item in keep] or [len(keep) - 1]
        return value

    @staticmethod
    def _mrope(data: dict, rope: dict) -> dict:
        """``rope`` with its ``mrope_section`` summing to half the rotary dims: modeling files
        default it to the real head_dim's [16, 24, 24]."""
        head_dim = data.get("head_dim") if isinstance(data.get("head_dim"), int) else HEAD_DIM
        factor = rope.get("partial_rotary_factor", data.get("partial_rotary_factor")) or 1.0
        total = max(3, int(head_dim * factor) // 2)
        return {**rope, "mrope_section": _rescale(rope.get("mrope_section") or [16, 24, 24], total, exact=True)}

    def _fix_groups(self, data: dict) -> None:
        hidden = data.get("hidden_size")
        heads = next((data[key] for key in ("num_attention_heads", "n_head", "num_heads") if isinstance(data.get(key), int)), None)
        # None defaults the modeling code divides by (the real checkpoints always set them)
        if "head_dim" in data and data["head_dim"] is None and isinstance(hidden, int) and heads:
            data["head_dim"] = hidden // heads
        if "num_key_value_heads" in data and data["num_key_value_heads"] is None and heads:
            data["num_key_value_heads"] = heads
        if isinstance(data.get("qk_head_dim"), int) and isinstance(data.get("qk_nope_head_dim"), int) \
                and isinstance(data.get("qk_rope_head_dim"), int):
            data["qk_head_dim"] = data["qk_nope_head_dim"] + data["qk_rope_head_dim"]
        # Mamba: heads * head dim must equal expand * hidden (or mamba_d_ssm)
        if isinstance(data.get("mamba_n_heads"), int) and isinstance(data.get("mamba_expand"), int) \
                and isinstance(hidden, int):
            if isinstance(data.get("mamba_d_ssm"), int):
                data["mamba_d_ssm"] = data["mamba_expand"] * hidden
            if not isinstance(data.get("mamba_d_head"), int) or isinstance(data.get("mamba_d_head"), bool):
                data["mamba_d_head"] = HEAD_DIM
        for heads_key, dim_key, expand_key in (("mamba_n_heads", "mamba_d_head", "mamba_expand"),
                                               ("num_heads", "head_dim", "expand")):
            if all(isinstance(data.get(key), int) for key in (heads_key, dim_key, expand_key)) \
                    and isinstance(hidden, int) and (expand_key != "expand" or "n_groups" in data or "state_size" in data):
                data[heads_key] = max(1, data[expand_key] * hidden // data[dim_key])
        if any(key in data and data[key] is None for key in _EXPERTS) \
                and any(_is_natural(data.get(key)) for key in _MOE_INTERMEDIATE):
            # a MoE block whose counts the class leaves None (Dots1: ``n_routed_experts``,
            # ``num_experts_per_tok``, ``n_shared_experts``; every checkpoint sets them)
            for key in _EXPERTS:
                if key in data and data[key] is None:
                    data[key] = EXPERTS
            for key in ("n_shared_experts", "num_shared_experts"):
                if key in data and data[key] is None:
                    data[key] = 1
        experts = next((data[key] for key in _EXPERTS if isinstance(data.get(key), int)), None)
        for key in _TOP_K:
            if key in data and data[key] is None and experts:
                data[key] = min(TOP_K, experts)
        for key in ("n_groups", "mamba_n_groups"):
            if isinstance(data.get(key), int) and data[key] > 1:
                data[key] = 1
        heads = next((data[key] for key in ("num_attention_heads", "n_head", "num_heads") if isinstance(data.get(key), int)), None)
        for key in _KV_HEADS:
            if isinstance(data.get(key), int) and heads and heads % data[key]:
                data[key] = 1
        experts = next((data[key] for key in _EXPERTS if isinstance(data.get(key), int)), None)
        for key in ("n_group", "num_expert_group"):
            if experts and isinstance(data.get(key), int) and experts % data[key]:
                data[key] = 1
        if isinstance(data.get("patch_size"), int) and isinstance(data.get("image_size"), int):
            # two merged patches a side: a pixel shuffle by `scale_factor` (Granite-Docling's vision
            # config) of a grid smaller than the factor would be 0 wide
            data["image_size"] = min(data["image_size"], 2 * data["patch_size"] * _merge_factor(data))
        _fix_image_size_pair(data)
        ratio = data.get("pixel_shuffle_ratio")
        if isinstance(ratio, float) and 0 < ratio < 1 and isinstance(hidden, int) \
                and isinstance(data.get("intermediate_size"), int) and isinstance(data.get("projector_input_dim"), int):
            # Llama 4's vision adapter: the pixel shuffle folds ratio**-2 patches into one feature of
            # hidden / ratio**2 channels, which the adapter's first layer takes as intermediate_size
            # (1408 -> 5632 in the real checkpoint; the class defaults do not match)
            data["intermediate_size"] = round(hidden / ratio**2)
            if isinstance(data.get("vision_output_dim"), int) and isinstance(data.get("projector_output_dim"), int):
                # the multimodal projector takes the adapter's output (4096 = 4096 in the checkpoint)
                data["vision_output_dim"] = data["projector_output_dim"]
        indices = data.get("intermediate_layers_indices")
        if isinstance(data.get("vision_output_dim"), int) and isinstance(indices, list) and isinstance(data.get("hidden_size"), int):
            data["vision_output_dim"] = data["hidden_size"] * (len(indices) + 1)
        rope = data.get("rope_parameters")
        mrope = self.mrope or _model_type_mentions(data.get("model_type"), "mrope_section")
        if isinstance(rope, dict) and "rope_type" in rope and (mrope or "mrope_section" in rope):
            data["rope_parameters"] = self._mrope(data, rope)
        elif isinstance(rope, dict) and rope and all(isinstance(item, dict) and "rope_type" in item or item is None
                                                     for item in rope.values()) and mrope:
            # per layer type (Cohere Compass: {"full_attention": {...}}), each with its own sections
            data["rope_parameters"] = {kind: item if item is None else self._mrope(data, item)
                                       for kind, item in rope.items()}
        for key in ("vision_feature_layer",):
            if isinstance(data.get(key), int) and data[key] > 1:
                data[key] = 1


def _merge_factor(data: dict) -> int:
    """Patches merged a side in one config level (1 where it states none)."""
    for key in _MERGE:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 1


def _square_count_map(value: Any) -> dict[int, int] | None:
    """``value`` as ``{patch count: int}`` when it is a map from square numbers (patch grids of square
    images; keys may be strings after a JSON round trip) to positive ints, else None."""
    if not isinstance(value, dict) or not value:
        return None
    counts = {}
    for key, item in value.items():
        try:
            count = int(key)
        except (TypeError, ValueError):
            return None
        if count <= 0 or math.isqrt(count) ** 2 != count or isinstance(item, bool) or not isinstance(item, int) \
                or item <= 0:
            return None
        counts[count] = item
    return counts


def _is_layer_dict(key, value: dict, old: int | None) -> bool:
    if not old or not value or not isinstance(key, str) or "layer" not in key.lower():
        return False
    try:
        return all(0 <= int(index) < old for index in value)
    except (TypeError, ValueError):
        return False


def _fix_image_size_pair(data: dict) -> None:
    """An ``image_size`` of ``[height, width]`` (Molmo2's tower, ``[378, 378]``) is lowered as an int one
    is, each side: to two merged patches. Molmo2 adds one position embedding per patch of that size
    (``num_position_embeddings``, 27 * 27 = 729, stored by ``to_dict``): a count that was the real
    size's patches becomes the new size's. A tower kept at the real size made every crop 729 patches
    and every image ~400 image tokens: the row ran past the sweep's time limit."""
    size, patch = data.get("image_size"), data.get("patch_size")
    if not (_is_natural(patch) and patch > 0 and isinstance(size, list) and len(size) == 2
            and all(_is_natural(side) and side > 0 for side in size)):
        return
    lowered = [min(side, 2 * patch * _merge_factor(data)) for side in size]
    if data.get("num_position_embeddings") == (size[0] // patch) * (size[1] // patch):
        data["num_position_embeddings"] = (lowered[0] // patch) * (lowered[1] // patch)
    data["image_size"] = lowered


def _is_natural(value: Any) -> bool:
    """A non-negative int (a count or an index; not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_index_list(key: str, value: list, old: int) -> bool:
    return (any(name in key.lower() for name in _PER_LAYER_NAMES) and bool(value)
            and all(isinstance(item, int) and not isinstance(item, bool) and 0 <= item < old for item in value)
            and len(set(value)) == len(value))


def _rescale(section: list, total: int, exact: bool = False) -> list:
    if not all(isinstance(item, int) for item in section) or sum(section) == total or (sum(section) < total and not exact):
        return section
    scaled = [max(1, math.floor(item * total / sum(section))) for item in section]
    scaled[-1] += total - sum(scaled)
    return scaled if scaled[-1] > 0 else section


def shrink_dict(data: dict, mrope: bool = False) -> dict:
    """The shrunk copy of a config's ``to_dict()``. ``mrope``: the modeling code reads
    ``rope_parameters["mrope_section"]`` (with a default sized for the real model)."""
    shrinker = _Shrinker(mrope)
    shrinker.collect_tokens(data)
    return shrinker.shrink(copy.deepcopy(data))


def shrink_config(config_class: type, **overrides):
    """A tiny instance of ``config_class`` (its defaults, shrunk)."""
    config = _with_vision(config_class)
    mrope = _modeling_mentions(config_class, "mrope_section")
    # Twice: building a config can add defaults sized for the real model (e.g. Qwen2-VL's
    # mrope_section); the second pass shrinks those too.
    for _ in range(2):
        data = shrink_dict(config.to_dict(), mrope)
        _fill_class_fields(config, data)
        for key in ("transformers_version", "architectures", "_name_or_path"):
            data.pop(key, None)
        _drop_sub_config_defaults(data)
        data.update(overrides)
        config = config_class.from_dict(data)
    return config


#: Vision sub-configs whose class default builds no model of the class, replaced (by ``model_type``,
#: before shrinking) with the checkpoints' at their real sizes: shrunk like any other.
CHECKPOINT_VISION_CONFIGS: dict[str, dict[str, Any]] = {
    # PerceptionLMConfig's default vision config is TimmWrapperConfig()'s resnet50 without model_args,
    # and the projector reads vision_config.model_args["embed_dim"] (a TypeError on None). The
    # checkpoints' tower is the Perception Encoder ViT; PLM-1B's and 3B's: vit_pe_core_large_patch14_336,
    # 23 blocks of width 1024 on 448-pixel tiles of 14-pixel patches, with the knobs transformers'
    # convert_perception_lm_weights_to_hf.py sets (layer scale 0.1 and no post-norm, as its tester)
    "perception_lm": {"architecture": "vit_pe_core_large_patch14_336",
                      "model_args": {"embed_dim": 1024, "depth": 23, "img_size": [448, 448], "global_pool": "",
                                     "use_post_transformer_norm": False, "init_values": 0.1,
                                     "ref_feat_shape": [32, 32]}},
}


#: Sub-configs whose class default fails the config's own validation, replaced (by ``model_type``,
#: before shrinking) with the fields every checkpoint sets. Gemma 4's assistant takes the default
#: ``gemma4_text`` config, the E2B target's (per-layer inputs of 256), which its
#: ``validate_architecture`` refuses: an assistant has no per-layer inputs (the checkpoints'
#: ``hidden_size_per_layer_input`` and ``vocab_size_per_layer_input`` are 0).
CHECKPOINT_SUB_CONFIGS: dict[str, dict[str, Any]] = {
    "gemma4_assistant": {"text_config": {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}},
}


#: Fields ``to_dict()`` writes into every sub-config at these values, which some sub-config classes
#: refuse back (transformers 5.10's Dbrx attention and FFN configs: "Found unknown
#: kwargs={'_name_or_path': '', 'output_attentions': False}"); left out, each is its default again.
_SUB_CONFIG_DEFAULTS = {"_name_or_path": "", "output_attentions": False}


def _drop_sub_config_defaults(data: dict) -> None:
    for value in data.values():
        for sub in (value if isinstance(value, list) else [value]):
            if _is_config(sub):
                for key, default in _SUB_CONFIG_DEFAULTS.items():
                    if key in sub and sub[key] == default and type(sub[key]) is type(default):
                        del sub[key]
                _drop_sub_config_defaults(sub)


def _with_vision(config_class: type):
    """The class's defaults; where those leave out an optional vision sub-config (Gemma 4 builds
    text-only unless given one), with the vision sub-config's own defaults: the tiny model gets its
    vision tower, so its image path can be checked. Where the default vision sub-config builds no
    model (``CHECKPOINT_VISION_CONFIGS``), with the checkpoints'."""
    checkpoint = CHECKPOINT_VISION_CONFIGS.get(getattr(config_class, "model_type", None))
    if checkpoint is not None:
        return config_class(vision_config=copy.deepcopy(checkpoint))
    sub_configs = CHECKPOINT_SUB_CONFIGS.get(getattr(config_class, "model_type", None), {})
    config = config_class(**copy.deepcopy(sub_configs))
    defaults = getattr(config_class, "sub_configs_defaults", None)
    if defaults is not None:
        optional = getattr(defaults.get("vision_config"), "optional", False)
    else:  # before transformers declared sub-config defaults (5.10): a vision sub-config class left None
        optional = "vision_config" in (getattr(config_class, "sub_configs", None) or {})
    if optional and getattr(config, "vision_config", ...) is None:
        try:
            return config_class(vision_config={})
        except Exception:  # noqa: BLE001  (no default vision config to build: stay text-only)
            return config
    return config


def _modeling_mentions(config_class: type, word: str) -> bool:
    import importlib.util
    import sys

    name = config_class.__module__.replace(".configuration_", ".modeling_")
    try:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            return word in open(module.__file__, encoding="utf-8").read()
        spec = importlib.util.find_spec(name)
        return bool(spec and spec.origin and word in open(spec.origin, encoding="utf-8").read())
    except Exception:  # noqa: BLE001
        return False


def _model_type_mentions(model_type, word: str) -> bool:
    """Does the modeling file of ``model_type``'s config class mention ``word``?"""
    if not isinstance(model_type, str):
        return False
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return _modeling_mentions(CONFIG_MAPPING[model_type], word)
    except Exception:  # noqa: BLE001
        return False
