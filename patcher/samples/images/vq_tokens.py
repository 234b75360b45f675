"""Images the model tokenizes itself (Chameleon, Emu3): ``pixel_values (N, C, H, W)`` into the
VQ-VAE of ``vq_config``, whose codes the model maps to text tokens of its own vocabulary
(``vocabulary_map``) and embeds in place of the ``<image>`` placeholders. No vision tower, no
``vision_config``: the sizes come from the VQ-VAE, which downsamples by
``2 ** (len(channel_multiplier) - 1)`` a side (one code per ``factor x factor`` pixels).

- Chameleon: the processor resizes and crops every image to one square (512 px, the VQ-VAE's
  ``resolution``; its ``image_seq_length`` 1024 = 32 x 32 codes); here two codes a side. One
  placeholder per code.
- Emu3: any size in multiples of the factor (the processor's ``smart_resize``), with
  ``image_sizes (N, 2)``; the model ends each row of codes with a line-end token, so an image of
  ``h x w`` codes takes ``h * (w + 1)`` placeholders. A second size is drawn.

The markers the processors put around an image (``<racm3:break>`` / ``<eoss>``, Emu3's
``<|image start|>h*w<|image token|>`` ... ``<|image end|>``) are text to the model, which finds
its images by the placeholders alone; they are left out.
"""

from __future__ import annotations

import torch

from .layout import ImageLayout, register_layout


def vq_config(config):
    vq = getattr(config, "vq_config", None)
    if vq is None:
        raise ValueError(f"{config.model_type}: the config has no vq_config, so there is no VQ-VAE to take pixels")
    return vq


def factor(config) -> int:
    """Pixels a side of one code: the encoder halves the image after every level but the last."""
    return 2 ** (len(vq_config(config).channel_multiplier) - 1)


def takes_sizes(config) -> bool:
    """Emu3 takes any multiple of the factor (with ``image_sizes``); Chameleon one square size."""
    return config.model_type == "emu3"


def default_size(config) -> tuple[int, int]:
    step = factor(config)
    return (2 * step, 3 * step) if takes_sizes(config) else (2 * step, 2 * step)  # h/w mix-up shows


def other_size(config) -> tuple[int, int] | None:
    step = factor(config)
    return (3 * step, 2 * step) if takes_sizes(config) else None


def codes(config, size) -> tuple[int, int]:
    height, width = size
    step = factor(config)
    if height <= 0 or width <= 0 or height % step or width % step:
        raise ValueError(f"{config.model_type} image size {size} must be positive multiples of the VQ-VAE's "
                         f"downsampling {step} (2 ** (len(vq_config.channel_multiplier) - 1))")
    return height // step, width // step


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    height, width = sizes[0]
    codes(config, sizes[0])
    channels = int(vq_config(config).in_channels)
    sample = {"pixel_values": torch.randn(len(sizes), channels, height, width, generator=generator).to(dtype)}
    if "image_sizes" in accepted:
        sample["image_sizes"] = torch.tensor(sizes, dtype=torch.long)
    return sample


def config_count(config, size) -> int:
    rows, columns = codes(config, size)
    return rows * (columns + 1) if config.model_type == "emu3" else rows * columns  # Emu3: a line end per row


LAYOUT = register_layout(ImageLayout(
    name="vq_tokens",
    model_types=("chameleon", "emu3"),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
))
