"""The real Cluster API core manager against a dev control plane, with its webhooks served on loopback.

capmaas claims to be a CAPI infrastructure provider, so its end-to-end tests run the real CAPI core
controllers (``sigs.k8s.io/cluster-api``, built by ``hack/build-tools.sh cluster-api`` into the binary
cache) rather than tests that play CAPI's part. It does what CAPI's own envtest does, as a process:

- the core CRDs are applied server-side with their conversion webhook pointed at the manager
  (``https://127.0.0.1:<port>/convert``), so v1beta1 reads are converted as in a real installation;
- the webhook configurations of ``config/webhook/manifests.yaml`` (from the module cache) are rewritten to
  ``url: https://127.0.0.1:<port><path>`` with the CA bundle of a fresh serving cert, so objects are defaulted
  and validated exactly as in a cluster installed with clusterctl;
- no RBAC: the manager uses the admin kubeconfig; no leader election; health and diagnostics on loopback.

``watch_namespace`` runs the manager the way HyperShift does (``--namespace``) and limits the webhooks to that
namespace, so a manager started for the e2e tests never reconciles or admits objects other tests create in
the same apiserver while playing CAPI themselves. Stopping removes the webhook configurations and the
conversion webhook again, so the apiserver is left as it was found.

Known limit: the CAPI manager has no flag for the webhook listen address, so its webhook port listens on every
interface (controller-runtime's default); health and diagnostics are bound to 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from capmaas_dev.devcluster import process
from capmaas_dev.devcluster.pki import ServingPki, make_serving_pki
from capmaas_dev.devcluster.tools import MissingToolError, capi_crds_dir, find_binary, run_kubectl
from capmaas_dev.devcluster.versions import CAPI_VERSION

FIELD_MANAGER = "capmaas-capi-harness"
#: libyaml's safe loader and dumper where PyYAML has them (the pure-Python ones otherwise): every start and
#: stop of a manager reads and writes the CAPI CRDs, a megabyte of YAML, which the pure-Python parser and
#: emitter took seconds of CPU for (docs/benchmarks/test-durations.md, "The xdist workers' CPU").
_LOADER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: type[yaml.SafeDumper] | type[yaml.CSafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
#: MachinePool off (capmaas has no MaasMachinePool); ClusterTopology on: it only adds ClusterClass support.
DEFAULT_FEATURE_GATES: Mapping[str, bool] = {"MachinePool": False, "ClusterTopology": True}
#: For tests (``feature_gates=``): CAPI's per-object reconcile rate limit off (``ReconcilerRateLimiting``,
#: beta and on by default since v1.13, off by default before). With it every controller reconciles an object
#: at most once a second (``util/controller``), the MachineHealthCheck controller at most once every 15 s: a
#: Node gone NotReady is acted on up to 15 s after its timeout, and each step of a rollout (Machine
#: provisioned, its Node found, the next Machine scaled) waits for the next 1 s slot. The limit only defers
#: reconciles that an event asked for (it spares a big management cluster's apiservers). What it hides: CAPI
#: finds a Machine's Node only on an event, and a reconcile it deferred sometimes came late enough to find one
#: without (``tests/e2e/e2e_support.nudge_machine``: the stand-alone control-plane Machine of the e2e tests).
UNTHROTTLED_FEATURE_GATES: Mapping[str, bool] = {"ReconcilerRateLimiting": False}
_PORT_RACE = "address already in use"
_SOURCE_HINT = "run `hack/build-tools.sh cluster-api` (building the manager downloads its Go module)"


class CapiStartError(RuntimeError):
    """The CAPI manager did not become ready; the message carries the tail of its log."""


def capi_source_dir() -> Path:
    """``sigs.k8s.io/cluster-api@<CAPI_VERSION>`` in the Go module cache (its webhook manifests and the
    kubeadm provider CRDs are read from there; building the manager put it there)."""
    roots = [os.environ.get("GOMODCACHE", "")]
    gopath = os.environ.get("GOPATH", "")
    roots += [str(Path(p) / "pkg" / "mod") for p in gopath.split(os.pathsep) if p]
    roots.append(str(Path.home() / "go" / "pkg" / "mod"))
    for root in filter(None, roots):
        path = Path(root) / "sigs.k8s.io" / f"cluster-api@{CAPI_VERSION}"
        if (path / "config" / "webhook" / "manifests.yaml").is_file():
            return path
    raise MissingToolError(
        f"sigs.k8s.io/cluster-api@{CAPI_VERSION} is not in the Go module cache: {_SOURCE_HINT}"
    )


def kubeadm_crd_dirs() -> list[Path]:
    """The CRD directories of the kubeadm bootstrap and control-plane providers at the pinned CAPI release
    (KubeadmConfig(Template), KubeadmControlPlane(Template)), for validating cluster templates."""
    src = capi_source_dir()
    return [
        src / "bootstrap" / "kubeadm" / "config" / "crd" / "bases",
        src / "controlplane" / "kubeadm" / "config" / "crd" / "bases",
    ]


def load_yaml_dir(*directories: Path) -> list[dict[str, Any]]:
    """Every YAML document (non-empty) of every ``*.yaml`` file in ``directories``, in name order."""
    docs: list[dict[str, Any]] = []
    for directory in directories:
        for path in sorted(directory.glob("*.yaml")):
            docs.extend(d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d)
    return docs


def apply_objects(
    kubeconfig: str | os.PathLike[str],
    objects: Iterable[Mapping[str, Any]],
    *,
    field_manager: str = FIELD_MANAGER,
    timeout: float = 120.0,
) -> None:
    """Server-side apply ``objects`` (CRDs over kubectl's 256 KB annotation limit included)."""
    text = yaml.dump_all([dict(o) for o in objects], Dumper=_DUMPER, sort_keys=False)
    run_kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={field_manager}",
        "-f",
        "-",
        input=text,
        timeout=timeout,
    )


