# PCN Lab: the README's commands. Every target that needs the environment runs `make deps` first.
VENV    := .venv
PY      := $(VENV)/bin/python
PCNLAB  := $(VENV)/bin/pcnlab
SUDO    := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: deps test run p4 doctor clean up ssh bench

deps:
	@bash scripts/deps.sh

test: deps
	$(SUDO) $(PY) -m pytest $(PYTEST_ARGS)

run: deps
	$(SUDO) $(PCNLAB) run experiments/smoke.yaml

p4: deps
	$(PCNLAB) p4

doctor: deps
	$(SUDO) $(PCNLAB) doctor

clean: deps
	$(SUDO) $(PCNLAB) clean

bench: deps
	$(PY) bench/bench_predictor.py
	$(SUDO) $(PY) bench/bench_dataplane.py
	$(SUDO) $(PY) bench/bench_arm_latency.py
	$(SUDO) $(PY) -m pytest bench/bench_workloads_test.py -p no:cacheprovider -q -s

up:
	vagrant up

ssh:
	vagrant ssh -c 'cd /vagrant && exec bash -l'
