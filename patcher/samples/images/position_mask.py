"""Fixed-size images whose features go where a mask says (Kosmos-2): ``pixel_values (N, C, S, S)``
at the tower's ``image_size``, ``latent_query_num`` features per image, placed where
``image_embeds_position_mask`` is 1. The processor puts a run of ids from ``unk + 1`` there (their
embeddings are replaced); here the run is the text's BOS id, a special token no text draws, so the
mask marks exactly the image runs (as for Kosmos-2.5 in ``pix2struct``)."""

from __future__ import annotations

from .layout import ImageLayout, register_layout
from .square import default_size, pixels


def config_count(config, size) -> int:
    return int(config.latent_query_num)


LAYOUT = register_layout(ImageLayout(
    name="position_mask",
    model_types=("kosmos-2",),
    pixels=pixels, default_size=default_size, config_count=config_count,
    placeholder=lambda config: int(config.get_text_config().bos_token_id),
))
