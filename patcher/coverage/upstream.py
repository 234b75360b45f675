"""Build failures that are transformers bugs, fixed in a later release: the row's error says so and
names the release, so that nobody looks for the cause in the sweep (and the row can be built in an
environment with that release, then merged with ``scripts/coverage.py --rows-from``).

Where the bug lives in a config class and the fixed release changed only that, the sweep builds the
row before that release with a config of a subclass that has the fix (:func:`apply_workarounds`):
the model classes, their code and every other config value are the installed release's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class UpstreamBug:
    model_types: frozenset[str]
    message: str  # a part of the error transformers raises
    fixed_in: str  # the first transformers release without it
    cause: str
    #: what the sweep changes in a shrunk config before ``fixed_in`` so that the row builds (None: nothing;
    #: the row fails with the note)
    workaround: Callable[[Any], None] | None = None


_WITH_FIXED_KV_SHARING: dict[type, type] = {}


def _kv_sharing_fixed(text_class: type) -> type:
    """``text_class`` (``Gemma4TextConfig``, ``Gemma4UnifiedTextConfig`` of transformers < 5.24.0) with
    5.24.0's ``kv_sharing_modes``: every layer reuses the kv handed in when every layer shares its kv
    (an assistant's, whose validation requires ``num_kv_shared_layers == num_hidden_layers``). 5.23.0
    raises then, since no layer of the model itself produces a kv. The subclass keeps the class's name,
    which transformers' auto mappings look a config class up by."""
    fixed = _WITH_FIXED_KV_SHARING.get(text_class)
    if fixed is None:
        original = text_class.kv_sharing_modes

        def kv_sharing_modes(self) -> list[str | None]:
            if self.num_kv_shared_layers == self.num_hidden_layers:
                return ["reuse"] * self.num_hidden_layers
            return original.fget(self)

        fixed = type(text_class.__name__, (text_class,), {
            "kv_sharing_modes": property(kv_sharing_modes), "__module__": text_class.__module__,
            "__qualname__": text_class.__qualname__,
            "__doc__": f"{text_class.__name__} with transformers 5.24.0's kv_sharing_modes (patcher.coverage.upstream)"})
        _WITH_FIXED_KV_SHARING[text_class] = fixed
    return fixed


def _assistant_sharing_every_layer(config) -> None:
    text = config.text_config
    config.text_config = _kv_sharing_fixed(type(text)).from_dict(text.to_dict())


KNOWN: tuple[UpstreamBug, ...] = (
    UpstreamBug(
        model_types=frozenset({"gemma4_assistant", "gemma4_unified_assistant"}),
        message="The set of layer types producing a cache is different than the set of layer types using them",
        fixed_in="5.24.0",
        cause="Gemma4TextConfig.kv_sharing_modes raises when every layer shares its kv, which an assistant's "
              "validation requires (num_kv_shared_layers == num_hidden_layers); 5.24 returns 'reuse' for each layer",
        # No config value avoids it: the validation requires every layer to share, and kv_sharing_modes
        # then raises for any layer types. 5.24.0's fix is this one property (configuration_gemma4.py,
        # configuration_gemma4_unified.py); the modeling code of both releases is the same.
        workaround=_assistant_sharing_every_layer,
    ),
)


def apply_workarounds(config, version: str | None = None) -> list[UpstreamBug]:
    """Change a shrunk ``config`` in place for each known bug of the installed transformers (``version``,
    default the installed one) that has a workaround; returns those bugs."""
    from packaging.version import Version

    if version is None:
        import transformers

        version = transformers.__version__
    model_type = getattr(config, "model_type", None)
    applied = []
    for bug in KNOWN:
        if bug.workaround is not None and model_type in bug.model_types and Version(version) < Version(bug.fixed_in):
            bug.workaround(config)
            applied.append(bug)
    return applied


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
