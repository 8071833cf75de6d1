"""``HostRoot.open_link_directory``: the kernel-resolved fast path of a PCI entry gives exactly what
``HostRoot.resolve`` gives, and declines (None) every case where it could not; the PCI source then
takes ``resolve`` with its answers and errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sysfs_trees import Link, pci_function, write_tree

from nodetopo.host import HostRoot
from nodetopo.model import ConditionReason
from nodetopo.sources import pci, rdma

ENTRY = "sys/bus/pci/devices/0000:3b:00.0"
DEVICE = "sys/devices/pci0000:00/0000:3b:00.0"


def _opened(root: HostRoot, link: Path) -> str | None:
    """The real path the fast path opened (its descriptor closed), None when it declined."""
    opened = root.open_link_directory(os.fspath(link))
    if opened is None:
        return None
    fd, real = opened
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(real))
    finally:
        os.close(fd)
    return real


def test_a_sysfs_link_is_opened_where_resolve_goes(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "root", pci_function("0000:3b:00.0"))
    entry = root.path / ENTRY
    assert _opened(root, entry) == os.fspath(root.resolve(entry))


def test_a_root_reached_through_a_symlink_still_gives_real_paths(tmp_path: Path) -> None:
    write_tree(tmp_path / "real-root", pci_function("0000:3b:00.0"))
    (tmp_path / "alias").symlink_to("real-root")
    root = HostRoot(tmp_path / "alias")
    entry = root.path / ENTRY
    assert (
        _opened(root, entry) == os.fspath(root.resolve(entry)) == os.fspath(tmp_path / "real-root" / DEVICE)
    )


@pytest.mark.parametrize(
    "how",
    [
        "absolute link",  # resolve re-roots it under the root: never followed by the kernel
        "relative link to an absolute link",  # a chain: one hop at a time in resolve
        "relative link to a relative link",
        "dangling link",
        "link loop",
        "plain directory",
        "link to a file",
        "link out of the root",
        "absent",
    ],
)
def test_declines_what_only_resolve_answers(tmp_path: Path, how: str) -> None:
    entries = pci_function("0000:3b:00.0")
    (tmp_path / "outside" / "0000:3b:00.0").mkdir(parents=True)
    # an absolute target the kernel would find inside the root, where resolve re-roots it elsewhere
    absolute = os.fspath(tmp_path / "root" / DEVICE)
    if how == "absolute link":
        entries[ENTRY] = Link(absolute)
    elif how == "relative link to an absolute link":
        entries[ENTRY] = Link("hop")
        entries["sys/bus/pci/devices/hop"] = Link(absolute)
    elif how == "relative link to a relative link":
        entries[ENTRY] = Link("hop")
        entries["sys/bus/pci/devices/hop"] = Link(f"../../../{DEVICE}")
    elif how == "dangling link":
        entries[ENTRY] = Link("../../../devices/pci0000:00/nowhere")
    elif how == "link loop":
        entries[ENTRY] = Link("0000:3b:00.0")
    elif how == "plain directory":
        del entries[ENTRY]
        entries[f"{ENTRY}/vendor"] = "0x15b3\n"
    elif how == "link to a file":
        entries[ENTRY] = Link(f"../../../{DEVICE}/vendor")
    elif how == "link out of the root":
        entries[ENTRY] = Link("../../../../../outside/0000:3b:00.0")
    elif how == "absent":
        del entries[ENTRY]
    root = write_tree(tmp_path / "root", entries)
    assert _opened(root, root.path / ENTRY) is None


def test_an_absolute_link_behind_a_relative_one_is_read_inside_the_capture(tmp_path: Path) -> None:
    """The kernel would follow the second hop to this machine's own /sys: the fast path declines and
    resolve re-roots it, so the attributes come from the capture."""
    entries = pci_function("0000:3b:00.0")
    entries[ENTRY] = Link("hop")
    entries["sys/bus/pci/devices/hop"] = Link(f"/{DEVICE}")
    root = write_tree(tmp_path, entries)
    devices, conditions = pci.read_pci_devices(root)
    assert [c.message for c in conditions if "0000:3b:00.0" in c.message] == []
    assert (devices[0].vendor, devices[0].root) == (0x15B3, "pci0000:00")


@pytest.mark.parametrize(
    ("link", "why"),
    [
        (Link("../../../devices/pci0000:00/nowhere"), "dangling symlink"),
        (Link("0000:3b:00.0"), "cannot resolve"),
        (Link("../../../../../outside/0000:3b:00.0"), "outside the host root"),
        (Link("../../../devices/pci0000:00/0000:3c:00.0/vendor"), "not a device directory"),
    ],
)
def test_declined_entries_keep_resolves_conditions(tmp_path: Path, link: Link, why: str) -> None:
    (tmp_path / "outside" / "0000:3b:00.0").mkdir(parents=True)
    entries = pci_function("0000:3c:00.0")
    entries[ENTRY] = link
    root = write_tree(tmp_path / "root", entries)
    devices, conditions = pci.read_pci_devices(root)
    assert [str(d.address) for d in devices] == ["0000:3c:00.0"]
    assert [c.reason for c in conditions] == [ConditionReason.UNAVAILABLE]
    assert why in conditions[0].message and "0000:3b:00.0" in conditions[0].message


# --- the RDMA source's device links take the same fast path ----------------------------------------

HCA = "sys/devices/pci0000:00/0000:3b:00.0/infiniband/mlx5_0"
NETDEV = "sys/devices/pci0000:00/0000:3b:00.0/net/ibp59s0"


def _hca_tree(tmp_path: Path, device_link: str, net_device_link: str) -> HostRoot:
    return write_tree(
        tmp_path / "root",
        {
            "sys/class/infiniband/mlx5_0": Link("../../devices/pci0000:00/0000:3b:00.0/infiniband/mlx5_0"),
            f"{HCA}/device": Link(device_link),
            f"{HCA}/hca_type": "MT4129\n",
            f"{HCA}/ports/1/link_layer": "InfiniBand\n",
            f"{HCA}/ports/1/gids/0": "fe80:0000:0000:0000:a088:c203:0012:3457\n",
            "sys/class/net/ibp59s0": Link("../../devices/pci0000:00/0000:3b:00.0/net/ibp59s0"),
            f"{NETDEV}/device": Link(net_device_link),
            f"{NETDEV}/operstate": "up\n",
            "sys/devices/pci0000:00/0000:3b:00.0/vendor": "0x15b3\n",
        },
    )


def test_rdma_relative_and_absolute_device_links_give_the_same_address(tmp_path: Path) -> None:
    """Relative links are resolved by the kernel; absolute ones are re-rooted under the capture."""
    relative = _hca_tree(tmp_path / "relative", "../../../0000:3b:00.0", "../../../0000:3b:00.0")
    absolute = _hca_tree(
        tmp_path / "absolute", "/sys/devices/pci0000:00/0000:3b:00.0", "/sys/devices/pci0000:00/0000:3b:00.0"
    )
    for root in (relative, absolute):
        devices, conditions = rdma.read_rdma_devices(root)
        nets, net_conditions = rdma.read_net_devices(root)
        assert conditions == net_conditions == ()
        assert str(devices[0].address) == str(nets[0].address) == "0000:3b:00.0"
        assert devices[0].ports[0].port_guid == "0xa088c20300123457"
        assert (devices[0].hca_type, nets[0].operstate) == ("MT4129", "up")


def test_rdma_device_links_out_of_the_root_or_dangling_keep_their_conditions(tmp_path: Path) -> None:
    (tmp_path / "outside" / "0000:3b:00.0").mkdir(parents=True)
    root = _hca_tree(tmp_path, "../../../../../../../outside/0000:3b:00.0", "../../../0000:99:00.0")
    devices, conditions = rdma.read_rdma_devices(root)
    nets, net_conditions = rdma.read_net_devices(root)
    assert devices[0].address is None and nets == ()
    assert [c.reason for c in (*conditions, *net_conditions)] == [ConditionReason.UNAVAILABLE] * 2
    assert "outside the host root" in conditions[0].message
    assert net_conditions[0].message == "/sys/class/net/ibp59s0/device: dangling symlink"


def test_an_absolute_link_reads_its_driver_and_missing_files_inside_the_capture(tmp_path: Path) -> None:
    """The driver link and the "missing" check are read in the re-rooted directory too, never in this
    machine's /sys (0000:00:00.0 exists on most machines, with a driver or without)."""
    address = "0000:00:00.0"
    entries = pci_function(address)
    device = f"sys/devices/pci0000:00/{address}"
    entries[f"sys/bus/pci/devices/{address}"] = Link(f"/{device}")
    entries[f"{device}/driver"] = Link("../../../bus/pci/drivers/nodetopo-test-driver")
    del entries[f"{device}/class"]
    root = write_tree(tmp_path, entries)
    devices, conditions = pci.read_pci_devices(root)
    assert devices[0].driver == "nodetopo-test-driver"
    assert [c.message for c in conditions] == [
        f"/sys/bus/pci/devices/{address}/class: missing: reported as 0"
    ]


