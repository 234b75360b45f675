"""The one normalisation of the Python API's list and count arguments.

Every entry point (``trace_graph``, ``trace_subgraphs``, ``partition_graph``, ``attempt_trace``,
``prepare_trace``, ``plan_model``, ``plan_memory``, ``repair``, ``patch_source``,
``load_traceable``) reads its arguments through these functions, so they mean the same
everywhere:

- ``sequential_targets``, ``ignore``, ``extra_ignore``, ``targets``: a list of entries, each a
  name (module class, or for ignore also a function or method) or a ``re:`` pattern; an
  ``nn.Module`` subclass means its ``__name__`` (what matching compares). A single string or
  class is one entry, never split into characters.
- ``unused_inputs``, ``towers``: a list of names; a single string is one name.
- ``targets_per_subgraph`` and other counts: an int >= 1 (not a float, a string or a bool).
- ``batch_size`` x ``seq_len`` of a built sample: at most :data:`MAX_SAMPLE_TOKENS` tokens.

A value of another type raises ``TypeError``, a count below 1 ``ValueError``; both name the
argument, what was given and what is expected. Imports nothing heavy (``patcher patch`` uses it).
"""

from __future__ import annotations

import operator
import sys
from typing import Any, Iterable, TypeAlias

#: What ``sequential_targets``, ``ignore`` and ``extra_ignore`` take (see above): entries (names, ``re:``
#: patterns, ``nn.Module`` subclasses) or a single one; the one spelling of the trace entry points' type.
ModuleEntries: TypeAlias = Iterable[str | type] | str | type

#: Tokens per sample batch (batch size x sequence length) that a built sample may hold: 2**24 =
#: 16,777,216 (a 10M-token context fits, as does a batch of 128 x 131,072). ``text_sample`` builds
#: its tensors for real (int64 input ids and attention mask: 256 MiB at this limit), and the
#: planner keeps the values of the integer tensors derived from them (position ids, cache
#: positions): ``patcher plan`` of a tiny Llama grew by about 95 bytes per token, 1.6 GB at the
#: limit. Past it, a typo (``--seq-len 100000000000``) asked for 800 GB before anything ran.
MAX_SAMPLE_TOKENS = 2**24


def _shown(value: Any) -> str:
    text = repr(value)
    return (text[:60] + "...") if len(text) > 63 else text


def _module_class_name(value: Any) -> str | None:
    """``value.__name__`` for an ``nn.Module`` subclass, else None (torch is not imported for it:
    without torch loaded, no value can be a module class)."""
    nn = sys.modules.get("torch.nn")
    if isinstance(value, type) and nn is not None and issubclass(value, nn.Module):
        return value.__name__
    return None


def module_entries(value: Any, argument: str, *, functions: bool = False) -> list[str]:
    """``value`` as a list of target/ignore entries (strings); ``None`` is an empty list.

    A string is one entry, an ``nn.Module`` subclass its ``__name__``, any other iterable a list
    of those. ``functions``: the argument may also name functions or methods (ignore lists).

    >>> module_entries("LlamaDecoderLayer", "sequential_targets")
    ['LlamaDecoderLayer']
    >>> module_entries(3, "sequential_targets")
    Traceback (most recent call last):
    ...
    TypeError: sequential_targets must be a module class name, ... or a list of them; got 3 (int)
    """
    what = ("a module class, function or method name, a 're:' pattern or an nn.Module subclass" if functions
            else "a module class name, a 're:' pattern or an nn.Module subclass")
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    name = _module_class_name(value)
    if name is not None:
        return [name]
    if isinstance(value, (bytes, bytearray, type)) or not _iterable(value):
        hint = "; pass the class itself (or its name), not an instance" if _is_module_instance(value) else ""
        raise TypeError(f"{argument} must be {what}, or a list of them; got {_shown(value)} "
                        f"({type(value).__name__}){hint}")
    entries = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            entries.append(item)
            continue
        name = _module_class_name(item)
        if name is None:
            hint = "; pass the class itself (or its name), not an instance" if _is_module_instance(item) else ""
            raise TypeError(f"{argument}[{index}] is {_shown(item)} ({type(item).__name__}): each entry must be "
                            f"{what}{hint}")
        entries.append(name)
    return entries


def input_names(value: Any, argument: str) -> list[str]:
    """``value`` as a list of names (sample inputs, towers); ``None`` is empty, a string one name.

    >>> input_names("attention_mask", "unused_inputs")
    ['attention_mask']
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, bytearray)) or not _iterable(value):
        raise TypeError(f"{argument} must be a name (str) or a list of names; got {_shown(value)} "
                        f"({type(value).__name__})")
    names = list(value)
    for index, item in enumerate(names):
        if not isinstance(item, str):
            raise TypeError(f"{argument}[{index}] is {_shown(item)} ({type(item).__name__}): each entry must be "
                            "a name (str)")
    return names


def positive_int(value: Any, argument: str) -> int:
    """``value`` as an int >= 1: ``TypeError`` for a float, string or bool, ``ValueError`` below 1.

    >>> positive_int(2, "targets_per_subgraph")
    2
    >>> positive_int(1.5, "targets_per_subgraph")
    Traceback (most recent call last):
    ...
    TypeError: targets_per_subgraph must be an int >= 1; got 1.5 (float)
    """
    if isinstance(value, bool):
        number = None
    else:
        try:
            number = operator.index(value)  # ints and int-like values (numpy ints); never floats
        except TypeError:
            number = None
    if number is None:
        raise TypeError(f"{argument} must be an int >= 1; got {_shown(value)} ({type(value).__name__})")
    if number < 1:
        raise ValueError(f"{argument} must be >= 1; got {number}")
    return number


def sample_shape(batch_size: Any, seq_len: Any, *,
                 names: tuple[str, str] = ("batch_size", "seq_len")) -> tuple[int, int]:
    """``(batch_size, seq_len)`` checked before a sample is built: ints >= 1 whose product stays
    within :data:`MAX_SAMPLE_TOKENS`; ``names`` are the arguments (or options) named in errors.

    >>> sample_shape(1, 10**11, names=("--batch", "--seq-len"))
    Traceback (most recent call last):
    ...
    ValueError: --batch 1 x --seq-len 100000000000 is 100000000000 tokens per batch, ... lower --seq-len or --batch
    """
    batch_size, seq_len = positive_int(batch_size, names[0]), positive_int(seq_len, names[1])
    tokens = batch_size * seq_len
    if tokens > MAX_SAMPLE_TOKENS:
        larger = names[1] if seq_len >= batch_size else names[0]
        other = names[0] if larger == names[1] else names[1]
        raise ValueError(
            f"{names[0]} {batch_size} x {names[1]} {seq_len} is {tokens} tokens per batch, a sample of "
            f"{tokens * 16 / 2**30:.0f} GiB (int64 input ids and attention mask); the limit is {MAX_SAMPLE_TOKENS} "
            f"(2**{MAX_SAMPLE_TOKENS.bit_length() - 1}) tokens per batch: lower {larger} or {other}")
    return batch_size, seq_len


def _iterable(value: Any) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _is_module_instance(value: Any) -> bool:
    nn = sys.modules.get("torch.nn")
    return nn is not None and isinstance(value, nn.Module)
