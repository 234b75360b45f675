"""Verify: the traced subgraphs compute what the eager model computes.

:mod:`.compare` holds the one comparison with eager and the one tolerance table (``TOLERANCES``)
that the coverage sweep and the zoo's tests use too; :mod:`.equivalence` checks a partition.
"""

from .compare import EXACT, TOLERANCES, Comparison, Tolerance, assert_equivalent, compare, max_abs_diff, tolerance
from .equivalence import EquivalenceReport, PartitionMismatch, targets_called_eagerly, verify_subgraphs

__all__ = ["EXACT", "TOLERANCES", "Comparison", "EquivalenceReport", "PartitionMismatch", "Tolerance",
           "assert_equivalent", "compare", "max_abs_diff", "targets_called_eagerly", "tolerance", "verify_subgraphs"]
