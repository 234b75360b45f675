"""Partition: one subgraph per sequential target, run one after another."""

from .paths import SubgraphPaths, run_subgraphs, trace_subgraphs
from .subgraph import BatchInputNames, Subgraph, partition_graph

__all__ = ["BatchInputNames", "Subgraph", "SubgraphPaths", "partition_graph", "run_subgraphs", "trace_subgraphs"]
