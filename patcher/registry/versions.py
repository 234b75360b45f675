"""The torch and transformers releases tracezoo supports: the oldest ones CI proves.

``pyproject.toml`` declares the same floors (``tests/registry/test_versions.py`` keeps them equal), but an
environment can hold older releases anyway (``pip install --no-deps``, a preinstalled image), and
below these floors tracezoo is known to fail or, worse, to be silently wrong, so the tracer refuses
to start there instead:

- torch before 2.9: stock ``torch.fx`` fails on ``torch.arange(<proxy>, device=<proxy>)`` and on
  ``torch.cat`` of an attribute proxy (every model tested failed); 2.9's generated code has no
  ``_prologue_start``, which tracezoo reads to name the source line of a graph node that raised
  (every such error became an ``AttributeError``). 2.10 is the oldest CI runs.
- transformers before 5.10: Gemma3n hands shared keys and values through
  ``past_key_values.shared_layers``, which a chain of subgraphs does not carry (logits 0.35 off,
  no error, on 5.5.4); Gemma3 and PaliGemma captured a tracing proxy in a mask closure; GLM-4V and
  Mllama failed in other ways on 5.0. 5.10.4 is the oldest CI runs.
"""

from __future__ import annotations

import importlib.metadata
import re

#: package -> the oldest release CI proves (pyproject.toml's ``>=``)
FLOORS = {"torch": "2.10", "transformers": "5.10.4"}
#: package -> the first release not claimed (pyproject.toml's ``<``)
CEILINGS = {"transformers": "6"}


class UnsupportedVersionError(ImportError):
    """An installed torch or transformers is outside the releases tracezoo supports."""


def release(version: str) -> tuple[int, ...]:
    """``"2.10.0+cu128"`` -> ``(2, 10, 0)``: the numeric release, without local or pre-release parts."""
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def unsupported(versions: dict[str, str | None] | None = None) -> list[str]:
    """``'torch 2.8.0 (tracezoo needs >=2.10)'`` for each installed package outside its range."""
    versions = {package: installed(package) for package in FLOORS} if versions is None else versions
    problems = []
    for package, floor in FLOORS.items():
        version = versions.get(package)
        if version is None:
            continue  # not installed through pip (a source checkout on the path): importing it will tell
        ceiling = CEILINGS.get(package)
        if release(version) < release(floor) or (ceiling and release(version) >= release(ceiling)):
            wanted = f">={floor}" + (f",<{ceiling}" if ceiling else "")
            problems.append(f"{package} {version} (tracezoo needs {wanted})")
    return problems


def check_supported_versions(versions: dict[str, str | None] | None = None) -> None:
    """Raise :class:`UnsupportedVersionError` naming every package outside its supported range."""
    problems = unsupported(versions)
    if problems:
        wanted = " ".join(f"'{package}>={floor}{',<' + CEILINGS[package] if package in CEILINGS else ''}'"
                          for package, floor in FLOORS.items())
        raise UnsupportedVersionError(
            f"tracezoo does not support {' and '.join(problems)}: below these releases tracing fails or gives "
            f"silently wrong results (patcher/registry/versions.py says which). Upgrade: pip install {wanted}")
