"""Build failures that are transformers bugs, fixed in a later release: the row's error says so and
names the release, so that nobody looks for the cause in the sweep (and the row can be built in an
environment with that release, then merged with ``scripts/coverage.py --rows-from``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UpstreamBug:
    model_types: frozenset[str]
    message: str  # a part of the error transformers raises
    fixed_in: str  # the first transformers release without it
    cause: str


KNOWN: tuple[UpstreamBug, ...] = (
    UpstreamBug(
        model_types=frozenset({"gemma4_assistant", "gemma4_unified_assistant"}),
        message="The set of layer types producing a cache is different than the set of layer types using them",
        fixed_in="5.24.0",
        cause="Gemma4TextConfig.kv_sharing_modes raises when every layer shares its kv, which an assistant's "
              "validation requires (num_kv_shared_layers == num_hidden_layers); 5.24 returns 'reuse' for each layer",
    ),
)


def upstream_note(model_type: str | None, message: str, version: str | None = None) -> str | None:
    """``message`` led by ``[a transformers X bug, fixed in Y: ...how to build the row]`` and followed
    by the cause, for a known bug of the installed release (``version``, default the installed
    one); None otherwise. The lead comes first: the report's table shows an error's first words."""
    from packaging.version import Version

    if version is None:
        import transformers

        version = transformers.__version__
    for bug in KNOWN:
        if model_type in bug.model_types and bug.message in message and Version(version) < Version(bug.fixed_in):
            return (f"[a transformers {version} bug, fixed in {bug.fixed_in}: sweep this row with transformers >= "
                    f"{bug.fixed_in} (the matrix's newest environment) and merge its coverage.json with "
                    f"scripts/coverage.py --rows-from] {message} ({bug.cause})")
    return None
