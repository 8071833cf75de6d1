"""The one set of Kubernetes client flags, for every command that talks to the API server.

Only ``argparse`` and ``os``: commands register their parsers without loading any client. The
values go to ``nodetopo.kube.config.cluster_access`` (THE loader) through
``nodetopo.kube.transport.connect``.
"""

from __future__ import annotations

import argparse
import os

HELP = (
    "kubeconfig file(s), joined by ':' as in $KUBECONFIG (default: the in-cluster service account, "
    "else $KUBECONFIG, else ~/.kube/config). Accepts what kubectl accepts: contexts, exec credential "
    "plugins (EKS, GKE, AKS), token/tokenFile, client certificates, username/password, impersonation, "
    "an http:// proxy-url (else $HTTPS_PROXY/$NO_PROXY)"
)


def add_kube_args(parser: argparse.ArgumentParser, *, kubeconfig_default: str | None = None) -> None:
    """``--kubeconfig`` and ``--context`` (env ``NODETOPO_KUBE_CONTEXT``), the same on every command."""
    parser.add_argument("--kubeconfig", default=kubeconfig_default, metavar="FILE", help=HELP)
    parser.add_argument(
        "--context",
        dest="kube_context",
        default=os.environ.get("NODETOPO_KUBE_CONTEXT") or None,
        metavar="NAME",
        help="the kubeconfig context to use (default: its current-context; env NODETOPO_KUBE_CONTEXT)",
    )
