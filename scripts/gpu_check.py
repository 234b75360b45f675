"""One command for a machine with a GPU: install what it lacks from carried wheels, run every check
that needs the GPU, and write one report (``gpu_check.md`` and ``gpu_check.json``).

    bash scripts/gpu_check --prepare     # here, with the network: the wheels into .whl/ (git-ignored)
    bash scripts/gpu_check               # there: install from .whl/, run, report into $OUT (or gpu-check-out/)
    bash scripts/gpu_check --dry-run     # anywhere: the same parts on the CPU at a size that takes seconds

Parts (``--parts`` picks some): ``install``; ``environment`` and ``environment-llmc`` (what each
environment imports); ``gpu-tests`` (``pytest -m gpu``: the CUDA cases of the ``device``
parametrization and the tests marked ``gpu``, the zoo in fp32, bf16 and fp16 among them);
``llmcompressor-tests`` (``tests/integrations/test_llmcompressor.py -m "not slow"`` with llm-compressor's
transformers); ``half-precision`` (bf16 and fp16 over the coverage slices); ``real-size-*``
(Meta-Llama-3-8B, LLaVA-1.5-7B, Gemma-3-4B with random bf16 weights: trace time, chain against
eager, each subgraph's GPU peak as planned and as measured). Each runs in its own process group
under its own time limit and the whole run under ``--budget``: a part that fails, crashes or runs
out of time is recorded as such and the others go on; the report is rewritten after every part.

This file needs only the standard library: it installs what the parts import.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".whl"
#: the --target folders on the GPU machine (git-ignored; kept between runs on a warm machine)
INSTALLED = REPO / ".gpu_env"
PARTS_SCRIPT = REPO / "scripts" / "gpu_check_parts.py"

#: The Python the carried wheels are built for: the GPU machine's.
PYTHON_VERSION = "3.12"

#: ``folder -> requirements`` downloaded by ``--prepare`` and installed with ``pip --target`` on the
#: GPU machine, which has torch, transformers 5.17.0, pytest, pytest-xdist, pytest-timeout,
#: hypothesis, pillow, scipy, accelerate, and nothing to download from. ``tf``: the main
#: environment's transformers (it shadows the machine's 5.17.0 for every part but llm-compressor's);
#: ``base``: what every part needs (the project's own wheel carries the ``tracezoo.models`` entry
#: point the zoo registers through); ``llmc``: llm-compressor and what it imports that the machine
#: lacks, beside the machine's own transformers 5.17.0 (llmcompressor 0.14 requires <= 5.17).
GROUPS: dict[str, list[str]] = {
    "tf": ["transformers==5.23.0", "huggingface-hub==1.33.0"],
    "base": ["libcst==1.9.0", "hypothesis==6.155.2", "hypothesmith==0.3.3", "lark==1.3.1", "tracezoo"],
    "llmc": ["llmcompressor==0.14.0.1", "compressed-tensors==0.19.0", "loguru==0.7.3", "pydantic==2.14.4",
             "pydantic-core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5", "datasets==5.2.0",
             "dill==0.4.1", "multiprocess==0.70.19", "auto-round==0.15.1"],
}
#: Installed only where the machine's own copy is older than this (transformers 5.23 needs
#: huggingface-hub >= 1.31; 5.17 takes >= 1.5): a newer one beside the machine's hub dependencies
#: would otherwise replace what works.
ONLY_IF_OLDER = {"huggingface-hub": "1.31.0"}

#: Seconds: the whole run (install included) and each part's own limit. A part gets the smaller of
#: its limit and what is left of the budget; one that would get less than MIN_PART_SECONDS is
#: skipped as out of time. Measured budget: the device allows 15 minutes including the machine's
#: start, so the run itself must end within about 8.
BUDGET = 460
MIN_PART_SECONDS = 15


def normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def requirement_name(requirement: str) -> str:
    return normalized(requirement.split("==")[0])


def wheel_name(path: Path) -> str:
    return normalized(path.name.split("-")[0])


def version_tuple(version: str) -> tuple:
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


# ---- --prepare: the wheels, downloaded here ------------------------------------------------------


def prepare(python: str) -> int:
    """Download every wheel of ``GROUPS`` for CPython 3.12 on manylinux x86_64 into ``.whl/`` and
    build the project's own wheel there. Needs the network (PyPI)."""
    WHEELS.mkdir(exist_ok=True)
    for stale in WHEELS.glob("tracezoo-*.whl"):
        stale.unlink()
    requirements = [requirement for group in GROUPS.values() for requirement in group if requirement != "tracezoo"]
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    command = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               PYTHON_VERSION, "--implementation", "cp", *[arg for p in platforms for arg in ("--platform", p)],
               "-d", str(WHEELS), *requirements]
    # the local index of this workplace has CPU builds only for another Python: PyPI alone
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)
    env.pop("PIP_FIND_LINKS", None)
    print("[gpu_check] " + " ".join(command), file=sys.stderr)
    if subprocess.run(command, env=env).returncode:
        return 1
    if subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "-w", str(WHEELS),
                       str(REPO)], env=env).returncode:
        return 1
    missing = [requirement for requirement in requirements + ["tracezoo"] if not wheels_for(requirement)]
    total = sum(path.stat().st_size for path in WHEELS.glob("*.whl"))
    print(f"[gpu_check] {len(list(WHEELS.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB in {WHEELS}"
          + (f"; missing: {', '.join(missing)}" if missing else ""), file=sys.stderr)
    return 1 if missing else 0


