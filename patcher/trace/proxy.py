"""The proxy tracezoo's tracer hands model code: fx's, plus what the graph checks at every run."""

from __future__ import annotations

import operator

from torch import fx

from .graph_runtime import unpacked_item
from .leaf_outputs import OUTPUT_KEYS


class TracingProxy(fx.Proxy):
    """A proxy that also records in-place indexed assignment (``x[..., i] = y``), knows the
    rank of a sample tensor: the graph checks it at every run (``TraceRecord.tensor_ranks``), so
    code that branches on ``input_ids.ndim`` (Csm's 2-D text ids or 3-D codebook ids) is decided
    while tracing, as on a None or a Python flag; and reads the keys of a leaf's output that ``**``
    unpacks through a check of its keys when the graph runs."""

    def __setitem__(self, indices, values):
        return self.tracer.create_proxy("call_function", operator.setitem, (self, indices, values), {})

    @property
    def ndim(self):
        rank = self.tracer.sample_rank(self.node)
        return rank if rank is not None else fx.Proxy.__getattr__(self, "ndim")

    def dim(self):
        rank = self.tracer.sample_rank(self.node)
        return rank if rank is not None else fx.Proxy.__getattr__(self, "dim")()

    def __getitem__(self, key):
        keys = self.node.meta.get(OUTPUT_KEYS)
        if keys is not None and isinstance(key, str):
            return self.tracer.create_proxy("call_function", unpacked_item, (self, key, keys), {})
        return super().__getitem__(key)
