#!/usr/bin/env python3
"""Wall time and peak host memory of llm-compressor's ``oneshot`` inside ``tracezoo_tracing()``:
one process against ``torchrun`` ranks on this machine's CPU (gloo).

What it runs
------------
A random LlamaForCausalLM of the size given (default: hidden 512, 8 layers, vocabulary 16000,
about 42M parameters, 166 MB in float32) is written with ``save_pretrained``, with ``--batches``
text batches of ``--batch-size`` x ``--seq-len`` tokens. GPTQ W8A8 on every projection of the
decoder layers, ``pipeline="sequential"``, one subgraph per layer. Each run is
``tests/integrations/llmcompressor_ranks.py`` (the same worker the tests run) in fresh processes:

* ``1 process``: plain ``python``, every batch;
* ``N ranks``:   ``torchrun --standalone --nproc_per_node N``, each rank its contiguous share of the
  batches (the model in shared memory, as compressed-tensors' distributed offload puts it).

each with the model loaded in memory (``from_pretrained``) and, with ``--offload``, through
``load_offloaded_model`` with ``device_map="auto_offload"`` and almost no CPU budget (the weights on
disk). The quantized weights of every run are compared with the single process's (bit-identical,
or the number of tensors that differ).

What it measures
----------------
* **threads**: per process (``OMP_NUM_THREADS``), by default the CPUs split among the processes,
  so that every run uses the same cores (torchrun would give each of several ranks one thread, a
  plain process every core);
* **wall s**: the whole command, process start to exit (imports, loading, oneshot, exit);
  **oneshot s**: ``oneshot`` itself, the slowest rank's;
* **peak PSS MB**: the highest sum, over every process of the run (torchrun's agent and the
  ranks), of the proportional set size (``/proc/PID/smaps_rollup``, sampled every 50 ms): memory
  shared between ranks (the weights in shared memory, the libraries) is counted once, split among
  the processes mapping it. Peak RSS per rank (``ru_maxrss``) is reported too: it counts the shared
  weights in every rank.

Examples
--------
    .venv-llmc/bin/python scripts/bench_distributed.py                      # 1 process vs 2 ranks, in memory
    .venv-llmc/bin/python scripts/bench_distributed.py --offload --ranks 2,4 --json bench-out/dist.json

Timings on a machine shared with other work are noisy: run it on a quiet one, and compare runs of
one invocation only. Never a test (no timed assert anywhere): tests/integrations/test_llmcompressor.py holds
the behaviour, this the cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "integrations" / "llmcompressor_ranks.py"


def build(folder: Path, args) -> dict:
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 3,
        num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    model.save_pretrained(folder)
    generator = torch.Generator().manual_seed(0)
    batches = [{"input_ids": torch.randint(0, args.vocab, (args.batch_size, args.seq_len), generator=generator),
                "attention_mask": torch.ones(args.batch_size, args.seq_len, dtype=torch.long)}
               for _ in range(args.batches)]
    torch.save(batches, folder / "batches.pt")
    return {"checkpoint": str(folder), "model_class": "transformers:LlamaForCausalLM",
            "batches": str(folder / "batches.pt"), "recipe_targets": "re:.*_proj",
            "sequential_targets": ["LlamaDecoderLayer"], "parameters": parameters}


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakMemory:
    """The highest summed PSS of a process tree, sampled in a thread. (Not /dev/shm: torch's shared
    tensors live in files there that are unlinked once every rank mapped them; PSS counts them.)"""

    def __init__(self, pid: int, every: float = 0.05):
        self.pid, self.every = pid, every
        self.peak_pss_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_pss_kb = max(self.peak_pss_kb, sum(_pss_kb(pid) for pid in _tree(self.pid)))
            time.sleep(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run(spec: dict, out: Path, ranks: int | None, threads: int) -> dict:
    out.mkdir(parents=True)
    spec = {**spec, "out": str(out), "offload_folder": str(out / "offload")}
    (out / "spec.json").write_text(json.dumps(spec))
    launcher = [] if ranks is None else ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    # torchrun gives each of several ranks one thread unless told otherwise, one process takes every
    # core: set alike for every run, so that the runs share the same cores
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS=str(threads))
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, *launcher, str(WORKER), str(out / "spec.json")], env=env,
                               stdout=subprocess.DEVNULL, stderr=open(out / "log", "w"))
    memory = PeakMemory(process.pid)
    status = process.wait()
    wall = time.perf_counter() - started
    memory.stop()
    reports = [json.loads(path.read_text()) for path in sorted(out.glob("report-*.json"))]
    failed = status != 0 or any("error" in report for report in reports)
    return {"ranks": ranks or 1, "launcher": "python" if ranks is None else "torchrun", "threads": threads,
            "status": status,
            "failed": failed, "wall_s": wall, "oneshot_s": max((r.get("oneshot_s", 0) for r in reports), default=0),
            "peak_pss_mb": memory.peak_pss_kb / 1024,
            "peak_rss_mb_by_rank": [round(r.get("peak_rss_mb", 0)) for r in reports],
            "disk_offloaded_parameters": [r.get("disk_offloaded_parameters") for r in reports]}


def _differing(reference: Path, weights: Path) -> dict | None:
    """How ``weights`` differ from ``reference``: the tensors, and of the quantized weights (those
    with a ``weight_scale``: the dequantized values oneshot leaves), how many elements differ and by
    how many quantization steps at most."""
    import torch

    if not reference.exists() or not weights.exists():
        return None
    one, other = torch.load(reference), torch.load(weights)
    tensors = [key for key in one if not torch.equal(one[key], other.get(key, torch.empty(0)))]
    elements, steps, total = 0, 0.0, 0
    for key in one:
        scale = one.get(key.removesuffix("weight") + "weight_scale") if key.endswith(".weight") else None
        if scale is None:
            continue
        total += one[key].numel()
        if key in tensors:
            moved = (other[key] - one[key]).abs() / scale
            elements += int((moved > 0).sum())
            steps = max(steps, float(moved.max()))
    return {"tensors": len(tensors), "quantized_weights_moved": elements, "quantized_weights": total,
            "most_steps": round(steps, 3), "non_weight_tensors": [key for key in tensors if not key.endswith(".weight")]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2", help="comma-separated rank counts to compare with one process")
    parser.add_argument("--offload", action="store_true", help="also load through load_offloaded_model (disk)")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=16000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int,
                        help="threads per process (default: the CPUs split among the processes of the run)")
    parser.add_argument("--keep", type=Path, help="keep the checkpoint and the runs' outputs here")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-dist-")) if args.keep is None else args.keep
    folder.mkdir(parents=True, exist_ok=True)
    spec = build(folder / "checkpoint", args)
    parameters = spec.pop("parameters")
    print(f"LlamaForCausalLM: {parameters / 1e6:.1f}M parameters ({parameters * 4 / 2**20:.0f} MB float32), "
          f"{args.layers} layers; {args.batches} batches of {args.batch_size}x{args.seq_len} tokens; GPTQ W8A8; "
          f"{os.cpu_count()} CPUs")
    rank_counts = [int(count) for count in args.ranks.split(",")]
    results = []
    header = f"{'load':8} {'run':12} {'threads':>7} {'wall s':>7} {'oneshot s':>9} {'peak PSS MB':>11} " \
             f"{'peak RSS MB by rank':>20}  weights vs 1 process"
    print(header)
    for load in ["memory"] + (["offload"] if args.offload else []):
        for ranks in [None, *rank_counts]:
            name = "1 process" if ranks is None else f"{ranks} ranks"
            out = folder / f"{load}-{'single' if ranks is None else ranks}"
            shutil.rmtree(out, ignore_errors=True)
            threads = args.threads or max(1, (os.cpu_count() or 1) // (ranks or 1))
            result = {"load": load, **run({**spec, "load": load, "rank_batches": _shares(args.batches, ranks or 1)},
                                          out, ranks, threads)}
            differ = _differing(folder / "memory-single" / "weights.pt", out / "weights.pt")
            result["tensors_differing_from_1_process"] = differ
            results.append(result)
            verdict = "FAILED (see log)" if result["failed"] else "bit-identical" if differ and not differ["tensors"] \
                else f"{differ['tensors']} tensors differ: {differ['quantized_weights_moved']} of " \
                     f"{differ['quantized_weights']} quantized weights, by at most {differ['most_steps']} step(s); " \
                     f"other tensors: {differ['non_weight_tensors'] or 'none'}"
            print(f"{load:8} {name:12} {threads:7} {result['wall_s']:7.1f} {result['oneshot_s']:9.1f} "
                  f"{result['peak_pss_mb']:11.0f} "
                  f"{str(result['peak_rss_mb_by_rank']):>20}  {verdict}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"parameters": parameters, "args": {k: str(v) for k, v in vars(args).items()},
                                         "results": results}, indent=1))
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


def _shares(batches: int, ranks: int) -> list[list[int]]:
    return [list(range(rank * batches // ranks, (rank + 1) * batches // ranks)) for rank in range(ranks)]


if __name__ == "__main__":
    main()
