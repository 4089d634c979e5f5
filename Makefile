# Set-up is part of every target: .venv is built from the pinned requirements
# the first time (and again when they change).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BACKENDS := tensorflow jax torch

.PHONY: demo test test-slow test-all test-durations test-fast test-install docs clean bench

# Python compiles each module to bytecode the first time a process imports it
# and keeps it (__pycache__), so the build compiles none (pip's --no-compile)
# and every target lets Python write what it compiles, even where the
# environment says not to: `make test` imports 10,476 of the 23,657 modules
# installed. Compiling them all at install (compileall on both cores) took
# about half of the build's time and saved the suite nothing measurable.
export PYTHONDONTWRITEBYTECODE :=

$(STAMP): requirements/dev.txt requirements/keras-hub.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -r requirements/dev.txt
	$(PY) -m pip install -q --no-compile --no-deps -r requirements/keras-hub.txt
	$(PY) -m pip install -q --no-compile --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) recipes/demo.py

# The suite in tiers, each once per backend; every backend runs even if one
# fails. Two workers (pytest-xdist; each file stays on one worker, with its
# fixtures, and the files go out longest first, by tests/durations.json),
# and the 15 slowest tests of each pass printed, so that growth shows in
# every log. Backend-independent and cross-backend tests run in the torch
# pass only (tests/conftest.py). A worker that crashes (a segfault in a
# backend) fails its test and ends the pass, whose summary names it:
# pytest-xdist 3.8's loadscope scheduler, given a replacement worker, can
# wait forever (pytest-dev/pytest-xdist#1313, #1323).
#   make test          the fast tier: every test not marked slow (plain pytest)
#   make test-slow     the tests marked slow, but the install's (pytest -m slow)
#   make test-install  a user's install from the wheel, four extra sets
#   make test-all      all three, as .ci/run runs them; fails if any tier fails
PYTEST := $(PY) -m pytest tests -n 2 --dist loadscope --no-loadscope-reorder --max-worker-restart=0 --durations=15
SLOW := -m "slow and not install"
define passes
	@status=0; for backend in $(BACKENDS); do \
		echo "=== $(1): KERAS_BACKEND=$$backend"; start=$$(date +%s); \
		KERAS_BACKEND=$$backend $(PYTEST) $(2) || status=1; \
		echo "=== $(1): KERAS_BACKEND=$$backend took $$(( $$(date +%s) - start )) s"; \
	done; exit $$status
endef

test: $(STAMP)
	$(call passes,test,)

test-slow: $(STAMP)
	$(call passes,test-slow,$(SLOW))

test-all: $(STAMP)
	@start=$$(date +%s); status=0; \
	$(MAKE) --no-print-directory test || status=1; \
	$(MAKE) --no-print-directory test-slow || status=1; \
	$(MAKE) --no-print-directory test-install || status=1; \
	echo "=== test-all took $$(( $$(date +%s) - start )) s"; exit $$status

# Each tier's passes again, storing each test's seconds and the processes it
# started in tests/durations.json: the rule of the tiers (tests/test_suite.py)
# and the order in which the workers take the files read them.
test-durations: $(STAMP)
	@status=0; for backend in $(BACKENDS); do \
		KERAS_BACKEND=$$backend $(PYTEST) --write-durations || status=1; \
		KERAS_BACKEND=$$backend $(PYTEST) $(SLOW) --write-durations || status=1; \
	done; exit $$status

# A user's install (tests/test_install.py): the wheel built from this tree, installed into a
# fresh virtual environment per extra set ([jax], [torch], [tensorflow], [jax,data]; kept in
# ~/.cache/keras_vit/install and reused while the wheel and its requirements stay the same),
# and each user journey run there as a process of its own. The test is backend-independent:
# it runs in the torch pass.
INSTALL_ENVS := jax,torch,tensorflow,jax-data
test-install: $(STAMP)
	@start=$$(date +%s); \
	KERAS_BACKEND=torch KERAS_VIT_INSTALL_ENVS=$(INSTALL_ENVS) $(PY) -m pytest tests/test_install.py -m install; \
	status=$$?; echo "=== test-install took $$(( $$(date +%s) - start )) s"; exit $$status

# The edit-run loop: the fast tier on one backend.
FAST_BACKEND ?= torch
test-fast: $(STAMP)
	KERAS_BACKEND=$(FAST_BACKEND) $(PYTEST)

# The docs site into site/ (mkdocs.yml); a broken reference or a missing docstring fails.
# `.venv/bin/mkdocs serve` serves it with live reload.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

# Throughput against keras-hub and Hugging Face (benchmarks/README.md). keras-hub
# goes in with --no-deps: its tensorflow-text would pull the full tensorflow.
$(VENV)/.bench-installed: requirements/bench.txt $(STAMP)
	$(PY) -m pip install -q --no-deps -r requirements/bench.txt
	touch $(VENV)/.bench-installed

bench: $(VENV)/.bench-installed
	$(PY) benchmarks/throughput.py --quick --json benchmarks/results/latest.json

clean:
	rm -rf $(VENV) demo_output .pytest_cache site
