#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install tracezoo with its
# test extra, pinned through constraints.txt. Safe to run repeatedly: it reinstalls only when
# pyproject.toml or constraints.txt changed since the last successful run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
    echo "[setup] creating virtual environment in .venv" >&2
    "$python" -m venv "$venv"
fi
stamp="$venv/.tracezoo-installed"
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "[setup] installing tracezoo and pinned dependencies (constraints.txt)" >&2
    "$venv/bin/python" -m pip install -q --upgrade pip >&2 || true
    # torch first and alone: with the pin it takes the local CPU wheel instead of CUDA builds.
    "$venv/bin/python" -m pip install -q -c constraints.txt "torch==2.13.0" >&2
    "$venv/bin/python" -m pip install -q -c constraints.txt -e ".[test]" >&2
    echo "$want" > "$stamp"
fi
# Graphviz's `dot` renders `patcher graph` pictures (.svg/.png/.pdf); .dot output works without it.
if ! command -v dot >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "[setup] installing graphviz (for patcher graph)" >&2
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz; } >&2 \
            || echo "[setup] could not install graphviz: patcher graph can only write .dot files" >&2
    else
        echo "[setup] graphviz not found: for .svg/.png from 'patcher graph' run: sudo apt-get install -y graphviz" >&2
    fi
fi
