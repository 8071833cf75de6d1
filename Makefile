# nodetopo developer commands. `make test` is THE test command (README, .ci/run).
PYTHON ?= python3

.PHONY: test lint typecheck unit cluster helm promtool nrt-scheduler node image bench fixtures

test: lint typecheck cluster helm promtool nrt-scheduler
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check nodetopo tests benchmarks
	$(PYTHON) -m ruff format --check nodetopo tests benchmarks
	lint-imports

typecheck:
	$(PYTHON) -m mypy

# Build (or find cached) kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet and etcd.
cluster:
	tests/cluster/build.sh

# Build (or find cached) the helm CLI for the chart tests (charts/nodetopo), from its own Go module.
helm:
	tests/cluster-helm/build.sh

# Build (or find cached) promtool for the runtime-acceptance rule and dashboard tests (deploy/monitoring),
# from its own Go module; before pytest, so that a cold build does not count against a test's timeout.
promtool:
	tests/tools-promtool/build.sh

# Build (or find cached) kube-scheduler with the scheduler-plugins NodeResourceTopologyMatch plugin for the
# NodeResourceTopology e2e (tests/kube/test_noderesourcetopology_e2e.py), from its own Go module; after
# the control plane, whose compiled Kubernetes packages it shares, and before pytest.
nrt-scheduler: cluster
	tests/cluster-nrt/build.sh

# The real-node suite alone (root; containerd, runc, CNI plugins, mmdebstrap): kubelet + the image + deploy/.
node: cluster helm
	$(PYTHON) -m pytest -q tests/node

# The agent image without Docker or a registry (README "Deploy"); `docker build -t nodetopo:0.1.0 .` with one.
image:
	$(PYTHON) image/build_oci.py --out nodetopo.oci.tar

unit:
	$(PYTHON) -m pytest -q -m "not k8s"

fixtures:
	$(PYTHON) tests/fixtures/gen_bundle.py

bench:
	$(PYTHON) benchmarks/run.py
