# vgpuctl developer entry points. `make demo` and `make test` work on a fresh machine with Go and Python 3.11.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
GPUSIM := tests/vcsim/bin/gpusim
DEMO_STATE := .work/demo

.PHONY: all venv gpusim demo test test-unit test-sim test-go lint clean

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

lint: venv
	$(BIN)/ruff check vgpuctl tests bench
	cd tests/vcsim && gofmt -l . | (! grep .) && go vet ./...

test-go:
	cd tests/vcsim && go vet ./... && go test ./...

test-unit: venv
	$(BIN)/pytest -m unit

test-sim: venv gpusim
	$(BIN)/pytest -m sim

# Everything but live tests: Go simulator tests, lint, then unit + sim + guests (guests need root; skipped otherwise).
test: venv gpusim lint test-go
	$(BIN)/pytest -m "not live"

clean:
	rm -rf $(VENV) tests/vcsim/bin .pytest_cache .ruff_cache
