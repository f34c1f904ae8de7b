# Two commands on a fresh machine (see README.md):
#   make book   create .venv, install everything, execute and build the book -> _build/html/index.html
#   make test   create .venv, run the unit tests and execute every notebook with nbval (smoke preset)
# Other targets: make venv (environment only), make clean (remove _build).
#
# Override the experiment scale of the book build with e.g. `make book ITLIN_PRESET=smoke`
# (presets: smoke, book, colab, paper; see README.md). `make book SOLUTIONS=hide` builds the
# book for a class, without the exercises' solutions (they are still executed).

SHELL        := /bin/bash
PYTHON       ?= python3
VENV         := .venv
VENV_PY      := $(VENV)/bin/python
STAMP        := $(VENV)/.installed
ITLIN_PRESET ?= book
BUILD_DIR    := _build
# Jupyter Book's execution cache (execute.execute_notebooks: cache). It is keyed on a
# notebook's code only, so this Makefile wipes it whenever the preset, $ITLIN_SWEEPS (recorded
# sweeps read back or trained: itlin_core.book.sweeps), the itlin_core sources, the recorded
# results or the pinned requirements change (see `book` below).
JCACHE       := $(BUILD_DIR)/.jupyter_cache
CACHE_KEY    := $(BUILD_DIR)/.itlin_cache_key
# Notebooks executed at once by `make book` (itlin_core.tools.execution fills the cache above
# before Jupyter Book renders; a notebook it could not run is executed again by the build).
JOBS         ?= $(shell nproc 2>/dev/null || echo 2)
# show | hide: the exercises' solutions in the built pages (book/_ext/itlin_html.py)
SOLUTIONS    ?= show

# Both targets run two processes at once (pytest -n auto; --jobs for the book). OpenBLAS, which
# NumPy, SciPy and jaxlib's CPU LAPACK calls (eigh, Cholesky, solves) use, then spins its threads
# against the other process: measured on this 2-core machine with one other busy process, a
# float64 eigvalsh of a 500 x 500 matrix took 3.3 s with OpenBLAS's default two threads and
# 0.045 s with one (jax.numpy and NumPy alike), so both targets give each process one thread.
BLAS_ENV     := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

.PHONY: venv book test test-system check-newest clean

venv: $(STAMP)

# The packages are installed with uv (from PyPI, like pip; pinned below), which downloads and
# installs them in parallel: measured on this 2-core machine, the requirements installed in a
# fresh environment in about 10 s with uv (its cache empty) against 42 s with pip (its cache full). Where uv cannot be
# installed, pip does the same installs.
UV_VERSION   := 0.13.8
PIP_INSTALL   = $(VENV_PY) -m uv pip install --quiet --python $(VENV_PY)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	@if $(VENV_PY) -m pip install --quiet uv==$(UV_VERSION); then \
	  echo "$(PIP_INSTALL) -r requirements.txt" && $(PIP_INSTALL) -r requirements.txt && \
	  $(PIP_INSTALL) --no-deps -e .; \
	else \
	  echo "uv could not be installed; installing with pip (slower)." >&2; \
	  $(VENV_PY) -m pip install --quiet --upgrade pip && \
	  $(VENV_PY) -m pip install --quiet -r requirements.txt && \
	  $(VENV_PY) -m pip install --quiet --no-deps -e .; \
	fi
	@touch $@

book: $(STAMP)
	@case "$(SOLUTIONS)" in show|hide) ;; *) echo "SOLUTIONS must be show or hide, got '$(SOLUTIONS)'." >&2; exit 2;; esac
	@mkdir -p $(BUILD_DIR)
	@key=$$( { echo "preset=$(ITLIN_PRESET) sweeps=$${ITLIN_SWEEPS:-use}"; $(TREE_KEY); } | sha256sum | cut -d' ' -f1 ); \
	if [ -d $(JCACHE) ] && [ "$$key" != "$$(cat $(CACHE_KEY) 2>/dev/null)" ]; then \
	  echo "Preset, itlin_core or recorded results changed: clearing the notebook execution cache."; \
	  rm -rf $(JCACHE); \
	fi; \
	echo "$$key" > $(CACHE_KEY)
	$(BLAS_ENV) JAX_PLATFORMS=cpu ITLIN_PRESET=$(ITLIN_PRESET) ITLIN_PROGRESS=text ITLIN_SLIDERS=static \
	  $(VENV_PY) -m itlin_core.tools.execution --jobs $(JOBS) --cache $(JCACHE)
	$(BLAS_ENV) JAX_PLATFORMS=cpu ITLIN_PRESET=$(ITLIN_PRESET) ITLIN_PROGRESS=text ITLIN_SLIDERS=static \
	  ITLIN_HIDE_SOLUTIONS=$(if $(filter hide,$(SOLUTIONS)),1,0) $(VENV)/bin/jupyter-book build . --all
	@echo
	@echo "Book built (ITLIN_PRESET=$(ITLIN_PRESET), solutions: $(SOLUTIONS)): $(CURDIR)/$(BUILD_DIR)/html/index.html"
	@echo "Open it in a browser, or serve it with: python3 -m http.server -d $(BUILD_DIR)/html"

