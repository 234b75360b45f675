"""Wake parameters whose init is all zeros: a dead path hides graph mistakes."""

from __future__ import annotations

import torch


def wake_zero_parameters(model: torch.nn.Module, seed: int) -> None:
    """Small random values for all-zero parameters; scalar gates get 0.5..1 (tanh gates open)."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.numel() and parameter.is_floating_point() and not parameter.any():
                if parameter.numel() == 1:
                    value = 0.5 + 0.5 * torch.rand(parameter.shape, generator=generator)
                else:
                    value = 0.02 * torch.randn(parameter.shape, generator=generator)
                parameter.copy_(value.to(parameter.dtype))
