"""The workloads of ``scripts/gpu_check``, one per command: each runs in its own process (a crash,
an out-of-memory or a hang ends that part only) and writes what it found to ``--json`` as it goes,
so a part killed at its time limit still leaves the rows it finished.

    python scripts/gpu_check_parts.py environment --json OUT.json
    python scripts/gpu_check_parts.py half_precision --json OUT.json [--dry-run]
    python scripts/gpu_check_parts.py real_size --model llama --json OUT.json [--dry-run]

Without CUDA, or with ``--dry-run``, the same code runs on the CPU at a size that takes seconds
(tiny configs instead of real-size ones, one architecture per coverage slice): what it then
reports checks the script, not the GPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


class Report:
    """The part's JSON, rewritten after every row: what a killed part finished stays on disk."""

    def __init__(self, path: str | os.PathLike, **fields: Any):
        self.path = Path(path)
        self.data: dict[str, Any] = {**fields, "rows": []}
        self.write()

    def row(self, row: dict) -> None:
        self.data["rows"].append(row)
        self.write()

    def set(self, **fields: Any) -> None:
        self.data.update(fields)
        self.write()

    def write(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.data, indent=1, default=str), encoding="utf-8")
        temporary.replace(self.path)


def failure(exc: BaseException) -> str:
    """One line for the report: the error and the innermost frame of the checkout or transformers."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if "site-packages/torch/" not in frame.filename]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}{where}"


def pick_device(dry_run: bool) -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and not dry_run else "cpu"


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


# ---- environment ---------------------------------------------------------------------------------


def environment(args) -> None:
    """What this machine runs: interpreter, torch, CUDA and the GPU, transformers and the tools the
    suite needs, each as this process imports it (``PYTHONPATH`` decides which copy)."""
    import importlib
    import importlib.metadata as metadata
    import platform

    report = Report(args.json, part="environment")
    found: dict[str, Any] = {"python": platform.python_version(), "executable": sys.executable,
                             "pythonpath": os.environ.get("PYTHONPATH", "")}
    for module, distribution in (("torch", "torch"), ("transformers", "transformers"), ("libcst", "libcst"),
                                 ("hypothesis", "hypothesis"), ("hypothesmith", "hypothesmith"), ("pytest", "pytest"),
                                 ("xdist", "pytest-xdist"), ("llmcompressor", "llmcompressor"),
                                 ("compressed_tensors", "compressed-tensors")):
        try:
            imported = importlib.import_module(module)
            version = getattr(imported, "__version__", None) or metadata.version(distribution)
            found[module] = f"{version} ({Path(imported.__file__).parent})"
        except Exception as exc:  # noqa: BLE001 - absent or broken: both are findings
            found[module] = f"not importable: {failure(exc)}"
    try:
        import torch

        found["cuda"] = torch.version.cuda
        found["gpu"] = (f"{torch.cuda.get_device_name(0)}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB"
                        if torch.cuda.is_available() else "none")
    except Exception as exc:  # noqa: BLE001
        found["gpu"] = f"not queried: {failure(exc)}"
    try:
        found["tracezoo entry points"] = [entry.value for entry in metadata.entry_points(group="tracezoo.models")]
        from patcher.registry.plugins import declared_collections, load_collections

        found["model collections"] = declared_collections()
        load_collections()  # as patcher loads them: the zoo registers its sample builders on import
        from patcher.samples.builders import registered_builder
        from zoo._entries import ENTRIES, recipe

        found["zoo entries (sample builder registered)"] = {
            entry: registered_builder(recipe(entry).model_type) is not None for entry in sorted(ENTRIES)}
    except Exception as exc:  # noqa: BLE001
        found["model collections"] = f"not loaded: {failure(exc)}"
    required = ["torch", "transformers", "libcst", *args.require]
    report.set(found=found, required=required,
               ok=not any(str(found.get(module, "not found")).startswith("not ") for module in required))


# ---- half precision over the coverage slices -----------------------------------------------------


def slice_names() -> dict[str, list[str]]:
    """The architectures of the coverage CI slices (tests/coverage/test_coverage_{images,video,audio}.py), by
    modality attempt: the sweep's own fixed, diverse sets, read from the tests that define them."""
    import importlib.util

    sys.path.insert(0, str(REPO / "tests"))
    found = {}
    for attempt, module, name in (("multimodal", "test_coverage_images", "WITH_IMAGES"),
                                  ("video", "test_coverage_video", "WITH_VIDEO"),
                                  ("audio", "test_coverage_audio", "WITH_AUDIO")):
        spec = importlib.util.spec_from_file_location(module, REPO / "tests" / "coverage" / f"{module}.py")
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        found[attempt] = list(getattr(loaded, name))
    return found