# pytest's exit status is passed on unchanged (make itself then exits 2). If the
# environment variable ITLIN_PYTEST_RC_FILE names a file, the exact status is also
# written there (.ci/run uses this). Status 5 means pytest collected no tests.
#
# Every notebook is executed once in `make test`, by nbval: conftest.py (repository root) stores
# each notebook nbval has run without a failure in the execution cache of the smoke book build
# (ITLIN_TEST_BOOK_DIR: $(TEST_BOOK), emptied when `make test` starts and kept afterwards), and
# that build (tests/test_book_build.py, in `make test-system`) renders them from there and
# executes only a notebook that is missing or changed (the cache is keyed on each notebook's
# code). `make test` writes beside them a key of what else the outputs depend on (TREE_KEY:
# requirements.txt, itlin_core's code and the recorded results); `make test-system` starts that
# folder afresh when the key differs, and the build then executes every notebook itself. A JAX
# persistent compilation cache, fresh and removed afterwards, lets the programs compiled once be
# reused by the other worker and the notebooks' kernels. It
# keeps every program, however quick to compile (JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0):
# the two workers and the fifteen notebook kernels each compile many of the same small programs
# (single operations that JAX runs outside jit: 1,471 of the 1,525 programs that
# tests/test_image_runs.py compiles took under 0.1 s, 17.7 s together); read back from the cache,
# the whole suite took 12:27 against 13:20 when only programs over 0.2 s were kept (one run
# each, on this 2-core machine, 2026-11-28). JAX writes a cache entry in place, so a process may
# read one that another is still writing; it then warns and compiles the program itself (correct,
# only slower), and PYTHONWARNINGS keeps that warning out of the notebooks' outputs.
CACHE_WARNING := ignore:Error reading persistent compilation cache entry:UserWarning
# With ITLIN_JAX_CACHE=DIR that cache is DIR and is kept, so that `make check-newest` (which
# reads the same variable) reuses the programs when its jax is the pinned one (.ci/run does this;
# JAX keys each program on the jax and jaxlib versions and the XLA flags, so a newer jax misses).
#
# The tests compile many small programs and run each for a few steps, so compiling is most of their
# time: XLA's CPU back end optimises the machine code less (TEST_XLA_FLAGS: LLVM at level 0
# without its expensive passes, and XLA's older loop emitters instead of its fusion emitters),
# which cuts compile times by about half (measured in pairs run side by side on this loaded 2-core
# machine: a ResNet-18 IL step compiled in 11-13 s without the fusion emitters, 9 s also without
# LLVM's expensive passes, against 22-24 s at level 0 alone; tests/test_models_cnn.py 170 s
# against 258 s). Two more flags select XLA's pass pipeline for fast compiling and compile each
# program as one piece instead of splitting it for parallel code generation (pointless on a core of
# its own): tests/test_core_gauss_newton.py and tests/test_models_cnn.py took 60 s against 72-76 s
# on one core, and the notebooks' kernels at smoke ran faster too (resnet_mnist 57 s against 76,
# refresh_rules 39 against 50, digits_cnn 35 against 45; 2026-11-28). Results agree with the
# default build to float32 rounding (not bit for bit: machine code that fuses or orders
# operations differently rounds differently), and
# every comparison a test makes is between programs built the same way. Timings are never
# asserted by the tests. `make book` compiles with these flags only the notebooks whose time is
# mostly compiling (itlin_core.tools.execution.COMPILE_BOUND, measured); the others and the
# benchmarks compile as usual.
TEST_XLA_FLAGS ?= --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true \
                  --xla_cpu_use_fusion_emitters=false --xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE \
                  --xla_cpu_parallel_codegen_split_count=1

#
# The tests marked `system` (pyproject.toml) run whole programs in other processes: the book built
# by Jupyter Book (the whole book at smoke, with -W, then read page by page in headless Chromium;
# the small failure-path books), the GPU queue interrupted and resumed, a run group on several
# devices and two hosts, writers killed mid-write, a resume in a new process. They took about 450
# of the suite's 1,620 worker-seconds (2026-11-29), so `make test` leaves them out to stay within
# 12 minutes on a 2-core machine; `make test-system` runs them in the same environment, after
# `make test` (whose executed notebooks its book build renders). CI (.ci/run) runs both.
TEST_BOOK = $(BUILD_DIR)/test-book
TREE_KEY  = { cat requirements.txt; find itlin_core book/results -type f \( -name '*.py' -o -name '*.json' \) 2>/dev/null \
                | LC_ALL=C sort | xargs -r sha256sum; } | sha256sum | cut -d' ' -f1
