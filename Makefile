# Two commands set up a fresh Debian machine with Python 3.11:
#   make run    a local nsqd + nsqlookupd (+ nsqadmin) on embedded defaults, data under ./data
#   make test   install whatever is missing, then run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Python writes its compiled modules (__pycache__) under every command here, whatever the
# shell says: the tests start several hundred Python processes (daemons, tools, Spark's workers),
# and each would otherwise compile nsqpy again (0.35 s of CPU an nsqd) and pytest rewrite
# every test module again in each worker. So pip need not compile what it installs: a module
# is compiled when first imported (pip's compiling took 28 of the 64 s of the install, and
# most of what it compiles, the packages' own tests among it, is never imported here).
# Outside make, with PYTHONDONTWRITEBYTECODE set, a module no make command has imported yet
# is compiled again by every process that imports it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test check fmt lint typecheck venv assets sysdeps bench clean jepsen jepsen-long youzan-suite wheel

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev]'
	touch $(STAMP)

# nsqadmin's front-end packages (frontend/package.json, pinned by its lock file) are
# installed from the npm registry and their built files copied into its static folder.
STATIC := src/nsqpy/nsqadmin/static
ASSETS := $(STATIC)/uPlot.iife.min.js

$(ASSETS): frontend/package.json frontend/package-lock.json
	command -v npm >/dev/null || bash scripts/install-system-deps
	npm ci --prefix frontend --no-audit --no-fund --loglevel=error
	cp frontend/node_modules/uplot/dist/uPlot.min.css $(STATIC)/
	cp frontend/node_modules/uplot/LICENSE $(STATIC)/uPlot.LICENSE.txt
	cp frontend/node_modules/uplot/dist/uPlot.iife.min.js $(STATIC)/

assets: $(ASSETS)

# Spark's Python workers import pyspark unpacked, not from its bundled zip (a .pth line;
# see src/nsqpy/spark/workerpath.py): ~1 s less at every streaming query's start.
WORKERPATH := $(VENV)/.workerpath

$(WORKERPATH): src/nsqpy/spark/workerpath.py $(STAMP)
	$(BIN)/python -m nsqpy.spark.workerpath
	touch $(WORKERPATH)

venv: $(STAMP) $(ASSETS) $(WORKERPATH)

sysdeps:
	bash scripts/install-system-deps

run: venv
	$(BIN)/nsqpy run --data-path ./data

# Browser screenshots of the nsqadmin tests are kept under ./test-artifacts (gitignored),
# every test's outcome and time in test-artifacts/junit.xml, and its start, end and worker
# in test-artifacts/timeline.jsonl.
# The 25 slowest tests are listed at the end: where the suite's wall time goes. The suite
# runs in TEST_WORKERS pytest-xdist workers, a test file per worker at a time (its module
# fixtures made once); many tests wait on daemons' timers, so three workers on two cores
# keep both busy (1,103 s; two workers: 1,249 s). TEST_WORKERS=0 runs it in this process.
ARTIFACTS := $(CURDIR)/test-artifacts
TEST_WORKERS ?= 3

test: venv sysdeps
	rm -f $(ARTIFACTS)/timeline.jsonl
	NSQPY_ARTIFACTS=$(ARTIFACTS) $(BIN)/python -m pytest -q --durations=25 \
		-n $(TEST_WORKERS) --dist loadfile --junitxml=$(ARTIFACTS)/junit.xml

fmt: venv
	$(BIN)/ruff format src tests bench scripts

lint: venv
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/ruff check src tests bench scripts

typecheck: venv
	$(BIN)/mypy src tests scripts

check: lint typecheck test

bench: venv sysdeps
	$(BIN)/python bench/storage.py
	$(BIN)/python bench/spark_archive.py    # Spark archive vs Spark's own Parquet write (Java 17)

clean:
	rm -rf $(VENV) build dist src/*.egg-info frontend/node_modules $(STATIC)/uPlot.*
	find src tests bench scripts -name __pycache__ -prune -exec rm -rf {} +

# A wheel for `pip install` (dist/): nsqadmin's built assets inside, the C speedups compiled
# for this machine. pip install dist/nsqpy-*.whl for one node; with '[cluster]' after the
# file's name, cluster mode's etcd client too.
wheel: $(STAMP) $(ASSETS)
	$(BIN)/python -m pip wheel --no-deps --quiet -w dist .

# Youzan's Go client's own test suite (youzan/go-nsq v1.7.12.1-HA) against nsqpy, single
# node and, with CLUSTER=1, a node of a cluster (docs/partitions.md, "Youzan's clients").
# SUITE= a checkout of that tag, with its test binary (go-nsq.test) or what go test needs.
youzan-suite: venv sysdeps
	$(BIN)/python scripts/youzan_suite.py $(SUITE) $(if $(CLUSTER),--cluster) \
		--out $(CURDIR)/test-artifacts/youzan-suite$(if $(CLUSTER),-cluster)

# The Jepsen-style fault harness (root: network namespaces; docs/jepsen.md). `make jepsen`
# is the short profile (about two minutes, run by .ci/run); `make jepsen-long` the long
# one (at least 30 minutes). SEED=N replays a run's schedule.
JEPSEN_OUT := $(CURDIR)/test-artifacts/jepsen
SEED ?=

jepsen: venv sysdeps
	$(BIN)/nsqpy jepsen --profile short $(if $(SEED),--seed $(SEED)) --out $(JEPSEN_OUT)/short

jepsen-long: venv sysdeps
	$(BIN)/nsqpy jepsen --profile long $(if $(SEED),--seed $(SEED)) --out $(JEPSEN_OUT)/long
