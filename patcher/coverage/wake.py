"""Wake parameters whose init is all zeros: a dead path hides graph mistakes."""

from __future__ import annotations

import torch


def wake_zero_parameters(model: torch.nn.Module, seed: int) -> None:
    """Give every all-zero float parameter a random value, so no path is dead (the coverage sweep's
    models and the zoo's tiny models). Biases and norm shifts get small values; scalar gates (e.g.
    Mllama's tanh gates) get a clear opening, tanh(0.5..1) ~ 0.46..0.76: with ``0.02 * randn`` they
    would pass ~1% of the image's contribution."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.numel() and parameter.is_floating_point() and not parameter.any():
                if parameter.numel() == 1:
                    value = 0.5 + 0.5 * torch.rand(parameter.shape, generator=generator)
                else:
                    value = 0.02 * torch.randn(parameter.shape, generator=generator)
                parameter.copy_(value.to(parameter.dtype))
