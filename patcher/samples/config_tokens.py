"""Which config fields hold token ids, and the set of special token ids a config names.

Both the config shrinker (which moves these ids into a tiny vocabulary) and every sample builder
(whose ordinary text tokens must avoid them: an image token in a text sample asks for image
features) read a config's token ids the same way, by field name alone.
"""

from __future__ import annotations

from typing import Any, Iterator

#: First words of the ids of image input tokens that do not say "token" (MiniCPM-V 4.7's
#: ``image_start_id``, ``slice_end_id``, ``newline_id``): ids in the text vocabulary all the same.
VISUAL_MARKER_WORDS = ("image", "video", "slice", "newline")


def is_visual_id_key(key) -> bool:
    """``image_start_id``, ``image_token_id``, BLIP-2's ``image_token_index``, ...: an id of the text
    vocabulary named by its visual first word."""
    return isinstance(key, str) and key.endswith(("_id", "_index")) and key.split("_")[0] in VISUAL_MARKER_WORDS


def is_token_key(key) -> bool:
    """Whether a config field named ``key`` holds token ids (``pad_token_id``, ``image_token_index``, ...)."""
    if not isinstance(key, str):
        return False
    if is_visual_id_key(key):
        return True
    key = key.lower()
    if key.startswith("num_") or key.endswith("_per_token"):
        return False  # a count (num_experts_per_token, num_image_tokens), never an id
    return "token" in key and (key.endswith("_id") or key.endswith("_ids") or key.endswith("_index")
                               or key.endswith("_idx") or key.endswith("token"))


def ints(value: Any) -> Iterator[int]:
    """The ints in ``value``: itself, or those of a (nested) list; bools are not ints here."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from ints(item)


def special_tokens(config) -> set[int]:
    """Every token id a field of the config (sub-configs included) names."""
    tokens: set[int] = set()

    def walk(data):
        if isinstance(data, dict):
            for key, value in data.items():
                if is_token_key(key):
                    tokens.update(ints(value))
                else:
                    walk(value)
        elif isinstance(data, list):
            for item in data:
                walk(item)

    walk(config.to_dict())
    return tokens