def with_conversion_webhook(crd: Mapping[str, Any], url: str | None, ca_pem: bytes | None) -> dict[str, Any]:
    """A copy of ``crd`` whose conversion goes to ``url`` (``None``: strategy None, i.e. no webhook)."""
    out = dict(crd)
    out["spec"] = dict(crd["spec"])
    if url is None or ca_pem is None:
        out["spec"]["conversion"] = {"strategy": "None"}
    else:
        out["spec"]["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1", "v1beta1"],
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
            },
        }
    return out


def webhook_configurations(
    manifests: str,
    *,
    base_url: str,
    ca_pem: bytes,
    name_suffix: str,
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """CAPI's ``config/webhook/manifests.yaml`` pointed at ``base_url`` (``https://127.0.0.1:<port>``).

    Every ``clientConfig.service`` becomes ``url: <base_url><path>`` with ``caBundle``; configurations are
    renamed ``<name>-<name_suffix>`` so they never clash with a real installation's. With ``namespace`` each
    webhook gets a ``namespaceSelector`` for that namespace only.
    """
    ca = base64.b64encode(ca_pem).decode()
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        doc["metadata"] = {
            "name": f"{doc['metadata']['name']}-{name_suffix}",
            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
        }
        for hook in doc.get("webhooks", []):
            path = hook["clientConfig"]["service"].get("path", "/")
            hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca}
            if namespace is not None:
                hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        out.append(doc)
    return out


