"""`patcher --help` starts fast: it imports neither torch nor transformers (nor libcst).

Timings are measured by scripts/bench_cli_startup.py, never asserted here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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
                         env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert "HEAVY [] STATUS" in run.stdout, run.stdout + run.stderr
    assert "Traceback" not in run.stderr


def test_version_names_the_package_version(capsys):
    from patcher import __version__
    from patcher.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"patcher {__version__}"