def _cast(sample: dict, device: str, dtype) -> dict:
    """The sample as a half-precision run feeds it: floating tensors in the model's dtype, all on
    its device (token ids, masks and grids keep their types)."""
    import torch

    return {key: (value.to(device=device, dtype=dtype) if value.is_floating_point() else value.to(device))
            if isinstance(value, torch.Tensor) else value for key, value in sample.items()}


def half_precision_row(name: str, attempt: str, device: str, dtypes: list[str], cache_dir: str,
                       seed: int = 0) -> list[dict]:
    """The coverage check of one architecture in ``dtypes`` on ``device``: the sweep's tiny model
    and the samples of its modality (two layouts), the patched class traced on the first in that
    dtype, the chain against eager as traced on both, within the "same kernels" row of
    ``patcher.verify.TOLERANCES`` (exact where the kernels round alike: ``max_diff`` 0)."""
    import torch

    from patcher.coverage.check import _build, _text_samples
    from patcher.coverage.discover import find_layers, trace_targets
    from patcher.samples.modalities import MODALITIES, prepare_config
    from patcher.coverage.shrink import shrink_config
    from patcher.models import build_model, cast_floating_point, resolve_model_class
    from patcher.partition import run_subgraphs, trace_subgraphs
    from patcher.trace import DEFAULT_IGNORE, DroppedInputError
    from patcher.trace.influence import eager_ignores, main_output
    from patcher.trace.tracer import sample_keys_not_taken
    from patcher.models.traceable import load_traceable
    from patcher.verify import compare, run_eagerly, tolerance

    torch.set_num_threads(2)
    start = time.perf_counter()
    cls = resolve_model_class(name)
    config = shrink_config(cls.config_class)
    prepare_config(config, cls)  # as the sweep does: the modalities' (audio's placeholder ids)
    meta = build_model(cls, config, device="meta")
    classes, layer_list = find_layers(meta)
    targets = trace_targets(meta, classes, layer_list)
    del meta
    original = _build(cls, config, seed)
    modality = next((m for m in MODALITIES if m.attempt == attempt and m.takes(cls, config)), None)
    samples = modality.samples(config, original, seed) if modality is not None else _text_samples(config, seed, original)
    for sample in samples:
        for key in sample_keys_not_taken(original, sample):
            del sample[key]
    traceable_cls = load_traceable(cls, targets=classes, cache_dir=cache_dir)
    traceable = _build(traceable_cls, config, seed)
    traceable.load_state_dict(original.state_dict(), strict=True)
    rows = []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        row = {"architecture": name, "input": modality.noun if modality is not None else "text", "dtype": dtype_name,
               "device": device}
        try:
            eager_model = cast_floating_point(copy.deepcopy(original).to(device), dtype)
            chain_model = cast_floating_point(copy.deepcopy(traceable).to(device), dtype)
            runs = [_cast(sample, device, dtype) for sample in samples]
            expected = [run_eagerly(eager_model, sample) for sample in runs]
            try:
                subgraphs = trace_subgraphs(chain_model, runs[0], targets, DEFAULT_IGNORE)
            except DroppedInputError as exc:
                # as the sweep does: an input counts as unused only where eager (fp32, CPU) ignores it too
                if exc.calls or not all(eager_ignores(original, samples[0], input_name) is True
                                        for input_name in exc.inputs):
                    raise
                subgraphs = trace_subgraphs(chain_model, runs[0], targets, DEFAULT_IGNORE, unused_inputs=exc.inputs)
            row["subgraphs"] = len(subgraphs)
            within = tolerance(dtype, "same kernels")
            diffs, equal = [], True
            path = list(subgraphs)  # one trace: every run proves that chain, as the sweep's reuse does
            for sample, reference in zip(runs, expected):
                key, want = main_output(reference)
                with torch.no_grad():
                    _, got = main_output(run_subgraphs(chain_model, path, sample), key)
                comparison = compare(got, want, within)
                diffs.append(comparison.max_abs_diff)
                equal = equal and comparison.equal
            row.update(max_diff=max(diffs), equal=equal, exact=all(diff == 0 for diff in diffs),
                       tolerance=f"rtol {within.rtol}, atol {within.atol}")
        except Exception as exc:  # noqa: BLE001 - one row's failure is that row's finding
            row.update(equal=False, error=failure(exc))
        row["seconds"] = round(time.perf_counter() - start, 1)
        rows.append(row)
    return rows


