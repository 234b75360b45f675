"""``attempt_trace``: can this model be traced, and into how many subgraphs?"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Iterable, TextIO

from torch import nn

from . import build_model, check_config_for_class, load_config, resolve_model_class
from ..registry.normalize import ModuleEntries, input_names, module_entries, positive_int
from ..partition import Subgraph, trace_subgraphs
from ..registry.plugins import TracingDefaults, drop_in_for, tracing_defaults
from ..samples import is_vision_language, sample_input, text_only_note
from ..samples.declaration import Modality
from ..trace import DEFAULT_IGNORE, TracingError
from ..trace.errors import TraceArgumentError
from ..trace.tracer import sample_keys_not_taken


def model_tracing_defaults(model: nn.Module) -> TracingDefaults | None:
    """The targets and ignores a model collection (the zoo) registered for ``model``'s model_type, if any."""
    return tracing_defaults(getattr(getattr(model, "config", None), "model_type", None))


def default_targets(model: nn.Module) -> list[str]:
    """A model collection's targets (the zoo recipe's), else decoder-layer classes from ``_no_split_modules``."""
    defaults = model_tracing_defaults(model)
    if defaults is not None:
        return list(defaults.targets)
    names = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    present = {type(module).__name__ for module in model.modules()}
    names &= present
    decoder = sorted(name for name in names if "DecoderLayer" in name)
    chosen = decoder or sorted(names)
    if not chosen:
        raise ValueError(
            f"cannot guess sequential targets for {type(model).__name__} (no _no_split_modules); pass them explicitly"
        )
    return chosen


def default_tower_targets(model: nn.Module, modality: str = "vision") -> list[str]:
    """A model collection's tower targets for its model type (the zoo recipe's ``vision_targets``), else the blocks of the model's
    ``modality`` tower found by :func:`patcher.models.towers.find_tower_blocks`. Raises ``ValueError``
    when the model has no such tower (a target list without it would silently trace less)."""
    from .towers import find_tower_blocks

    defaults = model_tracing_defaults(model)
    curated = defaults.tower_targets.get(modality) if defaults is not None else None
    found = list(curated) if curated else find_tower_blocks(model, modality)
    if not found:
        raise ValueError(f"{type(model).__name__} has no {modality} tower with a list of blocks to cut at; "
                         f"drop --{modality}-blocks, or name the tower's modules with --targets")
    return found


