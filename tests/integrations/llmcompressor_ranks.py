"""One rank of a distributed ``oneshot`` inside ``tracezoo_tracing()``, for tests/integrations/test_llmcompressor.py
and scripts/bench_distributed.py.

    torchrun --nproc_per_node 2 tests/integrations/llmcompressor_ranks.py SPEC.json   # 2 ranks (gloo on CPU)
    python tests/integrations/llmcompressor_ranks.py SPEC.json                        # the single-process run

``SPEC.json`` says what to load and calibrate on (keys below, in :func:`main`); every rank writes
``report-<rank>.json`` into ``spec["out"]`` (what it traced on, the error it raised, whether the
weights were unchanged after a refusal, how many tensors were read from the offload while tracing,
its peak resident memory, the time ``oneshot`` took and the time from the start of :func:`main`
(importing llm-compressor, loading, ``oneshot``)), and rank 0 writes the quantized ``state_dict`` to ``weights.pt``.
An error of ``oneshot`` is caught and reported, so the test reads every rank's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist


def _model_class(spec: str):
    """``transformers:Name``, ``zoo:Name`` or ``load_traceable:Name``."""
    kind, name = spec.split(":")
    if kind == "zoo":
        import warnings

        import zoo

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ZooRegeneratedWarning: llm-compressor's transformers is older
            return getattr(zoo, name)
    import transformers

    if kind == "load_traceable":
        from patcher import load_traceable

        return load_traceable(getattr(transformers, name))
    return getattr(transformers, name)


def _init_distributed() -> bool:
    """As a user's script does under torchrun: compressed-tensors' ``init_dist`` where there is an
    accelerator; on a machine without one it fails (compressed-tensors 0.19.0 reads
    ``torch.accelerator.current_accelerator().type`` of None), so gloo is set up directly."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    if torch.accelerator.is_available():
        from compressed_tensors.offload import init_dist

        init_dist()
    else:
        dist.init_process_group("gloo")
    return True


def _load(spec: dict, cls):
    if spec.get("load", "memory") == "memory":
        return cls.from_pretrained(spec["checkpoint"]).eval()
    from compressed_tensors.offload import load_offloaded_model

    # "auto_offload": as many weights in CPU memory as max_memory allows, the rest on disk; a
    # max_memory of a few KB puts nearly all of the tiny model on disk, as a model larger than the
    # host's memory would be
    with load_offloaded_model(cls):
        model = cls.from_pretrained(spec["checkpoint"], device_map="auto_offload",
                                    max_memory={"cpu": int(spec.get("cpu_bytes", 4096))},
                                    offload_folder=spec["offload_folder"])
    return model.eval()


def _disk_offloaded(model) -> int:
    from compressed_tensors.offload.cache import DiskCache

    return sum(len(module._parameters) for module in model.modules() if isinstance(module._parameters, DiskCache))


@contextlib.contextmanager
def _counting_onloads(counter: dict):
    """Counts the tensors the offload caches hand out as copies (read from disk or shared memory)
    while the integration traces."""
    from compressed_tensors.offload.cache import CPUCache, DiskCache

    saved = {cls: cls.onload for cls in (CPUCache, DiskCache)}

    def counted(original, kind):
        def onload(self, offloaded):
            if offloaded is not None:
                counter[kind] = counter.get(kind, 0) + 1
            return original(self, offloaded)
        return onload

    CPUCache.onload = counted(saved[CPUCache], "cpu")
    DiskCache.onload = counted(saved[DiskCache], "disk")
    try:
        yield
    finally:
        for cls, onload in saved.items():
            cls.onload = onload


def _slow_rank(rank: int, seconds: float) -> None:
    """This rank writes its quantized weights ``seconds`` late, as a slower device or a larger
    share of modules would: a rank that goes on without waiting reads the weights before they are
    written."""
    from llmcompressor.modifiers.gptq.base import GPTQModifier

    compress = GPTQModifier.compress_module_list

    def late(self, module_list):
        time.sleep(seconds)
        return compress(self, module_list)

    GPTQModifier.compress_module_list = late


