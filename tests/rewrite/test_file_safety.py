"""The output folder of ``patcher patch`` (and the ``load_traceable`` cache, and the picture of
``patcher graph``) is never damaged.

File modes follow the umask; parallel writers leave one whole pair; a writer killed (SIGKILL)
between writing its temporary files and renaming them leaves the old pair untouched, and its
``.tmp`` files are removed by the next run; SIGINT is a message and exit 130, no traceback.
The kill is timed with the test hook ``TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES`` (see
``patcher/rewrite/files.py``): the writer waits there, with its temporary files complete. ``patcher
graph`` is also killed while graphviz writes: a stand-in ``dot`` (``$TRACEZOO_DOT``) writes part
of a picture to the file it is given and waits.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from child_env import child_env

from patcher.rewrite.api import patch_file

MODEL = (
    "import torch\nfrom torch import nn\n\n\nclass TinyModel(nn.Module):\n"
    "    def forward(self, x):\n        assert x.sum() > 0, 'empty'\n        return x\n"
)
PAIR = ("modeling_tiny.py", "modeling_tiny.manifest.json")


def _env(**extra):
    return child_env(**extra)


def _source(folder: Path, variant: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "modeling_tiny.py"
    path.write_text(MODEL + f"# variant {variant}\n")
    return path


def _pair(out: Path) -> dict:
    return {name: (out / name).read_bytes() for name in PAIR if (out / name).exists()}


def _temporaries(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.tmp"))


def _consistent(out: Path) -> bool:
    manifest = json.loads((out / PAIR[1]).read_text())
    return manifest["code_sha256"] == hashlib.sha256((out / PAIR[0]).read_bytes()).hexdigest()


def _wait_for_temporaries(folder: Path, process, count: int, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while len(_temporaries(folder)) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the writer never reached the pause"
        time.sleep(0.05)


WRITER = "import sys; from patcher.rewrite.api import patch_file; patch_file(sys.argv[1], sys.argv[2])"


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_generated_files_get_the_umask_modes_and_an_existing_mode_is_kept(tmp_path, mask):
    old = os.umask(mask)
    try:
        patch_file(_source(tmp_path / "src"), tmp_path / "out")
        for name in PAIR:
            assert stat.S_IMODE((tmp_path / "out" / name).stat().st_mode) == 0o666 & ~mask
        os.chmod(tmp_path / "out" / PAIR[0], 0o640)
        patch_file(_source(tmp_path / "src", variant=1), tmp_path / "out")
        assert stat.S_IMODE((tmp_path / "out" / PAIR[0]).stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_check_calls_a_py_without_its_manifest_or_with_another_runs_manifest_stale(tmp_path):
    out = tmp_path / "out"
    patch_file(_source(tmp_path / "a", 0), out)
    assert patch_file(tmp_path / "a" / "modeling_tiny.py", out, check=True).manifest["up_to_date"]
    old_manifest = (out / PAIR[1]).read_bytes()
    patch_file(_source(tmp_path / "b", 1), out)
    (out / PAIR[1]).write_bytes(old_manifest)  # what a kill between the two renames leaves
    assert not patch_file(tmp_path / "b" / "modeling_tiny.py", out, check=True).manifest["up_to_date"]
    (out / PAIR[1]).unlink()
    assert not patch_file(tmp_path / "b" / "modeling_tiny.py", out, check=True).manifest["up_to_date"]


def test_a_pair_torn_between_its_two_renames_is_rewritten_by_the_same_command_without_force(tmp_path, monkeypatch):
    """A kill between the two renames leaves the new .py with the old manifest (the .py is renamed
    first): their hashes differ, yet the .py is no edit of the user's, so the same command rewrites it."""
    out = tmp_path / "out"
    patch_file(_source(tmp_path / "a", 0), out)
    replace, renamed = os.replace, []

    def killed_after_the_first_rename(source, target):
        if renamed:
            raise KeyboardInterrupt
        renamed.append(target)
        replace(source, target)

    monkeypatch.setattr(os, "replace", killed_after_the_first_rename)
    with pytest.raises(KeyboardInterrupt):
        patch_file(_source(tmp_path / "b", 1), out)
    monkeypatch.undo()
    assert not _consistent(out)
    patch_file(tmp_path / "b" / "modeling_tiny.py", out)
    assert _consistent(out) and _temporaries(out) == []


def test_crlf_source_keeps_its_untouched_lines_byte_identical(tmp_path):
    src = tmp_path / "modeling_tiny.py"
    src.write_bytes(MODEL.replace("\n", "\r\n").encode())
    patch_file(src, tmp_path / "out")
    generated = (tmp_path / "out" / PAIR[0]).read_bytes()
    for line in (b"from torch import nn\r\n", b"class TinyModel(nn.Module):\r\n"):
        assert line in generated


def test_a_killed_writer_leaves_the_old_pair_and_the_next_run_removes_its_temporaries(tmp_path):
    out = tmp_path / "out"
    patch_file(_source(tmp_path / "a", 0), out)
    old = _pair(out)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(_source(tmp_path / "b", 1)), str(out)],
                              env=_env(TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES="60"), stderr=subprocess.PIPE)
    try:
        _wait_for_temporaries(out, writer, 2)
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert _pair(out) == old
    assert len(_temporaries(out)) == 2  # left by the killed writer
    assert patch_file(tmp_path / "a" / "modeling_tiny.py", out, check=True).manifest["up_to_date"]
    patch_file(tmp_path / "b" / "modeling_tiny.py", out)
    assert _temporaries(out) == [] and _consistent(out)


