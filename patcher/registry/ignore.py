"""The functions and methods kept opaque by default, for the tracer and the rewriter alike."""

from __future__ import annotations

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
)

#: The checks on that list: the tracer keeps them opaque like the rest, but the rewriter moves each
#: with its message (TZ102) rather than forwarding it (TZ106).
CHECKS_IGNORED: tuple[str, ...] = ("torch_compilable_check",)

#: What the rewriter forwards to module-level wrappers (TZ106): the list above, less its checks.
FORWARDED_BY_REWRITER: tuple[str, ...] = tuple(name for name in DEFAULT_IGNORE if name not in CHECKS_IGNORED)
