#!/usr/bin/env bash
# Create (or reuse) a SEPARATE virtual environment with llm-compressor 0.14 and tracezoo, for
# tests/integrations/test_llmcompressor.py (skipped in the main environment, where llmcompressor is absent).
# Not part of scripts/test or CI, which install only the main .venv.
#
#   bash scripts/setup_llmcompressor.sh                      # -> .venv-llmc (git-ignored)
#   LLMC_VENV=/tmp/llmc-venv bash scripts/setup_llmcompressor.sh
#   .venv-llmc/bin/python -m pytest tests/integrations/test_llmcompressor.py
#
# Pins are in constraints-llmc.txt: torch 2.13.0 CPU, installed first and alone so pip takes the
# CPU wheel and never a CUDA build, then llmcompressor 0.14.0.1, whose own requirement
# (transformers>=5.15,<=5.17) puts transformers 5.17.0 here, not the main environment's 5.23.0.
# LLMC_TRANSFORMERS=5.23.0 force-installs another transformers afterwards (pip --no-deps),
# outside llmcompressor's declared range, to compare.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
venv="${LLMC_VENV:-$root/.venv-llmc}"
start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
    echo "[setup-llmc] creating virtual environment in $venv" >&2
    "$python" -m venv "$venv"
fi
stamp="$venv/.tracezoo-llmc-installed"
want="$(cat pyproject.toml constraints-llmc.txt | sha256sum | cut -d' ' -f1)-${LLMC_TRANSFORMERS:-}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    pip=("$venv/bin/python" -m pip install -q -c constraints-llmc.txt)
    "$venv/bin/python" -m pip install -q --upgrade pip >&2 || true
    echo "[setup-llmc] torch (CPU, pinned)" >&2
    "${pip[@]}" "torch==2.13.0" >&2
    echo "[setup-llmc] llmcompressor and its dependencies" >&2
    "${pip[@]}" "llmcompressor==0.14.0.1" >&2
    echo "[setup-llmc] tracezoo (editable, test extra)" >&2
    "${pip[@]}" -e ".[test]" >&2
    if [ -n "${LLMC_TRANSFORMERS:-}" ]; then
        echo "[setup-llmc] forcing transformers==$LLMC_TRANSFORMERS (outside llmcompressor's range)" >&2
        "$venv/bin/python" -m pip install -q --no-deps "transformers==$LLMC_TRANSFORMERS" >&2
    fi
    echo "$want" > "$stamp"
fi
"$venv/bin/python" - <<'PY' >&2
import importlib.metadata as m
print("[setup-llmc] " + ", ".join(f"{p} {m.version(p)}" for p in
      ("llmcompressor", "compressed-tensors", "torch", "transformers", "tracezoo")))
PY
echo "[setup-llmc] done in $(( $(date +%s) - start )) s" >&2
