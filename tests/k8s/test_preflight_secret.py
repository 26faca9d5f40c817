"""``capmaas preflight --identity-secret NAMESPACE/NAME``: the identity Secret read from a real apiserver with
the kubeconfig's credentials, then checked against the MAAS simulator on loopback."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from capmaas import cli, preflight
from capmaas_dev.demo.manifests import identity_secret
from capmaas_dev.demo.simthread import SimulatorThread
from capmaas_dev.devcluster import ControlPlane
from capmaas_dev.simulator import Inventory, Timings

pytestmark = [pytest.mark.k8s]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorThread]:
    s = SimulatorThread(Inventory.generate(machines=3, zones=3, vmhosts=1, seed=5), Timings.fast()).start()
    yield s
    s.stop()


def _run(kube: ControlPlane, ref: str) -> tuple[int, str]:
    args = cli.build_parser("preflight").parse_args(
        ["preflight", "--identity-secret", ref, "--kubeconfig", str(kube.kubeconfig)]
    )
    out = io.StringIO()
    return preflight.run(args, out), out.getvalue()


def test_identity_secret_from_the_cluster(
    kube: ControlPlane, kubectl: Any, namespace: str, sim: SimulatorThread
) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(identity_secret("maas", namespace, sim.url, sim.api_key)))
    code, out = _run(kube, f"{namespace}/maas")
    assert code == 0, out
    assert f"credentials: Secret {namespace}/maas" in out
    assert sim.api_key not in out
    # A non-admin user's key in the same Secret: the admin check fails, naming the fix.
    key = sim.call(lambda s: s.add_user("plain", admin=False).api_key)
    kubectl("apply", "-f", "-", input=json.dumps(identity_secret("maas", namespace, sim.url, key)))
    code, out = _run(kube, f"{namespace}/maas")
    assert code == 1, out
    assert "'plain' is not a MAAS admin" in out


def test_a_missing_identity_secret_is_reported(kube: ControlPlane, namespace: str) -> None:
    code, out = _run(kube, f"{namespace}/nope")
    assert code == 2
    assert f"Secret {namespace}/nope does not exist" in out