def _half_precision_task(task: tuple) -> list[dict]:
    name, attempt, device, dtypes, cache_dir = task
    try:
        return half_precision_row(name, attempt, device, dtypes, cache_dir)
    except Exception as exc:  # noqa: BLE001 - the model did not build or patch: a finding too
        return [{"architecture": name, "dtype": dtype, "device": device, "equal": False, "error": failure(exc)}
                for dtype in dtypes]


def half_precision(args) -> None:
    """bf16 and fp16 over the coverage slices (the zoo's entries are the GPU tests'
    ``test_equal_on_gpu``), several architectures at once in worker processes."""
    import multiprocessing

    device = pick_device(args.dry_run)
    names = slice_names()
    tasks = [(name, attempt, device, ["bfloat16", "float16"]) for attempt, listed in names.items() for name in listed]
    if device == "cpu":  # a check of this code, not of the GPU: one architecture per slice
        tasks = [next(task for task in tasks if task[1] == attempt) for attempt in names]
    report = Report(args.json, part="half_precision", device=device, architectures=len(tasks))
    cache_dir = tempfile.mkdtemp(prefix="gpu-check-generated-")
    deadline = time.monotonic() + args.seconds
    pool = multiprocessing.get_context("spawn").Pool(args.workers)
    pending = {task[0]: pool.apply_async(_half_precision_task, ((*task, cache_dir),)) for task in tasks}
    try:
        while pending and time.monotonic() < deadline:
            for name, result in list(pending.items()):
                if result.ready():
                    del pending[name]
                    try:
                        rows = result.get()
                    except Exception as exc:  # noqa: BLE001 - a worker that died (a crash in a kernel)
                        rows = [{"architecture": name, "equal": False, "error": f"worker died: {failure(exc)}"}]
                    for row in rows:
                        report.row(row)
            time.sleep(0.2)
    finally:
        pool.terminate()  # architectures still running at the deadline end here, and are named below
    rows = report.data["rows"]
    report.set(not_run=sorted(pending), ok=bool(rows) and all(row.get("equal") for row in rows), finished=True)


# ---- real-size configs ---------------------------------------------------------------------------

#: ``key -> (model class, bundled config, with images)``: a text model and two vision-language
#: models through the zoo's drop-ins, as `patcher plan` and a calibration run would load them.
REAL_MODELS = {
    "llama": ("LlamaForCausalLM", "Meta-Llama-3-8B", False),
    "llava": ("TraceableLlavaForConditionalGeneration", "llava-1.5-7b-hf", True),
    "gemma3": ("TraceableGemma3ForConditionalGeneration", "gemma-3-4b-it", True),
}


def tiny_config_dir(key: str, folder: Path) -> str:
    """A CPU-sized stand-in for the real config of ``key`` (the dry run): the zoo's tiny config of
    the same class, or a tiny Llama, saved as a checkpoint directory is."""
    import transformers

    if key == "llama":
        config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    else:
        from zoo._entries import recipe

        config = recipe({"llava": "llava", "gemma3": "gemma3"}[key]).tiny_config()
    config.save_pretrained(folder)
    return str(folder)