def test_sigint_is_a_message_and_exit_130_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "out"
    patch_file(_source(tmp_path / "a", 0), out)
    old = _pair(out)
    writer = subprocess.Popen([sys.executable, "-m", "patcher", "patch", str(_source(tmp_path / "b", 1)), "-o",
                               str(out)], env=_env(TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES="60"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_temporaries(out, writer, 2)
        writer.send_signal(signal.SIGINT)
        _, err = writer.communicate(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert _pair(out) == old and _temporaries(out) == []


def test_parallel_writers_leave_one_whole_pair(tmp_path):
    out = tmp_path / "out"
    sources = [_source(tmp_path / f"s{i}", i) for i in range(4)]
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(s), str(out)],
                                env=_env(TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES="0.3"), stderr=subprocess.PIPE)
               for s in sources]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    assert _consistent(out) and _temporaries(out) == []
    winners = [s for s in sources if patch_file(s, out, check=True).manifest["up_to_date"]]
    assert len(winners) == 1


CACHE_WRITER = ("import sys; from pathlib import Path; from patcher.models.traceable import import_generated; "
                "m = import_generated(sys.argv[1], 'tiny', Path(sys.argv[2])); assert m.VALUE == 7")


def test_load_traceable_cache_survives_parallel_and_killed_writers(tmp_path):
    code = "VALUE = 7\n" + "# padding\n" * 1000
    cache = tmp_path / "cache"
    killed = subprocess.Popen([sys.executable, "-c", CACHE_WRITER, code, str(cache)],
                              env=_env(TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES="60"), stderr=subprocess.PIPE)
    try:
        _wait_for_temporaries(cache, killed, 1)
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
    finally:
        if killed.poll() is None:
            killed.kill()
    assert [p.name for p in cache.glob("*.py")] == [] and len(_temporaries(cache)) == 1
    writers = [subprocess.Popen([sys.executable, "-c", CACHE_WRITER, code, str(cache)],
                                env=_env(TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES="0.2"), stderr=subprocess.PIPE)
               for _ in range(3)]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    (generated,) = cache.glob("*.py")
    assert generated.read_text() == code and _temporaries(cache) == []


def test_deeply_nested_source_is_an_error_message_not_a_crash(tmp_path):
    """A crash in the parser's native code would end the process (exit 139): run it in one."""
    body = "".join(" " * i + "if x:\n" for i in range(99)) + " " * 99 + "y = " + "(" * 150 + "x" + "[0]" * 300 \
        + ")" * 150 + "\n"
    src = tmp_path / "modeling_deep.py"
    src.write_text(MODEL + body)
    run = subprocess.run([sys.executable, "-m", "patcher", "patch", str(src), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, env=_env(), timeout=300)
    assert run.returncode == 2, run.stderr
    assert "modeling_deep.py:" in run.stderr and "nest" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()


# ---- patcher graph: the picture is written to a temporary file and renamed over -o FILE

LLAMA = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
         "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
#: a graphviz stand-in that writes part of a picture to its -o file (its last argument), then hangs
STUCK_DOT = '#!/bin/sh\nfor last; do :; done\nprintf "<svg partial" > "$last"\n: > "$READY"\nexec sleep 60\n'


def _graph(tmp: Path, picture: Path, **env) -> subprocess.Popen:
    """``patcher graph`` of a one-layer Llama into ``picture`` (--force), in its own process group."""
    config = tmp / "config.json"
    config.write_text(json.dumps(LLAMA))
    return subprocess.Popen([sys.executable, "-m", "patcher", "graph", "LlamaForCausalLM", str(config), "-o",
                             str(picture), "--force"], env=_env(**env), cwd=tmp, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _graph_stuck_in_dot(tmp: Path, picture: Path) -> subprocess.Popen:
    """``_graph`` with graphviz stuck halfway through writing; returns once it is."""
    dot, ready = tmp / "stuck-dot", tmp / "dot-is-writing"
    dot.write_text(STUCK_DOT)
    dot.chmod(0o755)
    process = _graph(tmp, picture, TRACEZOO_DOT=str(dot), READY=str(ready))
    deadline = time.monotonic() + 300
    while not ready.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "graphviz was never started"
        time.sleep(0.05)
    return process


def _signal_group(process: subprocess.Popen, sig: int) -> str:
    """Send ``sig`` to the command and its graphviz (as Ctrl-C does); its stderr once it ended."""
    try:
        os.killpg(process.pid, sig)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    return err


@pytest.mark.parametrize("suffix", ["svg", "dot"])
def test_graph_killed_mid_write_keeps_the_old_picture_and_the_next_run_removes_its_temporary(tmp_path, suffix):
    pictures = tmp_path / "pictures"
    pictures.mkdir()
    picture = pictures / f"g.{suffix}"
    picture.write_text("old picture\n")
    if suffix == "svg":  # killed while graphviz writes
        process = _graph_stuck_in_dot(tmp_path, picture)
    else:  # killed with the DOT text written, before the rename
        process = _graph(tmp_path, picture, TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES="60")
        _wait_for_temporaries(pictures, process, 1, limit=300)
    _signal_group(process, signal.SIGKILL)
    assert picture.read_text() == "old picture\n"
    assert len(_temporaries(pictures)) == 1  # left by the killed run
    rerun = _graph(tmp_path, picture)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, out + err
    assert ("</svg>" if suffix == "svg" else "digraph partition") in picture.read_text()
    assert _temporaries(pictures) == []


def test_graph_sigint_while_graphviz_writes_is_exit_130_and_leaves_no_file(tmp_path):
    picture = tmp_path / "pictures" / "new.svg"
    picture.parent.mkdir()
    process = _graph_stuck_in_dot(tmp_path, picture)
    err = _signal_group(process, signal.SIGINT)
    assert process.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    assert list(picture.parent.iterdir()) == []  # neither a half-written picture nor a temporary