def _feature_gates(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class CapiManager:
    """A running CAPI core manager (``cluster-api`` binary). Build one with :meth:`start`; use as a context
    manager or call :meth:`stop`."""

    def __init__(
        self,
        *,
        kubeconfig: Path,
        workdir: Path,
        owns_workdir: bool,
        watch_namespace: str | None,
        pki: ServingPki,
        webhook_port: int,
        health_port: int,
        diagnostics_port: int,
        name_suffix: str,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.owns_workdir = owns_workdir
        self.namespace = watch_namespace
        self.pki = pki
        self.webhook_port = webhook_port
        self.health_port = health_port
        self.diagnostics_port = diagnostics_port
        self.name_suffix = name_suffix
        self.log = workdir / "cluster-api.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.webhook_names: list[tuple[str, str]] = []  # (kind, name) of the configurations we applied
        self.crd_names: list[str] = []
        self.crd_labels: dict[str, str] = {}  # added to every CAPI CRD (e.g. clusterctl's inventory labels)
        self.startup_seconds = 0.0
        self._stopped = False

    # -- URLs ----------------------------------------------------------------------------------------------
    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.diagnostics_port}/metrics"

    # -- starting ------------------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        kubeconfig: str | os.PathLike[str],
        *,
        workdir: str | os.PathLike[str] | None = None,
        watch_namespace: str | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        extra_args: Sequence[str] = (),
        timeout: float = 120.0,
        attempts: int = 3,
        crd_labels: Mapping[str, str] | None = None,
    ) -> CapiManager:
        """Install CRDs and webhooks, start the manager and return once ``/readyz`` answers 200.

        ``workdir`` None means a fresh temporary directory, removed by :meth:`stop` (pass a directory to keep
        ``cluster-api.log``). Raises :class:`MissingToolError` when the binary or module is absent and
        :class:`CapiStartError` when the manager exits or never becomes ready. ``crd_labels`` are added to
        every CAPI CRD as it is created.
        """
        binary = find_binary("cluster-api")
        source = capi_source_dir()
        gates = {**DEFAULT_FEATURE_GATES, **(feature_gates or {})}
        owns = workdir is None
        path = Path(tempfile.mkdtemp(prefix="capmaas-capi-")) if workdir is None else Path(workdir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, max(1, attempts) + 1):
            mgr = cls(
                kubeconfig=Path(kubeconfig).resolve(),
                workdir=path,
                owns_workdir=owns,
                watch_namespace=watch_namespace,
                pki=make_serving_pki(path / "certs"),
                webhook_port=process.free_port(),
                health_port=process.free_port(),
                diagnostics_port=process.free_port(),
                name_suffix=(watch_namespace or "all")[:40] + "-" + secrets.token_hex(2),
            )
            mgr.crd_labels = dict(crd_labels or {})
            try:
                mgr._start(binary, source, gates, list(extra_args), timeout)
                return mgr
            except BaseException as exc:
                mgr.stop(keep_workdir=True)
                if not isinstance(exc, CapiStartError) or _PORT_RACE not in str(exc) or attempt >= attempts:
                    if owns:
                        shutil.rmtree(path, ignore_errors=True)
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _start(
        self, binary: Path, source: Path, gates: Mapping[str, bool], extra: list[str], timeout: float
    ) -> None:
        began = time.monotonic()
        ca_pem = self.pki.ca_cert.read_bytes()
        process.register_cleanup(id(self), self.stop)
        crds = self._crds()
        self.crd_names = [c["metadata"]["name"] for c in crds]
        apply_objects(
            self.kubeconfig, [with_conversion_webhook(c, f"{self.webhook_url}/convert", ca_pem) for c in crds]
        )
        # The manager lists every kind at start and exits on 'no matches for kind' when the apiserver has not
        # served a just-created CRD yet (seen under load): wait for all of them to be Established first.
        run_kubectl(
            self.kubeconfig,
            "wait",
            "--for=condition=Established",
            f"--timeout={int(timeout)}s",
            *(f"crd/{name}" for name in self.crd_names),
            timeout=timeout + 10,
        )
        hooks = webhook_configurations(
            (source / "config" / "webhook" / "manifests.yaml").read_text(),
            base_url=self.webhook_url,
            ca_pem=ca_pem,
            name_suffix=self.name_suffix,
            namespace=self.namespace,
        )
        self.webhook_names = [(h["kind"], h["metadata"]["name"]) for h in hooks]
        apply_objects(self.kubeconfig, hooks)
        args = [
            str(binary),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            f"--webhook-port={self.webhook_port}",
            f"--webhook-cert-dir={self.pki.cert.parent}",
            f"--health-addr=127.0.0.1:{self.health_port}",
            f"--diagnostics-address=127.0.0.1:{self.diagnostics_port}",
            "--insecure-diagnostics",
            f"--feature-gates={_feature_gates(gates)}",
            *([f"--namespace={self.namespace}"] if self.namespace else []),
            *extra,
        ]
        self.popen = process.spawn(args, self.log, detach=False, env=process.go_env())
        self._wait_ready(began + timeout)
        self.startup_seconds = time.monotonic() - began

    def _crds(self) -> list[dict[str, Any]]:
        """The CAPI CRDs with ``crd_labels`` added: labels given at creation cost no second write of these big
        CRDs (the apiserver re-checks every schema and CEL rule of a CRD on each write)."""
        crds = load_yaml_dir(capi_crds_dir())
        for c in crds:
            c["metadata"].setdefault("labels", {}).update(self.crd_labels)
        return crds

    def _wait_ready(self, deadline: float) -> None:
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.popen is not None and self.popen.poll() is not None:
                raise CapiStartError(
                    f"cluster-api exited with code {self.popen.returncode} during start; log {self.log}:\n"
                    f"{_tail(self.log)}"
                )
            try:
                with urllib.request.urlopen(f"{self.health_url}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise CapiStartError(f"cluster-api not ready in time ({last}); log {self.log}:\n{_tail(self.log)}")

    # -- using it ------------------------------------------------------------------------------------------
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def healthy(self) -> bool:
        """``/healthz`` and ``/readyz`` both answer 200."""
        try:
            for probe in ("healthz", "readyz"):
                with urllib.request.urlopen(f"{self.health_url}/{probe}", timeout=2) as resp:
                    if resp.status != 200:
                        return False
        except OSError:
            return False
        return True

    def tail(self, lines: int = 60) -> str:
        return _tail(self.log, lines)

    # -- stopping ------------------------------------------------------------------------------------------
    def stop(self, *, keep_workdir: bool = False, uninstall: bool = True) -> None:
        """Stop the manager, delete our webhook configurations and turn the CRDs' conversion webhook off
        again (best effort: the apiserver may already be gone at interpreter exit). Idempotent.
        ``uninstall=False`` skips the clean-up of the apiserver (for a control plane about to be deleted)."""
        if self._stopped:
            return
        self._stopped = True
        process.unregister_cleanup(id(self))
        if self.popen is not None:
            process.stop_group(self.popen.pid, popen=self.popen)
        with contextlib.suppress(Exception):  # teardown must not mask the test's own failure
            if uninstall:
                self._uninstall()
        if self.owns_workdir and not keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _uninstall(self) -> None:
        for kind, name in self.webhook_names:
            resource = (
                "mutatingwebhookconfiguration"
                if kind.startswith("Mutating")
                else "validatingwebhookconfiguration"
            )
            run_kubectl(self.kubeconfig, "delete", resource, name, "--ignore-not-found", timeout=30)
        if self.crd_names:
            crds = [c for c in self._crds() if c["metadata"]["name"] in self.crd_names]
            apply_objects(self.kubeconfig, [with_conversion_webhook(c, None, None) for c in crds], timeout=60)

    def __enter__(self) -> CapiManager:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        pid = self.popen.pid if self.popen is not None else None
        return f"CapiManager(namespace={self.namespace!r}, webhook={self.webhook_url!r}, pid={pid})"


# -- a local clusterctl repository for CAPI's own providers (offline `clusterctl init`) ----------------------
#: (provider directory, components file kind, kustomize directory in the module, clusterctl type, name)
CAPI_PROVIDERS = (
    ("cluster-api", "core", "config/default", "CoreProvider", "cluster-api"),
    ("bootstrap-kubeadm", "bootstrap", "bootstrap/kubeadm/config/default", "BootstrapProvider", "kubeadm"),
    (
        "control-plane-kubeadm",
        "control-plane",
        "controlplane/kubeadm/config/default",
        "ControlPlaneProvider",
        "kubeadm",
    ),
)


def build_capi_repository(dest: Path) -> list[dict[str, str]]:
    """Lay out core, kubeadm bootstrap and kubeadm control-plane as a clusterctl local repository under
    ``dest`` (``<provider>/<version>/<kind>-components.yaml`` + ``metadata.yaml``), built the way CAPI's
    release does (``kustomize build config/default``, here ``kubectl kustomize``) from the module cache.

    Returns clusterctl config ``providers:`` entries (name, type, url). Nothing is fetched from the network.
    """
    from capmaas_dev.devcluster.tools import kubectl_path

    src = capi_source_dir()
    entries = []
    for directory, kind, kustomize_dir, provider_type, name in CAPI_PROVIDERS:
        out = dest / directory / CAPI_VERSION
        out.mkdir(parents=True, exist_ok=True)
        built = subprocess.run(
            [str(kubectl_path()), "kustomize", str(src / kustomize_dir)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        components = out / f"{kind}-components.yaml"
        components.write_text(built.stdout)
        (out / "metadata.yaml").write_text((src / "metadata.yaml").read_text())
        entries.append({"name": name, "type": provider_type, "url": components.as_uri()})
    return entries


def cert_manager_api_standin() -> list[dict[str, Any]]:
    """CRDs (no controller) for cert-manager's ``Issuer`` and ``Certificate``.

    ``clusterctl init`` installs cert-manager unless creating an Issuer and a Certificate succeeds
    (``cert_manager.go`` ``waitForAPIReady``); these schema-less CRDs make that probe pass so an offline
    ``clusterctl init`` can go on to the providers. Nothing issues certificates: apply this only to a
    throwaway control plane (the installed providers' webhooks then point at Services that never answer).
    """

    def crd(kind: str, plural: str) -> dict[str, Any]:
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.cert-manager.io", "labels": {"capmaas.dev/stand-in": "true"}},
            "spec": {
                "group": "cert-manager.io",
                "scope": "Namespaced",
                "names": {
                    "kind": kind,
                    "listKind": f"{kind}List",
                    "plural": plural,
                    "singular": kind.lower(),
                },
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }

    return [crd("Issuer", "issuers"), crd("Certificate", "certificates")]
