"""The operator's own apiserver settings without the ``kubernetes`` package: the service account, or the
kubeconfig's current context (files relative to the kubeconfig, several files merged first-wins); a
kubeconfig with a plugin is left to that package (None). The operator's start-up does not import it."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from capmaas.operator.apiserver import Apiserver, ApiserverConfigError, from_kubeconfig, load
from capmaas_dev.devcluster.pki import make_serving_pki


def kubeconfig(path: Path, *, user: dict[str, object], current: str | None = "c", name: str = "c") -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority": "ca.crt"}}
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "ns1"}}],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def test_token_file_and_paths_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    cfg = kubeconfig(tmp_path / "config", user={"tokenFile": "token"})
    api = from_kubeconfig({"KUBECONFIG": str(cfg)})
    assert api is not None
    assert (api.server, api.ca_path, api.namespace) == (
        "https://10.0.0.1:6443",
        str(tmp_path / "ca.crt"),
        "ns1",
    )
    assert api.current_token() == "s3cret"


def test_the_first_file_wins(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "a", user={"token": "first"})
    second = kubeconfig(tmp_path / "b", user={"token": "second"}, current="other", name="c")
    api = from_kubeconfig({"KUBECONFIG": f"{first}:{second}"})
    assert api is not None
    assert api.current_token() == "first"


@pytest.mark.parametrize("user", [{"exec": {"command": "aws"}}, {"auth-provider": {"name": "oidc"}}])
def test_plugins_are_left_to_the_kubernetes_package(tmp_path: Path, user: dict[str, object]) -> None:
    assert from_kubeconfig({"KUBECONFIG": str(kubeconfig(tmp_path / "config", user=user))}) is None


def test_no_current_context_is_an_error(tmp_path: Path) -> None:
    cfg = kubeconfig(tmp_path / "config", user={"token": "t"}, current=None)
    with pytest.raises(ApiserverConfigError, match="current-context"):
        from_kubeconfig({"KUBECONFIG": str(cfg)})


def test_the_service_account_comes_first(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "namespace").write_text("capmaas-system")
    env = {
        "KUBERNETES_SERVICE_HOST": "fd00::1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBECONFIG": "/nonexistent",
    }
    api = load(env, service_account=tmp_path)
    assert api is not None
    assert (api.server, api.namespace, api.current_token()) == (
        "https://[fd00::1]:443",
        "capmaas-system",
        "sa-token",
    )
    assert api.target().authorization() == "Bearer sa-token"


def test_the_operator_starts_without_the_kubernetes_package_or_httpx_cli() -> None:
    code = (
        "import sys\n"
        "from capmaas.operator.main import _lean_imports\n"
        "_lean_imports()\n"
        "import capmaas.operator.app\n"
        "assert not {'kubernetes', 'click', 'rich'} & sys.modules.keys(), 'imported'\n"
        "import kubernetes.config\n"  # still there for the kubeconfigs that need it
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_apiserver_context_trusts_its_ca_only(
    tmp_path: Path, trust_store_loads: list[ssl.SSLContext]
) -> None:
    """With a CA (the service account's, a kubeconfig's) the operator's own TLS context loads that CA and not
    the system's trust store (native memory per context: docs/scaling.md, "Memory: session 40"); without one
    it verifies against the system store. Verification is on either way."""
    loads = trust_store_loads
    pki = make_serving_pki(tmp_path)
    for api in (
        Apiserver(server="https://10.0.0.1:6443", ca_path=str(pki.ca_cert), token="t"),
        Apiserver(server="https://10.0.0.1:6443", ca_data=pki.ca_cert.read_text(), token="t"),
    ):
        tls = api.target().tls
        assert isinstance(tls, ssl.SSLContext)
        assert (tls.verify_mode, tls.check_hostname) == (ssl.CERT_REQUIRED, True)
        assert tls.cert_store_stats()["x509_ca"] == 1
    assert loads == []
    tls = Apiserver(server="https://10.0.0.1:6443", token="t").target().tls
    assert isinstance(tls, ssl.SSLContext)
    assert tls.verify_mode == ssl.CERT_REQUIRED
    assert len(loads) == 1
