"""What the rewriter and the tracer agree on, and nothing else: the bottom layer.

- :mod:`.rules`: what a rule's :class:`~.rules.RuleSpec` says (title, why, fix, GUIDE anchor, the
  static issue kinds it owns, the tracer messages that diagnose it, its precedence), and ``RULES``:
  every rule module's ``SPEC`` (``patcher/rewrite/rules/``), read from its source, not imported;
- :mod:`.wrapped`: the name prefixes of the functions the rewriter creates, which the tracer
  and the renderer recognise;
- :mod:`.ignore`: the functions and methods kept opaque by default;
- :mod:`.locations`: :class:`~.locations.Location`, a line (or function) a tracer failure asks
  the rewriter to rewrite, with the rule or symptom it names;
- :mod:`.normalize`: one reading of the targets, ignore entries, input names and counts every
  entry point takes;
- :mod:`.plugins`: the hooks model collections (the zoo) register through, and their entry points.

Pure Python, importing nothing from ``patcher`` (nor torch, transformers, libcst): ``rewrite``,
``trace`` and the command line all read it, and ``patcher patch --help`` stays cheap.
"""

from .ignore import DEFAULT_IGNORE
from .locations import Location
from .rules import NO_RULE, RULES, Level, RuleSpec, Symptom, rule_for_location

__all__ = ["DEFAULT_IGNORE", "NO_RULE", "RULES", "Level", "Location", "RuleSpec", "Symptom", "rule_for_location"]
