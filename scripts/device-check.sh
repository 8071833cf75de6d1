#!/usr/bin/env bash
# One short check of nodetopo on a machine with a real NVIDIA GPU (written for a lent H200, ~15 min).
#
#   OUT=/some/empty/dir scripts/device-check.sh      (the device runner sets $OUT; default: a temp dir)
#
# What it leaves under $OUT, to turn into a real fixture (tests/fixtures/<machine>/, tests/fixtures/nvml/):
#   raw/            nvidia-smi topo -m, -L, -q -x, -q, nvlink -s, topo -p2p r/n, lscpu, numactl -H (+ .rc/.stderr)
#   bundle/         `nodetopo capture` output (sys/, cmd/, nvml.json) when the CLI is there
#   nvml.json       dump_nvml(PynvmlApi()) called directly (always attempted)
#   source.txt      the NVML source's facts and conditions on the live host, and the replay check
#   discover.json   `nodetopo discover --from bundle -o json`
#   steps.txt       every step with ok / FAILED and its exit code
# No step is fatal: each failure is reported and the script goes on. It exits 1 when any step failed.
#
# Without network on the device, `pip install .` cannot fetch dependencies (it is given 120 s): the script
# then falls back to PYTHONPATH=<repo> (the NVML source needs only the stdlib and pynvml). pynvml is one
# pure-Python file; if the device lacks it, copy it beforehand into scripts/.device-deps/
# (python -c 'import pynvml; print(pynvml.__file__)') so that it travels with the working tree.
set -u

REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$(mktemp -d -t nodetopo-device-XXXXXX)}"
mkdir -p "$OUT/raw"
STEPS="$OUT/steps.txt"
: >"$STEPS"
FAILED=0
PY="${PYTHON:-python3}"

step() { # step NAME COMMAND...  (stdout/stderr go to the terminal; result to steps.txt)
    local name="$1" rc start
    shift
    echo "===== $name"
    start=$(date +%s)
    "$@"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "ok      $name ($(($(date +%s) - start))s)" | tee -a "$STEPS"
    else
        echo "FAILED  $name (rc=$rc, $(($(date +%s) - start))s)" | tee -a "$STEPS"
        FAILED=$((FAILED + 1))
    fi
    return 0
}

save() { # save FILE COMMAND...  (stdout to raw/FILE, stderr to raw/FILE.stderr, exit code to raw/FILE.rc)
    local file="$1" rc
    shift
    timeout 120 "$@" >"$OUT/raw/$file" 2>"$OUT/raw/$file.stderr"
    rc=$?
    echo "$rc" >"$OUT/raw/$file.rc"
    [ -s "$OUT/raw/$file.stderr" ] || rm -f "$OUT/raw/$file.stderr"
    return "$rc"
}

install_nodetopo() {
    cd "$REPO" || return 1
    if [ -d "$REPO/scripts/.device-deps" ]; then
        export PYTHONPATH="$REPO/scripts/.device-deps${PYTHONPATH:+:$PYTHONPATH}"
    fi
    # bounded: without network pip would otherwise retry its downloads for many minutes
    timeout 120 "$PY" -m pip install --quiet --retries 0 --timeout 10 . && return 0
    echo "pip install failed; using PYTHONPATH=$REPO"
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
    "$PY" -c 'import nodetopo.sources.nvml' || return 1
    return 2 # importable, but not installed: report it
}

nodetopo_cli() { "$PY" -m nodetopo "$@"; }

step "environment" sh -c "uname -a; $PY --version; nvidia-smi --version 2>&1 | head -5; \
    $PY -c 'import pynvml; print(\"pynvml\", pynvml.__file__)'"
step "install nodetopo" install_nodetopo

step "nvidia-smi topo -m" save nvidia-smi-topo-m.txt nvidia-smi topo -m
step "nvidia-smi -L" save nvidia-smi-L.txt nvidia-smi -L
step "nvidia-smi -q -x" save nvidia-smi-q.xml nvidia-smi -q -x
step "nvidia-smi -q" save nvidia-smi-q.txt nvidia-smi -q
step "nvidia-smi nvlink -s" save nvidia-smi-nvlink-s.txt nvidia-smi nvlink -s
step "nvidia-smi topo -p2p r" save nvidia-smi-topo-p2p-r.txt nvidia-smi topo -p2p r
step "nvidia-smi topo -p2p n" save nvidia-smi-topo-p2p-n.txt nvidia-smi topo -p2p n
step "lscpu" save lscpu.txt lscpu
step "numactl -H" save numactl-H.txt numactl -H

