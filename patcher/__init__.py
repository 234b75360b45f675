"""tracezoo's patcher: make transformers models traceable by torch.fx and split them per layer.

The flow is visible in the subpackages: ``rewrite`` (libcst source rewrites) -> ``trace``
(the fx tracer) -> ``partition`` (subgraphs per sequential target) -> ``verify``
(equivalence with the eager model).
"""

__version__ = "0.1.0"

from .exports.errors import TRACE_ERRORS
from .exports.lazy import lazy_names

# Everything below is imported on first use: `patcher --help` and `patcher patch` must not pay for
# torch and transformers (seconds) before they are needed.
_LAZY = {
    "Subgraph": "partition", "partition_graph": "partition", "run_subgraphs": "partition",
    "trace_subgraphs": "partition",
    "find_tower_blocks": "models.towers", "find_towers": "models.towers",
    "DEFAULT_IGNORE": "trace", "trace_graph": "trace",
    **{name: "trace" for name in TRACE_ERRORS},
    # how a model collection (the zoo) registers itself: see patcher.registry.plugins
    "register_drop_in": "registry.plugins", "register_tracing_defaults": "registry.plugins",
    "register_multimodal_sample": "samples.builders",
}


#: Exported on first use (``from patcher import load_traceable`` works): they pull in the
#: rewriter, sample builders and config loading.
LAZY_EXPORTS = ("attempt_trace", "load_traceable", "patch_file", "patch_source")

__getattr__, __dir__ = lazy_names(__name__, {
    **_LAZY, "attempt_trace": "models.attempt", "load_traceable": "models.traceable", "patch_file": "rewrite", "patch_source": "rewrite"})

__all__ = sorted([*_LAZY, *LAZY_EXPORTS])
