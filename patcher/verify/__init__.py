"""Verify: the traced subgraphs compute what the eager model computes."""

from .equivalence import (
    DTYPE_TOLERANCES,
    EquivalenceReport,
    PartitionMismatch,
    targets_called_eagerly,
    verify_subgraphs,
)

__all__ = ["DTYPE_TOLERANCES", "EquivalenceReport", "PartitionMismatch", "targets_called_eagerly", "verify_subgraphs"]
