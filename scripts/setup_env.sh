#!/usr/bin/env bash
# Create (or reuse) one environment of CI's version matrix, with tracezoo installed in it from this
# checkout, and print its python.
#
#   bash scripts/setup_env.sh floor     # torch and transformers at pyproject.toml's floors (constraints-floor.txt)
#   bash scripts/setup_env.sh newest    # the newest releases CI proves (constraints-newest.txt)
#   "$(bash scripts/setup_env.sh floor)" -m pytest -m matrix
#
# The main environment (.venv, scripts/setup.sh) holds the pins of constraints.txt; the llm-compressor
# one (.venv-llmc, scripts/setup_llmcompressor.sh) transformers 5.17.0. These ones live outside the
# checkout, in $TRACEZOO_ENVS (default ~/.cache/tracezoo/envs), so CI reuses them across runs and
# fresh clones: an environment is reinstalled only when its constraints or pyproject.toml change;
# tracezoo itself is reinstalled (editable, no dependencies, seconds) on every call, so the
# environment runs this checkout. torch comes from PyPI: a CUDA build (2.5 to 3.5 GB of downloads
# with its nvidia-* packages, 5 to 7.5 GB on disk) that runs on a CPU-only machine too.
# PIP_CONFIG_FILE=/dev/null: a machine's pip configuration may cap torch below the release asked
# for (PIP_CONSTRAINT= does not lift such a cap).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: scripts/setup_env.sh NAME (constraints-NAME.txt names the pins)}"
constraints="$root/constraints-$name.txt"
[ -f "$constraints" ] || { echo "[setup-env] no $constraints: known: $(cd "$root" && ls constraints-*.txt | sed 's/constraints-//; s/\.txt//' | tr '\n' ' ')" >&2; exit 2; }
python="${PYTHON:-python3}"
envs="${TRACEZOO_ENVS:-$HOME/.cache/tracezoo/envs}"
venv="$envs/$name"
stamp="$venv/.tracezoo-env-installed"
want="$(cat "$root/pyproject.toml" "$constraints" | sha256sum | cut -d' ' -f1)"
pip=(env PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$constraints")
start=$(date +%s)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    mkdir -p "$envs"
    free_gb=$(( $(df -Pk "$envs" | awk 'NR==2 {print $4}') / 1048576 ))
    if [ "$free_gb" -lt 12 ]; then
        echo "[setup-env] only ${free_gb} GB free under $envs; $name needs up to 8 GB: free some (old environments: ls $envs)" >&2
        exit 1
    fi
    echo "[setup-env] installing $name (pins: $(basename "$constraints")) into $venv" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # torch (and what must match its build) first and alone, from the pins
    first=$(grep -oE '^(torch|torchvision|timm)==[^ ]+' "$constraints" | tr '\n' ' ')
    # shellcheck disable=SC2086
    "${pip[@]}" $first >&2
    "${pip[@]}" -e "$root[test]" >&2
    echo "$want" > "$stamp"
else
    "${pip[@]}" --no-deps -e "$root" >&2
fi
"$venv/bin/python" - "$name" <<'PY' >&2
import importlib.metadata as m, sys
print(f"[setup-env] {sys.argv[1]}: " + ", ".join(f"{p} {m.version(p)}" for p in ("torch", "transformers", "tracezoo")))
PY
echo "[setup-env] $name ready in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1) on disk, $(df -Ph "$envs" | awk 'NR==2 {print $4}') free" >&2
echo "$venv/bin/python"
