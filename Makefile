# Set-up is part of every target: .venv is built from the pinned requirements
# the first time (and again when they change).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BACKENDS := tensorflow jax torch

.PHONY: demo test clean

$(STAMP): requirements/dev.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) recipes/demo.py

# The whole suite once per backend; every backend runs even if one fails.
test: $(STAMP)
	@status=0; for backend in $(BACKENDS); do \
		echo "=== KERAS_BACKEND=$$backend"; \
		KERAS_BACKEND=$$backend $(PY) -m pytest tests || status=1; \
	done; exit $$status

clean:
	rm -rf $(VENV) demo_output .pytest_cache
