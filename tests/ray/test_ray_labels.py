"""Ray labels and resources from NodeTopology objects of real-machine fixture bundles, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import BUNDLES
from helpers import nodetopology_of as body_of

from nodetopo.cli import main
from nodetopo.ray.labels import GPU_DOMAIN, labels_file_text, ray_labels, ray_resources, resources_json


def test_multi_node_nvlink_clique_is_the_gpu_domain() -> None:
    body = body_of("gh200-nvl")
    fabric = body["status"]["fabric"]
    labels = ray_labels(body)
    assert labels[GPU_DOMAIN] == f"{fabric['clusterUUID']}.{fabric['cliqueID']}"
    assert labels["nodetopo.io/nvlink.clique"] == labels[GPU_DOMAIN]
    assert ray_labels(body_of("gh200-nvl", "other-node"))[GPU_DOMAIN] == labels[GPU_DOMAIN]  # rack-wide


def test_node_local_island_is_the_gpu_domain_otherwise() -> None:
    labels = ray_labels(body_of("dgx-h100", "gpu-node-7"))
    assert labels[GPU_DOMAIN] == "gpu-node-7.nvl0"
    assert labels["nodetopo.io/gpu.count"] == "8"
    assert labels["nodetopo.io/nvlink.island-size"] == "8"
    assert labels["nodetopo.io/nvlink.nvswitch"] == "true"
    assert labels["nodetopo.io/gpu-nic.distance"] == "PIX"
    assert labels["nodetopo.io/node-name"] == "gpu-node-7"


def test_gpus_spanning_islands_have_no_domain_until_narrowed() -> None:
    body = body_of("pcie-4x-nvbridge", "pairs")
    assert GPU_DOMAIN not in ray_labels(body)
    second_pair = ray_labels(body, ["2", "3"])
    assert second_pair[GPU_DOMAIN] == "pairs.nvl1"
    assert second_pair["nodetopo.io/gpu.count"] == "2"
    uuid = body["status"]["gpus"][0]["uuid"]
    assert ray_labels(body, [uuid])["nodetopo.io/gpu.count"] == "1"
    with pytest.raises(ValueError, match="no GPU '9'"):
        ray_labels(body, ["9"])
    assert GPU_DOMAIN not in ray_labels(body_of("pcie-8x-2socket"))  # no NVLink at all


def test_resources() -> None:
    pairs = ray_resources(body_of("pcie-4x-nvbridge"))
    assert pairs == {"nodetopo.io/nvlink-island-2": 2.0, "nodetopo.io/rdma-nic": 2.0}
    assert ray_resources(body_of("pcie-4x-nvbridge"), ["0", "1", "2"]) == {
        "nodetopo.io/nvlink-island-2": 1.0,
        "nodetopo.io/rdma-nic": 2.0,
    }
    assert json.loads(resources_json(ray_resources(body_of("dgx-h100")))) == {
        "nodetopo.io/nvlink-island-8": 1,
        "nodetopo.io/rdma-nic": 10,
    }
    assert ray_resources(body_of("pcie-8x-2socket")) == {}


def test_every_label_is_valid_for_ray_and_kubernetes() -> None:
    label_utils = pytest.importorskip("ray._private.label_utils")
    for bundle in ("dgx-h100", "dgx-a100", "dgx1-v100", "pcie-4x-nvbridge", "a100-mig", "gh200-nvl"):
        labels = ray_labels(body_of(bundle))
        label_utils.validate_node_label_syntax(labels)
        assert yaml.safe_load(labels_file_text(labels)) == labels  # every value stays a string


def test_cli_from_bundle_and_from_a_nodetopology_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels_path, resources_path = tmp_path / "labels.yaml", tmp_path / "resources.json"
    argv = [
        "ray",
        "--from",
        str(BUNDLES / "dgx-h100"),
        "--node-name",
        "n1",
        "--labels-file",
        str(labels_path),
    ]
    assert main([*argv, "--resources-file", str(resources_path)]) == 0
    assert yaml.safe_load(labels_path.read_text())[GPU_DOMAIN] == "n1.nvl0"
    assert json.loads(resources_path.read_text())["nodetopo.io/nvlink-island-8"] == 1
    body_path = tmp_path / "ntopo.json"
    body_path.write_text(json.dumps(body_of("pcie-4x-nvbridge", "n2")))
    assert main(["ray", "--nodetopology", str(body_path), "--gpus", "0,1"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)[GPU_DOMAIN] == "n2.nvl0"
    assert main(["ray", "--nodetopology", str(body_path), "--gpus", "7"]) == 2


def test_gpus_visible_reads_the_gpus_the_container_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = body_of("pcie-4x-nvbridge", "n2")
    body_path = tmp_path / "ntopo.json"
    body_path.write_text(json.dumps(body))
    by_index = {g["index"]: g["uuid"] for g in body["status"]["gpus"]}
    argv = ["ray", "--nodetopology", str(body_path), "--gpus", "visible"]
    # the device plugin names the UUIDs of island 1 (GPUs 2 and 3): that island's domain, 2 GPUs
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", f"{by_index[2]},{by_index[3]}")
    assert main(argv) == 0
    labels = yaml.safe_load(capsys.readouterr().out)
    assert (labels[GPU_DOMAIN], labels["nodetopo.io/gpu.count"]) == ("n2.nvl1", "2")
    # node indices work too; `all` is the whole node (spanning both islands: no domain)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0,1")
    assert main(argv) == 0
    assert yaml.safe_load(capsys.readouterr().out)[GPU_DOMAIN] == "n2.nvl0"
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    assert main(argv) == 0
    labels = yaml.safe_load(capsys.readouterr().out)
    assert GPU_DOMAIN not in labels and labels["nodetopo.io/gpu.count"] == "4"
    # no GPU given, or not said: an error naming the variable, never the whole node's labels
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "void")
    assert main(argv) == 2
    assert "NVIDIA_VISIBLE_DEVICES='void': this container was given no GPU" in capsys.readouterr().err
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # the container's own numbering: not used
    assert main(argv) == 2
    assert "NVIDIA_VISIBLE_DEVICES is not set" in capsys.readouterr().err