def in_dtype(model_id: str, dtype, folder: Path) -> str:
    """``model_id``'s config with every (sub-)config in ``dtype``, saved as a checkpoint directory:
    the plan and the real run read the same file (LLaVA-1.5's own config says float16)."""
    from patcher.models import load_config

    config = load_config(model_id)
    for sub in [config] + [getattr(config, name) for name in getattr(config, "sub_configs", {}) if getattr(config, name, None) is not None]:
        sub.dtype = dtype
    config.save_pretrained(folder)
    return str(folder)


class PeakMeter:
    """Bytes allocated by a block above what was allocated when it began: the CUDA caching
    allocator's count (``max_memory_allocated``: requested sizes, rounded to its 512-byte blocks;
    its cached, unused memory is not counted) on a GPU, the live bytes of every storage an
    operation returned (``patcher.plan.live.LiveBytes``, what the plan itself counts on meta) on the CPU."""

    def __init__(self, device: str):
        self.device = device

    def run(self, function: Callable[[], Any]) -> tuple[Any, int]:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            result = function()
            torch.cuda.synchronize()
            return result, torch.cuda.max_memory_allocated() - base
        from patcher.plan.live import LiveBytes

        tracker = LiveBytes()
        with tracker, tracker.measure() as measured:
            result = function()
        return result, measured.extra


