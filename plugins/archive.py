"""The krew archive of ``kubectl ntopo``: ``kubectl-ntopo`` (the launcher) and ``LICENSE``, as a
reproducible ``.tar.gz`` (fixed owner, mode and time), so ``plugins/ntopo.yaml`` can pin its sha256.

    python plugins/archive.py OUT.tar.gz     # writes the archive, prints its sha256
"""

from __future__ import annotations

import gzip
import hashlib
import io
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEMBERS = ((ROOT / "plugins" / "kubectl-ntopo", "kubectl-ntopo", 0o755), (ROOT / "LICENSE", "LICENSE", 0o644))


def archive_bytes() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, name, mode in MEMBERS:
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)


def main(argv: list[str]) -> int:
    data = archive_bytes()
    if argv:
        Path(argv[0]).write_bytes(data)
    print(hashlib.sha256(data).hexdigest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
