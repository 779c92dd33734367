# Two commands do all set-up: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PORT   ?= 8501

.PHONY: run test lint bench browser-deps clean

$(STAMP): requirements.txt requirements-dev.txt
	@$(PYTHON) -m venv $(VENV) || { echo "error: '$(PYTHON) -m venv' failed; on Debian run: apt-get install python3-venv"; exit 1; }
	$(PY) -m pip install -qq -r requirements-dev.txt
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/streamlit run app.py --server.port $(PORT)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) bench/run_all.py

# Debian's chromium for the browser tests (.ci/run calls this; needs root or sudo).
browser-deps:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
