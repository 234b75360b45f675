"""Partition: one subgraph per sequential target, run one after another."""

from .subgraph import Subgraph, partition_graph, run_subgraphs, trace_subgraphs

__all__ = ["Subgraph", "partition_graph", "run_subgraphs", "trace_subgraphs"]