def test_a_root_that_is_not_there_resolves_by_name(tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to("not-yet")
    for path in (tmp_path / "absent", tmp_path / "alias", tmp_path / "alias" / "below"):
        assert HostRoot(path).real_path == Path(os.path.realpath(path))


# --- sysfs.rdma lists ports/ and device/net/ and opens their entries through the parent's descriptor


def _hca_with_links(tmp_path: Path, links: dict[str, str]) -> HostRoot:
    """The HCA tree with ``ports/1`` and ``device/net/ibp59s0`` real directories, except those named in
    ``links`` (path under the HCA's PCI function -> link target), which are links to copies elsewhere."""
    function = "sys/devices/pci0000:00/0000:3b:00.0"
    entries: dict[str, str | Link] = {
        "sys/class/infiniband/mlx5_0": Link("../../devices/pci0000:00/0000:3b:00.0/infiniband/mlx5_0"),
        f"{HCA}/device": Link("../../../0000:3b:00.0"),
        f"{HCA}/hca_type": "MT4129\n",
    }
    files = {
        "infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
        "infiniband/mlx5_0/ports/2/state": "1: DOWN\n",
        "net/ibp59s0/dev_port": "1\n",
    }
    for name, text in files.items():
        entries[f"{function}/{name}"] = text
        entries[f"elsewhere/{name}"] = text  # the copy links point to (inside the root)
        entries[f"outside/{name}"] = text  # the copy out of the root (written beside it)
    for name, target in links.items():
        for entry in [e for e in entries if e.startswith(f"{function}/{name}/")]:
            del entries[entry]
        entries[f"{function}/{name}"] = Link(target)
    tree = write_tree(tmp_path, entries)
    os.rename(tmp_path / "outside", tmp_path.parent / f"{tmp_path.name}-outside")
    return tree


def _ports(root: HostRoot) -> list[tuple[int, str | None, tuple[str, ...]]]:
    devices, _ = rdma.read_rdma_devices(root)
    return [(p.number, p.state, p.netdevs) for p in devices[0].ports]


def test_rdma_plain_port_and_net_directories_are_read(tmp_path: Path) -> None:
    root = _hca_with_links(tmp_path / "root", {})
    assert _ports(root) == [(1, "ACTIVE", ()), (2, "DOWN", ("ibp59s0",))]
    assert rdma.read_rdma_devices(root)[1] == ()


@pytest.mark.parametrize(
    "name", ["infiniband/mlx5_0/ports", "infiniband/mlx5_0/ports/2", "net", "net/ibp59s0"]
)
def test_rdma_linked_port_and_net_directories_inside_the_root_are_followed(tmp_path: Path, name: str) -> None:
    """A link (not a plain directory) is read by its path as before: inside the root it is followed."""
    depth = "../" * (name.count("/") + 4)
    root = _hca_with_links(tmp_path / "root", {name: f"{depth}elsewhere/{name}"})
    assert _ports(root) == [(1, "ACTIVE", ()), (2, "DOWN", ("ibp59s0",))]
    assert rdma.read_rdma_devices(root)[1] == ()


@pytest.mark.parametrize("name", ["infiniband/mlx5_0/ports", "net"])
def test_rdma_port_and_net_directories_linked_out_of_the_root_are_unlisted(tmp_path: Path, name: str) -> None:
    depth = "../" * (name.count("/") + 5)
    root = _hca_with_links(tmp_path / "root", {name: f"{depth}root-outside/{name}"})
    expected = [] if name.endswith("ports") else [(1, "ACTIVE", ()), (2, "DOWN", ())]
    assert _ports(root) == expected


def test_rdma_a_port_linked_out_of_the_root_is_not_read_there(tmp_path: Path) -> None:
    name = "infiniband/mlx5_0/ports/2"
    root = _hca_with_links(tmp_path / "root", {name: f"{'../' * 8}root-outside/{name}"})
    devices, conditions = rdma.read_rdma_devices(root)
    assert [(p.number, p.state) for p in devices[0].ports] == [(1, "ACTIVE"), (2, None)]
    assert [c.reason for c in conditions] == [ConditionReason.UNAVAILABLE]
    message = "/sys/class/infiniband/mlx5_0/ports/2/state: cannot read: refused"
    assert conditions[0].message.startswith(message)
