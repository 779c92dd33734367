#!/usr/bin/env bash
# make gpu-bundle-check: a fresh venv with only torch and transformers (the pins of requirements.txt)
# plus the gpu bundle runs `bench/gpu_suite.py --device cpu --quick`: the GPU machine needs nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DEV_PY=${DEV_PY:-.venv/bin/python}
work=.venv-gpu-check
pin() { grep -E "^$1==" requirements.txt | sed 's/[[:space:]]*#.*//'; }
rm -rf "$work/bundle" "$work/site" "$work/out"
version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
"$DEV_PY" bench/gpu_bundle.py --out "$work/bundle" --python-version "$version"
if [ ! -x "$work/venv/bin/python" ]; then "$PYTHON" -m venv "$work/venv"; fi
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile "$(pin torch)" "$(pin transformers)"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile --no-index --no-deps --target "$work/site" "$work"/bundle/*.whl
export PYTHONPATH="$work/site"
if "$work/venv/bin/python" -c "import streamlit" 2>/dev/null; then echo "gpu-bundle-check: the fresh venv is not fresh"; exit 1; fi
"$work/venv/bin/python" bench/gpu_suite.py --device cpu --quick --out "$work/out"
echo "gpu-bundle-check: the suite ran from torch + transformers + $(ls "$work"/bundle/*.whl | wc -l) bundled wheels"
