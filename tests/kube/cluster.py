"""A real Kubernetes control plane for the test suite: etcd + kube-apiserver (+ kube-controller-manager).

The binaries come from ``tests/cluster/build.sh`` (built from the official Go modules pinned in
``tests/cluster/go.mod`` and cached outside the repository). ``LocalCluster`` generates a CA, a
serving certificate and a service-account signing key with the ``cryptography`` package, writes a
static token file with a few test users, starts etcd and kube-apiserver on free loopback ports,
waits for ``/readyz`` and writes one kubeconfig per user. kube-controller-manager (garbage
collector, namespace and service-account controllers) is started on demand.

Every process runs in its own process group; ``stop()`` terminates the groups, then kills them.
``stop()`` is idempotent and is also registered with ``atexit`` so an interrupted session does not
leave servers behind.

Nothing here is pytest-specific: ``tests/kube/conftest.py`` wraps it in fixtures.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tests" / "cluster" / "build.sh"
CRDS = REPO / "crds"
SERVICE_CIDR = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"
BARRIER = "nodetopo-audit-barrier-"


class ClusterError(RuntimeError):
    """The test control plane could not be built or started. Tests must fail on it, never skip."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class User:
    """A static-token user of the test apiserver (``--token-auth-file``)."""

    name: str
    token: str
    groups: tuple[str, ...]


#: The users the token file defines. ``admin`` drives the tests; ``publisher`` is a second
#: ``system:masters`` identity used for nodetopo's own writes so the audit log can tell them apart;
#: ``other`` is a third actor (another controller, a human with kubectl); ``nobody`` is
#: authenticated but has no RBAC grant at all.
USER_GROUPS: dict[str, tuple[str, ...]] = {
    "admin": ("system:masters",),
    "publisher": ("system:masters",),
    "other": ("system:masters",),
    "nobody": (),
}


def run_build_script(script: Path, needed_by: str, error: type[RuntimeError] = ClusterError) -> Path:
    """Run a cached build script (``tests/*/build.sh``: a no-op when cached) and return the bin
    directory it prints last; ``error`` (saying ``needed_by``) when it cannot run or fails."""
    try:
        done = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, check=False, timeout=3600
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise error(f"{script} could not run: {e}") from e
    if done.returncode != 0:
        raise error(f"{script} failed (exit {done.returncode}); {needed_by}.\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def build_binaries() -> Path:
    """Run ``tests/cluster/build.sh`` (a no-op when cached) and return the directory of binaries.

    ``NODETOPO_CLUSTER_BIN`` short-circuits the build with a directory of prebuilt binaries.
    """
    override = os.environ.get("NODETOPO_CLUSTER_BIN")
    bin_dir = (
        Path(override)
        if override
        else run_build_script(BUILD_SCRIPT, "the Kubernetes tests need its binaries")
    )
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"):
        if not os.access(bin_dir / name, os.X_OK):
            raise ClusterError(f"{bin_dir / name} is missing or not executable")
    return bin_dir


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------------------------
# Certificates and keys
# --------------------------------------------------------------------------------------------


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def issue_certificate(
    pki: Path,
    name: str,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
) -> tuple[Path, Path]:
    """A certificate signed by ``pki``'s CA (``ca.crt``/``ca.key``): ``<name>.crt`` and ``<name>.key``.

    A client certificate unless ``server``; ``organizations`` become the user's groups."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    _write_key(pki / f"{name}.key", key)
    _write_cert(pki / f"{name}.crt", builder.sign(ca_key, hashes.SHA256()))
    return pki / f"{name}.crt", pki / f"{name}.key"


def write_pki(directory: Path, *, extra_ips: Sequence[str] = ()) -> None:
    """ca.crt/ca.key, apiserver.crt/.key (SANs for loopback, the in-cluster names and ``extra_ips``),
    sa.key/sa.pub, and apiserver-kubelet-client.crt/.key (the apiserver's client certificate for
    kubelets: logs, exec)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodetopo-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    service_ip = next(ipaddress.IPv4Network(SERVICE_CIDR).hosts())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(service_ip),
        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in extra_ips),
    ]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write_key(directory / "ca.key", ca_key)
    _write_cert(directory / "ca.crt", ca)
    _write_key(directory / "apiserver.key", server_key)
    _write_cert(directory / "apiserver.crt", server)
    _write_key(directory / "sa.key", sa_key)
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    issue_certificate(
        directory,
        "apiserver-kubelet-client",
        common_name="kube-apiserver-kubelet-client",
        organizations=("system:masters",),
    )


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata"}],
}