def wheels_for(requirement: str) -> list[Path]:
    name = requirement_name(requirement)
    version = requirement.split("==")[1] if "==" in requirement else None
    return sorted(path for path in WHEELS.glob("*.whl")
                  if wheel_name(path) == name and (version is None or path.name.split("-")[1] == version))


# ---- install: the carried wheels, with pip --target ----------------------------------------------


PROBE = """
import importlib.metadata, json, sys
versions = {}
for name in sys.argv[1:]:
    try:
        versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        versions[name] = None
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "versions": versions}))
"""


def probe(python: str) -> dict:
    """The parts' interpreter, asked directly (the driver may run on another): its version, and the
    versions of the distributions in ONLY_IF_OLDER it has."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    run = subprocess.run([python, "-c", PROBE, *ONLY_IF_OLDER], capture_output=True, text=True, env=env, check=True)
    return json.loads(run.stdout)


def _unpack(wheel: Path, target: Path) -> None:
    """A wheel installed by hand, where the machine has no pip: the archive into ``target``, with
    its ``.data/purelib`` and ``.data/platlib`` contents moved up (scripts and headers are not needed)."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    for data in target.glob("*.data"):
        for kind in ("purelib", "platlib"):
            if (data / kind).is_dir():
                for item in (data / kind).iterdir():
                    shutil.move(str(item), str(target / item.name))
        shutil.rmtree(data)


def pip_available(python: str) -> bool:
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0


def install(python: str) -> dict:
    """Each group of ``GROUPS`` into its own ``--target`` folder under ``.gpu_env/``, reused while
    the same wheels were installed there for the same Python."""
    result: dict[str, Any] = {"groups": {}}
    machine = probe(python)
    running = machine["python"]
    if running != PYTHON_VERSION:
        result["skipped"] = (f"the wheels are built for Python {PYTHON_VERSION}; this is Python {running}: the parts "
                             "run on this environment's own packages")
        return result
    if not any(WHEELS.glob("*.whl")):
        result["skipped"] = f"no wheels in {WHEELS} (run `bash scripts/gpu_check --prepare` where PyPI is reachable)"
        return result
    has_pip = pip_available(python)
    for group, requirements in GROUPS.items():
        wheels, notes = [], []
        for requirement in requirements:
            found = wheels_for(requirement)
            name = requirement_name(requirement)
            if not found:
                notes.append(f"{requirement}: no wheel carried")
                continue
            have = machine["versions"].get(name)
            if name in ONLY_IF_OLDER and have and version_tuple(have) >= version_tuple(ONLY_IF_OLDER[name]):
                notes.append(f"{name}: the machine's {have} is recent enough")
                continue
            wheels += found
        target = INSTALLED / group
        stamp = hashlib.sha256("\n".join([sys.version, *sorted(path.name for path in wheels)]).encode()).hexdigest()
        stamp_file = INSTALLED / f"{group}.installed"
        if stamp_file.is_file() and stamp_file.read_text() == stamp and target.is_dir():
            result["groups"][group] = {"folder": str(target), "wheels": [path.name for path in wheels],
                                       "notes": notes + ["already installed (same wheels)"]}
            continue
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        if wheels and has_pip:
            run = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                                  "--disable-pip-version-check", "--target", str(target), *map(str, wheels)],
                                 capture_output=True, text=True)
            if run.returncode:
                raise RuntimeError(f"pip install --target {target} failed: {run.stderr.strip()[-1500:]}")
        else:
            for wheel in wheels:
                _unpack(wheel, target)
            notes += [] if not wheels else ["no pip here: unpacked by hand"]
        stamp_file.write_text(stamp)
        result["groups"][group] = {"folder": str(target), "wheels": [path.name for path in wheels], "notes": notes}
    return result


