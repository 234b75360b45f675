"""Line numbers of original nodes, computed only where something is rewritten."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider


def positions_of(module: cst.Module, index: int, starts: list[int]) -> dict:
    """Positions of the nodes of top-level statement `index`, lines numbered as in `module`."""
    try:
        from libcst.metadata.position_provider import PositionProvidingCodegenState

        provider = PositionProvider()
        state = PositionProvidingCodegenState(
            default_indent=module.default_indent, default_newline=module.default_newline, provider=provider)
        state.line = starts[index]
        module.body[index]._codegen(state)
        return provider._computed
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - other libcst internals
        return all_positions(MetadataWrapper(module, unsafe_skip_copy=True))


def all_positions(wrapper: MetadataWrapper):
    """Node -> CodeRange. Runs the provider's codegen pass directly: MetadataWrapper.resolve
    first walks the whole tree with a visitor, which doubled the cost (libcst 1.x internals,
    with the public API as fallback)."""
    try:
        provider = PositionProvider()
        provider._gen_impl(wrapper.module)
        return provider._computed
    except Exception:  # pragma: no cover - a libcst without these internals
        return wrapper.resolve(PositionProvider)
