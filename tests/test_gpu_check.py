"""scripts/gpu_check works before a GPU is lent: its runner records every part whatever the part
does (fails, crashes, hangs, never gets time), its install step puts carried wheels on the path,
a dry run without llm-compressor skips its parts and names the set-up step, and a real-size
part's comparison of planned and measured memory holds on the CPU.

The GPU run itself (`bash scripts/gpu_check` on the lent machine) is not a test: GUIDE.md,
"Checking on a GPU".
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from child_env import REPO, child_env


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _json_part(gpu_check, tmp_path, name, code, timeout=60, stage=1):
    output = tmp_path / f"{name}.json"
    return gpu_check.Part(name, [sys.executable, "-c", code, str(output)], timeout, stage, kind="json", output=output)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:  # a zombie left for its reaper is dead too
            return stat.read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def test_every_part_is_recorded_whatever_it_does(gpu_check, tmp_path, monkeypatch):
    write = "import json, sys; json.dump({{'ok': {ok}, 'rows': [{{'n': 1}}]}}, open(sys.argv[1], 'w'))"
    pid_file = tmp_path / "child.pid"
    hang = ("import json, subprocess, sys, time; json.dump({'rows': [{'n': 1}]}, open(sys.argv[1], 'w'));"
            f"child = subprocess.Popen(['sleep', '300']); open({str(pid_file)!r}, 'w').write(str(child.pid));"
            "time.sleep(300)")
    parts = [
        _json_part(gpu_check, tmp_path, "passes", write.format(ok=True)),
        _json_part(gpu_check, tmp_path, "fails", write.format(ok=False)),
        _json_part(gpu_check, tmp_path, "crashes", "import os; os.abort()"),
        _json_part(gpu_check, tmp_path, "hangs", hang, timeout=6),  # time to start Python on a loaded machine
        _json_part(gpu_check, tmp_path, "never-starts", write.format(ok=True), stage=2),
        gpu_check.Part("cannot-start", [str(tmp_path / "no-such-program")], 60, 1),
    ]
    monkeypatch.setattr(gpu_check, "MIN_PART_SECONDS", 7)
    recorded = []
    # stage 1 lasts at least the hanging part's 6 s: stage 2 then has less than MIN_PART_SECONDS left
    results = gpu_check.run_parts(parts, tmp_path, time.monotonic() + 12.5, recorded.append)
    status = {result.name: result.status for result in results}
    assert status == {"passes": "passed", "fails": "failed", "crashes": "error", "hangs": "timeout",
                      "never-starts": "skipped", "cannot-start": "error"}
    assert [result.name for result in recorded] == [result.name for result in results]
    hung = next(result for result in results if result.name == "hangs")
    assert hung.details["rows"] == [{"n": 1}] and "1 rows finished before" in hung.summary
    # SIGKILL reaches the part's group at once, but a grandchild is gone only when the kernel has torn it
    # down, which a loaded machine may take a moment to do: it must not live on for its 300 s
    child, gone_by = int(pid_file.read_text()), time.monotonic() + 10
    while _alive(child) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert not _alive(child), "a part's own child outlived the part's time limit"
    assert "out of time" in next(result for result in results if result.name == "never-starts").summary

    report = {"started": "now", "command": "scripts/gpu_check", "dry_run": True, "budget": 6, "seconds": 6.0,
              "results": [result.__dict__ for result in results]}
    gpu_check.write_report(tmp_path, report)
    text = (tmp_path / "gpu_check.md").read_text()
    for name, state in status.items():
        assert f"| {name} | {state} |" in text
    assert json.loads((tmp_path / "gpu_check.json").read_text())["results"][0]["name"] == results[0].name


def test_a_pytest_part_is_judged_by_its_junit_report_or_else_by_its_log(gpu_check, tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\ndef test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2, 'one is not two'\n\n"
        "def test_skipped():\n    pytest.skip('no CUDA device')\n")
    xml = tmp_path / "sample.xml"
    part = gpu_check.Part("sample", [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", f"--junitxml={xml}",
                                     str(tmp_path / "test_sample.py")], 120, 1, kind="pytest", output=xml)
    result, = gpu_check.run_parts([part], tmp_path, time.monotonic() + 120, lambda result: None)
    assert result.status == "failed"
    assert result.details["counts"] == {"passed": 1, "failed": 1, "errors": 0, "skipped": 1}
    assert "one is not two" in result.details["failures"][0]["message"]
    assert result.details["skips"] == {"no CUDA device": 1}

    log = tmp_path / "cut.log"
    log.write_text("[gw0] [ 33%] PASSED tests/test_a.py::test_x[cuda]\n"
                   "[gw1] [ 66%] FAILED tests/test_a.py::test_y[cuda]\n"
                   "tests/test_b.py::test_z PASSED                [100%]\n")
    found = gpu_check.log_summary(log)
    assert found["counts"] == {"passed": 2, "failed": 1, "errors": 0, "skipped": 0}
    assert found["failures"] == [{"test": "tests/test_a.py::test_y[cuda]", "message": "failed"}]


def _wheel(folder: Path, name: str, version: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/__init__.py", f"VERSION = {version!r}\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.parametrize("with_pip", [True, False], ids=["pip", "unpacked"])
def test_carried_wheels_are_installed_into_one_folder_per_group(gpu_check, tmp_path, monkeypatch, with_pip):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "tz_first", "1.0")
    _wheel(wheels, "tz_second", "2.0")
    monkeypatch.setattr(gpu_check, "WHEELS", wheels)
    monkeypatch.setattr(gpu_check, "INSTALLED", tmp_path / "installed")
    monkeypatch.setattr(gpu_check, "GROUPS", {"one": ["tz-first==1.0"], "two": ["tz_second==2.0", "tz-missing==3"]})
    monkeypatch.setattr(gpu_check, "PYTHON_VERSION", "%d.%d" % sys.version_info[:2])
    if not with_pip:
        monkeypatch.setattr(gpu_check, "pip_available", lambda python: False)
    installed = gpu_check.install(sys.executable)
    assert installed["groups"]["two"]["notes"][0] == "tz-missing==3: no wheel carried"
    path = gpu_check.python_path("one", "two", installed=installed)
    assert path.split(os.pathsep)[:3] == [str(REPO), str(tmp_path / "installed" / "one"),
                                          str(tmp_path / "installed" / "two")]
    probe = subprocess.run([sys.executable, "-c", "import tz_first, tz_second, importlib.metadata as m; "
                            "print(tz_first.VERSION, tz_second.VERSION, m.version('tz_second'))"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=path), check=True)
    assert probe.stdout.split() == ["1.0", "2.0", "2.0"]
    again = gpu_check.install(sys.executable)
    assert "already installed (same wheels)" in again["groups"]["one"]["notes"]


def test_install_is_skipped_for_another_python(gpu_check, monkeypatch):
    monkeypatch.setattr(gpu_check, "PYTHON_VERSION", "2.7")
    assert "built for Python 2.7" in gpu_check.install(sys.executable)["skipped"]


def test_a_dry_run_without_llmcompressor_skips_its_parts_and_says_how_to_get_it(gpu_check, tmp_path, monkeypatch):
    args = gpu_check.argparse.Namespace(python=sys.executable, llmc_python=sys.executable, dry_run=True, parts="")
    parts = gpu_check.plan_parts(args, {}, tmp_path)
    names = [part.name for part in parts]
    assert set(gpu_check.LLMC_PARTS) <= set(names)

    monkeypatch.setattr(gpu_check, "LLMC_MODULE", "json")  # importable everywhere: the parts stay
    kept, skipped = gpu_check.skip_llmc_parts_without_llmcompressor(parts, sys.executable)
    assert [part.name for part in kept] == names and skipped == []

    monkeypatch.setattr(gpu_check, "LLMC_MODULE", "tracezoo_no_such_module")
    kept, skipped = gpu_check.skip_llmc_parts_without_llmcompressor(parts, sys.executable)
    assert [part.name for part in kept] == [name for name in names if name not in gpu_check.LLMC_PARTS]
    assert [(result.name, result.status) for result in skipped] == [(name, "skipped") for name in gpu_check.LLMC_PARTS]
    assert all("setup_llmcompressor.sh" in result.summary and "--llmc-python" in result.summary for result in skipped)


def test_a_real_size_part_compares_planned_and_measured_memory_on_the_cpu(tmp_path):
    # The dry run's tiny Llama: on the CPU, the measurement is the live bytes of every storage an
    # operation returned, what the plan counts on meta, so they agree (tests/plan/test_plan.py: within 5%).
    output = tmp_path / "llama.json"
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check_parts.py"), "real_size", "--model",
                          "llama", "--dry-run", "--json", str(output)], capture_output=True, text=True,
                         env=child_env(), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(output.read_text())
    assert found["finished"] and found["ok"] and found["equal"] and found["max_diff"] == 0.0
    assert found["same_partition"] and found["subgraphs"] == len(found["rows"]) == 3
    for row in found["rows"]:
        assert abs(row["measured_acts"] / row["planned_acts"] - 1) <= 0.05, row
        assert abs(row["read_params"] / row["planned_params"] - 1) <= 0.05, row
