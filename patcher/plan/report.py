"""Readable table and JSON for a :class:`~patcher.plan.memory.MemoryPlan`; ``plan_model``."""

from __future__ import annotations

from typing import Iterable

from ..registry.normalize import ModuleEntries
from .memory import MemoryPlan, plan_memory


def human(size: int) -> str:
    """Binary units, three significant digits: ``1.39 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}" if value >= 10 else \
                f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError


def _targets(names: list[str]) -> str:
    if not names:
        return "-"
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)})"


def format_plan(plan: MemoryPlan) -> str:
    """A table, one row per subgraph, then the totals."""
    gptq = plan.algorithm == "gptq"
    header = ["subgraph", "targets", "params", "acts in", "acts out"] + (["hessians"] if gptq else []) + \
        ["gpu peak", "cpu cache"]
    rows = [header]
    for s in plan.subgraphs:
        params = " + ".join(f"{human(size)} {dtype}" for dtype, size in s.parameter_bytes.items()) or "0 B"
        rows.append([str(s.index), _targets(s.targets), params, human(s.input_bytes), human(s.output_bytes)]
                    + ([human(s.hessian_bytes)] if gptq else []) + [human(s.gpu_peak_bytes), human(s.cpu_cache_bytes)])
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if c in (1, 2) else cell.rjust(w) for c, (cell, w) in enumerate(zip(row, widths)))
             .rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    shape = f"batch {plan.batch_size} x seq {plan.seq_len}" if plan.seq_len else f"batch {plan.batch_size}"
    params = " + ".join(f"{human(size)} {dtype}" for dtype, size in plan.parameter_bytes.items())
    head = (f"Memory plan for {plan.model}: {plan.samples} samples in {plan.batches} batches ({shape}), "
            f"algorithm {plan.algorithm}")
    return "\n".join([head] + lines + [
        f"parameters (tied weights once): {params}",
        f"peak GPU (one subgraph on the device, the rest offloaded): {human(plan.peak_gpu_bytes)}",
        f"peak CPU (cached activations, all batches): {human(plan.peak_cpu_bytes)}",
    ] + [f"note: {note}" for note in plan.notes])


def plan_model(
    model_class: str | type,
    model_id: str,
    *,
    batch_size: int = 1,
    seq_len: int = 2048,
    samples: int = 512,
    algorithm: str = "none",
    multimodal_data: bool = False,
    sequential_targets: ModuleEntries | None = None,
    ignore: ModuleEntries | None = None,
    extra_ignore: ModuleEntries = (),
    targets_per_subgraph: int = 1,
    towers: Iterable[str] | str = (),
    unused_inputs: Iterable[str] | str = (),
    modality=None,
) -> MemoryPlan:
    """Build ``model_class`` from ``model_id``'s config on the meta device, trace it with a sample of
    ``batch_size x seq_len`` (images too with ``multimodal_data``; ``modality``: a declared
    modality's sample, as in :func:`patcher.models.attempt.prepare_trace`) and plan its memory.

    Targets and ignore entries read as in :func:`patcher.models.attempt.prepare_trace` (names, ``re:``
    patterns or ``nn.Module`` subclasses; a single string or class is one entry);
    ``unused_inputs`` names sample inputs the model does not read, as in
    :func:`~patcher.partition.trace_subgraphs`.
    ``batch_size``, ``seq_len``, ``samples`` and ``targets_per_subgraph`` are ints >= 1, and a
    batch holds at most :data:`patcher.registry.normalize.MAX_SAMPLE_TOKENS` tokens. A wrong type raises
    ``TypeError``, a wrong value ``ValueError``, naming the argument, before the model is built
    (:mod:`patcher.registry.normalize`).

    >>> plan = plan_model("LlamaForCausalLM", "Meta-Llama-3-8B", seq_len=2048, samples=512, algorithm="gptq")
    >>> len(plan.subgraphs), plan.subgraphs[1].input_bytes_per_batch  # hidden states, cos/sin (bf16), position ids
    (33, 17842176)
    """
    from ..models.attempt import in_cli_order, prepare_trace
    from ..registry.normalize import input_names, positive_int, sample_shape
    from ..partition import trace_subgraphs

    batch_size, seq_len = sample_shape(batch_size, seq_len)
    samples = positive_int(samples, "samples")
    targets_per_subgraph = positive_int(targets_per_subgraph, "targets_per_subgraph")
    unused_inputs = input_names(unused_inputs, "unused_inputs")
    # the sample on CPU: plan_memory moves floats to meta and keeps the values of integer inputs (image grids)
    model_class, model_id = in_cli_order(model_class, model_id, "plan_model")
    setup = prepare_trace(model_class, model_id, multimodal_data, sequential_targets, ignore, extra_ignore, towers,
                          modality, device="cpu", batch_size=batch_size, seq_len=seq_len)
    sample = setup.sample
    meta_sample = {key: value.to("meta") if hasattr(value, "to") else value for key, value in sample.items()}
    subgraphs = trace_subgraphs(setup.model, meta_sample, setup.targets, setup.ignore, targets_per_subgraph,
                                unused_inputs)
    plan = plan_memory(setup.model, subgraphs, sample, samples=samples, algorithm=algorithm,
                       name=f"{setup.model_class.__name__} ({model_id})")
    plan.notes += [note.removeprefix("note: ") for note in setup.notes]
    return plan
