"""The parser of nccl-tests' JSON output (``-J``, nccl-tests 2.17 and later) into the same
``NcclOutput`` as the text parser. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from nodetopo.errors import ParseError, excerpt
from nodetopo.jsonread import load_json
from nodetopo.perf.nccl import SOURCE, NcclHalf, NcclHeader, NcclOutput, NcclRank, NcclRow

# --------------------------------------------------------------------------------------------
# JSON (``-J FILE``, nccl-tests 2.17 and later; layout of ``JSON_FILE_VERSION`` 3 in src/util.cu)
# --------------------------------------------------------------------------------------------

#: the JSON file nccl-tests writes is small (one record per size); refuse anything absurd
MAX_JSON_CHARS = 64 << 20


def _jfloat(value: Any, path: str, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ParseError(SOURCE, path, f"{what}: expected a number, got a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    raise ParseError(SOURCE, path, f"{what}: expected a number, got {excerpt(repr(value))}")


def _jhalf(body: Any, path: str, what: str) -> NcclHalf | None:
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise ParseError(SOURCE, path, f"{what}: expected an object")
    wrong = _jfloat(body.get("nwrong"), path, f"{what}.nwrong")
    if wrong is not None and (not math.isfinite(wrong) or wrong < 0 or wrong != int(wrong)):
        raise ParseError(SOURCE, path, f"{what}.nwrong: {wrong} is not a count")
    time = body.get("time", body.get("cpu_time"))
    return NcclHalf(
        time_us=_jfloat(time, path, f"{what}.time"),
        algbw=_jfloat(body.get("alg_bw"), path, f"{what}.alg_bw"),
        busbw=_jfloat(body.get("bus_bw"), path, f"{what}.bus_bw"),
        wrong=int(wrong) if wrong is not None else None,
    )


def _with_iter(half: NcclHalf | None, body: Any, path: str, what: str) -> NcclHalf | None:
    if half is None or not isinstance(body, Mapping):
        return half
    return dataclasses.replace(
        half,
        i_min_us=_jfloat(body.get("min_us"), path, f"{what}.min_us"),
        i_max_us=_jfloat(body.get("max_us"), path, f"{what}.max_us"),
        i_p99_us=_jfloat(body.get("p99_us"), path, f"{what}.p99_us"),
        i_cv_pct=_jfloat(body.get("cv_pct"), path, f"{what}.cv_pct"),
    )


def _version_text(code: Any) -> str | None:
    """NCCL's version code (22807) as ``2.28.7``."""
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def parse_nccl_json(text: str, path: str = "-") -> NcclOutput:
    """Parse the JSON report nccl-tests writes with ``-J FILE``."""
    doc = load_json(text, source=SOURCE, path=path, max_chars=MAX_JSON_CHARS)
    if not isinstance(doc, Mapping) or "results" not in doc:
        raise ParseError(SOURCE, path, "not an nccl-tests JSON report (no 'results')")
    args = doc.get("args") or []
    program = None
    if isinstance(args, list) and args and isinstance(args[0], str):
        program = args[0].rsplit("/", 1)[-1]
    env: list[tuple[str, str]] = []
    for item in doc.get("env") or []:
        if isinstance(item, str) and item.startswith("NCCL_") and "=" in item:
            key, _, value = item.partition("=")
            env.append((key, value))
    config = doc.get("config") if isinstance(doc.get("config"), Mapping) else {}
    assert isinstance(config, Mapping)
    ranks = []
    for i, d in enumerate(config.get("devices") or []):
        if not isinstance(d, Mapping):
            raise ParseError(SOURCE, path, f"config.devices[{i}]: expected an object")
        try:
            ranks.append(
                NcclRank(
                    rank=int(d["rank"]),
                    group=int(d["group"]) if d.get("group") is not None else None,
                    pid=int(d["pid"]) if d.get("pid") is not None else None,
                    host=str(d.get("hostname") or "?"),
                    device=int(d["device"]),
                    bus_id=str(d["device_hex"]) if d.get("device_hex") else None,
                    model=str(d["device_info"]) if d.get("device_info") else None,
                )
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ParseError(SOURCE, path, f"config.devices[{i}]: {e}") from None
    rows = []
    results = doc.get("results")
    if not isinstance(results, list):
        raise ParseError(SOURCE, path, "results: expected a list")
    for i, r in enumerate(results):
        what = f"results[{i}]"
        if not isinstance(r, Mapping):
            raise ParseError(SOURCE, path, f"{what}: expected an object")
        try:
            size, count = int(r["size"]), int(r["count"])
        except (KeyError, TypeError, ValueError):
            raise ParseError(SOURCE, path, f"{what}: no integer size and count") from None
        root_text = str(r.get("root", "")).strip()
        oop = _with_iter(
            _jhalf(r.get("out_of_place"), path, f"{what}.out_of_place"),
            r.get("out_of_place_per_iter"),
            path,
            f"{what}.out_of_place_per_iter",
        )
        ip = _with_iter(
            _jhalf(r.get("in_place"), path, f"{what}.in_place"),
            r.get("in_place_per_iter"),
            path,
            f"{what}.in_place_per_iter",
        )
        rows.append(
            NcclRow(
                line=None,
                size=size,
                count=count,
                type=str(r["type"]) if r.get("type") is not None else None,
                redop=str(r["redop"]) if r.get("redop") is not None else None,
                root=int(root_text) if re.fullmatch(r"-?\d{1,9}", root_text) else None,
                out_of_place=oop,
                in_place=ip,
            )
        )
    oob_body = doc.get("out_of_bounds")
    oob: tuple[tuple[int, bool | None], ...] = ()
    if isinstance(oob_body, Mapping) and isinstance(oob_body.get("count"), int):
        okay = oob_body.get("okay")  # written as the string "true"/"false" (jsonBool in src/util.cu)
        flag = okay if isinstance(okay, bool) else {"true": True, "false": False}.get(str(okay))
        oob = ((int(oob_body["count"]), flag),)
    avg_body = doc.get("average_bus_bandwidth")
    avg: tuple[float, ...] = ()
    if isinstance(avg_body, Mapping):
        mean = _jfloat(avg_body.get("bandwidth"), path, "average_bus_bandwidth.bandwidth")
        avg = (mean,) if mean is not None else ()
    header = NcclHeader(
        line=0,
        threads=config.get("nthreads") if isinstance(config.get("nthreads"), int) else None,
        gpus_per_thread=config.get("ngpus") if isinstance(config.get("ngpus"), int) else None,
        min_bytes=config.get("minimum_bytes") if isinstance(config.get("minimum_bytes"), int) else None,
        max_bytes=config.get("maximum_bytes") if isinstance(config.get("maximum_bytes"), int) else None,
        iterations=config.get("iterations") if isinstance(config.get("iterations"), int) else None,
        warmup_iterations=config.get("warmup_iters") if isinstance(config.get("warmup_iters"), int) else None,
        validation=bool(config["validation"]) if isinstance(config.get("validation"), int) else None,
    )
    per_iter = any(
        h is not None and h.i_min_us is not None for row in rows for h in (row.out_of_place, row.in_place)
    )
    return NcclOutput(
        source=path,
        program=program,
        nccl_version=_version_text(doc.get("nccl_version")),
        headers=(header,) if config else (),
        ranks=tuple(ranks),
        tables=1,
        per_iteration=per_iter,
        rows=tuple(rows),
        out_of_bounds=oob,
        avg_busbw=avg,
        concluded=1 if avg else 0,
        env=tuple(env),
    )
