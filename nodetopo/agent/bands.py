"""The bands the agent exports: the bandwidth model's expectation for this node's own topology.

Two quantities, for an all-reduce at large sizes (``nodetopo.expect``: the capacity graph of the
node, the min cut of each algorithm NCCL may pick, the calibrated efficiency bands):

* ``busbw``: the bus bandwidth nccl-tests would report, per NVLink island (an all-reduce over the
  island's GPUs) and for the whole node (over every GPU). The band spans every algorithm NCCL may
  pick (Ring, and NVLS on an NVSwitch that supports it).
* ``nvlink_tx``: what each GPU of an island sends over its NVLinks meanwhile: the quantity the DCGM
  exporter's ``DCGM_FI_PROF_NVLINK_TX_BYTES`` measures. Under Ring each GPU sends 2(n-1)/n of the
  buffer per operation, which is the bus bandwidth's definition: send rate = busbw. Under NVLS each
  GPU pushes its buffer into the switch once: send rate = algbw = busbw × n / (2(n-1)). The band is
  the union of both, so a healthy job under either algorithm is inside it.

An unknown fact gives no band, never a guessed or zero one: a GPU model the model's table does not
know (its NVLink and PCIe rates would be guesses), a GPU without a known NVLink rate in an island, a
cut through the CPU interconnect (the CPU model is not published), a placement the model refuses
(MIG, a link that carries nothing). Pure: the loop calls it when the topology changes.
"""

from __future__ import annotations

import dataclasses
import logging

from nodetopo.agent.metrics import ExpectedBand
from nodetopo.expect import Algorithm, Expectation, ExpectError, LinkKind, Placement, expect
from nodetopo.expect.hardware import gpu_spec
from nodetopo.model import Topology

log = logging.getLogger(__name__)

COLLECTIVE = "all_reduce"
GB = 1e9


def _known(topology: Topology, gpus: tuple[int, ...], *, nvlink: bool) -> str | None:
    """Why the model would guess for these GPUs (None: every rate it uses is known)."""
    by_index = {g.index: g for g in topology.gpus}
    for i in gpus:
        g = by_index.get(i)
        if g is None:
            return f"GPU {i} is not in the topology"
        spec = gpu_spec(g.model)
        if spec is None:
            return f"GPU {i}: model {g.model or 'unknown'} is not in the bandwidth model's table"
        if nvlink and not spec.nvlink_gbs_per_link:
            return f"GPU {i}: model {g.model} has no known NVLink rate"
    return None


def _guessed(e: Expectation) -> str | None:
    """Why a computed expectation rests on an assumed rate the node does not publish."""
    for b in e.bounds:
        for link in b.limiting:
            if link.kind is LinkKind.SMP and link.capacity < 1e6:
                return f"{b.algorithm} is bound by the CPU interconnect, whose rate is not published"
    return None


def _expectation(topology: Topology, node: str, gpus: tuple[int, ...], *, nvlink: bool) -> Expectation | None:
    why = _known(topology, gpus, nvlink=nvlink)
    if why is None:
        try:
            e = expect([Placement(node=node or "node", topology=topology, gpus=gpus)], COLLECTIVE)
        except ExpectError as err:
            why = str(err)
        else:
            why = _guessed(e)
            if why is None:
                return e
    log.debug("no band for GPUs %s: %s", ",".join(map(str, gpus)), why)
    return None


def _send_factor(algorithm: Algorithm, ranks: int) -> float:
    """A GPU's send rate over the bus bandwidth, under ``algorithm`` for ``ranks`` GPUs."""
    if algorithm in (Algorithm.NVLS, Algorithm.NVLS_TREE):
        return ranks / (2 * (ranks - 1))
    return 1.0


def expected_bands(topology: Topology, node: str) -> tuple[ExpectedBand, ...]:
    """The busbw band of every NVLink island and of the node, and each island's per-GPU NVLink send
    band, in bytes per second (what the model cannot judge is left out)."""
    out: list[ExpectedBand] = []
    for island in sorted(topology.nvlink_islands, key=lambda i: i.id):
        if len(island.gpus) < 2 or island.links_per_pair < 1:
            continue
        e = _expectation(topology, node, island.gpus, nvlink=True)
        if e is None:
            continue
        out.append(
            ExpectedBand(
                scope="island",
                island=island.id,
                collective=COLLECTIVE,
                lower_bytes_per_second=e.band.low * GB,
                upper_bytes_per_second=e.band.high * GB,
            )
        )
        factors = [(b, _send_factor(b.algorithm, e.ranks)) for b in e.bounds]
        out.append(
            ExpectedBand(
                scope="island",
                island=island.id,
                collective=COLLECTIVE,
                quantity="nvlink_tx",
                lower_bytes_per_second=min(b.band.low * f for b, f in factors) * GB,
                upper_bytes_per_second=max(b.band.high * f for b, f in factors) * GB,
            )
        )
    every = tuple(sorted(g.index for g in topology.gpus))
    if len(every) >= 2:
        e = _expectation(topology, node, every, nvlink=False)
        if e is not None:
            out.append(
                ExpectedBand(
                    scope="node",
                    collective=COLLECTIVE,
                    lower_bytes_per_second=e.band.low * GB,
                    upper_bytes_per_second=e.band.high * GB,
                )
            )
    return tuple(out)


@dataclasses.dataclass(slots=True)
class BandCache:
    """``expected_bands`` of the latest topology, computed again only when what the model reads
    changes (not on every scan, never on a scrape)."""

    node: str
    _key: tuple[object, ...] | None = None
    _bands: tuple[ExpectedBand, ...] = ()
    computed: int = 0  #: how many times the model ran

    def bands(self, topology: Topology) -> tuple[ExpectedBand, ...]:
        key = (
            topology.gpus,
            topology.nics,
            topology.nvlink_islands,
            topology.gpu_links,
            topology.gpu_nic_distances,
            topology.numa_nodes,
            topology.fabric,
        )
        if key != self._key:
            try:
                self._bands = expected_bands(topology, self.node)
            except Exception:  # a model bug must not stop the publish: no band, said in the log
                log.exception("the bandwidth model failed on this topology; no expected bands")
                self._bands = ()
            self._key = key
            self.computed += 1
        return self._bands
