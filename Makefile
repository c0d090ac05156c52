# metainfer build tooling. The two entry points, both work on a fresh clone with only python3:
#
#   make demo   venv in .venv-demo, torch==2.13.0, `pip install -e .`, then `metainfer generate`
#               (tiny embedded random-weight model; prints text and tokens/s). DEMO_ARGS="..." passes args.
#   make test   venv in .venv (VENV=...), torch==2.13.0, `pip install -e ".[dev]"`, then in order:
#               sync (nbs/ <-> metainfer/, clean notebooks), readme-check, lint (ruff), nbtest, docs, pytest.
#
# Each step is its own target (make sync / readme-check / nbtest / docs / pytest); `make help` lists all.
# Tools are called as $(VENV)/bin/..., so nothing needs activating.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# The steps of `test` share the work tree: always run them one after another, even under -j.
.NOTPARALLEL:
.DELETE_ON_ERROR:

# PYTHON only creates the venvs and runs the stdlib-only README tool.
PYTHON    ?= python3
VENV      ?= .venv
DEMO_VENV ?= .venv-demo
# TORCH is installed first, then pinned with `pip -c` so no later install can swap it.
TORCH     ?= torch==2.13.0
PIP_ARGS  ?= --progress-bar off
LIB       ?= metainfer
NBS       ?= nbs
N_WORKERS ?= 2
NBTEST_ARGS ?=
PYTEST_ARGS ?= -q
DOCS_ARGS ?=
DEMO_ARGS ?=
README_ARGS ?=
# 2 workers x N torch threads on 2 cores oversubscribes badly; give each notebook worker one thread.
NBTEST_ENV ?= OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# No network but PyPI: never let a test reach for the Hugging Face hub; headless plotting.
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_HUB_DISABLE_TELEMETRY ?= 1
export TOKENIZERS_PARALLELISM ?= false
export MPLBACKEND ?= Agg

VPY        := $(VENV)/bin/python
DEV_STAMP  := $(VENV)/.metainfer-dev.stamp
DEMO_STAMP := $(DEMO_VENV)/.metainfer-demo.stamp
CHECK      := bash tools/check_unchanged.sh
# Notebooks write tiny checkpoints (~86 MB each) to tempfile.mkdtemp() folders that nothing removes; thousands of
# runs filled the disk once. Each test step runs with its own TMPDIR, removed when the step ends, pass or fail.
IN_OWN_TMPDIR := bash tools/in_own_tmpdir.sh
INSTALL_DEPS := settings.ini setup.py $(wildcard pyproject.toml)

.PHONY: help demo test install install-demo sync readme readme-check lint nbtest pytest docs docs-serve \
        screenshots prepare clean distclean

help:  ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# ---------------------------------------------------------------- entry points
demo: $(DEMO_STAMP)  ## fresh venv (.venv-demo) + pip install -e . + `metainfer generate` on the tiny built-in model
	$(DEMO_VENV)/bin/metainfer generate $(DEMO_ARGS)

# pytest runs last so that its summary line ("N passed in ...") is the last line CI prints.
test: sync readme-check lint nbtest docs pytest  ## everything CI runs (.ci/run), in order; stops at the first failure