def _fingerprint(batch: dict) -> str:
    digest = hashlib.sha256()
    for key in sorted(batch):
        value = batch[key]
        digest.update(key.encode())
        if isinstance(value, torch.Tensor):
            digest.update(str((value.dtype, tuple(value.shape))).encode())
            digest.update(value.contiguous().view(torch.uint8).numpy().tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:16]


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    started = time.perf_counter()
    distributed = _init_distributed()
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    out = Path(spec["out"])
    report: dict = {"rank": rank, "world": world}

    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier

    import patcher.integrations.llmcompressor as integration
    from patcher.integrations.llmcompressor import tracezoo_tracing

    if spec.get("slow_rank") == rank:
        _slow_rank(rank, float(spec.get("slow_seconds", 0.5)))
    cls = _model_class(spec["model_class"])
    model = _load(spec, cls)
    report["disk_offloaded_parameters"] = _disk_offloaded(model)

    if "dataset" in spec:  # a datasets.Dataset, the same on every rank: llm-compressor splits it
        from datasets import load_from_disk

        dataset = load_from_disk(spec["dataset"])
        data_args = dict(dataset=dataset, num_calibration_samples=len(dataset),
                         shuffle_calibration_samples=bool(spec.get("shuffle", False)))
    else:  # ready batches: rank r's are spec["rank_batches"][r] (every rank's, in order, in a single process)
        batches = torch.load(spec["batches"])
        shares = spec["rank_batches"] if distributed else [sum(spec["rank_batches"], [])]
        mine = [batches[index] for index in shares[rank]]
        data_args = dict(dataset=torch.utils.data.DataLoader(mine, batch_size=None), num_calibration_samples=len(mine))

    traced_on: list[str] = []
    onloads: dict = {}
    trace = integration.trace_subgraphs

    def traced(model, sample, *args, **kwargs):
        traced_on.append(_fingerprint(sample))
        with _counting_onloads(onloads):
            return trace(model, sample, *args, **kwargs)

    integration.trace_subgraphs = traced
    before = {name: value.detach().clone() for name, value in model.state_dict().items()}
    recipe = GPTQModifier(targets=spec["recipe_targets"], scheme=spec.get("scheme", "W8A8"),
                          ignore=spec.get("recipe_ignore", []))
    calibrating = time.perf_counter()
    session = None
    try:
        with tracezoo_tracing() as session:
            oneshot(model=model, processor=object(), recipe=recipe, pipeline="sequential",
                    sequential_targets=spec["sequential_targets"], **data_args,
                    **spec.get("oneshot_args_by_rank", {}).get(str(rank), {}))
    except Exception as error:  # noqa: BLE001 - reported for the test to read
        report["error_type"] = type(error).__name__
        report["error"] = str(error)
        report["traceback"] = traceback.format_exc()
        state = model.state_dict()
        report["unchanged"] = all(torch.equal(state[name], value) for name, value in before.items() if name in state)
    finally:
        integration.trace_subgraphs = trace
    report["traced_on"] = traced_on
    paths = getattr(session, "paths", None)
    report["path_kinds"] = len(paths.paths) if paths is not None else 0
    report["onloads_while_tracing"] = onloads
    report["oneshot_s"] = time.perf_counter() - calibrating
    report["wall_s"] = time.perf_counter() - started
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if rank == 0 and "error" not in report:
        torch.save({name: value.detach().clone() for name, value in model.state_dict().items()}, out / "weights.pt")
    (out / f"report-{rank}.json").write_text(json.dumps(report, indent=1))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    # run as a script, this folder is first on the path, and its `zoo` (the zoo's tests) would
    # shadow the zoo package: the checkout goes first instead
    sys.path[0] = str(Path(__file__).resolve().parents[2])
    main(sys.argv[1])
