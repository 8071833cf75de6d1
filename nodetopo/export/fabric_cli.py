"""``nodetopo fabric``: sweep the InfiniBand fabric once and write the map every agent reads."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from nodetopo.command.args import AddArguments, add_command
from nodetopo.command.output import output_help, write_output
from nodetopo.errors import BundleError, NodetopoError

HELP = "sweep the InfiniBand fabric once (or read a sweep) and write the fabric map agents read"
DESCRIPTION = """\
Run `ibnetdiscover` once (or read its saved output with --from) and write a fabric map: every host port
GUID -> its leaf switch and port, and each leaf's tier groups above. Put the map in a ConfigMap, mount it
in the DaemonSet and give the agents `--fabric-map` (env NODETOPO_FABRIC_MAP): they then learn their
leaf and tiers from their own port GUIDs, and no node sweeps the fabric.

examples:
  nodetopo fabric -o fabric-map.json                       sweep now (needs infiniband-diags, an HCA)
  nodetopo fabric --from ibnetdiscover.out --configmap nodetopo-fabric -n nodetopo | kubectl apply -f -
"""

DATA_KEY = "fabric-map.json"


def register(sub: Any, add_common: AddArguments, add_input: AddArguments) -> None:
    del add_input
    p = add_command(sub, "fabric", help=HELP, description=DESCRIPTION)
    p.add_argument(
        "--from",
        dest="source",
        metavar="FILE",
        help="saved `ibnetdiscover` (or `-p`) output (default: run ibnetdiscover here)",
    )
    p.add_argument("--ports", action="store_true", help="the input is `ibnetdiscover -p` (one line per port)")
    p.add_argument("--timeout", type=float, default=600.0, help="sweep timeout, s (default: %(default)s)")
    p.add_argument("--configmap", metavar="NAME", help="write a ConfigMap (YAML) holding the map")
    p.add_argument(
        "-n", "--namespace", default="nodetopo", help="the ConfigMap's namespace (default: %(default)s)"
    )
    p.add_argument("-o", "--output", default="-", metavar="FILE", help=output_help("the map"))
    add_common(p)
    p.set_defaults(func=cmd_fabric)


def cmd_fabric(args: argparse.Namespace) -> int:
    from nodetopo import fabric as ib
    from nodetopo.host import CommandNotFound, CommandTimeout, SubprocessRunner

    if args.source:
        try:
            text = Path(args.source).read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise BundleError(f"{args.source}: {e.strerror or e}") from e
        where = args.source
    else:
        argv = ("ibnetdiscover", "-p") if args.ports else ("ibnetdiscover",)
        try:
            result = SubprocessRunner().run(argv, timeout=args.timeout)
        except CommandNotFound as e:
            raise NodetopoError("ibnetdiscover is not installed (infiniband-diags)") from e
        except CommandTimeout as e:
            raise NodetopoError(str(e)) from e
        if result.returncode != 0 and not result.stdout.strip():
            raise NodetopoError(f"ibnetdiscover exited {result.returncode}: {result.stderr.strip()[:300]}")
        text, where = result.stdout, " ".join(argv)
    parse = ib.parse_ibnetdiscover_ports if args.ports else ib.parse_ibnetdiscover
    fabric = parse(text, where)
    fmap = ib.fabric_map(fabric)
    body = json.dumps(fmap, sort_keys=True, separators=(",", ":")) + "\n"
    if args.configmap:
        body = yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": args.configmap, "namespace": args.namespace},
                "data": {DATA_KEY: body},
            },
            sort_keys=False,
        )
    write_output(args.output, body)
    switches = fmap["switches"]
    assert isinstance(switches, dict)
    leaves = sum(1 for s in switches.values() if s["tier"] == 0)
    ports = fmap["ports"]
    assert isinstance(ports, dict)
    print(
        f"nodetopo fabric: {len(ports)} host port(s), {leaves} leaf switch(es), "
        f"{len(switches) - leaves} above; {len(fabric.skipped)} non-topology line(s) skipped",
        file=sys.stderr,
    )
    return 0