def python_path(*groups: str, installed: dict) -> str:
    """The checkout first (its code is what runs, not the wheel's copy), then the groups' folders."""
    folders = [str(REPO)] + [installed["groups"][group]["folder"] for group in groups if group in installed.get("groups", {})]
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join(folders + ([inherited] if inherited else []))


# ---- parts ---------------------------------------------------------------------------------------


@dataclass
class Part:
    name: str
    command: list[str]
    timeout: float
    #: parts of one stage run at the same time; stages run in order
    stage: int
    env: dict[str, str] = field(default_factory=dict)
    #: "pytest": judged from its JUnit XML; "json": from the JSON the part writes (ok / rows)
    kind: str = "json"
    output: Path | None = None


@dataclass
class Result:
    name: str
    status: str  # passed, failed, error, timeout, skipped
    seconds: float = 0.0
    summary: str = ""
    details: dict = field(default_factory=dict)
    log: str = ""


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def junit_summary(path: Path) -> dict:
    """Counts and the failures of a JUnit XML file (pytest --junitxml)."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures, skips = [], {}
    root = ElementTree.parse(path).getroot()
    for case in root.iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        if problem is not None:
            counts["failed" if problem.tag == "failure" else "errors"] += 1
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failures.append({"test": test, "message": (message[0] if message else "")[:400]})
        elif skipped is not None:
            counts["skipped"] += 1
            reason = (skipped.get("message") or "").strip()
            if reason == "collection skipped":  # a module skipped whole: the reason is in the text
                reason = (skipped.text or reason).strip().rsplit("Skipped: ", 1)[-1].removesuffix('")').removesuffix("')")
            reason = reason[:200]
            skips[reason] = skips.get(reason, 0) + 1
        else:
            counts["passed"] += 1
    return {"counts": counts, "failures": failures, "skips": skips}


_VERBOSE_LINE = re.compile(r"(?:^|\s)(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\s+(\S+::\S+)|(\S+::\S+)\s+(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")


def log_summary(log: Path) -> dict:
    """What a pytest run killed before writing its JUnit XML had finished: the ``-v`` lines of its
    log (``[gw0] [ 10%] PASSED tests/...`` under xdist, ``tests/... PASSED [ 10%]`` without)."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures, seen = [], set()
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for match in _VERBOSE_LINE.finditer(text):
        outcome, test = (match[1], match[2]) if match[1] else (match[4], match[3])
        if (test, outcome) in seen:
            continue
        seen.add((test, outcome))
        key = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "errors"}.get(outcome, "skipped")
        counts[key] += 1
        if key in ("failed", "errors"):
            failures.append({"test": test, "message": outcome.lower()})
    return {"counts": counts, "failures": failures, "skips": {}, "from": "the log (no JUnit XML: the run was cut)"}


