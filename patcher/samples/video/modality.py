"""Video: a class whose family has a video layout (``patcher.samples.video``) gets one video per row on
two layouts (another frame count and size), and the chain must follow eager where only the video
changes."""

from __future__ import annotations

import torch

from ..declaration import Modality
from ..images.modality import NEEDS_IMAGES, with_other_pixels


def video_samples(config, model, seed: int) -> list[dict]:
    from . import second_video_layout, video_sample

    return [video_sample(config, batch_size=2, seq_len=8, left_padding=1, model=model,
                         generator=torch.Generator().manual_seed(seed)),
            video_sample(config, batch_size=1, seq_len=13, model=model,
                         generator=torch.Generator().manual_seed(seed + 1), **second_video_layout(config))]


def command_sample(config, model, **options) -> tuple[dict, None]:
    """``--modality video``: one video per row, its tokens counted by the model's own
    ``get_video_features`` on the meta device."""
    from . import video_sample
    from ...models.attempt import sample_on_meta

    return sample_on_meta(lambda: video_sample(config, model=model, **options), "video"), None


def _has_video_layout(cls, config) -> bool:
    from . import has_video_layout

    return has_video_layout(config)


VIDEO = Modality(
    label="video", noun="video", attempt="video", given="with a video layout", varied="the video",
    hint="check the sample's video tokens and frame layout, and that the tiny vision tower's output depends on "
         "its pixels",
    text_alone=NEEDS_IMAGES,
    takes=_has_video_layout,
    samples=video_samples,
    # a video layout's pixel inputs are values only: no patch carries its grid position (as
    # Pix2Struct's do, whose image layout varies them itself)
    vary=lambda sample, seed, config: with_other_pixels(sample, seed),
    chain_runs_varied=True,
    order=1,
    input_name="pixel_values_videos",
    text_alone_summary="need images",
    command_sample=command_sample,
)

#: what :mod:`patcher.samples.modalities` finds
MODALITY = VIDEO
