"""A MaasRemediation pass that runs before the watch cache has its MaasMachine, on a real kube-apiserver.

A restarted operator passes over a MaasRemediation as soon as kopf delivers it; only the CAPI Machines and
Clusters are indexed before any handler runs, so the MaasMachines' listing may come after that pass (the
e2e test of an operator killed right after a power-off saw it: "RemediationFailed: the Machine has no
MaasMachine holding a MAAS server", and the healthy server's Machine was replaced). The pass must read the
MaasMachine from the apiserver then, not give up nor let go of a server it may have left off.

MAAS is not reached here: the connection is refused, and what is asserted is that the pass went to MAAS for
that MaasMachine's server (instead of deciding without it).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from capmaas.maas import errors as maas_errors
from capmaas.operator.apiserver import from_kubeconfig
from capmaas.operator.kube import KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp
from capmaas.operator.remediation import RemediationAdapter
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.remediation import FINALIZER, RemediationMaas, RemediationReconciler
from capmaas_dev.demo.manifests import machine
from capmaas_dev.devcluster import ControlPlane

pytestmark = pytest.mark.k8s

INFRA_API = "infrastructure.cluster.x-k8s.io/v1beta1"
SID = "abc123"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


class Setting:
    """The adapter over a real apiserver and a store the watches have fed only the CAPI Machine into."""

    def __init__(self, kube: ControlPlane, kubectl: Kubectl, namespace: str) -> None:
        api = from_kubeconfig({"KUBECONFIG": str(kube.kubeconfig)})
        assert api is not None
        self.kubectl, self.namespace = kubectl, namespace
        self.http = KubeHttp(api.target())
        self.store = Store()
        self.adapter = RemediationAdapter(
            self.store, self.http, KubeAdapter(self.store, self.http, secret_ttl=1.0), lambda key: None
        )
        self.connected: list[str] = []

        async def refused(mm: Any) -> RemediationMaas:
            self.connected.append(str(mm["metadata"]["name"]))
            raise maas_errors.TransportError("refused (no MAAS in this test)", request=_request())

        self.reconciler = RemediationReconciler(self.adapter, refused)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = self.kubectl("create", "-n", self.namespace, "-o", "json", "-f", "-", input=json.dumps(obj))
        return dict(json.loads(out.stdout))

    def get(self, kind: str, name: str) -> dict[str, Any]:
        out = self.kubectl("get", kind, name, "-n", self.namespace, "-o", "json")
        return dict(json.loads(out.stdout))

    def worker(self) -> None:
        """Machine w0 (in the store, as the index put it) and its MaasMachine holding SID (not stored)."""
        self.store.put("machines", self.create(machine("w0", self.namespace, "c1", control_plane=False,
                                                       bootstrap="w0-bootstrap")))  # fmt: skip
        self.create(
            {
                "apiVersion": INFRA_API,
                "kind": "MaasMachine",
                "metadata": {"name": "w0"},
                "spec": {"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096, "systemID": SID},
            }
        )

    def remediation(self, **status: Any) -> dict[str, Any]:
        self.create(
            {
                "apiVersion": INFRA_API,
                "kind": "MaasRemediation",
                "metadata": {"name": "w0", "finalizers": [FINALIZER] if status else []},
                "spec": {},
            }
        )
        if status:
            patch = json.dumps({"status": status})
            self.kubectl("patch", "maasremediation", "w0", "-n", self.namespace, "--subresource=status",
                         "--type=merge", "-p", patch)  # fmt: skip
        return self.get("maasremediation", "w0")


def _request() -> maas_errors.RequestInfo:
    return maas_errors.RequestInfo("GET", "http://maas.invalid/MAAS/api/2.0/", "version/")


@pytest.fixture
async def setting(
    crds: list[str], kube: ControlPlane, kubectl: Kubectl, namespace: str
) -> AsyncIterator[Setting]:
    s = Setting(kube, kubectl, namespace)
    try:
        yield s
    finally:
        await s.http.aclose()


async def test_a_first_pass_without_the_maasmachine_cached_goes_to_maas_and_does_not_give_up(
    setting: Setting,
) -> None:
    setting.worker()
    body = setting.remediation()
    with pytest.raises(TransientError, match="refused"):
        await setting.reconciler.reconcile(body)
    assert setting.connected == ["w0"]  # the MaasMachine was read from the apiserver
    status = setting.get("maasremediation", "w0").get("status") or {}
    assert (status.get("step"), status.get("phase")) == (None, None), status
    conditions = (setting.get("machine", "w0").get("status") or {}).get("conditions") or []
    assert [c for c in conditions if c.get("type") == "OwnerRemediated"] == []  # not handed to CAPI
    assert setting.store.find("maasmachines", setting.namespace, "w0") is None  # the watch delivers it


async def test_a_deleted_remediation_whose_server_may_be_off_powers_it_on_before_letting_go(
    setting: Setting,
) -> None:
    setting.worker()
    setting.remediation(step="PowerOff", phase="PowerCycling", systemID=SID)
    setting.kubectl("delete", "maasremediation", "w0", "-n", setting.namespace, "--wait=false")
    body = setting.get("maasremediation", "w0")
    assert body["metadata"].get("deletionTimestamp")
    with pytest.raises(TransientError, match="refused"):
        await setting.reconciler.reconcile(body)
    assert setting.connected == ["w0"]  # to power SID on
    assert setting.get("maasremediation", "w0")["metadata"]["finalizers"] == [FINALIZER]  # not let go


async def test_a_maasmachine_that_does_not_exist_is_none(setting: Setting) -> None:
    assert await setting.adapter.read_maasmachine(setting.namespace, "nothing") is None
