# `make demo` and `make test` each set up .venv from nothing (once) and then do their job.
VENV ?= .venv
PYTHON ?= python3
# The CPU build of torch goes in first, so the project's `torch>=...` requirement is already met and pulls no CUDA.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	@echo "One-step model (SPEC §2), diverse lengths Unif{3..15}: expect ood/acc near 1 (induction head)"
	$(BIN)/headsweep train configs/paper_theory.yaml task.lengths.low=3 task.lengths.high=15 --out runs/demo/wide
	@echo "Same model, narrow lengths Unif{14..15}: expect ood/acc far below 1 (positional shortcut)"
	$(BIN)/headsweep train configs/paper_theory.yaml task.lengths.low=14 task.lengths.high=15 --out runs/demo/narrow
	@echo "The paper's whole sweep on Ray Tune: 156 trials over (l_min, l_max, N_trg); see the phase diagram and report"
	$(BIN)/headsweep grid configs/paper_theory_grid.yaml --out runs/demo/paper_theory_grid

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/core.py
	$(BIN)/python bench/grid.py

clean:
	rm -rf $(VENV) runs
