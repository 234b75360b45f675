"""What patcher's packages export by name, each list written once, and the lazy loading they share.

- :mod:`.errors`: the tracing errors and the module of :mod:`patcher.trace` that defines each, which
  ``patcher`` and ``patcher.trace`` both export;
- :mod:`.lazy`: the ``__getattr__`` / ``__dir__`` of a package whose names load on first use
  (``patcher``, ``patcher.plan``), so that ``--help`` pays for torch only when it is needed.

Pure Python, importing nothing from ``patcher``: ``patcher``'s own ``__init__`` reads it.
"""