step "NVML dump (direct)" "$PY" - "$OUT/nvml.json" <<'PYEOF'
import json, sys, time
from nodetopo.sources.nvml import PynvmlApi, dump_nvml
start = time.monotonic()
with PynvmlApi() as api:
    dump = dump_nvml(api)
took = time.monotonic() - start
with open(sys.argv[1], "w") as f:
    json.dump(dump, f, indent=1)
    f.write("\n")
print(f"dump_nvml: {len(dump['devices'])} GPUs in {took:.3f}s; errors: {dump.get('errors')}")
for d in dump["devices"]:
    active = [l for l in d["nvlinks"] if l.get("active")]
    print(d["index"], d["name"], d["pciBusId"], "links", len(active), "of", len(d["nvlinks"]),
          {l.get("remoteType") for l in active}, "fabric", d["fabric"], "errors", d.get("errors"))
PYEOF

step "nodetopo capture" nodetopo_cli capture "$OUT/bundle"
if [ ! -f "$OUT/bundle/nvml.json" ] && [ -f "$OUT/nvml.json" ] && [ -d "$OUT/bundle" ]; then
    cp "$OUT/nvml.json" "$OUT/bundle/nvml.json" && echo "copied the direct NVML dump into the bundle"
fi
step "nodetopo discover --from bundle" sh -c "$PY -m nodetopo discover --from '$OUT/bundle' -o json >'$OUT/discover.json'"
step "nodetopo discover (live)" sh -c "$PY -m nodetopo discover -o table"

live_source() { # stdin: the Python below
    local rc
    "$PY" - "$OUT/nvml.json" >"$OUT/source.txt" 2>&1
    rc=$?
    cat "$OUT/source.txt"
    return "$rc"
}

step "NVML source (live) and replay check" live_source <<'PYEOF'
import sys, time
from nodetopo.host import HostRoot, SubprocessRunner
from nodetopo.model import format_cpulist
from nodetopo.sources import nvml
from nodetopo.sources.base import Context

start = time.monotonic()
result = nvml.collect(Context(root=HostRoot("/"), runner=SubprocessRunner()))
print(f"collect: {result.duration_s:.3f}s (wall {time.monotonic() - start:.3f}s), ok={result.ok}")
for status in result.facts.sources:
    print("status:", status)
for c in result.facts.conditions:
    print("condition:", c.reason.value, c.message)
snap = result.facts.nvml
failures = 0
if snap is None:
    print("no NVML snapshot")
    sys.exit(1)
print("driver", snap.driver_version)
for g in snap.gpus:
    remotes = sorted({(str(l.remote_address), l.remote_type.value) for l in g.links})
    print(f"GPU {g.index} {g.uuid} {g.model} {g.address} mem={g.memory_bytes} "
          f"cpus={format_cpulist(g.cpu_affinity) if g.cpu_affinity is not None else None} numa={g.numa_node} "
          f"mig={g.mig_current}/{g.mig_pending} links={len(g.links)} remotes={remotes} fabric={g.fabric} "
          f"migs={[(m.profile, m.gpu_instance, m.compute_instance) for m in g.migs]}")
for (a, b), cls in snap.common_ancestor:
    print(f"common ancestor GPU{a}-GPU{b}: {cls.name}")
try:
    replayed = nvml.RecordedNvml.from_json(sys.argv[1])
    again, _ = nvml.read_nvml(replayed)
    print("replay of nvml.json gives the live snapshot:", again == snap)
    import json
    same = nvml.dump_nvml(replayed) == json.load(open(sys.argv[1]))
    print("dump of the replay equals the dump:", same)
    failures += (again != snap) + (not same)
except Exception as e:  # report, do not stop
    print("replay check failed:", type(e).__name__, e)
    failures += 1
sys.exit(1 if failures else 0)
PYEOF

echo "===== summary ($OUT)"
cat "$STEPS"
find "$OUT" -maxdepth 2 -type f | sort | head -50
[ "$FAILED" -eq 0 ] || exit 1
exit 0
