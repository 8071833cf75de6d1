# nodetopo developer commands. `make test` is THE test command (README, .ci/run).
PYTHON ?= python3

.PHONY: test lint typecheck unit cluster bench fixtures

test: lint typecheck cluster
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check nodetopo tests benchmarks
	$(PYTHON) -m ruff format --check nodetopo tests benchmarks
	lint-imports

typecheck:
	$(PYTHON) -m mypy

# Build (or find cached) kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd.
cluster:
	tests/cluster/build.sh

unit:
	$(PYTHON) -m pytest -q -m "not k8s"

fixtures:
	$(PYTHON) tests/fixtures/gen_bundle.py

bench:
	$(PYTHON) benchmarks/run.py