def format_partition(subgraphs: list[Subgraph]) -> str:
    """A table: index, targets inside, number of inputs and outputs."""
    rows = [("subgraph", "targets", "inputs", "outputs")]
    for subgraph in subgraphs:
        names = subgraph.targets
        if len(names) > 2:
            targets = f"{names[0]} .. {names[-1]} ({len(names)})"
        else:
            targets = ", ".join(names) if names else "-"
        rows.append((str(subgraph.index), targets, str(len(subgraph.input_names)), str(len(subgraph.output_names))))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = [
        "  ".join(cell.ljust(width) if column == 1 else cell.rjust(width) for column, (cell, width) in
                  enumerate(zip(row, widths)))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _fix_hint(cls: type) -> str | None:
    """Where a traceable variant of ``cls`` comes from: a model collection (the zoo), or the patcher."""
    drop_in = drop_in_for(cls)
    if drop_in is not None:
        return f"hint: the {drop_in.package} has a traceable drop-in: patcher trace {drop_in.name} ..."
    if cls.__module__.startswith("transformers."):
        return f"hint: generate a traceable variant: patcher patch {cls.__module__} -o traceable/"
    return None


@dataclass
class TraceSetup:
    """Everything a trace needs, resolved the same way for ``patcher trace``, ``graph`` and ``repair``."""

    model_class: type
    config: object
    model: nn.Module
    sample: dict
    targets: list[str]
    ignore: list[str]
    #: what the caller should print about the sample (an image-token count that could not be checked)
    notes: list[str] = field(default_factory=list)


def prepare_trace(
    model_class: str | type,
    model_id: str,
    multimodal_data: bool = False,
    sequential_targets: ModuleEntries | None = None,
    ignore: ModuleEntries | None = None,
    extra_ignore: ModuleEntries = (),
    towers: Iterable[str] | str = (),
    modality: Modality | None = None,
    **sample_options,
) -> TraceSetup:
    """Build the model on the meta device, its sample, and the targets and ignore list to use.

    ``sample_options`` go to :func:`~patcher.samples.sample_input` (default: a meta sample of its
    default shape; ``patcher plan`` asks for its batch and sequence length on CPU).

    ``ignore=None`` means ``DEFAULT_IGNORE``, plus a collection's additions (the zoo recipe's) when its
    default targets are used too (those additions, e.g. ``re:model\\.visual``, would swallow
    targets chosen inside a vision tower); ``[]`` means nothing. ``extra_ignore`` is added either
    way. Targets and ignore entries are names, ``re:`` patterns or ``nn.Module`` subclasses (their
    name); a single string or class (targets, ignore, extra_ignore) is one entry, a single string
    one tower. They are checked (:mod:`patcher.registry.normalize`: ``TypeError`` naming the argument)
    before the config is read.

    ``modality`` (a :class:`~patcher.samples.declaration.Modality`, ``patcher.samples.modalities.named(
    "video")``): its ``command_sample`` instead of the text sample (``multimodal_data``: the model's
    multimodal sample, images).

    ``towers`` (``"vision"``, ``"audio"``) puts the blocks of those towers before the targets
    (:func:`default_tower_targets`); the collection's ignore additions are then its tower ones (the zoo recipe's ``vision_ignore``)
    (its ``DEFAULT_IGNORE`` keeps the tower opaque).
    """
    if sequential_targets is not None:
        sequential_targets = module_entries(sequential_targets, "sequential_targets")
    if ignore is not None:
        ignore = module_entries(ignore, "ignore", functions=True)
    extra_ignore = module_entries(extra_ignore, "extra_ignore", functions=True)
    towers = list(dict.fromkeys(input_names(towers, "towers")))
    config = load_config(model_id)  # first: a misspelt MODEL_ID is reported before a model module is imported
    cls = resolve_model_class(model_class)
    check_config_for_class(cls, config)
    model = build_model(cls, config, device="meta")
    targets = list(sequential_targets or default_targets(model))
    tower_targets = [target for modality in towers for target in default_tower_targets(model, modality)]
    targets = list(dict.fromkeys(tower_targets + targets))
    if ignore is None:
        defaults = model_tracing_defaults(model)
        if defaults is not None and towers:
            additions = [entry for modality in towers for entry in defaults.tower_ignore.get(modality, ())]
        elif defaults is not None and not sequential_targets:
            additions = list(defaults.ignore)
        else:
            additions = []
        ignore = list(DEFAULT_IGNORE) + [entry for entry in additions if entry not in DEFAULT_IGNORE]
    ignore = list(ignore) + [entry for entry in extra_ignore if entry not in ignore]
    sample_options = {"device": "meta", **sample_options}
    notes: list[str] = []
    if modality is not None:
        if modality.command_sample is None:
            raise ValueError(f"the {modality.label} modality's declaration gives no command_sample: build a "
                             f"{modality.noun} sample yourself and pass it to patcher.trace_subgraphs")
        sample, note = modality.command_sample(config, model, **sample_options)
        notes += [note] if note else []
    elif multimodal_data:
        sample, note = counted_image_sample(config, model, **sample_options)
        notes += [note] if note else []
    else:
        sample = sample_input(config, **sample_options)
    # The default sample is built from the config alone; inputs the forward cannot take (xLSTM has no
    # attention_mask) are left out rather than refused by the tracer
    for key in sample_keys_not_taken(model, sample):
        del sample[key]
    return TraceSetup(cls, config, model, sample, targets, ignore, notes)


def counted_image_sample(config, model: nn.Module, **options) -> tuple[dict, str | None]:
    """The multimodal sample with as many image tokens per image as ``model``'s own vision path
    makes of its pixels, counted on the meta device (shapes only; integer inputs such as image
    sizes keep their values). The builder's count from the config alone can differ (Aya Vision's
    and Llama 4's pixel shuffle: 4 tokens for 1 feature): the sample then fails only when the
    graph runs. Where the vision path cannot run on meta, the config's count, and a note saying
    it is unchecked."""
    from .meta_mode import MetaWhereMixed

    try:
        with MetaWhereMixed():
            return sample_input(config, multimodal=True, model=model, **options), None
    except Exception as exc:  # noqa: BLE001  (a vision path that reads values meta tensors lack)
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    sample = sample_input(config, multimodal=True, **options)
    return sample, (f"note: the image tokens per image in this sample are the count derived from the config: the "
                    f"model's vision path could not count them on the meta device ({reason}); a count that does "
                    "not match the model's image features fails only when the graph runs (check a real run, "
                    "e.g. patcher.verify.verify_subgraphs, or pass your own sample)")


def sample_on_meta(build, what: str) -> dict:
    """``build()`` (a sample whose counts ``model``'s own path makes) run with the model on the meta
    device and integer inputs real; a failure is a ``ValueError`` naming ``what`` and the way out."""
    from .meta_mode import MetaWhereMixed

    try:
        with MetaWhereMixed():
            return build()
    except Exception as exc:  # noqa: BLE001  (model code that reads values meta tensors lack)
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        raise ValueError(f"the {what} sample could not be built with the model on the meta device ({reason}); build "
                         "it on a real model and pass it to patcher.trace_subgraphs") from exc


def _is_model_class(value) -> bool:
    if isinstance(value, type):
        return True
    try:
        resolve_model_class(value)
    except Exception:  # noqa: BLE001  (not a class name: a model id)
        return False
    return True


def in_cli_order(model_class, model_id, caller: str = "attempt_trace"):
    """``(model_class, model_id)``, swapping the arguments of a call in the old order
    (``attempt_trace(model_id, model_class)``) with a deprecation warning."""
    # model_id is asked first: for a usual MODEL_ID (a path, a config name) it is no class, and the
    # model class is then not imported (seconds) before the config is looked up (a typo is reported at once)
    if _is_model_class(model_id) and not _is_model_class(model_class):
        warnings.warn(f"{caller}(model_id, model_class) is deprecated: pass the class first, as in "
                      "`patcher trace MODEL_CLASS MODEL_ID`", DeprecationWarning, stacklevel=3)
        return model_id, model_class
    return model_class, model_id


def attempt_trace(
    model_class: str | type,
    model_id: str,
    multimodal_data: bool = False,
    sequential_targets: ModuleEntries | None = None,
    ignore: ModuleEntries | None = None,
    targets_per_subgraph: int = 1,
    out: TextIO | None = None,
    extra_ignore: ModuleEntries = (),
    unused_inputs: Iterable[str] | str = (),
    towers: Iterable[str] | str = (),
    modality: Modality | None = None,
) -> list[Subgraph] | None:
    """Build ``model_class`` from ``model_id``'s config on the meta device and try to trace it.

    The arguments come in the order of ``patcher trace MODEL_CLASS MODEL_ID``. The old order
    (``model_id`` first) still works, with a ``DeprecationWarning``. ``model_id`` is a ``from_pretrained`` directory, a config JSON file, a bundled config name
    (``Meta-Llama-3-8B``) or a hub id (where the network allows). Targets and ignores are
    resolved by :func:`prepare_trace` (``towers=["vision"]``: the vision tower's blocks too). Prints
    ``Successfully traced model into N subgraphs!`` and the partition table, or the failure with
    its source location; returns the subgraphs, or None on failure.

    Targets, ignore entries and ``unused_inputs`` read as in :func:`prepare_trace` and
    :func:`~patcher.partition.trace_subgraphs` (a single string or module class is one entry;
    ``targets_per_subgraph`` is an int >= 1). A mistake in the arguments raises instead of printing
    a failure: ``TypeError``/``ValueError`` for a wrong type or value, ``TargetMatchError`` for
    targets that match no module, ``UnknownInputError`` for an ``unused_inputs`` name the sample
    lacks (both ``TraceArgumentError``).

    >>> subgraphs = attempt_trace("LlamaForCausalLM", "Meta-Llama-3-8B")  # doctest: +ELLIPSIS
    Tracing LlamaForCausalLM (Meta-Llama-3-8B) on the meta device, targets: LlamaDecoderLayer
    ...
    Successfully traced model into 33 subgraphs!
    """
    model_class, model_id = in_cli_order(model_class, model_id)
    targets_per_subgraph = positive_int(targets_per_subgraph, "targets_per_subgraph")
    unused_inputs = input_names(unused_inputs, "unused_inputs")
    out = out or sys.stdout
    setup = prepare_trace(model_class, model_id, multimodal_data, sequential_targets, ignore, extra_ignore, towers,
                          modality)
    cls, model, sample, targets, ignore = setup.model_class, setup.model, setup.sample, setup.targets, setup.ignore
    print(f"Tracing {cls.__name__} ({model_id}) on the meta device, targets: {', '.join(targets)}", file=out)
    for note in setup.notes:
        print(note, file=out)
    start = time.perf_counter()
    try:
        subgraphs = trace_subgraphs(model, sample, targets, ignore, targets_per_subgraph, unused_inputs)
    except TraceArgumentError:
        raise  # a mistake in the arguments (exit 2 from the CLI), not a construct that fails to trace
    except TracingError as exc:
        construct = getattr(exc, "construct", None)
        print(f"Failed to trace {cls.__name__}:", file=out)
        print(construct.describe() if construct is not None else str(exc), file=out)
        hint = _fix_hint(cls) if construct is not None else None
        if hint:
            print(hint, file=out)
        return None
    elapsed = time.perf_counter() - start
    print(format_partition(subgraphs), file=out)
    print(f"(traced in {elapsed:.2f} s)", file=out)
    print(f"Successfully traced model into {len(subgraphs)} subgraphs!", file=out)
    if not multimodal_data and modality is None and is_vision_language(setup.config):
        print(text_only_note(setup.config), file=out)
    return subgraphs