TEST_ENV = XLA_FLAGS="$(TEST_XLA_FLAGS) $${XLA_FLAGS:-}" \
	JAX_COMPILATION_CACHE_DIR=$$jcache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
	PYTHONWARNINGS="$(CACHE_WARNING)" \
	$(BLAS_ENV) JAX_PLATFORMS=cpu ITLIN_PRESET=smoke ITLIN_PROGRESS=off ITLIN_SLIDERS=static
PYTEST_XDIST = -p no:cacheprovider -n auto --dist loadfile --no-loadscope-reorder --durations=$${ITLIN_DURATIONS:-15}

test: $(STAMP)
	@rc=0; jcache=$${ITLIN_JAX_CACHE:-$$(mktemp -d)}; bookdir=$(TEST_BOOK); \
	rm -rf "$$bookdir" && mkdir -p "$$bookdir" && $(TREE_KEY) > "$$bookdir/key"; \
	ITLIN_TEST_BOOK_DIR=$$bookdir $(TEST_ENV) \
	  $(VENV_PY) -m pytest tests book -m "not system" --nbval-lax --nbval-current-env $(PYTEST_XDIST) || rc=$$?; \
	[ -n "$${ITLIN_JAX_CACHE:-}" ] || rm -rf "$$jcache"; \
	if [ -n "$${ITLIN_PYTEST_RC_FILE:-}" ]; then echo $$rc > "$$ITLIN_PYTEST_RC_FILE"; fi; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit status 5)." >&2; fi; \
	exit $$rc

test-system: $(STAMP)
	@rc=0; jcache=$${ITLIN_JAX_CACHE:-$$(mktemp -d)}; bookdir=$(TEST_BOOK); \
	if [ "$$($(TREE_KEY))" != "$$(cat $$bookdir/key 2>/dev/null)" ]; then \
	  echo "No notebooks executed by make test for this code: the book build executes them all (slower)."; \
	  rm -rf "$$bookdir" && mkdir -p "$$bookdir"; \
	fi; \
	ITLIN_TEST_BOOK_DIR=$$bookdir $(TEST_ENV) $(VENV_PY) -m pytest tests -m system $(PYTEST_XDIST) || rc=$$?; \
	[ -n "$${ITLIN_JAX_CACHE:-}" ] || rm -rf "$$jcache"; \
	if [ $$rc -eq 5 ]; then echo "make test-system: pytest collected no tests (exit status 5)." >&2; fi; \
	exit $$rc

# The Colab-like check (itlin_core/book/newest.py): a fresh environment with the newest published
# jax, jaxlib, optax, numpy and matplotlib that install on $(PYTHON) (not requirements.txt), itlin_core installed with pip
# from this repository's committed HEAD (as a chapter's first cell installs it from GitHub on
# Colab), every chapter executed at smoke in an empty folder outside the repository. Writes
# NEWEST_STATUS, which the page "Execution statistics" shows; exits non-zero if a chapter failed.
# Where the newest versions are exactly the pins of requirements.txt (--pinned), `make test` has
# just executed every chapter with them, so only the first and last chapters are executed again
# (the install from the repository, and the closing chapter reading every record from outside it).
# The newest packages are installed with uv as in `make venv` (pip where uv cannot be installed);
# itlin_core with pip, as the chapters' first cell does.
NEWEST_DIR    ?= $(BUILD_DIR)/newest
NEWEST_STATUS ?= book/results/newest.json
NEWEST_PKGS   := jax jaxlib optax numpy matplotlib scipy scikit-learn ipywidgets tqdm ipykernel nbclient nbformat pyyaml

check-newest:
	rm -rf $(NEWEST_DIR) && $(PYTHON) -m venv $(NEWEST_DIR)/venv
	$(NEWEST_DIR)/venv/bin/python -m pip install --quiet --upgrade pip
	$(NEWEST_DIR)/venv/bin/python -m pip install --quiet uv==$(UV_VERSION) && \
	  $(NEWEST_DIR)/venv/bin/python -m uv pip install --quiet --python $(NEWEST_DIR)/venv/bin/python --upgrade $(NEWEST_PKGS) || \
	  $(NEWEST_DIR)/venv/bin/python -m pip install --quiet --upgrade $(NEWEST_PKGS)
	$(NEWEST_DIR)/venv/bin/python -m pip install --quiet "itlin-core @ git+file://$(CURDIR)"
	cd $(NEWEST_DIR) && $(BLAS_ENV) XLA_FLAGS="$(TEST_XLA_FLAGS)" \
	  $(if $(ITLIN_JAX_CACHE),JAX_COMPILATION_CACHE_DIR=$(ITLIN_JAX_CACHE) JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
	    PYTHONWARNINGS="$(CACHE_WARNING)") \
	  venv/bin/python -m itlin_core.tools.newest \
	  --book $(CURDIR) --out $(abspath $(NEWEST_STATUS)) --jobs $(JOBS) --pinned $(CURDIR)/requirements.txt

clean:
	rm -rf $(BUILD_DIR)