# ---------------------------------------------------------------- environments
# Installs are keyed on a stamp file inside the venv: they re-run only when settings.ini or setup.py
# change (or the venv is deleted), so repeated `make` calls don't touch pip at all.
install: $(DEV_STAMP)  ## create/refresh the dev venv (.venv, or VENV=...) with the dev extras
install-demo: $(DEMO_STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(DEMO_VENV)/bin/python:
	$(PYTHON) -m venv $(DEMO_VENV)

# setup.py reads README.md, so a fresh clone needs it before `pip install -e .`
README.md:
	$(PYTHON) tools/make_readme.py
	@test -f README.md || { echo "README.md is missing and nbs/index.ipynb can't make it; setup.py needs it" >&2; exit 1; }

$(DEV_STAMP): $(INSTALL_DEPS) | $(VENV)/bin/python README.md
	echo '$(TORCH)' > $(VENV)/constraints.txt
	$(VPY) -m pip install $(PIP_ARGS) '$(TORCH)'
	$(VPY) -m pip install $(PIP_ARGS) -c $(VENV)/constraints.txt -e '.[dev]'
	touch $@

$(DEMO_STAMP): $(INSTALL_DEPS) | $(DEMO_VENV)/bin/python README.md
	echo '$(TORCH)' > $(DEMO_VENV)/constraints.txt
	$(DEMO_VENV)/bin/python -m pip install $(PIP_ARGS) '$(TORCH)'
	$(DEMO_VENV)/bin/python -m pip install $(PIP_ARGS) -c $(DEMO_VENV)/constraints.txt -e .
	touch $@

# ---------------------------------------------------------------- the steps of `make test`
sync: install  ## fail if nbdev_export would change metainfer/ or nbdev_clean would change nbs/
	$(CHECK) $(LIB) -- $(VENV)/bin/nbdev_export
	$(CHECK) $(NBS) -- $(VENV)/bin/nbdev_clean

readme:  ## write README.md from nbs/index.ipynb (stand-in for nbdev_readme, which needs Quarto)
	$(PYTHON) tools/make_readme.py $(README_ARGS)

lint: install  ## ruff (line length 100), ruff format --check, and tools/nb_stats.py --check (short cells, demos, show_doc)
	$(VENV)/bin/ruff check nbs metainfer tests tools
	$(VENV)/bin/ruff format --check nbs tests tools
	$(PYTHON) tools/nb_stats.py --check

readme-check:  ## fail if README.md differs from what `make readme` would write
	$(PYTHON) tools/make_readme.py --check $(README_ARGS)

nbtest: install  ## nbdev_test --n_workers 2 (cells flagged cuda/slow are skipped: settings.ini tst_flags)
	$(NBTEST_ENV) $(IN_OWN_TMPDIR) $(VENV)/bin/nbdev_test --n_workers $(N_WORKERS) $(NBTEST_ARGS)

pytest: install  ## pytest -q tests/ (skipped with a note while tests/ has no test files)
	@if [ -n "$$(find tests -name 'test_*.py' -o -name '*_test.py' 2>/dev/null | head -n 1)" ]; then \
	    echo "$(VPY) -m pytest $(PYTEST_ARGS) tests/"; \
	    $(IN_OWN_TMPDIR) $(VPY) -m pytest $(PYTEST_ARGS) tests/; \
	else echo "pytest: no test files in tests/; skipping"; fi

docs: install  ## check the benchmarks page is current, build the MkDocs site (strict) into docs/site/, check its links
	$(VPY) tools/bench_page.py --check
	$(VPY) tools/build_docs.py $(DOCS_ARGS)
	$(VPY) tools/check_links.py docs/site

docs-serve: install  ## stage the docs and run `mkdocs serve` (re-run after editing notebooks)
	$(VPY) tools/build_docs.py --serve $(DOCS_ARGS)

# ---------------------------------------------------------------- developer helpers
# Not part of `test`: needs Chromium (apt-get install chromium) and `pip install playwright` in $(VENV).
SCREENSHOTS_ARGS ?=
screenshots:  ## screenshots of docs/site at 1400 px into docs/screenshots/; fails if a <=100-char code line is cut off
	@test -f docs/site/index.html || { echo "screenshots: no docs/site; run make docs first" >&2; exit 1; }
	$(VPY) tools/screenshots.py $(SCREENSHOTS_ARGS)

prepare: install  ## nbdev_export + nbdev_clean + readme: bring everything in sync before committing
	$(VENV)/bin/nbdev_export
	$(VENV)/bin/nbdev_clean
	$(PYTHON) tools/make_readme.py

clean:  ## remove build outputs (build/, docs/site/); keeps the venvs
	rm -rf build docs/site _docs .pytest_cache

distclean: clean  ## also remove the venvs made by this Makefile
	rm -rf $(VENV) $(DEMO_VENV)
