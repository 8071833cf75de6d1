"""The Helm chart (``charts/nodetopo``) and the real ``helm`` CLI built by ``tests/cluster-helm/build.sh``.

``helm_binary()`` builds helm from its Go module (cached; ``NODETOPO_HELM_BIN`` names a prebuilt one)
and raises ``HelmError`` naming what is missing, so a test that needs it fails rather than skips.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kube.cluster import run_build_script

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "nodetopo"
BUILD_SCRIPT = REPO / "tests" / "cluster-helm" / "build.sh"
KUBE_VERSION = "1.34.0"  # what tests/cluster builds; `helm template` has no cluster to ask

# Labels and annotations that Helm (not the manifests) adds: dropped before comparing with deploy/.
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)
HELM_ANNOTATIONS = frozenset({"helm.sh/resource-policy"})


class HelmError(RuntimeError):
    pass


@functools.cache
def helm_binary() -> Path:
    override = os.environ.get("NODETOPO_HELM_BIN")
    if override:
        binary = Path(override)
    else:
        binary = run_build_script(BUILD_SCRIPT, "the chart tests need a real helm", HelmError) / "helm"
    if not os.access(binary, os.X_OK):
        raise HelmError(f"{binary} is missing or not executable (the chart tests need a real helm)")
    return binary


def helm(
    *args: str, env: Mapping[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(helm_binary()), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    if check and done.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return done


def template(
    release: str = "nodetopo",
    namespace: str = "nodetopo",
    *,
    values: Sequence[str] = (),
    check: bool = True,
    tests: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart; ``values`` are extra helm arguments (``--set k=v``, ``-f file``).
    Without ``tests`` the ``helm test`` hook pod is left out (``--skip-tests``): it is no object the
    release installs."""
    return helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        *(() if tests else ("--skip-tests",)),
        *values,
        check=check,
    )


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(release: str = "nodetopo", namespace: str = "nodetopo", *values: str) -> list[dict[str, Any]]:
    return documents(template(release, namespace, values=values).stdout)


def render_tests(
    release: str = "nodetopo", namespace: str = "nodetopo", *values: str
) -> list[dict[str, Any]]:
    """Only the ``helm test`` hooks of the chart rendered with ``values``."""
    return [
        d
        for d in documents(template(release, namespace, values=values, tests=True).stdout)
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"
    ]


def without_helm_metadata(
    obj: dict[str, Any], *, drop_labels: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """``obj`` less the labels and annotations Helm adds (and ``drop_labels``); empty maps removed."""
    obj = yaml.safe_load(yaml.safe_dump(obj))  # a deep copy
    meta = obj["metadata"]
    for field, drop in (("labels", HELM_LABELS | drop_labels), ("annotations", HELM_ANNOTATIONS)):
        kept = {k: v for k, v in (meta.get(field) or {}).items() if k not in drop}
        if kept:
            meta[field] = kept
        else:
            meta.pop(field, None)
    return dict(obj)


def squeeze_whitespace(value: Any) -> Any:
    """``value`` with every run of whitespace in its strings made one space. kustomize re-emits a
    folded (``>-``) scalar whose next line is more indented with an extra blank line: the same CEL
    expression to the API server, a different string to ``==``."""
    if isinstance(value, str):
        return re.sub(r"\s+", " ", value).strip()
    if isinstance(value, list):
        return [squeeze_whitespace(v) for v in value]
    if isinstance(value, dict):
        return {k: squeeze_whitespace(v) for k, v in value.items()}
    return value


def by_identity(docs: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for d in docs:
        key = (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
        assert key not in out, f"{key} rendered twice"
        out[key] = d
    return out