def judge(part: Part, returncode: int | None, seconds: float, log: Path) -> Result:
    result = Result(part.name, "error", round(seconds, 1), log=_tail(log))
    if returncode is None:
        result.status = "timeout"
        result.summary = f"killed after {seconds:.0f} s (its limit)"
    if part.kind == "pytest":
        if part.output is not None and part.output.is_file():
            try:
                result.details = junit_summary(part.output)
            except ElementTree.ParseError as exc:
                result.details = {"error": f"unreadable JUnit XML: {exc}"}
        else:
            result.details = log_summary(log)
            if returncode is None:
                counts = result.details["counts"]
                result.summary += (f"; before that: {counts['passed']} passed, {counts['failed']} failed, "
                                   f"{counts['errors']} errors, {counts['skipped']} skipped (from its log)")
        counts = result.details.get("counts")
        if returncode is not None and counts:
            ran = counts["passed"] + counts["failed"] + counts["errors"]
            if counts["failed"] or counts["errors"]:
                result.status = "failed"
            elif ran:
                result.status = "passed"
            else:
                result.status = "skipped"
            reasons = "; ".join(f"{n} x {reason}" for reason, n in list(result.details["skips"].items())[:3])
            result.summary = (f"{counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
                              f"{counts['skipped']} skipped" + (f" ({reasons})" if reasons and not ran else ""))
        elif returncode is not None:
            result.summary = f"exit {returncode}, no test report (see the log)"
        return result
    data = {}
    if part.output is not None and part.output.is_file():
        try:
            data = json.loads(part.output.read_text(encoding="utf-8"))
        except ValueError as exc:
            data = {"error": f"unreadable JSON: {exc}"}
    result.details = data
    if returncode is None:
        result.summary += f"; {len(data.get('rows', []))} rows finished before"
        return result
    if returncode:
        result.summary = f"exit {returncode}: " + (_tail(log, 1) or "no output")
        return result
    result.status = "passed" if data.get("ok") else "failed"
    result.summary = SUMMARIES.get(part.name.split(":")[0], lambda d: "")(data)
    return result


def _summary_half(data: dict) -> str:
    rows = data.get("rows", [])
    equal = sum(1 for row in rows if row.get("equal"))
    exact = sum(1 for row in rows if row.get("exact"))
    not_run = data.get("not_run") or []
    return (f"{equal} of {len(rows)} (architecture, dtype) equal within the same-kernels tolerance, {exact} exact, "
            f"on {data.get('device')}" + (f"; not finished in time: {', '.join(not_run)}" if not_run else ""))


def _summary_real(data: dict) -> str:
    def median(values):
        values = sorted(values or [0])
        return values[len(values) // 2]

    if "trace_seconds" not in data:
        return "did not trace"
    return (f"traced in {data['trace_seconds']} s into {data.get('subgraphs')} subgraphs; chain "
            f"{median(data.get('chain_seconds')):.3f} s vs eager {median(data.get('eager_seconds')):.3f} s, "
            f"{'equal' if data.get('equal') else 'NOT equal'} (max diff {data.get('max_diff')}); peak measured/planned "
            f"worst {data.get('worst_ratio')}")


def _summary_environment(data: dict) -> str:
    found = data.get("found", {})
    return ", ".join(f"{key} {str(found.get(key, '?')).split(' (')[0]}" for key in ("python", "torch", "transformers", "gpu"))


SUMMARIES: dict[str, Callable[[dict], str]] = {
    "half-precision": _summary_half, "real-size": _summary_real, "environment": _summary_environment,
    "environment-llmc": _summary_environment,
}


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the part and every worker it started
    except ProcessLookupError:
        pass
    process.wait()


def run_parts(parts: list[Part], out: Path, deadline: float, on_result: Callable[[Result], None]) -> list[Result]:
    """Run the parts stage by stage, the parts of a stage at once, each in its own process group
    under min(its limit, what is left of the budget); never raises for a part's failure."""
    results = []
    (out / "logs").mkdir(parents=True, exist_ok=True)
    for stage in sorted({part.stage for part in parts}):
        running = []
        for part in (p for p in parts if p.stage == stage):
            left = deadline - time.monotonic()
            if left < MIN_PART_SECONDS:
                result = Result(part.name, "skipped", summary=f"out of time: {max(left, 0):.0f} s of the budget left")
                results.append(result)
                on_result(result)
                continue
            limit = min(part.timeout, left)
            # a part told its own limit ("{seconds}") stops starting work 20 s before it
            command = [argument.replace("{seconds}", str(max(int(limit) - 20, 5))) for argument in part.command]
            log = out / "logs" / f"{part.name.replace(':', '-')}.log"
            if part.output is not None and part.output.exists():
                part.output.unlink()
            with open(log, "w", encoding="utf-8") as handle:
                try:
                    process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO,
                                               env={**os.environ, **part.env}, start_new_session=True)
                except OSError as exc:
                    result = Result(part.name, "error", summary=f"could not start: {exc}")
                    results.append(result)
                    on_result(result)
                    continue
            running.append((part, process, time.monotonic(), limit, log))
        while running:
            time.sleep(0.2)
            for item in list(running):
                part, process, started, limit, log = item
                elapsed = time.monotonic() - started
                if process.poll() is None and elapsed < limit:
                    continue
                returncode = process.poll()
                if returncode is None:
                    _kill(process)
                running.remove(item)
                result = judge(part, returncode, elapsed, log)
                results.append(result)
                on_result(result)
    return results


