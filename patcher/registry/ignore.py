"""The functions and methods kept opaque by default, for the tracer and the rewriter alike."""

from __future__ import annotations

from typing import Iterable

#: transformers.vision_utils' index and position builders of vision towers, computed from
#: ``grid_thw`` with ``.tolist()``, ``len()`` and loops (transformers precomputes them for export),
#: and ``get_max_seqlen`` (``.item()`` of the longest packed sequence, for flash attention). Reached
#: only when a tower is traced through (its blocks are sequential targets); kept opaque when tracing,
#: not rewritten in source (generated files stay as they were for text-layer targets).
TOWER_HELPERS: tuple[str, ...] = (
    "get_vision_position_ids",
    "get_vision_window_index",
    "get_vision_interpolation_indices_and_weights",
    "get_vision_bilinear_indices_and_weights",
    "get_vision_nearest_position_ids",
    "get_vision_merged_shape",
    "get_max_seqlen",
)

#: Modules and functions kept opaque by default: transformers' mask builders and helpers whose
#: bodies branch on tensor values. Entries are module class names, ``re:`` module-name
#: patterns, or names of functions/methods.
DEFAULT_IGNORE: tuple[str, ...] = (
    "create_causal_mask",
    "create_sliding_window_causal_mask",
    "create_chunked_causal_mask",
    "create_bidirectional_mask",
    "create_bidirectional_sliding_window_mask",
    "create_recurrent_attention_mask",
    "create_masks_for_generate",
    "create_masks_for_vision_model",
    "_prepare_4d_causal_attention_mask",
    "_prepare_4d_causal_attention_mask_with_cache_position",
    "_prepare_4d_attention_mask",
    "_update_causal_mask",
    "get_rope_index",
    "torch_compilable_check",
    # Gemma 4 (transformers 5.23 on): before the first KV-sharing layer, slices the inputs to the
    # positions `logits_to_keep` asks for, decided by an if/elif on the sequence length, flags and the
    # attention implementation; traced, every KV-sharing config (the E2B/E4B checkpoints') failed
    "_maybe_slice_kv_shared_inputs",
    *TOWER_HELPERS,
)

#: The checks on that list: the tracer keeps them opaque like the rest, but the rewriter moves each
#: with its message (TZ102) rather than forwarding it (TZ106).
CHECKS_IGNORED: tuple[str, ...] = ("torch_compilable_check",)

#: What the rewriter forwards to module-level wrappers (TZ106): the list above, less its checks and
#: the vision towers' helpers (kept opaque by the tracer itself when a tower is traced through;
#: forwarders for them would only add code to every VLM's file).
FORWARDED_BY_REWRITER: tuple[str, ...] = tuple(name for name in DEFAULT_IGNORE
                                               if name not in CHECKS_IGNORED and name not in TOWER_HELPERS)


def resolve_ignore(ignore: Iterable[str] | str | None) -> list[str]:
    """The ignore list to use: ``None`` means :data:`DEFAULT_IGNORE`, an empty list nothing; else
    :func:`patcher.normalize.module_entries` (a single string or module class is one entry, never
    split into characters; another type raises ``TypeError``)."""
    if ignore is None:
        return list(DEFAULT_IGNORE)
    from ..normalize import module_entries

    return module_entries(ignore, "ignore", functions=True)