def params_read(model, function: Callable[[], Any]) -> tuple[Any, int]:
    """Bytes of the model's parameters and buffers that the operations of ``function`` read: what
    a subgraph needs on the device, observed rather than derived from the modules it calls."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    weights = {tensor.untyped_storage()._cdata: tensor.untyped_storage().nbytes()
               for tensor in list(model.parameters()) + list(model.buffers())}
    read: dict[int, int] = {}

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            for value in tree_flatten((args, kwargs or {}))[0]:
                if isinstance(value, torch.Tensor):
                    try:
                        key = value.untyped_storage()._cdata
                    except (RuntimeError, NotImplementedError):
                        continue
                    if key in weights:
                        read[key] = weights[key]
            return func(*args, **(kwargs or {}))

    with Reads():
        result = function()
    return result, sum(read.values())


def timed(function: Callable[[], Any], device: str, repeats: int) -> tuple[Any, list[float]]:
    """One warm-up call, then ``repeats`` timed calls (synchronized on a GPU)."""
    result = function()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        result = function()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return result, times


def real_size(args) -> None:
    """One real-size config with random weights in bf16: trace time, the chain against eager as
    traced (exactness, wall time, peak memory), and every subgraph's GPU peak as `patcher plan`
    predicts it against the one measured running that subgraph alone."""
    import torch

    from patcher.models.attempt import prepare_trace
    from patcher.models import build_model
    from patcher.partition import run_subgraphs, trace_subgraphs
    from patcher.plan import plan_model, tensor_bytes
    from patcher.verify import compare, run_eagerly, tolerance

    device = pick_device(args.dry_run)
    model_class, model_id, multimodal = REAL_MODELS[args.model]
    seq_len = args.seq_len if device == "cuda" else 32
    dtype = torch.bfloat16
    report = Report(args.json, part=f"real_size:{args.model}", model_class=model_class,
                    config=model_id if device == "cuda" else f"{model_id} (tiny stand-in: dry run)", device=device,
                    dtype="bfloat16", batch_size=1, seq_len=seq_len, multimodal=multimodal)
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-config-"))
    source = model_id if device == "cuda" else tiny_config_dir(args.model, folder / "tiny")
    checkpoint = in_dtype(source, dtype, folder / "bf16")

    start = time.perf_counter()
    plan = plan_model(model_class, checkpoint, batch_size=1, seq_len=seq_len, samples=1,
                      multimodal_data=multimodal)
    report.set(plan_seconds=round(time.perf_counter() - start, 2))

    setup = prepare_trace(model_class, checkpoint, multimodal, device="cpu", batch_size=1, seq_len=seq_len)
    torch.manual_seed(0)
    start = time.perf_counter()
    model = build_model(setup.model_class, setup.config, device=device)
    synchronize(device)
    sample = {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in setup.sample.items()}
    dtypes = sorted({str(parameter.dtype).removeprefix("torch.") for parameter in model.parameters()})
    report.set(build_seconds=round(time.perf_counter() - start, 2), parameter_dtypes=dtypes,
               parameters=sum(parameter.numel() for parameter in model.parameters()),
               sample={key: list(value.shape) for key, value in sample.items() if isinstance(value, torch.Tensor)})

    start = time.perf_counter()
    subgraphs = trace_subgraphs(model, sample, setup.targets, setup.ignore)
    synchronize(device)
    report.set(trace_seconds=round(time.perf_counter() - start, 2), subgraphs=len(subgraphs),
               plan_subgraphs=len(plan.subgraphs),
               same_partition=[s.targets for s in subgraphs] == [s.targets for s in plan.subgraphs])

    meter = PeakMeter(device)
    repeats = 3 if device == "cuda" else 1
    with torch.no_grad():
        # timed first, then one run each for the peak (a timed loop holds two results at once)
        _, eager_times = timed(lambda: run_eagerly(model, sample).logits, device, repeats)
        _, chain_times = timed(lambda: run_subgraphs(model, subgraphs, sample)["logits"], device, repeats)
        eager_logits, eager_peak = meter.run(lambda: run_eagerly(model, sample).logits)
        chain_logits, chain_peak = meter.run(lambda: run_subgraphs(model, subgraphs, sample)["logits"])
    comparison = compare(chain_logits, eager_logits, tolerance(dtype, "same kernels"))
    del chain_logits, eager_logits
    report.set(equal=comparison.equal, max_diff=comparison.max_abs_diff,
               eager_seconds=[round(t, 4) for t in eager_times], chain_seconds=[round(t, 4) for t in chain_times],
               eager_peak_bytes=eager_peak, chain_peak_bytes=chain_peak)

    # Each subgraph alone, as the sequential pipeline runs it: its inputs held, then its run. The
    # plan's gpu peak is parameters (+ Hessians, none here) + the peak of live tensor bytes.
    intermediates = dict(sample)
    worst = 0.0
    with torch.no_grad():
        for subgraph, planned in zip(subgraphs, plan.subgraphs):
            step = {name: intermediates[name] for name in subgraph.input_names if name in intermediates}
            inputs = tensor_bytes(list(step.values()))
            outputs, allocated = meter.run(lambda: subgraph.forward(model, **step))
            _, weights = params_read(model, lambda: subgraph.forward(model, **step))
            measured_acts = inputs + allocated
            row = {"subgraph": subgraph.index, "targets": subgraph.targets,
                   "planned_params": planned.parameter_total, "read_params": weights,
                   "planned_acts": planned.intermediate_peak_bytes, "measured_acts": measured_acts,
                   "planned_gpu_peak": planned.gpu_peak_bytes, "measured_gpu_peak": weights + measured_acts}
            row["ratio"] = round(row["measured_gpu_peak"] / row["planned_gpu_peak"], 4) if row["planned_gpu_peak"] else None
            row["acts_ratio"] = round(measured_acts / planned.intermediate_peak_bytes, 4) \
                if planned.intermediate_peak_bytes else None
            if row["ratio"] is not None:
                worst = max(worst, abs(math.log(row["ratio"])))
            report.row(row)
            for name in subgraph.consumed_names:
                intermediates.pop(name, None)
            intermediates.update(outputs)
    report.set(plan_peak_gpu_bytes=plan.peak_gpu_bytes,
               measured_peak_gpu_bytes=max((row["measured_gpu_peak"] for row in report.data["rows"]), default=0),
               worst_ratio=round(math.exp(worst), 4), ok=comparison.equal, finished=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["environment", "half_precision", "real_size"])
    parser.add_argument("--json", required=True, help="where the part writes its findings")
    parser.add_argument("--dry-run", action="store_true", help="the CPU, at a size that takes seconds")
    parser.add_argument("--model", choices=sorted(REAL_MODELS), default="llama")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=180,
                        help="half_precision: start no architecture after this; the unfinished are named in the report")
    parser.add_argument("--require", nargs="*", default=[], help="environment: modules that must import too")
    args = parser.parse_args(argv)
    {"environment": environment, "half_precision": half_precision, "real_size": real_size}[args.part](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
