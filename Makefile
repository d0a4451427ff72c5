# flashlab: the two commands a newcomer needs are `make lab` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.flashlab-installed

.PHONY: install lab test tour kernel clean

$(STAMP): pyproject.toml Makefile  # a changed install step reinstalls
	@test -x $(BIN)/python || $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
	  { echo "make: $(PYTHON) is older than Python 3.10; run e.g. 'make $(MAKECMDGOALS) PYTHON=python3.11'" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || \
	  { rm -rf $(VENV); echo "make: '$(PYTHON) -m venv' failed; on Debian/Ubuntu: sudo apt install python3-venv" >&2; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name flashlab --display-name "flashlab (Python 3)" >/dev/null
	mkdir -p $(VENV)/share/jupyter/lab/settings  # no "Jupyter news?" pop-up over the course
	echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}' \
	  > $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $(STAMP)

install: $(STAMP)

kernel: install

# Jupyter refuses to start as root (containers, WSL set-ups) unless told it may.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

# The address JupyterLab prints opens notebook 00; the launcher offers only the flashlab kernel.
LAB_OPTIONS := --LabApp.default_url=/lab/tree/00_orientation.ipynb \
  --KernelSpecManager.allowed_kernelspecs=flashlab --MappingKernelManager.default_kernel_name=flashlab

# The learner works in work/ (git-ignored): their copies of the notebooks and exercises/.
# `flashlab workarea` creates it, copies in new course files, never overwrites the learner's.
lab: install  ## set up your work area (work/) and open the course there at notebook 00
	$(BIN)/flashlab workarea
	cd work && "$(CURDIR)/$(BIN)/jupyter" lab $(ALLOW_ROOT) $(LAB_OPTIONS)

# The tests run in parallel, one worker per core up to TEST_WORKERS_MAX (most of the suite is single-threaded
# grading and interpreter work); then the notebooks, one after another in one process, whose test of the
# whole course's time needs every notebook's time from the same session.
TEST_WORKERS_MAX ?= 4

test: install  ## every test: library, interpreter kernels, grader, notebooks, browser
	@test -d tests || { echo "make test: no tests/ folder here (a student release leaves the test suite out; grade your work with flashlab grade)"; exit 2; }
	$(BIN)/python -m pytest -q -n auto --maxprocesses=$(TEST_WORKERS_MAX) --ignore=tests/test_notebooks.py
	$(BIN)/python -m pytest -q tests/test_notebooks.py

tour: install  ## a headless run of the main pipeline, no GPU needed
	$(BIN)/flashlab tour

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis artifacts
