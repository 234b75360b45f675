"""Verify: the traced subgraphs compute what the eager model computes.

:mod:`.eager` is the eager run a chain is held to (as traced: cache off); :mod:`.compare` holds the one comparison with eager and the one tolerance table (``TOLERANCES``)
that the coverage sweep and the zoo's tests use too; :mod:`.equivalence` checks a partition's outputs,
:mod:`.kernels` that it makes eager's kernel calls on eager's layouts (exact on other CPUs too).
"""

from .compare import EXACT, TOLERANCES, Comparison, Tolerance, assert_equivalent, compare, max_abs_diff, tolerance
from .eager import AS_TRACED, eager_inputs, run_eagerly
from .equivalence import EquivalenceReport, PartitionMismatch, targets_called_eagerly, verify_subgraphs

__all__ = ["AS_TRACED", "EXACT", "TOLERANCES", "Comparison", "EquivalenceReport", "PartitionMismatch", "Tolerance",
           "assert_equivalent", "compare", "eager_inputs", "max_abs_diff", "run_eagerly", "targets_called_eagerly", "tolerance",
           "verify_subgraphs"]
