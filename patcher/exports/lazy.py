"""Names of a package that load on first use: the ``__getattr__`` and ``__dir__`` its ``__init__`` sets."""

from __future__ import annotations

import importlib
import sys
from typing import Callable, Mapping


def lazy_names(package: str, modules: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package ``package``: a name of ``modules`` (name -> module of
    the package that defines it, ``"memory"`` for ``package.memory``) is imported from that module when
    first read, and kept in the package, so the module loads once; any other name raises
    ``AttributeError`` as a module does. ``dir(package)`` lists the names before they load."""

    def __getattr__(name: str) -> object:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(modules))

    return __getattr__, __dir__
