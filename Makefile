# `make demo` and `make test` each set up .venv from nothing (once) and then do their job.
VENV ?= .venv
PYTHON ?= python3
# The CPU build of torch goes in first, so the project's `torch>=...` requirement is already met and pulls no CUDA.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo check test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	@echo "One-step model (docs/TASKS.md, one_step), diverse lengths Unif{3..15}: expect ood/acc near 1 (induction head)"
	$(BIN)/headsweep train configs/paper_theory.yaml task.lengths.low=3 task.lengths.high=15 --out runs/demo/wide
	@echo "Same model, narrow lengths Unif{14..15}: expect ood/acc far below 1 (positional shortcut)"
	$(BIN)/headsweep train configs/paper_theory.yaml task.lengths.low=14 task.lengths.high=15 --out runs/demo/narrow
	@echo "The main job: per (l_min, N_trg), the smallest width K of Unif{l_min..l_min+K-1} at which a seed generalizes OOD with probability >= 1/2, with its 95% interval"
	$(BIN)/headsweep search configs/quickstart.yaml --out runs/quickstart

# The worked plugin example, installed as a user installs a plugin package (again whenever its files change).
EXAMPLE := examples/headsweep-zoology
$(VENV)/.example-installed: $(STAMP) $(shell find $(EXAMPLE) -name '*.py' -o -name pyproject.toml 2>/dev/null)
	$(BIN)/python -m pip install -q ./$(EXAMPLE)
	touch $@

# The unit tier (tests/conftest.py: TIERS): in-process, no server, what to run before every commit; its tests
# handed out one by one to TEST_WORKERS processes.
TEST_WORKERS ?= 2
check: $(STAMP) $(VENV)/.example-installed
	$(BIN)/python -m pytest -q -m unit -n $(TEST_WORKERS)

# Test files run side by side on TEST_WORKERS processes, each file whole on one (its module fixtures, its Ray): most
# integration time is a process waiting on another (imports, Ray scheduling, a subprocess CLI), not arithmetic.
# Files are handed out in collection order, the e2e tier's first and the unit tier's many short files last, so that
# the run does not end on one worker still in a minute-long file (xdist's default hands out the files with the most
# tests first: the long single-test files came last).
test: $(STAMP) $(VENV)/.example-installed
	bash tests/install_debian_packages.sh  # Debian's chromium and postgresql for the tests, when missing
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder  # pyproject: testpaths

bench: $(STAMP)
	$(BIN)/python bench/core.py
	$(BIN)/python bench/wandb_cost.py
	$(BIN)/python bench/memory_estimate.py
	$(BIN)/python bench/population.py
	$(BIN)/python bench/transformer_speed.py
	$(BIN)/python bench/grid.py
	$(BIN)/python bench/main_job.py
	$(BIN)/python bench/search.py configs/quickstart.yaml configs/paper_theory_search.yaml
	$(BIN)/python bench/calibration.py

clean:
	rm -rf $(VENV) runs