def plan_parts(args, installed: dict, out: Path) -> list[Part]:
    python = args.python
    main_env = {"PYTHONPATH": python_path("tf", "base", installed=installed), "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false"}
    llmc_env = {"PYTHONPATH": python_path("llmc", "base", installed=installed), "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false"}
    # parts that share the machine: a few threads each, not one per core each
    shared = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    dry = ["--dry-run"] if args.dry_run else []
    # pytest-xdist where the interpreter has it (the GPU machine does; a dev .venv may not)
    xdist = {id(main_env): has_module(python, main_env, "xdist"),
             id(llmc_env): has_module(args.llmc_python, llmc_env, "xdist")}
    parts_dir = out / "parts"
    parts_dir.mkdir(parents=True, exist_ok=True)

    def json_part(name, arguments, timeout, stage, env, extra=None):
        output = parts_dir / f"{name.replace(':', '-')}.json"
        interpreter = args.llmc_python if env is llmc_env else python
        return Part(name, [interpreter, str(PARTS_SCRIPT), *arguments, "--json", str(output), *dry], timeout, stage,
                    {**env, **(extra or {})}, "json", output)

    def pytest_part(name, arguments, timeout, stage, env, workers):
        output = parts_dir / f"{name}.xml"
        parallel = ["-n", str(workers)] if xdist[id(env)] and workers > 1 else []
        # -v: a run cut at its limit writes no JUnit XML; its log still says what finished
        return Part(name, [args.llmc_python if env is llmc_env else python, "-m", "pytest", "-v", "-p",
                           "no:cacheprovider", "--timeout", "120", f"--junitxml={output}", *parallel, *arguments],
                    timeout, stage, {**env, **shared}, "pytest", output)

    llmc_selection = ["-m", "not slow"] + (["-k", "guide_example"] if args.dry_run else [])
    # stage 1: the suite's GPU tests, llm-compressor's and the half-precision sweep share the machine
    # (tiny models: the cores matter more than the GPU); then the real-size runs, alone, for timings
    parts = [
        json_part("environment", ["environment"], 90, 1, main_env),
        json_part("environment-llmc", ["environment", "--require", "llmcompressor"], 90, 1, llmc_env),
        pytest_part("gpu-tests", ["-m", "gpu", "tests"], 200, 1, main_env, 4),
        pytest_part("llmcompressor-tests", [*llmc_selection, "tests/integrations/test_llmcompressor.py"], 200, 1, llmc_env, 2),
        # it stops 20 s before its limit and names the architectures it did not finish
        json_part("half-precision", ["half_precision", "--workers", "1" if args.dry_run else "4", "--seconds", "{seconds}"],
                  200, 1, main_env, shared),
    ]
    parts += [json_part(f"real-size:{model}", ["real_size", "--model", model], 80, 2 + index, main_env)
              for index, model in enumerate(("llama", "llava", "gemma3"))]
    if args.parts:
        wanted = {name.strip() for name in args.parts.split(",")}
        parts = [part for part in parts if part.name in wanted or part.name.split(":")[0] in wanted]
    return parts


def has_module(python: str, env: dict, module: str) -> bool:
    probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True, env={**os.environ, **env})
    return probe.returncode == 0


#: the parts that need llm-compressor in their interpreter, and the module they import
LLMC_PARTS = ("environment-llmc", "llmcompressor-tests")
LLMC_MODULE = "llmcompressor"


