# vgpuctl developer entry points. `make demo` and `make test` work on a fresh machine with Go and Python 3.11.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The lock (constraints.txt) every install here goes through, build tools included; `make test-latest` runs
# without it. LATEST_VENV: where test-latest installs the newest versions pyproject.toml allows.
CONSTRAINTS := constraints.txt
PIN    ?= -c $(CONSTRAINTS) --build-constraint $(CONSTRAINTS)
LATEST_VENV := .venv-latest
GPUSIM := tests/vcsim/bin/gpusim
DEMO_STATE := .work/demo

GUEST_PACKAGES := $(shell sed -e 's/\#.*//' scripts/guest-test-packages.txt)

.PHONY: all venv gpusim demo test test-latest constraints test-unit test-sim test-go test-packaging guest-deps lint \
	typecheck mutation clean

all: venv gpusim

$(BIN)/vgpuctl: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip $(if $(PIN),-c $(CONSTRAINTS))
	$(BIN)/pip install -q $(PIN) -e '.[dev]'
	@touch $@

venv: $(BIN)/vgpuctl

gpusim:
	cd tests/vcsim && go build -o bin/gpusim .

# Build and start the simulator, apply the example inventory, show the result, stop the simulator. As root the
# simulator's VMs also get guests (namespace guests: `vgpuctl sim up --guests`, after the guest tests' packages) and
# `provision -f inventory.sim-guests.yaml` runs in between; not as root, the demo says why it leaves provision out.
demo: venv gpusim
	@mkdir -p $(DEMO_STATE)
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory guest-deps; fi
	@set -e; export VGPUCTL_STATE_DIR=$(CURDIR)/$(DEMO_STATE); \
	  if [ "$$(id -u)" = 0 ]; then guests=--guests; else guests=; fi; \
	  $(BIN)/vgpuctl sim up $$guests > $(DEMO_STATE)/sim.env; \
	  trap '$(BIN)/vgpuctl sim down' EXIT; \
	  . $(DEMO_STATE)/sim.env; \
	  $(BIN)/vgpuctl plan -f inventory.example.yaml; \
	  $(BIN)/vgpuctl apply -f inventory.example.yaml --yes; \
	  if [ -n "$$guests" ]; then \
	    $(BIN)/vgpuctl provision -f inventory.sim-guests.yaml --yes --ip-poll 1; \
	  else \
	    echo "make demo: provision left out: the simulator's guests run in network namespaces, which needs root" \
	      "(sudo make demo shows it)"; \
	  fi; \
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

# `make test` on the newest versions pyproject.toml allows (what a fresh `pip install` gets today), in a fresh
# venv of their own; not part of `make test` or CI. Passing, `make constraints` makes them the lock.
test-latest:
	rm -rf $(LATEST_VENV)
	$(MAKE) test VENV=$(LATEST_VENV) PIN=

# constraints.txt from the venv test-latest made (its header kept)
constraints:
	@test -x $(LATEST_VENV)/bin/pip || { echo "make constraints: run make test-latest first"; exit 1; }
	grep '^#' $(CONSTRAINTS) > $(CONSTRAINTS).new
	$(LATEST_VENV)/bin/pip freeze --all --exclude-editable >> $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

clean:
	rm -rf $(VENV) $(LATEST_VENV) tests/vcsim/bin .pytest_cache .ruff_cache
