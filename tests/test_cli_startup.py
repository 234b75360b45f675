"""`patcher --help` starts fast: it imports neither torch nor transformers (nor libcst); no command's
`--help` imports torch or transformers (`patch --help` lists the rules, which need libcst).

Timings are measured by scripts/bench_cli_startup.py, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from child_env import child_env

PROBE = """
import sys
from patcher.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:
    status = exc.code
heavy = sorted(m for m in ("torch", "transformers", "libcst") if m in sys.modules)
print("HEAVY", heavy, "STATUS", status)
"""


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["trace", "--help"], ["repair", "--help"], []])
def test_help_and_version_import_no_heavy_module(argv):
    run = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                         env=child_env(), timeout=120)
    assert "HEAVY [] STATUS" in run.stdout, run.stdout + run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("command", ["patch", "graph", "plan"])
def test_command_help_imports_neither_torch_nor_transformers(command):
    # `patch --help` once imported the tracer for its default ignore list, `graph`/`plan --help`
    # the renderer's and planner's torch code for two constants: seconds for a help text.
    run = subprocess.run([sys.executable, "-c", PROBE, command, "--help"], capture_output=True, text=True,
                         env=child_env(), timeout=120)
    heavy = run.stdout.split("HEAVY ", 1)[-1].split(" STATUS")[0]
    assert "torch" not in heavy and "transformers" not in heavy, run.stdout + run.stderr
    assert "STATUS 0" in run.stdout and "Traceback" not in run.stderr
    assert "usage: patcher " + command in run.stdout


def test_version_names_the_package_version(capsys):
    from patcher import __version__
    from patcher.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"patcher {__version__}"


@pytest.mark.parametrize("command", ["trace", "graph", "repair", "plan"])
@pytest.mark.parametrize("model_id", ["./no-such-checkpoint", "Meta-Llama-3-8"])
def test_a_misspelt_model_id_is_reported_before_torch_and_the_model_class_are_imported(command, model_id):
    # It once took 8 s: the model class (torch, transformers, its modeling module) was imported
    # before the MODEL_ID was looked up.
    argv = [command, "LlamaForCausalLM", model_id] + (["-o", "never-written.svg"] if command == "graph" else [])
    run = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                         env=child_env(), timeout=120)
    assert "HEAVY [] STATUS 2" in run.stdout.replace("'libcst', ", ""), run.stdout + run.stderr
    assert "Traceback" not in run.stderr and model_id in run.stderr


EXIT_PROBE = """
import atexit, sys
marker = sys.argv.pop(1)
atexit.register(lambda: open(marker, "w").write("exit handlers ran"))
from patcher.cli import console_main
console_main()
"""


def test_the_executable_skips_the_interpreter_teardown_but_not_the_output_or_the_exit_handlers(tmp_path):
    # console_main ends the process with os._exit (the teardown after importing torch costs ~1.5 s);
    # a plan's whole JSON must still arrive through a pipe, and atexit handlers must still run.
    from transformers import LlamaConfig

    config = tmp_path / "config.json"
    LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1).to_json_file(config)
    marker = tmp_path / "marker"
    # Block-buffered output, as a user's pipe has it, so a missing flush would lose the plan.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = child_env()["PYTHONPATH"]
    run = subprocess.run([sys.executable, "-c", EXIT_PROBE, str(marker), "plan", "LlamaForCausalLM", str(config),
                          "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert len(plan["subgraphs"]) == 3
    assert marker.read_text() == "exit handlers ran"
    failed = subprocess.run([sys.executable, "-c", EXIT_PROBE, str(marker), "plan", "LlamaForCausalLM",
                             str(tmp_path / "missing.json")], capture_output=True, text=True, env=env,
                            timeout=300)
    assert failed.returncode == 2 and "missing.json" in failed.stderr