# --------------------------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


#: the kube-controller-manager controller that writes a ValidatingAdmissionPolicy's type check
TYPE_CHECK_CONTROLLER = "validatingadmissionpolicy-status-controller"


class LocalCluster:
    """etcd + kube-apiserver on loopback, plus kube-controller-manager on demand.

    Use ``start()``/``stop()`` or the context manager. Attributes after ``start()``:
    ``server`` (https URL), ``ca_file``, ``users`` (name → ``User``), ``kubeconfig`` (admin's),
    ``audit_log`` (JSON lines, level Metadata, stage ResponseComplete), ``workdir``.
    """

    def __init__(
        self,
        bin_dir: Path,
        *,
        workdir: Path | None = None,
        keep_workdir: bool = False,
        extra_sans: Sequence[str] = (),
    ) -> None:
        self.bin_dir = bin_dir
        self.extra_sans = tuple(extra_sans)  # more IP SANs for the serving certificate (a pod network)
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="nodetopo-cluster-"))
        self._keep_workdir = keep_workdir
        self._processes: dict[str, _Process] = {}
        self.etcd_port = 0
        self.apiserver_port = 0
        self.users: dict[str, User] = {}
        self.startup_seconds = 0.0
        self._stopped = False
        self._barriers: dict[int, str] = {}  # audit log offset → the marker's receive time

    # ---- paths ------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    @property
    def kubeconfig(self) -> Path:
        return self.kubeconfig_for("admin")

    def kubeconfig_for(self, user: str) -> Path:
        """The kubeconfig of one of the static users (``USER_GROUPS``)."""
        return self.workdir / f"kubeconfig-{user}.yaml"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def publish_bundle(
        self, bundle: Path, node: str, *extra: str, user: str = "publisher"
    ) -> subprocess.CompletedProcess[str]:
        """``nodetopo publish --from BUNDLE --node-name NODE`` as one of the static users (``extra``:
        more flags), in a process of this interpreter; the caller asserts on the result."""
        argv = [sys.executable, "-m", "nodetopo", "publish", "--from", str(bundle), "--node-name", node]
        argv += ["--kubeconfig", str(self.kubeconfig_for(user)), *extra]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    # ---- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, timeout: float = 120.0) -> None:
        """Start etcd and kube-apiserver, wait until ready, write kubeconfigs, apply ``crds/``."""
        atexit.register(self.stop)
        started = time.monotonic()
        try:
            pki = self.workdir / "pki"
            pki.mkdir(parents=True, exist_ok=True)
            write_pki(pki, extra_ips=self.extra_sans)
            self._write_tokens()
            self._start_etcd(timeout=timeout)
            self._start_apiserver(timeout=timeout)
            for name in self.users:
                self.write_kubeconfig(self.kubeconfig_for(name), token=self.users[name].token)
            self.apply_crds()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def stop(self) -> None:
        """Terminate every process group (SIGTERM, then SIGKILL after 10 s); remove the workdir."""
        if self._stopped:
            return
        self._stopped = True
        for process in reversed(list(self._processes.values())):
            _terminate(process.popen)
        self._processes.clear()
        if self._own_workdir and not self._keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- users and kubeconfigs --------------------------------------------------------------

    def _write_tokens(self) -> None:
        lines = []
        for name, groups in USER_GROUPS.items():
            user = User(name=f"nodetopo-test-{name}", token=secrets.token_hex(24), groups=groups)
            self.users[name] = user
            group_field = f',"{",".join(groups)}"' if groups else ""
            lines.append(f"{user.token},{user.name},uid-{name}{group_field}")
        path = self.workdir / "tokens.csv"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)

    def write_kubeconfig(self, path: Path, *, token: str) -> Path:
        """A kubeconfig for this cluster that authenticates with a bearer ``token``."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "nodetopo-test",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "nodetopo-test", "user": "user"}}],
            "current-context": "test",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # ---- processes --------------------------------------------------------------------------

    def _spawn(self, name: str, argv: Sequence[str]) -> _Process:
        log = self.workdir / f"{name}.log"
        handle = log.open("ab")
        try:
            popen = subprocess.Popen(
                list(argv),
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: stop() kills it and its children
                cwd=self.workdir,
            )
        finally:
            handle.close()
        process = _Process(name=name, popen=popen, log=log)
        self._processes[name] = process
        return process

    def _fail(self, process: _Process, why: str) -> ClusterError:
        tail = process.log.read_text(errors="replace")[-6000:] if process.log.exists() else ""
        return ClusterError(f"{process.name}: {why}\n--- {process.log} (tail) ---\n{tail}")

    def _start_etcd(self, *, timeout: float) -> None:
        self.etcd_port = free_port()
        peer_port = free_port()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        process = self._spawn(
            "etcd",
            [
                str(self.binary("etcd")),
                "--name=nodetopo-test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=nodetopo-test={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait_http(process, f"{client}/health", timeout=timeout, context=None)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (etcd keeps the data): clients see connection refused until
        ``start_apiserver()``. For outage tests."""
        process = self._processes.pop("kube-apiserver")
        _terminate(process.popen)

    def start_apiserver(self, *, timeout: float = 120.0) -> None:
        """Start kube-apiserver again, on the same port, after ``stop_apiserver()``."""
        self._start_apiserver(timeout=timeout, port=self.apiserver_port)

    def _start_apiserver(self, *, timeout: float, port: int | None = None) -> None:
        self.apiserver_port = port or free_port()
        pki = self.workdir / "pki"
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        process = self._spawn(
            "kube-apiserver",
            [
                str(self.binary("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Defaults already include ValidatingAdmissionPolicy (GA), ServiceAccount,
                # NamespaceLifecycle, PodSecurity ...; NodeRestriction completes the Node authorizer.
                "--enable-admission-plugins=NodeRestriction,ValidatingAdmissionPolicy",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-mode=blocking",
                "--audit-log-format=json",
                # A kubelet (tests/node) is reached by its node name, which resolves to 127.0.0.1.
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                "--kubelet-preferred-address-types=Hostname,InternalIP",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        self._wait_http(
            process,
            f"{self.server}/readyz",
            timeout=timeout,
            context=context,
            token=self.users["admin"].token,
        )

    def _wait_http(
        self,
        process: _Process,
        url: str,
        *,
        timeout: float,
        context: ssl.SSLContext | None,
        token: str | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._fail(process, f"exited with {process.popen.returncode} before {url} was ready")
            request = urllib.request.Request(url)
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=5, context=context) as response:
                    if response.status == 200:
                        return
                    last = f"HTTP {response.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}: {e.read()[-500:]!r}"
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.25)
        raise self._fail(process, f"{url} not ready after {timeout:.0f}s ({last})")

    def start_controller_manager(
        self, *, timeout: float = 60.0, controllers: str = "garbagecollector,namespace,serviceaccount"
    ) -> None:
        """Start kube-controller-manager (by default the garbage collector, namespace and
        service-account controllers; ``controllers="*"`` for all, as a real node needs).

        Idempotent; once started it runs until ``stop()``.
        """
        if "kube-controller-manager" in self._processes:
            return
        process = self._spawn(
            "kube-controller-manager", self._controller_manager_argv(controllers, "kcm-certs")
        )
        # Ready once the garbage collector's informers (NodeTopology's included) have synced.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._fail(process, f"exited with {process.popen.returncode}")
            text = process.log.read_text(errors="replace") if process.log.exists() else ""
            if "Garbage collector: all resource monitors have synced" in text:
                return
            time.sleep(0.25)
        raise self._fail(process, f"garbage collector not started after {timeout:.0f}s")

    def _controller_manager_argv(self, controllers: str, cert_dir: str) -> list[str]:
        pki = self.workdir / "pki"
        return [
            str(self.binary("kube-controller-manager")),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--controllers={controllers}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={self.workdir / cert_dir}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            "--use-service-account-credentials=false",
            "--v=1",
        ]

    def start_policy_type_checker(self) -> None:
        """A kube-controller-manager of its own that runs only the controller that type-checks
        admission policies into their ``status.typeChecking`` (nothing else: no garbage collector
        or namespace controller starts in the shared cluster because a test type-checks a policy).
        Idempotent; once started it runs until ``stop()``."""
        name = "kube-controller-manager-typecheck"
        if name in self._processes:
            return
        self._spawn(name, self._controller_manager_argv(TYPE_CHECK_CONTROLLER, "kcm-typecheck-certs"))

    def policy_type_warnings(self, name: str, *, timeout: float = 30.0) -> list[Any]:
        """The type checker's warnings for the ValidatingAdmissionPolicy ``name`` (empty: it checks
        cleanly). Starts the type checker (``start_policy_type_checker``) and fails when the policy
        carries no ``status.typeChecking`` in time: an unchecked policy is not a clean one."""
        self.start_policy_type_checker()
        path = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}"
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.request("GET", path)
            if status != 200:
                raise AssertionError(f"GET {path}: HTTP {status}: {body}")
            checked = body.get("status", {}).get("typeChecking")
            if checked is not None:
                return list(checked.get("expressionWarnings", []))
            checker = self._processes["kube-controller-manager-typecheck"]
            if checker.popen.poll() is not None:
                raise self._fail(checker, f"exited with {checker.popen.returncode}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"policy {name} was not type-checked within {timeout:.0f}s: {body}")
            time.sleep(0.2)

    def start_scheduler(self, *, timeout: float = 60.0) -> None:
        """Start kube-scheduler (DaemonSet pods are bound by it). Idempotent."""
        if "kube-scheduler" in self._processes:
            return
        process = self._spawn(
            "kube-scheduler",
            [
                str(self.binary("kube-scheduler")),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise self._fail(process, f"exited with {process.popen.returncode}")
            text = process.log.read_text(errors="replace") if process.log.exists() else ""
            if "Serving securely" in text or "Starting Kubernetes Scheduler" in text:
                return
            time.sleep(0.25)
        raise self._fail(process, f"not started after {timeout:.0f}s")

    # ---- kubectl and the API ----------------------------------------------------------------

    def kubectl(
        self, *args: str, user: str = "admin", input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this cluster as one of the static users."""
        argv = [str(self.binary("kubectl")), f"--kubeconfig={self.kubeconfig_for(user)}", *args]
        done = subprocess.run(argv, capture_output=True, text=True, input=input, check=False, timeout=120)
        if check and done.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    def apply_crds(self) -> None:
        """``kubectl apply -k crds/`` and wait until every CRD is Established."""
        if not (CRDS / "kustomization.yaml").is_file():
            return
        self.kubectl("apply", "--server-side", "--field-manager=nodetopo-tests", "-k", str(CRDS))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")

    def request(
        self, method: str, path: str, *, user: str = "admin", body: Any = None, content_type: str = ""
    ) -> tuple[int, Any]:
        """A raw API request (for the audit barrier and for tests that want the exact HTTP status)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.server}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.users[user].token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type or "application/json")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            payload = e.read()
            try:
                return e.code, json.loads(payload)
            except ValueError:
                return e.code, payload.decode(errors="replace")

    # ---- the audit log ----------------------------------------------------------------------

    def audit_barrier(self) -> int:
        """Make a marker request, wait until its audit event is written; return an offset for
        ``audit_events(since=...)``.

        The apiserver writes an event after the response went out, so an event can land in the
        log a moment after a later request's. ``audit_events`` therefore selects by the time each
        request was received, between this marker's and a closing marker's.
        """
        marker = f"{BARRIER}{uuid.uuid4().hex}"
        self.request("GET", f"/api/v1/namespaces/{marker}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.audit_log.exists():
                with self.audit_log.open("rb") as f:
                    content = f.read()
                index = content.find(marker.encode())
                if index >= 0:
                    start = content.rfind(b"\n", 0, index) + 1
                    end = content.find(b"\n", index)
                    if end >= 0:
                        event = json.loads(content[start:end])
                        self._barriers[start] = str(event["requestReceivedTimestamp"])
                        return start
            time.sleep(0.05)
        raise ClusterError(f"audit event for {marker} never appeared in {self.audit_log}")

    def audit_events(self, *, since: int, user: str | None = None) -> list[dict[str, Any]]:
        """Audit events (stage ResponseComplete) of requests received after the marker ``since``
        and before a new closing marker, in the order they were received.

        ``user`` is a key of ``users`` (e.g. ``"publisher"``) or a full user name.
        """
        opened = self._barriers[since]
        closing = self.audit_barrier()
        closed = self._barriers[closing]
        time.sleep(0.2)  # let events of requests received before the closing marker land
        with self.audit_log.open("rb") as f:
            f.seek(since)
            chunk = f.read()
        wanted = None if user is None else self.users[user].name if user in self.users else user
        events = []
        for line in chunk.splitlines():
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete" or BARRIER in event.get("requestURI", ""):
                continue
            if not opened < str(event.get("requestReceivedTimestamp")) < closed:
                continue
            if wanted is not None and event.get("user", {}).get("username") != wanted:
                continue
            events.append(event)
        return sorted(events, key=lambda e: str(e["requestReceivedTimestamp"]))

    def processes(self) -> Iterator[tuple[str, int]]:
        """(name, pid) of the running processes (for diagnostics)."""
        for name, process in self._processes.items():
            yield name, process.popen.pid


def _terminate(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is not None:
        return
    try:
        os.killpg(popen.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        popen.wait(timeout=10)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        popen.wait(timeout=10)
