"""Run ``check_architecture`` for many architectures, each in its own process with a time limit.

A crash (segfault, OOM kill) or a hang of one architecture becomes a failure row; the sweep goes
on. Processes come from a ``forkserver`` that imported torch and transformers once (a fresh
interpreter per architecture would spend most of its time importing), or ``spawn`` on request.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import traceback
from typing import Callable, Iterable

from .check import CoverageRow

PRELOAD = ["torch", "transformers", "transformers.modeling_utils", "patcher", "patcher.rewrite",
           "patcher.models.traceable", "patcher.coverage.check"]


def _child(name: str, options: dict, connection) -> None:
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import warnings

        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        warnings.filterwarnings("ignore")

        torch.set_num_threads(options.pop("threads", 1))
        from .check import check_architecture

        row = check_architecture(name, **options)
        connection.send(row.as_dict())
    except BaseException as exc:  # noqa: BLE001
        connection.send({"architecture": name, "stage": "crash",
                         "error": f"{type(exc).__name__}: {exc}"[:400] + "\n" + traceback.format_exc()[-600:]})
    finally:
        connection.close()


def run_architectures(
    names: Iterable[str],
    *,
    jobs: int = 2,
    timeout: float = 60.0,
    options: dict | None = None,
    start_method: str = "forkserver",
    on_row: Callable[[CoverageRow], None] | None = None,
) -> list[CoverageRow]:
    """Check each name in a child process, ``jobs`` at a time; rows come back in input order."""
    names = list(names)
    context = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        context.set_forkserver_preload(PRELOAD)
    options = dict(options or {})
    options.setdefault("threads", max(1, (os.cpu_count() or 1) // max(1, jobs)))
    pending = list(enumerate(names))
    running: dict[int, tuple] = {}
    rows: dict[int, CoverageRow] = {}

    def finish(index: int, row: CoverageRow) -> None:
        rows[index] = row
        if on_row:
            on_row(row)

    while pending or running:
        while pending and len(running) < jobs:
            index, name = pending.pop(0)
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(name, dict(options), sender), daemon=True)
            process.start()
            sender.close()
            running[index] = (name, process, receiver, time.monotonic())
        time.sleep(0.05)
        for index, (name, process, receiver, started) in list(running.items()):
            row = None
            try:
                if receiver.poll():
                    data = receiver.recv()
                    if data.get("stage") == "crash" and "built" not in data:
                        row = CoverageRow(architecture=name, stage="crash", error=data.get("error"))
                    else:
                        row = CoverageRow.from_dict(data)
            except (EOFError, OSError):
                process.join(1)
                row = CoverageRow(architecture=name, stage="crash",
                                  error=f"process died (exit code {process.exitcode})")
            if row is None and not process.is_alive():
                process.join()
                if receiver.poll():
                    continue  # its row arrived just now: read it on the next round
                row = CoverageRow(architecture=name, stage="crash",
                                  error=f"process died without a result (exit code {process.exitcode})")
            elapsed = time.monotonic() - started
            if row is None and elapsed > timeout:
                row = CoverageRow(architecture=name, stage="timeout", error=f"no result after {timeout:.0f} s")
            if row is None:
                continue
            if process.is_alive():
                process.join(2)
                if process.is_alive():
                    process.kill()
                    process.join(5)
            receiver.close()
            if row.seconds == 0.0:
                row.seconds = elapsed
            del running[index]
            finish(index, row)
    return [rows[index] for index in range(len(names))]


def progress_callback(total: int):
    """A tqdm bar if tqdm is installed, else a single stderr line rewritten per row."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        bar = tqdm(total=total, unit="arch", file=sys.stderr, dynamic_ncols=True)

        def update(row: CoverageRow) -> None:
            bar.set_postfix_str(f"{row.architecture[:40]} {_mark(row)}")
            bar.update(1)

        update.close = bar.close  # type: ignore[attr-defined]
        return update
    done = 0

    def update(row: CoverageRow) -> None:
        nonlocal done
        done += 1
        sys.stderr.write(f"\r[{done}/{total}] {row.architecture[:40]:40} {_mark(row):12}")
        sys.stderr.flush()

    update.close = lambda: sys.stderr.write("\n")  # type: ignore[attr-defined]
    return update


def _mark(row: CoverageRow) -> str:
    if row.equal:
        return "equal"
    if row.traced:
        return "traced"
    if row.built:
        return "built"
    return row.stage or "failed"
