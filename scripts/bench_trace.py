#!/usr/bin/env python3
"""Benchmark tracezoo's trace_subgraphs: trace time, partition time and peak memory.

What it measures
----------------
For every case the public ``trace_subgraphs(model, sample, targets, ignore)`` is called and
timed, split into its two phases:

* **trace**     -- building the whole-model fx graph (tracezoo: ``patcher.trace.trace_graph``);
* **partition** -- cutting it into one subgraph per sequential target
  (tracezoo: ``patcher.partition.partition_graph``).

Wall time (``total s``) and the process's CPU time (``CPU s``, ``time.process_time``) are both
reported: on a shared machine, CPU time is the steadier of the two. Each timed call comes after
an untimed warm-up call (``--no-warmup`` to skip it); ``--repeat`` calls are timed and the run
with the median wall time is shown.

Memory is measured twice, in a fresh process per case:

* **peak MB** -- ``tracemalloc`` peak of Python allocations during one extra, untimed call
  (tracemalloc slows Python down, so it never runs during the timed calls);
* **RSS delta MB** -- rise of the process's peak resident set size (``resource.getrusage``
  ``ru_maxrss``) across the first timed call, after the model and sample were built.

Cases
-----
``llama3-8b``   Meta-Llama-3-8B from the bundled config (patcher/models/configs), on the ``meta`` device;
                targets ``LlamaDecoderLayer`` (32 of them).
``real``        every bundled real config (patcher/configs), on ``meta``, built and sampled as
                ``patcher trace`` builds them (``patcher.models.attempt.prepare_trace``): the VLMs with an
                image (``--multimodal``), the text models on text. Each tracer gets its own class
                (tracezoo the zoo's drop-in where there is one, llmcompressor transformers' own,
                which its tracer rewrites itself), the same sample and targets (tracezoo's default
                targets) and its own default ignore list. One case per config: ``qwen2-vl-2b``,
                ``qwen2.5-vl-7b``, ``llama-3.2-11b-vision``, ``llava-1.5-7b``, ``gemma-3-4b``,
                ``llama3-8b-config``, ``deepseek-v3``; ``real`` names them all.
``llama3-70b``  a LlamaConfig with Llama-3-70B's published shape (hidden 8192, 80 layers,
                64 heads, 8 kv heads, intermediate 28672, vocab 128256), on ``meta``.
``chain``       a synthetic model whose forward loops over an ``nn.ModuleList`` of N tiny
                ``Block`` modules (one ``Linear(4, 4)`` each); targets ``Block``. Sizes from
                ``--sizes``. Time per target should stay flat if tracing is linear in N.
``side``        (opt-in) the same chain, but the loop also calls a non-target module
                (``nn.Identity``) after every block, as models with per-layer modules outside
                the layers do. Sizes from ``--side-sizes``.

The peer
--------
With ``--peer-python`` pointing at a Python that has ``llmcompressor`` installed (default
``/tmp/llmc-venv/bin/python``, or $TRACEZOO_PEER_PYTHON), every case also runs through
``llmcompressor.pipelines.sequential.helpers.trace_subgraphs`` on the same model and sample,
in that interpreter (its own torch/transformers). Its partition time is the time spent in its
``topological_partition``, ``partition_graph`` and ``trace_consumed_names``; the rest is trace.
A missing interpreter, or one without llmcompressor, skips the peer with a message.
Set up the peer in its own venv, with torch pinned so pip never pulls a CUDA build::

    python3 -m venv /tmp/llmc-venv
    echo 'torch==2.13.0' > /tmp/llmc-constraints.txt
    /tmp/llmc-venv/bin/pip install -c /tmp/llmc-constraints.txt torch==2.13.0
    /tmp/llmc-venv/bin/pip install -c /tmp/llmc-constraints.txt 'llmcompressor==0.14.*'

Examples
--------
    .venv/bin/python scripts/bench_trace.py                          # everything, N up to 100,000
    .venv/bin/python scripts/bench_trace.py --sizes 1000,10000 --skip-peer
    .venv/bin/python scripts/bench_trace.py --cases chain --sizes 100000 --repeat 3 --json out.json
    .venv/bin/python scripts/bench_trace.py --cases side --side-sizes 1000,3000,10000 --skip-peer

Each case runs in a fresh worker process (this same file, ``--worker``), so one case's memory
and caches never reach the next; a progress line per case goes to stderr, the tables to stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PEER_PYTHON = os.environ.get("TRACEZOO_PEER_PYTHON", "/tmp/llmc-venv/bin/python")
RESULT_MARKER = "BENCH_TRACE_RESULT "
TRACERS = ("tracezoo", "llmcompressor")
MODEL_CASES = ("llama3-8b", "llama3-70b")
# case -> (bundled config, transformers class, traced with an image): the real configs, traced as
# `patcher trace CLASS CONFIG [--multimodal]` traces them
REAL_CONFIGS = {
    "qwen2-vl-2b": ("Qwen2-VL-2B-Instruct", "Qwen2VLForConditionalGeneration", True),
    "qwen2.5-vl-7b": ("Qwen2.5-VL-7B-Instruct", "Qwen2_5_VLForConditionalGeneration", True),
    "llama-3.2-11b-vision": ("Llama-3.2-11B-Vision-Instruct", "MllamaForConditionalGeneration", True),
    "llava-1.5-7b": ("llava-1.5-7b-hf", "LlavaForConditionalGeneration", True),
    "gemma-3-4b": ("gemma-3-4b-it", "Gemma3ForConditionalGeneration", True),
    "llama3-8b-config": ("Meta-Llama-3-8B", "LlamaForCausalLM", False),
    "deepseek-v3": ("DeepSeek-V3", "DeepseekV3ForCausalLM", False),
}
ALL_CASES = (*MODEL_CASES, "chain", "side", *REAL_CONFIGS)
DEFAULT_CASES = (*MODEL_CASES, "chain")

# Llama-3-70B's published shape (meta-llama/Meta-Llama-3-70B config.json).
LLAMA3_70B = dict(
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_id=128001,
)


# ---------------------------------------------------------------------------------------------
# Synthetic models. Defined at module level in this file: llmcompressor rewrites forwards from
# their source (inspect.getsource), so they must live in a real file. Only torch is needed here,
# so the peer interpreter can import this file without tracezoo.
# ---------------------------------------------------------------------------------------------
def _synthetic_classes():
    import torch
    from torch import nn

    class Block(nn.Module):
        """One sequential target: a single tiny Linear."""

        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            return self.linear(x)

    class Chain(nn.Module):
        """``x -> blocks[0] -> blocks[1] -> ... -> blocks[N-1]``."""

        def __init__(self, n: int, side: bool = False):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(n))
            if side:
                self.sides = nn.ModuleList(nn.Identity() for _ in range(n))
            # llmcompressor reads model.config and model.device (as its own tests' models do).
            self.config = types.SimpleNamespace(use_cache=False)
            self.device = torch.device("meta")

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    class SideChain(Chain):
        """The chain plus a non-target module called after every block, outside the blocks."""

        def __init__(self, n: int):
            super().__init__(n, side=True)

        def forward(self, x):
            for block, side in zip(self.blocks, self.sides):
                x = side(block(x))
            return x

    return Block, Chain, SideChain


# ---------------------------------------------------------------------------------------------
# Worker: one (tracer, case, size) in a fresh process; prints one JSON result line.
# ---------------------------------------------------------------------------------------------
def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux


def _text_sample(vocab_size: int, seq_len: int):
    import torch

    generator = torch.Generator().manual_seed(0)
    return {
        "input_ids": torch.randint(0, vocab_size, (1, seq_len), generator=generator),
        "attention_mask": torch.ones(1, seq_len, dtype=torch.long),
    }


def _build_case(spec: dict):
    """Return (model, sample, sequential_targets, number_of_targets)."""
    import torch

    case, tracer = spec["case"], spec["tracer"]
    if case in REAL_CONFIGS:
        return _build_real_config(case, tracer)
    if case in ("chain", "side"):
        _, Chain, SideChain = _synthetic_classes()
        with torch.device("meta"):
            model = (SideChain if case == "side" else Chain)(spec["n"]).eval()
        return model, {"x": torch.zeros(1, 4)}, ["Block"], spec["n"]

    from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM

    if case == "llama3-8b":
        if tracer == "tracezoo":
            from patcher.models import build_model, load_config, resolve_model_class
            from patcher.samples import text_sample

            config = load_config("Meta-Llama-3-8B")
            model = build_model(resolve_model_class(config.architectures[0]), config)
            sample = text_sample(config, seq_len=spec["seq_len"], generator=torch.Generator().manual_seed(0))
            return model, sample, ["LlamaDecoderLayer"], config.num_hidden_layers
        # the peer's interpreter has no tracezoo: read the same bundled JSON the same way
        data = json.loads((REPO / "patcher" / "models" / "configs" / "Meta-Llama-3-8B.json").read_text())
        config = AutoConfig.for_model(**data)
    elif case == "llama3-70b":
        config = LlamaConfig(**LLAMA3_70B)
    else:
        raise ValueError(f"unknown case {case!r}")
    with torch.device("meta"):
        model = LlamaForCausalLM._from_config(config).eval()
    return model, _text_sample(config.vocab_size, spec["seq_len"]), ["LlamaDecoderLayer"], config.num_hidden_layers


def _build_real_config(case: str, tracer: str):
    """A bundled config's model on meta and its sample, as ``patcher trace`` builds them. The peer's
    interpreter imports tracezoo from this checkout for that only (its own torch and transformers)."""
    sys.path.insert(0, str(REPO))
    from patcher.models.attempt import prepare_trace
    from patcher.models import resolve_model_class
    from patcher.registry.plugins import drop_in_for

    name, class_name, multimodal = REAL_CONFIGS[case]
    cls = resolve_model_class(class_name)
    drop_in = drop_in_for(cls) if tracer == "tracezoo" else None
    if drop_in is not None:
        cls = resolve_model_class(drop_in.name)
    setup = prepare_trace(cls, name, multimodal_data=multimodal)
    n_targets = sum(type(module).__name__ in setup.targets for module in setup.model.modules())
    return setup.model, setup.sample, setup.targets, n_targets


class _PhaseTimer:
    """Wraps module-level functions so the time spent inside them is added up per phase."""

    def __init__(self):
        self.seconds = {"trace": 0.0, "partition": 0.0}
        self._restore = []

    def wrap(self, module, name: str, phase: str) -> None:
        original = getattr(module, name)
        seconds = self.seconds

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[phase] += time.perf_counter() - start

        setattr(module, name, timed)
        self._restore.append((module, name, original))

    def reset(self) -> None:
        for key in self.seconds:
            self.seconds[key] = 0.0


def _tracer_api(tracer: str):
    """Return (trace_subgraphs, default ignore, phase timer, versions) for a tracer."""
    import torch
    import transformers

    timer = _PhaseTimer()
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "python": platform.python_version()}
    if tracer == "tracezoo":
        sys.path.insert(0, str(REPO))
        import patcher
        from patcher import DEFAULT_IGNORE, trace_subgraphs

        # the module that defines trace_subgraphs calls the two phases by these names
        module = sys.modules[trace_subgraphs.__module__]
        timer.wrap(module, "trace_graph", "trace")
        timer.wrap(module, "partition_graph", "partition")
        versions["tracezoo"] = patcher.__version__
        return module.trace_subgraphs, list(DEFAULT_IGNORE), timer, versions

    from importlib.metadata import version

    from llmcompressor.args import DatasetArguments
    from llmcompressor.pipelines.sequential import helpers as module

    try:  # quiet its per-call warnings (no accelerator, no lm_head on the chain)
        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level="ERROR")
    except Exception:
        pass
    for name in ("topological_partition", "partition_graph", "trace_consumed_names"):
        timer.wrap(module, name, "partition")
    versions["llmcompressor"] = version("llmcompressor")
    return module.trace_subgraphs, list(DatasetArguments().tracing_ignore), timer, versions


def worker(spec: dict) -> dict:
    trace_subgraphs, ignore, timer, versions = _tracer_api(spec["tracer"])
    t0 = time.perf_counter()
    model, sample, targets, n_targets = _build_case(spec)
    build_s = time.perf_counter() - t0

    if spec["warmup"]:
        # one untimed call first, so one-time costs (lazy imports, first-use caches) stay out of
        # the timings; the chains warm up on an 8-block copy, the Llamas on the model itself
        warm_model, warm_sample = model, sample
        if spec["case"] in ("chain", "side"):
            warm_model, warm_sample, _, _ = _build_case({**spec, "n": 8})
        trace_subgraphs(warm_model, warm_sample, targets, ignore)
        del warm_model, warm_sample

    runs = []
    rss_delta = None
    n_subgraphs = None
    for index in range(spec["repeat"]):
        gc.collect()
        rss_before = _peak_rss_mb()
        if spec["no_gc"]:
            gc.disable()
        timer.reset()
        cpu_start = time.process_time()
        start = time.perf_counter()
        subgraphs = trace_subgraphs(model, sample, targets, ignore)
        total = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        gc.enable()
        if index == 0:
            rss_delta = _peak_rss_mb() - rss_before
        n_subgraphs = len(subgraphs)
        partition = timer.seconds["partition"]
        runs.append({"total_s": total, "partition_s": partition, "trace_s": total - partition, "cpu_s": cpu})
        del subgraphs

    peak_mb = None
    if spec["tracemalloc"]:
        import tracemalloc

        gc.collect()
        tracemalloc.start()
        subgraphs = trace_subgraphs(model, sample, targets, ignore)
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        del subgraphs

    # the run with the median wall time (the lower one for an even count), so its phases add up
    median = sorted(runs, key=lambda run: run["total_s"])[(len(runs) - 1) // 2]
    return {
        **spec,
        "targets": n_targets,
        "subgraphs": n_subgraphs,
        "build_s": build_s,
        "runs": runs,
        **median,
        "ms_per_target": 1000 * median["total_s"] / n_targets,
        "cpu_ms_per_target": 1000 * median["cpu_s"] / n_targets,
        "loadavg": os.getloadavg(),
        "peak_mb": peak_mb,
        "rss_delta_mb": rss_delta,
        "versions": versions,
    }


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------
def _int_list(text: str) -> list[int]:
    try:
        values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return values


def _case_list(text: str) -> list[str]:
    cases = [part.strip() for part in text.split(",") if part.strip()]
    cases = [expanded for case in cases for expanded in (REAL_CONFIGS if case == "real" else [case])]
    unknown = [case for case in cases if case not in ALL_CASES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(ALL_CASES)}")
    return cases


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench_trace.py",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cases", type=_case_list, default=list(DEFAULT_CASES),
                        help=f"comma-separated cases to run, from {', '.join(ALL_CASES)}, or 'real' for every real config "
                             f"(default: {','.join(DEFAULT_CASES)})")
    parser.add_argument("--sizes", type=_int_list, default=[1000, 10000, 100000],
                        help="chain lengths N for the 'chain' case (default: 1000,10000,100000). N=100000 costs "
                             "about 5 min (tracezoo) and 13 min (llmcompressor) of worker time on 2 cores, model "
                             "build and the tracemalloc call included: drop it, or add --no-tracemalloc, for a quick run")
    parser.add_argument("--side-sizes", type=_int_list, default=[1000, 3000, 10000],
                        help="chain lengths for the opt-in 'side' case (default: 1000,3000,10000)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="timed calls per case; the tables show the median (default: 1)")
    parser.add_argument("--json", metavar="OUT", type=Path, help="also write every result (all runs) to OUT as JSON")
    parser.add_argument("--skip-peer", action="store_true", help="run tracezoo only")
    parser.add_argument("--peer-python", default=DEFAULT_PEER_PYTHON,
                        help="Python interpreter with llmcompressor installed (default: %(default)s, "
                             "or $TRACEZOO_PEER_PYTHON)")
    parser.add_argument("--seq-len", type=int, default=16, help="sample sequence length for the Llama cases (default: 16)")
    parser.add_argument("--no-tracemalloc", action="store_true",
                        help="skip the extra tracemalloc call (peak MB column left empty); halves the run time")
    parser.add_argument("--no-gc", action="store_true",
                        help="disable Python's cyclic garbage collector during timed calls (shows how much of "
                             "the time is GC; memory columns are unaffected)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the untimed warm-up call (on an 8-block chain, or the Llama itself) before timing")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per case before it is given up (default: 1800)")
    parser.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    return args


def _peer_problem(python: str) -> str | None:
    """None if ``python`` can import llmcompressor, else why not."""
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        return f"peer interpreter {python} not found (give --peer-python, or --skip-peer)"
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('llmcompressor'))"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{python} has no llmcompressor: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def _run_worker(python: str, spec: dict, timeout: float) -> dict:
    command = [python, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
    return {**spec, "error": f"worker exited {proc.returncode}: " + " | ".join(tail)}


def _fmt(value, digits=2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def _case_label(result: dict) -> str:
    return f"{result['case']} N={result['n']:,}" if result["case"] in ("chain", "side") else result["case"]


def results_table(results: list[dict]) -> str:
    lines = [
        "| tracer | case | targets | subgraphs | trace s | partition s | total s | CPU s | ms/target | peak MB | RSS Δ MB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['tracer']} | {_case_label(r)} | - | - | - | - | - | - | - | - | - |  ← {r['error']}")
            continue
        lines.append(
            f"| {r['tracer']} | {_case_label(r)} | {_fmt(r['targets'])} | {_fmt(r['subgraphs'])} | "
            f"{_fmt(r['trace_s'], 3)} | {_fmt(r['partition_s'], 3)} | {_fmt(r['total_s'], 3)} | "
            f"{_fmt(r['cpu_s'], 3)} | {_fmt(r['ms_per_target'], 3)} | {_fmt(r['peak_mb'], 1)} | {_fmt(r['rss_delta_mb'], 1)} |"
        )
    return "\n".join(lines)


def linearity_table(results: list[dict], case: str) -> str | None:
    """time(N)/N per tracer and size, and its ratio to the smallest N's."""
    rows = [r for r in results if r["case"] == case and "error" not in r]
    if not rows:
        return None
    lines = [
        "| tracer | N | total s | ms/target | × smallest N | CPU ms/target | × smallest N | trace ms/target "
        "| partition ms/target |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for tracer in TRACERS:
        mine = sorted((r for r in rows if r["tracer"] == tracer), key=lambda r: r["n"])
        for r in mine:
            ratio = r["ms_per_target"] / mine[0]["ms_per_target"]
            cpu_ratio = r["cpu_ms_per_target"] / mine[0]["cpu_ms_per_target"]
            lines.append(
                f"| {tracer} | {r['n']:,} | {_fmt(r['total_s'], 3)} | {_fmt(r['ms_per_target'], 4)} | {ratio:.2f} | "
                f"{_fmt(r['cpu_ms_per_target'], 4)} | {cpu_ratio:.2f} | "
                f"{_fmt(1000 * r['trace_s'] / r['n'], 4)} | {_fmt(1000 * r['partition_s'] / r['n'], 4)} |"
            )
    return "\n".join(lines)


def _min_cpu(result: dict) -> float:
    """The least CPU time of the timed calls: on a shared machine, the closest to the cost itself."""
    return min(run["cpu_s"] for run in result["runs"])


def comparison_table(results: list[dict]) -> str | None:
    by_key = {}
    for r in results:
        if "error" not in r:
            by_key.setdefault((r["case"], r["n"]), {})[r["tracer"]] = r
    lines = ["| case | tracezoo total s | llmcompressor total s | speed-up | tracezoo CPU s | llmcompressor CPU s "
             "| speed-up (CPU) | tracezoo min CPU s | llmcompressor min CPU s | tracezoo peak MB | llmcompressor peak MB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (case, n), pair in by_key.items():
        if len(pair) < 2:
            continue
        ours, peer = pair["tracezoo"], pair["llmcompressor"]
        lines.append(
            f"| {_case_label(ours)} | {_fmt(ours['total_s'], 3)} | {_fmt(peer['total_s'], 3)} | "
            f"{peer['total_s'] / ours['total_s']:.2f}× | {_fmt(ours['cpu_s'], 3)} | {_fmt(peer['cpu_s'], 3)} | "
            f"{peer['cpu_s'] / ours['cpu_s']:.2f}× | {_fmt(_min_cpu(ours), 3)} | {_fmt(_min_cpu(peer), 3)} | "
            f"{_fmt(ours['peak_mb'], 1)} | {_fmt(peer['peak_mb'], 1)} |"
        )
    return "\n".join(lines) if len(lines) > 2 else None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        result = worker(json.loads(args.worker))
        print(RESULT_MARKER + json.dumps(result), flush=True)
        return 0

    tracers = {"tracezoo": sys.executable}
    if not args.skip_peer:
        problem = _peer_problem(args.peer_python)
        if problem:
            print(f"skipping llmcompressor: {problem}", file=sys.stderr)
        else:
            tracers["llmcompressor"] = args.peer_python

    specs = []
    for case in args.cases:
        sizes = args.sizes if case == "chain" else args.side_sizes if case == "side" else [None]
        for n in sizes:
            for tracer in tracers:
                specs.append({"tracer": tracer, "case": case, "n": n, "repeat": args.repeat,
                              "seq_len": args.seq_len, "tracemalloc": not args.no_tracemalloc,
                              "no_gc": args.no_gc, "warmup": not args.no_warmup})

    results = []
    started = time.perf_counter()
    for index, spec in enumerate(specs, 1):
        label = f"[{index}/{len(specs)}] {spec['tracer']:<13} {spec['case']}" + (f" N={spec['n']:,}" if spec["n"] else "")
        print(f"{label} ...", file=sys.stderr, flush=True)
        case_start = time.perf_counter()
        result = _run_worker(tracers[spec["tracer"]], spec, args.timeout)
        if result.get("n") is None:
            result["n"] = result.get("targets", 0)
        wall = time.perf_counter() - case_start
        if "error" in result:
            print(f"{label} FAILED after {wall:.1f} s: {result['error']}", file=sys.stderr, flush=True)
        else:
            print(f"{label} {result['subgraphs']:,} subgraphs, total {result['total_s']:.3f} s "
                  f"(trace {result['trace_s']:.3f}, partition {result['partition_s']:.3f}), "
                  f"peak {_fmt(result['peak_mb'], 1)} MB; worker wall {wall:.1f} s", file=sys.stderr, flush=True)
        results.append(result)

    print("## Trace time and memory\n")
    print(results_table(results))
    for case in ("chain", "side"):
        table = linearity_table(results, case)
        if table:
            print(f"\n## Per-target time, case '{case}' (flat ratio = linear in N)\n")
            print(table)
    table = comparison_table(results)
    if table:
        print("\n## tracezoo vs llmcompressor (speed-up = llmcompressor time / tracezoo time)\n")
        print(table)
    versions = {r["tracer"]: r["versions"] for r in results if "versions" in r}
    print("\nVersions: " + "; ".join(f"{tracer}: " + ", ".join(f"{k} {v}" for k, v in info.items())
                                     for tracer, info in versions.items()))
    loads = [r["loadavg"][0] for r in results if "loadavg" in r]
    print(f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, 1-min load average {min(loads, default=0):.1f}"
          f"-{max(loads, default=0):.1f} while it ran (above 1 means other processes competed: trust CPU s more "
          f"than wall s); timed calls per case: {args.repeat} (the median run shown)"
          + ("; GC off while timing" if args.no_gc else ""))
    print(f"Command: {shlex.join([Path(sys.executable).name, *sys.argv])}; wall {time.perf_counter() - started:.0f} s")

    if args.json:
        payload = {"command": sys.argv, "python": sys.executable, "peer_python": tracers.get("llmcompressor"),
                   "machine": platform.platform(), "cpus": os.cpu_count(), "results": results}
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
