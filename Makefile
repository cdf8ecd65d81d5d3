# Every target runs in the tools venv (.tools/), created from the pinned,
# hash-checked scripts/requirements-tools.txt by any python3 on the host.
# No conda, mamba or micromamba is used anywhere.

PYTHON ?= python3
TOOLS  := .tools
PY     := $(TOOLS)/bin/python
ENV    ?= py310
# Extra arguments for `bootstrap lock`, e.g. LOCK_ARGS="--mirror conda-forge=http://mirror.internal/conda-forge"
LOCK_ARGS ?=
ENV_ARGS ?=
# Developers only: the conda-forge repodata snapshot the committed locks were solved against, kept
# beside the developers' checkout (a clone has none). Only lock-from-snapshot, bench-lock and bench-add read it.
SNAPSHOT := ../shared/conda-forge-snapshot/conda-forge
# Tests of the env-side code (verify, bench) run on a CPU torch in the tools venv.
# It is kept out of requirements-tools.txt so `make env`/`make lock` never pay for it.
TORCH_TEST ?= torch==2.13.0
# Where the CPU build comes from: PyPI's Linux torch is the CUDA build, which pulls ~2.7 GB of
# nvidia wheels. Where this index is unreachable (a PyPI mirror only), the default index is used.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: env add remove bundle cache prune-cache clean-env verify doctor bench-env bench-env-real tools lock lock-example lock-check lock-from-snapshot test test-slow test-network test-all bench-lock bench-add bench-fetch tools-requirements clean export monitor bench-verify bench-prolog bench bench-loader bench-training bench-watch bench-report gpu-check help FORCE

## Build the tools venv (every other target does it first when needed).
tools: $(TOOLS)/.requirements-tools.txt

# Rebuilt when the content of the requirements or of the script differs from the stamps the venv holds,
# or the venv's python no longer runs (its interpreter moved or was removed); never for a time alone:
# a checkout or a touch that leaves the content as it was must not cost a rebuild (nor a network).
ifneq ($(shell cmp -s scripts/requirements-tools.txt $(TOOLS)/.requirements-tools.txt \
  && cmp -s scripts/tools-venv.sh $(TOOLS)/.tools-venv.sh && test -x $(PY) && echo ok),ok)
$(TOOLS)/.requirements-tools.txt: FORCE
endif
$(TOOLS)/.requirements-tools.txt:
	PYTHON="$(PYTHON)" BUNDLE="$(BUNDLE)" scripts/tools-venv.sh $(TOOLS)
# The stamps are written once what they stand for is complete: Ctrl-C after that (tools-venv.sh still
# removing the replaced venv) must not have make delete them and rebuild a working venv next time.
.PRECIOUS: $(TOOLS)/.requirements-tools.txt $(TOOLS)/.requirements-test.txt $(TOOLS)/.torch-test

# What only the tests and the torch benchmarks need (pytest, ruff, numpy, ...): installed into the
# tools venv by those targets, never by `make env` or `make lock`. Its stamp is the file's content;
# a rebuilt venv (a newer tools stamp) installs it again.
ifneq ($(shell cmp -s scripts/requirements-test.txt $(TOOLS)/.requirements-test.txt && echo ok),ok)
$(TOOLS)/.requirements-test.txt: FORCE
endif
$(TOOLS)/.requirements-test.txt: $(TOOLS)/.requirements-tools.txt
	@echo "installing $$(grep -c '^[A-Za-z0-9]' scripts/requirements-test.txt) pinned, hash-checked test packages from scripts/requirements-test.txt" >&2
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps --retries 2 --timeout 20 \
	  -r scripts/requirements-test.txt
	$(PY) scripts/check-tools-deps.py
	cp scripts/requirements-test.txt $@

FORCE:

