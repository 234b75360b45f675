"""Partition: one subgraph per sequential target, run one after another."""

from .subgraph import BatchInputNames, Subgraph, partition_graph, run_subgraphs, trace_subgraphs

__all__ = ["BatchInputNames", "Subgraph", "partition_graph", "run_subgraphs", "trace_subgraphs"]
