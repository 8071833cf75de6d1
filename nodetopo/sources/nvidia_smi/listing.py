"""``nvidia-smi -L``: the GPUs by index, each with the MIG devices listed under it."""

from __future__ import annotations

import dataclasses
import re

from nodetopo import model
from nodetopo.errors import ParseError, excerpt
from nodetopo.sources.nvidia_smi._text import NAME, _nonblank_lines

LIST_PATH = "nvidia-smi -L"

_GPU_LINE = re.compile(r"GPU ([0-9]{1,4}): (.*\S) \(UUID: (GPU-[0-9A-Za-z-]{1,80})\)")
#: ``  MIG 3g.40gb     Device  0: (UUID: MIG-<uuid>)``; drivers before R470 print ``MIG-GPU-<uuid>/<gi>/<ci>``
_MIG_LINE = re.compile(
    r"MIG (\S{1,40})\s+Device\s+([0-9]{1,4}): "
    r"\(UUID: (MIG-[0-9A-Za-z-]{1,80}(?:/([0-9]{1,4})/([0-9]{1,4}))?)\)"
)
#: a GPU nvidia-smi could not open; printed instead of its line (``collect`` reports it as Degraded)
_UNREADABLE_GPU = re.compile(r"Unable to determine the device handle for .*")


def _read_smi_list(text: str, path: str) -> tuple[tuple[model.ListedGpu, ...], list[str]]:
    gpus: list[model.ListedGpu] = []
    migs: list[list[model.MigDevice]] = []  #: the MIG devices of gpus[i], joined at the end (linear)
    seen: set[int] = set()  #: GPU indices
    seen_migs: set[tuple[int, int]] = set()  #: (GPU index, MIG device index)
    problems: list[str] = []
    for number, line, stripped in _nonblank_lines(text):
        gpu = _GPU_LINE.fullmatch(stripped)
        if gpu is not None and not line[0].isspace():
            index = int(gpu[1])
            if index in seen:
                raise ParseError(NAME, path, f"GPU {index} is listed twice", line=number)
            seen.add(index)
            gpus.append(model.ListedGpu(index=index, model=gpu[2], uuid=gpu[3]))
            migs.append([])
            continue
        mig = _MIG_LINE.fullmatch(stripped)
        if mig is not None:
            if not gpus:
                raise ParseError(NAME, path, "a MIG device before any GPU line", line=number)
            parent = gpus[-1]
            device = model.MigDevice(
                uuid=mig[3],
                parent_uuid=parent.uuid,
                parent_index=parent.index,
                profile=mig[1],
                device_index=int(mig[2]),
                gpu_instance=int(mig[4]) if mig[4] is not None else None,
                compute_instance=int(mig[5]) if mig[5] is not None else None,
            )
            if (parent.index, int(mig[2])) in seen_migs:
                raise ParseError(
                    NAME, path, f"GPU {parent.index} lists MIG Device {mig[2]} twice", line=number
                )
            seen_migs.add((parent.index, int(mig[2])))
            migs[-1].append(device)
            continue
        if _UNREADABLE_GPU.fullmatch(stripped):
            problems.append(stripped)
            continue
        raise ParseError(
            NAME,
            path,
            f"expected 'GPU n: <model> (UUID: GPU-...)' or a MIG line, got {excerpt(stripped)}",
            line=number,
        )
    joined = (
        dataclasses.replace(gpu, migs=tuple(found)) if found else gpu
        for gpu, found in zip(gpus, migs, strict=True)
    )
    return tuple(sorted(joined, key=lambda gpu: gpu.index)), problems


def parse_smi_list(text: str, path: str = LIST_PATH) -> tuple[model.ListedGpu, ...]:
    """Parse ``nvidia-smi -L``: GPUs by index, each with the MIG devices listed under it.

    Inside a container or Slurm job the indices are the job's (re-indexed), not the host's; the UUIDs
    are the stable identity.
    """
    return _read_smi_list(text, path)[0]