def skip_llmc_parts_without_llmcompressor(parts: list[Part], llmc_python: str) -> tuple[list[Part], list[Result]]:
    """For a dry run: a checkout without llm-compressor cannot check its parts, which is a missing set-up
    step here, not a failure of the script; the GPU run keeps them, where a missing install is a failure."""
    llmc = [part for part in parts if part.name in LLMC_PARTS]
    if not llmc or has_module(llmc_python, llmc[0].env, LLMC_MODULE):
        return parts, []
    hint = (f"{llmc_python} cannot import {LLMC_MODULE}: run `bash scripts/setup_llmcompressor.sh` "
            f"(it makes .venv-llmc, which a dry run then uses) or pass --llmc-python")
    return [part for part in parts if part.name not in LLMC_PARTS], [Result(part.name, "skipped", summary=hint) for part in llmc]


# ---- the report ----------------------------------------------------------------------------------


def _bytes(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return str(value)


def markdown(report: dict) -> str:
    lines = [f"# gpu_check report", "",
             f"{report['started']}, {report['seconds']:.0f} s of a {report['budget']} s budget"
             + (" (dry run: the CPU at a size that takes seconds; it checks the script, not the GPU)"
                if report["dry_run"] else ""), "",
             f"`{report['command']}`", "", "| part | status | seconds | summary |", "| --- | --- | --- | --- |"]
    for result in report["results"]:
        lines.append(f"| {result['name']} | {result['status']} | {result['seconds']} | "
                     f"{result['summary'].replace('|', '/')} |")
    for result in report["results"]:
        lines += ["", f"## {result['name']}: {result['status']}", ""]
        details = result.get("details") or {}
        name = result["name"].split(":")[0]
        if name == "install":
            if details.get("skipped"):
                lines.append(f"skipped: {details['skipped']}")
            for group, info in details.get("groups", {}).items():
                lines.append(f"- `{group}` -> `{info['folder']}`: {', '.join(info['wheels']) or 'nothing'}"
                             + (f" ({'; '.join(info['notes'])})" if info["notes"] else ""))
        elif name.startswith("environment"):
            for key, value in details.get("found", {}).items():
                lines.append(f"- {key}: {value}")
        elif "counts" in details:
            for failure in details["failures"][:40]:
                lines.append(f"- FAILED `{failure['test']}`: {failure['message']}")
            if len(details["failures"]) > 40:
                lines.append(f"- ... {len(details['failures']) - 40} more in gpu_check.json")
            for reason, count in list(details["skips"].items())[:10]:
                lines.append(f"- skipped {count}: {reason}")
        elif name == "half-precision":
            lines += ["| architecture | input | dtype | equal | exact | max diff | error |", "| --- | --- | --- | --- | --- | --- | --- |"]
            for row in sorted(details.get("rows", []), key=lambda r: (r.get("architecture", ""), r.get("dtype", ""))):
                lines.append(f"| {row.get('architecture')} | {row.get('input', '')} | {row.get('dtype')} | "
                             f"{row.get('equal')} | {row.get('exact', '')} | {row.get('max_diff', '')} | "
                             f"{str(row.get('error', '')).replace('|', '/')} |")
        elif name == "real-size":
            keys = ("config", "model_class", "device", "parameters", "parameter_dtypes", "sample", "plan_seconds",
                    "build_seconds", "trace_seconds", "subgraphs", "same_partition", "equal", "max_diff",
                    "eager_seconds", "chain_seconds")
            lines += [f"- {key}: {details[key]}" for key in keys if key in details]
            for key in ("eager_peak_bytes", "chain_peak_bytes", "plan_peak_gpu_bytes", "measured_peak_gpu_bytes"):
                if key in details:
                    lines.append(f"- {key.replace('_bytes', '')}: {_bytes(details[key])}")
            rows = details.get("rows", [])
            if rows:
                lines += ["", "GPU peak per subgraph: planned by `patcher plan` (params + live tensors) and "
                          "measured running the subgraph alone (params its operations read + inputs + what the "
                          "allocator handed out); every subgraph is in gpu_check.json", "",
                          "| subgraph | targets | planned params | read params | planned acts | measured acts | "
                          "planned peak | measured peak | measured/planned |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
                shown = [row for index, row in enumerate(rows) if index < 2 or index == len(rows) - 1
                         or row.get("ratio") is None or abs(row["ratio"] - 1) > 0.05]
                for row in shown:
                    lines.append(f"| {row['subgraph']} | {', '.join(row['targets']) or '-'} | "
                                 f"{_bytes(row['planned_params'])} | {_bytes(row['read_params'])} | "
                                 f"{_bytes(row['planned_acts'])} | {_bytes(row['measured_acts'])} | "
                                 f"{_bytes(row['planned_gpu_peak'])} | {_bytes(row['measured_gpu_peak'])} | {row['ratio']} |")
        if result["status"] in ("error", "timeout", "failed") and result.get("log"):
            lines += ["", "log tail:", "", "```text", result["log"], "```"]
    return "\n".join(lines) + "\n"


def write_report(out: Path, report: dict) -> None:
    for name, text in (("gpu_check.json", json.dumps(report, indent=1, default=str)), ("gpu_check.md", markdown(report))):
        temporary = out / (name + ".tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(out / name)


def default_out() -> Path:
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "gpu-check-out"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="download the wheels into .whl/ (needs PyPI) and stop")
    parser.add_argument("--dry-run", action="store_true", help="every part on the CPU, at a size that takes seconds (the llm-compressor parts are skipped, with the set-up step, where --llmc-python cannot import llmcompressor)")
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: $OUT, else gpu-check-out/)")
    parser.add_argument("--budget", type=float, default=BUDGET, help=f"seconds for the whole run (default {BUDGET})")
    parser.add_argument("--parts", default="", help="comma-separated part names (default: all)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the parts run on")
    parser.add_argument("--llmc-python", default=None,
                        help="the interpreter of the llm-compressor tests (default: --python with the carried "
                             "llmc wheels, else .venv-llmc's where it exists: scripts/setup_llmcompressor.sh)")
    args = parser.parse_args(argv)
    if args.prepare:
        return prepare(args.python)

    start, started = time.monotonic(), datetime.datetime.now().isoformat(timespec="seconds")
    deadline = start + args.budget
    out = (args.out or default_out()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"started": started, "command": " ".join(["scripts/gpu_check", *sys.argv[1:]]),
                              "dry_run": args.dry_run, "budget": args.budget, "seconds": 0.0, "results": []}

    def record(result: Result) -> None:
        report["results"].append(result.__dict__)
        report["seconds"] = time.monotonic() - start
        write_report(out, report)
        print(f"[gpu_check] {result.name}: {result.status} ({result.seconds} s) {result.summary}", file=sys.stderr,
              flush=True)

    installed: dict = {}
    if not args.parts or "install" in args.parts.split(","):
        began = time.monotonic()
        try:
            installed = install(args.python)
            status = "skipped" if installed.get("skipped") else "passed"
            summary = installed.get("skipped") or ", ".join(
                f"{group}: {len(info['wheels'])} wheels" for group, info in installed["groups"].items())
            record(Result("install", status, round(time.monotonic() - began, 1), summary, installed))
        except Exception as exc:  # noqa: BLE001 - the parts still run, on what the machine has
            record(Result("install", "error", round(time.monotonic() - began, 1), f"{type(exc).__name__}: {exc}"[:500]))
    else:
        installed = {"groups": {group: {"folder": str(INSTALLED / group)} for group in GROUPS
                                if (INSTALLED / f"{group}.installed").is_file()}}
    local_llmc = REPO / ".venv-llmc" / "bin" / "python"
    args.llmc_python = args.llmc_python or (
        str(local_llmc) if "llmc" not in installed.get("groups", {}) and local_llmc.exists() else args.python)
    parts = plan_parts(args, installed, out)
    if args.dry_run:
        parts, skipped = skip_llmc_parts_without_llmcompressor(parts, args.llmc_python)
        for result in skipped:
            record(result)
    run_parts(parts, out, deadline, record)
    report["seconds"] = time.monotonic() - start
    write_report(out, report)
    print(f"[gpu_check] report: {out / 'gpu_check.md'}", file=sys.stderr)
    bad = [result for result in report["results"] if result["status"] in ("failed", "error", "timeout")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
