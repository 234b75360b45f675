"""Where a tracer failure (or a caller) asks the rewriter to rewrite: one :class:`Location` each.

The public entry points (``patch_source``, ``patch_file``, ``load_traceable``) take locations as
``Location`` or as the tuples they always took: ``(line, wanted)``, ``(line,)`` or ``("name",
wanted)``. :meth:`Location.of` decodes a tuple once, where locations enter the rewriter; past
that point everything reads the fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .rules import names_a_code, rule_for_location

#: What a location given as ``(line,)`` asks for: a truth value the tracer could not get (the
#: statement at the line decides the rule, as for a symptom with ``forces_rule=False``).
UNNAMED = "bool"


@dataclass(frozen=True)
class Location:
    """A line of the source to rewrite even where static detection sees nothing, or a function or
    method to call opaquely (``function``: its name, the last part of a dotted one)."""

    line: int | None
    function: str | None = None
    #: a rule code (``TZ105``) or a symptom key (``control_flow``; ``registry.rules.Symptom.key``)
    wanted: str = UNNAMED

    @classmethod
    def of(cls, entry: "Location | tuple | list") -> "Location":
        """``entry`` as a Location: ``(line, wanted)`` or ``(line,)`` (a line, int or digits), or
        ``("module.function", wanted)`` (a function or method to call opaquely)."""
        if isinstance(entry, Location):
            return entry
        where, wanted = entry[0], (entry[1] if len(entry) > 1 else UNNAMED)
        if isinstance(where, str) and not where.isdigit():
            return cls(None, where.rsplit(".", 1)[-1], str(wanted))
        return cls(int(where), None, str(wanted))

    @property
    def names_a_code(self) -> bool:
        """``wanted`` names a rule (``TZ105``, ``tz105``) rather than a symptom."""
        return names_a_code(self.wanted)

    @property
    def rule(self) -> str | None:
        """The rule code this location forces; None: the statement at the line decides
        (:func:`~patcher.registry.rules.rule_for_location`)."""
        return rule_for_location(self.wanted)

    def shifted(self, lines: int) -> "Location":
        """The same location ``lines`` further down (a line location; a function one as it is)."""
        return self if self.line is None else replace(self, line=self.line + lines)


def decode(entries) -> list[Location]:
    """Every entry of a ``locations`` argument as a :class:`Location`."""
    return [Location.of(entry) for entry in entries]
