"""The smallest sequential target, for the tracer's tests on hand-written models: a Linear and a ReLU.

Its class name is what those tests trace with (``trace_subgraphs(model, sample, ["Layer"])``)."""

from __future__ import annotations

import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, hidden):
        return torch.relu(self.linear(hidden))