# The env targets take ENV from make's command line or the environment: a shell's own ENV
# (POSIX sh's startup file, e.g. ENV=~/.shrc) or an empty one must not become a path to remove.
CHECK_ENV = @case "$(ENV)" in ""|*/*|.*|*[!A-Za-z0-9_.-]*) echo "ENV='$(ENV)' is not an env name such as py310 or py39 (the shell's ENV variable? pass ENV=py310 to make)" >&2; exit 2;; esac
# `verify` and `bench` run in the env they accept, on its own torch: one line when it is not there yet.
# An env with a prefix per variant (.envs/ENV/NAME) runs them in the one this host picks (or VARIANT
# names), through `bootstrap shell --exec`, which says in one line when that one is not installed.
IN_ENV = $(if $(wildcard .envs/$(ENV)/bin/python),.envs/$(ENV)/bin/python,$(PY) -m bootstrap shell $(ENV) --variant $(VARIANT) --exec python)
NEED_ENV = @test -x .envs/$(ENV)/bin/python || test -d .envs/$(ENV) || { echo "no env at .envs/$(ENV): run \`make env$(if $(filter-out py310,$(ENV)), ENV=$(ENV))\` first" >&2; exit 2; }
# A variant is named like an env, without dots (they separate env and variant in lock file names).
CHECK_VARIANT = @case "$(VARIANT)" in ""|-*|*[!A-Za-z0-9_-]*) echo "VARIANT='$(VARIANT)' is not a variant name such as auto or cu128" >&2; exit 2;; esac

## Every target with a line of help (`make help`).
help:
	@awk -v env='$(ENV)' '/^## / { text = text substr($$0, 4) " " } /^$$/ { text = "" } \
	  /^[a-z][a-z-]*:/ { if (text != "") { gsub(/\$$\(ENV\)/, env, text); n = split(text, words, " "); \
	    line = sprintf("  %-19s", substr($$1, 1, length($$1) - 1)); \
	    for (i = 1; i <= n; i++) { if (length(line) + length(words[i]) >= 100) { print line; line = sprintf("%21s", "") } \
	      line = line " " words[i] } print line } text = "" }' $(MAKEFILE_LIST)

## Create or update .envs/$(ENV) from its lock (ENV=py39 for the other env); ENV_ARGS="--dry-run" prints the plan.
## An env with torch variants has a prefix per variant, .envs/$(ENV)/NAME: VARIANT=NAME installs that one
## (default auto: the one `make doctor` picks for this host), VARIANT=all every one locked (a shared tree).
## BUNDLE=FILE takes the artifacts from a bundle `make bundle` wrote: no channel or index needed.
BUNDLE ?=
VARIANT ?= auto
env: tools
	$(CHECK_ENV)
	$(CHECK_VARIANT)
	$(PY) -m bootstrap env $(ENV) --variant $(VARIANT)$(if $(BUNDLE), --bundle "$(BUNDLE)") $(ENV_ARGS)

## Add PKG="numpy>=1.26 zlib" (requirements, each without spaces) to $(ENV)'s spec, in pip: or the conda
## dependencies, whichever the channel has it in; relock only what they need, export environment.yml,
## update .envs/$(ENV). ADD_ARGS="--pip", "--replace", "--no-install", "--mirror C=URL", ... (bootstrap add --help).
PKG ?=
ADD_ARGS ?=
# Each word of PKG single-quoted for the shell: `numpy>=1.26` must not become a redirection.
PKG_WORDS = $(foreach word,$(PKG),'$(subst ','\'',$(word))')
CHECK_PKG = @test -n "$(strip $(PKG))" || { echo "PKG is empty: name what to $@, e.g. make $@ PKG=\"numpy>=1.26\"" >&2; exit 2; }
add: tools
	$(CHECK_ENV)
	$(CHECK_VARIANT)
	$(CHECK_PKG)
	$(PY) -m bootstrap add --env $(ENV) --variant $(VARIANT) $(PKG_WORDS) $(ADD_ARGS)

## Remove PKG="numpy zlib" from $(ENV)'s spec; what only they needed leaves the lock too (ADD_ARGS as for add).
remove: tools
	$(CHECK_ENV)
	$(CHECK_VARIANT)
	$(CHECK_PKG)
	$(PY) -m bootstrap remove --env $(ENV) --variant $(VARIANT) $(PKG_WORDS) $(ADD_ARGS)

## Every artifact the lock of $(ENV) installs on this platform, and the lock, in one tar for nodes
## without internet; BUNDLE_ARGS="--platform linux-64 -o FILE" for another platform or name.
BUNDLE_ARGS ?=
bundle: tools
	$(CHECK_ENV)
	$(PY) -m bootstrap bundle $(ENV) $(BUNDLE_ARGS)

## What the package cache (~/.cache/bootstrap) holds.
cache: tools
	$(PY) -m bootstrap cache

## Remove from the package cache what no lock of this project installs.
prune-cache: tools
	$(PY) -m bootstrap cache --prune

## Remove .envs/$(ENV) with all its generations (and every variant's prefix).
clean-env:
	$(CHECK_ENV)
	rm -rf .envs/$(ENV) .envs/.$(ENV).gens .envs/.$(ENV).lock .envs/.$(ENV).switch

## Inside the env: packages match the lock, the CUDA stack fits, the acceptance benchmark passes.
## The env's own python runs this checkout's bootstrap package (nothing is installed into the env).
VERIFY_ARGS ?=
verify:
	$(CHECK_ENV)
	$(NEED_ENV)
	PYTHONPATH="$(CURDIR)" $(IN_ENV) -m bootstrap verify $(VERIFY_ARGS)

## Host only, before any env exists: driver, max CUDA, GPUs, and which torch variant of $(ENV) runs here
## (the one `make env` installs); DOCTOR_ARGS="--facts FILE" judges a host recorded with --save-facts.
doctor: tools
	$(CHECK_ENV)
	$(PY) -m bootstrap doctor --env $(ENV) $(DOCTOR_ARGS)

## `env` vs raw rattler.install, side by side; BENCH_ENV_ARGS="--packages 112" for a ~20,000-file env.
BENCH_ENV_ARGS ?=
bench-env: tools
	$(PY) scripts/bench_env.py $(BENCH_ENV_ARGS)

## Opt-in, needs PyPI once: bench-env at real size, the lock's torch and CUDA wheels (several GB,
## fetched once into the package cache) beside rattler + uv with their default link modes.
bench-env-real: tools
	$(PY) scripts/bench_env.py --real $(BENCH_ENV_ARGS)

## Solve envs/*.yml for every platform and write the locks (conda-forge and PyPI must be reachable,
## or pass mirrors in LOCK_ARGS), then the environment.yml that goes with them.
lock: tools
	$(PY) -m bootstrap lock $(LOCK_ARGS)
	$(PY) -m bootstrap export -o environment.yml

## Developers only (needs their conda-forge snapshot, SNAPSHOT): how the committed locks were produced,
## the conda part from the snapshot served as a mirror of the canonical channel, the pip part from PyPI.
lock-from-snapshot: tools
	$(PY) -m bootstrap lock --mirror https://conda.anaconda.org/conda-forge=$(SNAPSHOT) $(LOCK_ARGS)
	$(PY) -m bootstrap export -o environment.yml

## Lock examples/pytorch-index (cpu and cu126 variants from download.pytorch.org; needs that index).
lock-example: tools
	$(PY) -m bootstrap lock --root examples/pytorch-index $(LOCK_ARGS)

## Offline: do the committed locks still satisfy the specs?
lock-check: tools
	$(PY) -m bootstrap lock --check

# The stamp holds what was installed: another TORCH_TEST installs again. pip resolves torch's own
# dependencies here, and its check afterwards would report, as an ERROR, the dependencies the tools venv
# leaves out on purpose (scripts/requirements-unused.txt): --no-warn-conflicts, and check-tools-deps.py
# fails on anything else that is missing or conflicting.
ifneq ($(shell cat $(TOOLS)/.torch-test 2>/dev/null),$(TORCH_TEST))
$(TOOLS)/.torch-test: FORCE
endif
$(TOOLS)/.torch-test: $(TOOLS)/.requirements-tools.txt
	@if $(PY) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$(TORCH_CPU_INDEX)/" \
	    2>/dev/null; then \
	  echo "installing $(TORCH_TEST), a CPU build, from $(TORCH_CPU_INDEX)" >&2; \
	  $(PY) -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --index-url "$(TORCH_CPU_INDEX)" \
	    "$(TORCH_TEST)"; \
	else \
	  echo "$(TORCH_CPU_INDEX) is unreachable: installing $(TORCH_TEST) from the default index" >&2; \
	  $(PY) -m pip install --quiet --disable-pip-version-check --no-warn-conflicts "$(TORCH_TEST)"; \
	fi
	$(PY) scripts/check-tools-deps.py
	echo "$(TORCH_TEST)" > $@

# The test requirements and the CPU torch: what the test targets and the torch benchmarks add.
TEST_TOOLS := $(TOOLS)/.requirements-test.txt $(TOOLS)/.torch-test

# One pytest worker per core, up to four: the suite waits on engines and subprocesses one test at a
# time, and its tests hold whatever else the machine is doing. A worker that runs out of tests takes
# some of another's (worksteal): a few long tests would otherwise keep one worker busy alone at the end.
PYTEST := $(PY) -m pytest -q -n auto --maxprocesses 4 --dist worksteal

## The offline test suite without the slow tests, ruff (lint, complexity and format), mypy, and the Python 3.9 static check; the first run installs a CPU torch.
test: tools $(TEST_TOOLS)
	$(TOOLS)/bin/ruff check --quiet .
	$(TOOLS)/bin/ruff format --check --quiet .
	$(PY) scripts/check-py39.py
	$(PY) -m mypy
	$(PYTEST)

## The tests marked slow (CI runs them after `make test`).
test-slow: tools $(TEST_TOOLS)
	$(PYTEST) -m "slow and not network and not gpu"

## The tests that need PyPI.
test-network: tools $(TEST_TOOLS)
	$(PYTEST) -m network

## Every test but the GPU ones, slow and network ones included.
test-all: tools $(TEST_TOOLS)
	$(PYTEST) -m "not gpu"

## Developers only (needs SNAPSHOT, as lock-from-snapshot): solve and write times of `lock` against the
## snapshot, and `lock --check`.
bench-lock: tools
	$(PY) scripts/bench_lock.py

## Developers only (needs SNAPSHOT and PyPI): `add` of one pip package to py310 against relocking the same line
## written by hand, interleaved rounds; BENCH_ADD_ARGS="--rounds 7 --package NAME".
BENCH_ADD_ARGS ?=
bench-add: tools
	$(PY) scripts/bench_add.py $(BENCH_ADD_ARGS)
# bench-report runs bench_lock.py and bench_add.py too; the snapshot goes by the environment so the commands it
# shows stay short.
bench-lock bench-add bench-report: export BENCH_LOCK_SNAPSHOT = $(SNAPSHOT)

## Time to fetch archives from a loopback server that cuts 1 GET in 5 mid-file, against a clean one.
bench-fetch: tools
	$(PY) scripts/bench_fetch.py

## Re-pin the tools venv and the test requirements (needs PyPI).
TOOLS_COMPILE = $(TOOLS)/bin/uv pip compile --universal --python-version 3.10 --generate-hashes --no-header
tools-requirements: tools
	$(TOOLS_COMPILE) scripts/requirements-tools.in --excludes scripts/requirements-unused.txt -o scripts/requirements-tools.txt
	$(TOOLS_COMPILE) scripts/requirements-test.in -c scripts/requirements-tools.txt -o scripts/requirements-test.txt

## Remove the tools venv (the next target builds it again).
clean:
	rm -rf $(TOOLS) $(TOOLS).old $(TOOLS).trash $(TOOLS).lock .pytest_cache .mypy_cache

## The shareable environment.yml of the default env: requested specs pinned to conda-lock.yml,
## no build strings, no paths (`make test` fails when it drifts from the lock).
## `python -m bootstrap export --pinned` writes the per-platform explicit files.
export: tools
	$(PY) -m bootstrap export -o environment.yml

## Live per-GPU view; Ctrl-C prints the summary. E.g. MONITOR_ARGS="--interval 0.5 --csv gpu.csv".
MONITOR_ARGS ?=
monitor: tools
	$(PY) -m bootstrap monitor $(MONITOR_ARGS)

## `verify --no-bench` against `python -m torch.utils.collect_env`, same interpreter and torch, median of 7 runs.
bench-verify: tools $(TEST_TOOLS)
	$(PY) scripts/bench_verify.py

## The pre-job check, `verify --no-bench --prolog`, whole process on a ~20,000-file env (target <= 1 s), median of 7 runs.
bench-prolog: tools $(TEST_TOOLS)
	$(PY) scripts/bench_prolog.py

## Inside the env, as `verify`: the GPU-utilisation acceptance benchmark on the env's own torch,
## e.g. BENCH_ARGS="--budget 60 --device cuda:0 --out results/" (--device auto: cuda, else mps, else cpu).
BENCH_ARGS ?=
bench:
	$(CHECK_ENV)
	$(NEED_ENV)
	PYTHONPATH="$(CURDIR)" $(IN_ENV) -m bootstrap bench $(BENCH_ARGS)

## The tuned loader against naive, the fixed advice and an exhaustive grid, interleaved (bench's --io-ms 5 and
## --cpu-ms 5 workloads; several minutes); BENCH_LOADER_ARGS="--quick --json loader.json" for a shorter run.
BENCH_LOADER_ARGS ?=
bench-loader: tools $(TEST_TOOLS)
	$(PY) scripts/bench_loader.py $(BENCH_LOADER_ARGS)

## tune_training's recommendation against an exhaustive grid of the same choices, interleaved, and its wall time
## against its 120 s budget (bench's tiny CNN and a model with a fixed cost a step, on the CPU; about 6 minutes).
BENCH_TRAINING_ARGS ?=
bench-training: tools $(TEST_TOOLS)
	$(PY) scripts/bench_training.py $(BENCH_TRAINING_ARGS)

## What `bootstrap.watch(loader)` costs a ~1 ms training step: bare and watched loops interleaved (under a minute).
BENCH_WATCH_ARGS ?=
bench-watch: tools $(TEST_TOOLS)
	$(PY) scripts/bench_watch.py $(BENCH_WATCH_ARGS)

## Run the benchmark scripts (bench-lock, -env, -verify, -prolog, -loader, -fetch, -training, -watch, -add) and write docs/PERFORMANCE.md: their figures,
## the command behind each, the machine; BENCH_REPORT_ARGS="--only env" measures one and keeps the others.
BENCH_REPORT_ARGS ?=
bench-report: tools $(TEST_TOOLS)
	$(PY) scripts/bench_report.py $(BENCH_REPORT_ARGS)

## On a lent GPU machine with its own CUDA torch (no conda, no tools venv): doctor, verify's torch checks,
## bench on the built-in workload and an image folder, the training tuner (ResNet-50, bf16), monitor, a 1-GPU
## torchrun all-reduce, in <= 330 s;
## every output in OUT=DIR (default ./gpu-check-DATE) with summary.txt; PYTHON= the interpreter with torch.
gpu-check:
	PYTHON="$(PYTHON)" scripts/gpu-check.sh
