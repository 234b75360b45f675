"""Sizes above which ``collapse="auto"`` draws one box per subgraph (torch-free, for ``--help``)."""

#: ``collapse="auto"`` draws one box per subgraph above these sizes.
AUTO_COLLAPSE_SUBGRAPHS = 8
AUTO_COLLAPSE_NODES = 300
