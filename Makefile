# vgpuctl developer entry points. `make demo` and `make test` work on a fresh machine with Go and Python 3.11.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
GPUSIM := tests/vcsim/bin/gpusim
DEMO_STATE := .work/demo

GUEST_PACKAGES := $(shell sed -e 's/\#.*//' scripts/guest-test-packages.txt)

.PHONY: all venv gpusim demo test test-unit test-sim test-go test-packaging guest-deps lint typecheck mutation clean

all: venv gpusim

$(BIN)/vgpuctl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(BIN)/vgpuctl

gpusim:
	cd tests/vcsim && go build -o bin/gpusim .

# Build and start the simulator, apply the example inventory, show the result, stop the simulator.
demo: venv gpusim
	@mkdir -p $(DEMO_STATE)
	@set -e; export VGPUCTL_STATE_DIR=$(CURDIR)/$(DEMO_STATE); \
	  $(BIN)/vgpuctl sim up > $(DEMO_STATE)/sim.env; \
	  trap '$(BIN)/vgpuctl sim down' EXIT; \
	  . $(DEMO_STATE)/sim.env; \
	  $(BIN)/vgpuctl plan -f inventory.example.yaml; \
	  $(BIN)/vgpuctl apply -f inventory.example.yaml --yes; \
	  $(BIN)/vgpuctl status; \
	  $(BIN)/vgpuctl plan -f inventory.example.yaml --detailed-exitcode

lint: venv typecheck
	$(BIN)/ruff check vgpuctl tests bench
	cd tests/vcsim && gofmt -l . | (! grep .) && go vet ./...

typecheck: venv
	$(BIN)/mypy vgpuctl

test-go:
	cd tests/vcsim && go vet ./... && go test ./...

test-unit: venv
	$(BIN)/pytest -m unit

test-sim: venv gpusim
	$(BIN)/pytest -m sim

test-packaging: venv
	$(BIN)/pytest -m packaging

# Mutation testing of the pure core (placement, scheduler, plan, capacity kinds and layout), unit tests only: not
# part of `make test` or CI (a full run takes hours on two cores). mutmut goes into the venv on first use.
# MUTATION_ARGS: modules to run (default all), --fresh to forget earlier results, --report-only. docs/testing.md.
mutation: venv
	$(BIN)/pip install -q mutmut==3.8.1
	$(BIN)/python scripts/mutation.py $(MUTATION_ARGS)

# As root: install the Debian packages the guest tests need (scripts/guest-test-packages.txt), when missing.
guest-deps:
	@if [ "$$(id -u)" != 0 ]; then exit 0; fi; \
	missing=$$(for p in $(GUEST_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing the guest tests' packages:" $$missing; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Everything but live tests: Go simulator tests, lint, then unit + sim + packaging + guests (guests need root).
test: venv gpusim lint test-go guest-deps
	@if [ "$$(id -u)" = 0 ]; then \
	  $(BIN)/pytest -m "not live"; \
	else \
	  echo "make test: skipping the guests suite: it needs root (network namespaces, chroot, apt packages)"; \
	  $(BIN)/pytest -m "not live and not guests"; \
	fi

clean:
	rm -rf $(VENV) tests/vcsim/bin .pytest_cache .ruff_cache
