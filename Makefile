# PCN Lab: the README's commands. `make` alone lists them. Targets that run experiments or tests run
# `make deps` first; `doctor` and `clean` only look and clean, and never install anything.
VENV    := .venv
PY      := $(VENV)/bin/python
PCNLAB  := $(VENV)/bin/pcnlab
SUDO    := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
PYTEST_ARGS ?=
NEED_VENV = $(if $(wildcard $(PCNLAB)),,$(error $(PCNLAB) is missing (no .venv here yet): run `make deps` first))

.DEFAULT_GOAL := help
.PHONY: help deps test run p4 doctor clean up ssh bench image

help:  ## this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  make %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps:  ## install what is missing: Debian packages, p4c + BMv2, the .venv (idempotent)
	@bash scripts/deps.sh

test: deps  ## the test suite (real Mininet, BMv2, packets; root via sudo)
	$(SUDO) $(PY) -m pytest $(PYTEST_ARGS)

run: deps  ## run experiments/smoke.yaml (ecn vs pcn, about two minutes)
	$(SUDO) $(PCNLAB) run experiments/smoke.yaml

p4: deps  ## compile p4src/ into p4src/build/
	$(PCNLAB) p4

image: deps  ## the default worker image for jobs with image: (containers/Containerfile; no image registry needed)
	$(SUDO) bash scripts/image.sh

doctor:  ## what this machine has and lacks, with the command that fixes each (installs nothing)
	$(NEED_VENV)
	$(SUDO) $(PCNLAB) doctor

clean:  ## remove exactly what dead runs left behind (installs nothing)
	$(NEED_VENV)
	$(SUDO) $(PCNLAB) clean

bench: deps  ## the benchmarks in bench/
	$(PY) bench/bench_predictor.py
	$(PY) bench/bench_compression_efficiency.py
	$(SUDO) $(PY) bench/bench_dataplane.py
	$(SUDO) $(PY) bench/bench_arm_latency.py
	$(SUDO) $(PY) -m pytest bench/bench_workloads_test.py -p no:cacheprovider -q -s

up:  ## the Vagrant VM (Ubuntu 24.04), provisioned by make deps
	vagrant up

ssh:  ## a shell in the VM, in the project folder
	vagrant ssh -c 'cd /vagrant && exec bash -l'
