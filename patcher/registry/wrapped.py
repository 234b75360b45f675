"""Names of the functions the rewriter creates, so that other layers recognise them by name.

The tracer and the graph renderer see only a function's ``__name__``: these prefixes are the
contract between the code that writes the names and the code that reads them.
"""

from __future__ import annotations

#: Hoisted statements and forwarders to ignored calls: ``_wrapped_<what>``.
WRAPPED_PREFIX = "_wrapped"
#: Hoisted checks (asserts, ``if ...: raise``): ``_check_<what>``; they return None by design.
CHECK_PREFIX = "_check"
#: Shape conditions around sequential targets, kept in the code and decided by the tracer from the
#: sample, with a run-time check in the graph: ``_decided_<what>``.
DECIDED_PREFIX = "_decided"


def forwarder_name(callee: str) -> str:
    """``create_causal_mask`` -> ``_wrapped_create_causal_mask`` (before de-duplication)."""
    return f"{WRAPPED_PREFIX}_{callee.strip('_')}"


def is_wrapped_name(name: str) -> bool:
    """A forwarder or a hoisted statement (whose callees are in its code), not a check."""
    return name.startswith(WRAPPED_PREFIX + "_")


def is_check_name(name: str) -> bool:
    return name.startswith(CHECK_PREFIX + "_")


def is_decision_name(name: str) -> bool:
    """A condition the tracer decides from the sample and checks again at every run."""
    return name.startswith(DECIDED_PREFIX + "_")
