"""``capmaas preflight``: can capmaas work with this MAAS and these credentials? A pass/fail table that says
what to fix, before a cluster is created and fails deep inside a reconcile.

The credentials come from the command line (``--endpoint``, ``--api-key``, ``--ca-file``) or from an identity
Secret exactly as a MaasCluster's ``spec.identityRef`` names it (a manifest file, or ``namespace/name`` read
from the current kubeconfig), with the keys the operator reads (``MAAS_ENDPOINT``, ``MAAS_API_KEY``,
``MAAS_CA_CERT``, ``MAAS_INSECURE_SKIP_TLS_VERIFY`` and the Go provider's spellings).

Checks, in order, each through the typed client (:mod:`capmaas.maas`); a check whose prerequisite failed is
skipped rather than reported as a second failure:

- endpoint: the URL is an absolute http(s) MAAS URL;
- reachable: ``version/`` answers (anonymous in MAAS, so it works before the key is known to be good);
- TLS: the certificate verifies (system CAs or ``--ca-file``); plain http and verification switched off are
  warnings (the key would travel readable, or to anyone answering);
- MAAS version: 3.x is what capmaas is written and tested against; 4.0 removed VM hosts;
- API key: well-formed and accepted (``users/?op=whoami``);
- admin: capmaas creates the DNS record of the control-plane endpoint, registers VM hosts and composes VMs,
  which MAAS allows only to admins;
- zones and resource pools: listed; the failure domains a MaasCluster without ``spec.failureDomains`` offers
  CAPI are the zones that hold a machine the user can see, the others are named as left out;
- VM hosts: ``vm-hosts/`` is served (MAAS 4.0 answers 410 Gone) and at least one is registered; needed only
  for ``provisioningMode: lxd``, skipped with ``--bare-metal``.

The exit status is 1 when any check failed, 0 otherwise (warnings included). The API key never appears in the
output: messages name the source (the flag or the Secret), never the value.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

import yaml

from capmaas import maas
from capmaas.reconcilers.credentials import API_KEY_KEYS, CA_KEYS, ENDPOINT_KEYS, INSECURE_KEYS

#: MAAS major versions capmaas is written and tested against.
SUPPORTED_MAJOR = 3


class Result(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "FAIL"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    """One line of the table: what was checked, the outcome, what was found and, unless it passed, the fix."""

    name: str
    result: Result
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Target:
    """The MAAS to check and the credentials to check it with. ``source`` says where they came from."""

    endpoint: str
    api_key: str
    ca_data: str | None = None
    insecure: bool = False
    source: str = "command line"


class PreflightError(Exception):
    """The credentials could not even be read (a missing Secret, a key absent from it); no check ran."""


@dataclass
class Report:
    target: Target
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.result is Result.FAIL]

    def by_name(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)


# -- reading the credentials --------------------------------------------------------------------------------
def _first(data: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        value = (data.get(k) or "").strip()
        if value:
            return value
    return None


def target_from_secret_data(data: Mapping[str, str], source: str) -> Target:
    """A :class:`Target` from an identity Secret's decoded ``data`` (the operator's keys and rules)."""
    endpoint, api_key = _first(data, ENDPOINT_KEYS), _first(data, API_KEY_KEYS)
    missing = [keys[0] for keys, v in ((ENDPOINT_KEYS, endpoint), (API_KEY_KEYS, api_key)) if not v]
    if missing or endpoint is None or api_key is None:
        raise PreflightError(
            f"{source} lacks {' and '.join(missing)} (keys read: {', '.join(ENDPOINT_KEYS + API_KEY_KEYS)})"
        )
    insecure = (_first(data, INSECURE_KEYS) or "").lower() in ("1", "true", "yes")
    return Target(endpoint, api_key, _first(data, CA_KEYS), insecure, source)


def secret_data(secret: Mapping[str, Any], source: str) -> dict[str, str]:
    """``data`` (base64) and ``stringData`` of a Secret manifest, decoded (``stringData`` wins, as in the
    API)."""
    out: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True).decode()
        except (ValueError, UnicodeDecodeError) as exc:
            raise PreflightError(f"{source}: data.{key} is not base64-encoded UTF-8 text") from exc
    out.update({str(k): str(v) for k, v in (secret.get("stringData") or {}).items()})
    return out


def target_from_secret_file(path: Path) -> Target:
    """The identity Secret in a manifest file (YAML or JSON; the first ``kind: Secret`` document)."""
    source = f"Secret in {path}"
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as exc:
        raise PreflightError(f"cannot read {path}: {exc}") from exc
    secrets = [d for d in docs if d.get("kind") == "Secret"]
    if not secrets:
        raise PreflightError(f"{path} holds no kind: Secret document")
    name = (secrets[0].get("metadata") or {}).get("name")
    if name:
        source = f"Secret {name} in {path}"
    return target_from_secret_data(secret_data(secrets[0], source), source)


def target_from_cluster_secret(namespace: str, name: str, kubeconfig: str | None) -> Target:
    """The identity Secret ``namespace/name`` read from the cluster of ``kubeconfig`` (default: the current
    context), with the caller's own permissions."""
    import kubernetes
    from kubernetes.client.exceptions import ApiException

    source = f"Secret {namespace}/{name}"
    try:
        api = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise PreflightError(f"cannot load a kubeconfig to read {source}: {exc}") from exc
    try:
        got = kubernetes.client.CoreV1Api(api).read_namespaced_secret(name, namespace)
        secret = {"data": dict(got.data or {})}
    except ApiException as exc:
        why = "does not exist" if exc.status == 404 else f"cannot be read (HTTP {exc.status} {exc.reason})"
        raise PreflightError(f"{source} {why}") from exc
    except OSError as exc:
        raise PreflightError(f"cannot reach the Kubernetes API to read {source}: {exc}") from exc
    finally:
        api.close()
    return target_from_secret_data(secret_data(secret, source), source)


# -- the checks ---------------------------------------------------------------------------------------------
def _tls_cause(exc: BaseException) -> ssl.SSLError | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLError):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def _short(exc: BaseException, limit: int = 160) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


ADMIN_FIX = (
    "use the API key of a MAAS admin (`maas createadmin`, or tick 'MAAS administrator' for the user in the "
    "UI): capmaas creates the control-plane endpoint's DNS record, registers VM hosts and composes VMs, "
    "which MAAS allows only to admins"
)


async def run_checks(
    target: Target,
    *,
    bare_metal: bool = False,
    request_timeout: float = 10.0,
    transport: Any = None,
) -> Report:
    """Every check against ``target``; never raises for a MAAS problem (each is a table row)."""
    report = Report(target)
    add = report.checks.append
    try:
        maas.normalize_base_url(target.endpoint)
    except maas.InvalidBaseUrlError as exc:
        add(Check("endpoint", Result.FAIL, str(exc), "give the MAAS URL, e.g. http://maas.example:5240/MAAS"))
        return report
    add(Check("endpoint", Result.PASS, target.endpoint))
    try:
        maas.Credentials.parse(target.api_key)
        key_ok = True
    except maas.InvalidApiKeyError:
        key_ok = False
    ca = target.ca_data
    client = maas.MaasClient(
        target.endpoint,
        # A malformed key still lets the anonymous checks run (reachability, TLS, version).
        api_key=target.api_key if key_ok else "x:x:x",
        ca_data=ca,
        insecure=target.insecure,
        timeout=request_timeout,
        max_retries=0,
        transport=transport,
    )
    async with client:
        if not await _reachable(client, target, add):
            return report
        await _authenticated(client, target, key_ok, bare_metal, add)
    return report


async def _reachable(client: maas.MaasClient, target: Target, add: Callable[[Check], None]) -> bool:
    https = target.endpoint.strip().lower().startswith("https://")
    try:
        version = await client.version()
    except maas.TransportError as exc:
        tls = _tls_cause(exc)
        if https and tls is not None:
            add(Check("reachable", Result.PASS, "TCP connection made; the TLS handshake failed"))
            fix = (
                "pass the CA that signed MAAS's certificate "
                "(--ca-file, or MAAS_CA_CERT in the identity Secret)"
                if isinstance(tls, ssl.SSLCertVerificationError)
                else "check that the endpoint speaks TLS on that port (http:// for plain MAAS on 5240)"
            )
            add(Check("TLS", Result.FAIL, _short(tls), fix))
            return False
        add(
            Check(
                "reachable",
                Result.FAIL,
                _short(exc),
                "check the URL, that MAAS (regiond) runs, and that this machine can reach it "
                "(firewall, proxy)",
            )
        )
        return False
    except maas.ApiError as exc:
        add(
            Check(
                "reachable",
                Result.FAIL,
                f"{target.endpoint} answered HTTP {exc.status} to version/: not a MAAS API",
                "the URL must be MAAS's, ending in /MAAS "
                "(the region API, not the UI or a proxy's error page)",
            )
        )
        return False
    except maas.MaasError as exc:  # an answer that is not MAAS's JSON
        add(Check("reachable", Result.FAIL, _short(exc), "the URL must be the MAAS region API (…/MAAS)"))
        return False
    add(Check("reachable", Result.PASS, f"version/ answered ({target.endpoint})"))
    if not https:
        add(
            Check(
                "TLS",
                Result.WARN,
                "plain http: the API key and cloud-init user data travel unencrypted",
                "serve MAAS over https (MAAS 3.x: `maas config-tls enable`) and use the https:// URL",
            )
        )
    elif target.insecure:
        add(
            Check(
                "TLS",
                Result.WARN,
                "certificate verification is switched off (insecure)",
                "drop MAAS_INSECURE_SKIP_TLS_VERIFY and pass the CA (--ca-file / MAAS_CA_CERT) instead",
            )
        )
    else:
        cas = "given CA" if target.ca_data else "system CAs"
        add(Check("TLS", Result.PASS, f"certificate verified ({cas})"))
    add(_version_check(version))
    return True


def _version_check(version: maas.Version) -> Check:
    text = version.version + (f" ({version.subversion})" if version.subversion else "")
    try:
        major = int(version.version.split(".", 1)[0])
    except ValueError:
        return Check(
            "MAAS version", Result.WARN, f"unrecognised version {text!r}", "capmaas supports MAAS 3.x"
        )
    if major == SUPPORTED_MAJOR:
        return Check("MAAS version", Result.PASS, text)
    if major > SUPPORTED_MAJOR:
        return Check(
            "MAAS version",
            Result.WARN,
            f"{text}: newer than capmaas is tested against (3.x); MAAS 4.0 removed VM hosts",
            "bare metal should work; LXD VMs need a MAAS 3.x region",
        )
    return Check("MAAS version", Result.FAIL, f"{text}: too old", "upgrade MAAS to 3.x")


async def _authenticated(
    client: maas.MaasClient, target: Target, key_ok: bool, bare_metal: bool, add: Callable[[Check], None]
) -> None:
    later = ("admin", "zones", "resource pools", "VM hosts")
    if not key_ok:
        add(
            Check(
                "API key",
                Result.FAIL,
                f"the key from {target.source} is not consumer_key:token_key:token_secret",
                "copy the whole key: `maas apikey --username=USER` (or the user's API keys page in the UI)",
            )
        )
        for name in later:
            add(Check(name, Result.SKIP, "needs a valid API key"))
        return
    try:
        user = await client.whoami()
    except maas.UnauthorizedError:
        add(
            Check(
                "API key",
                Result.FAIL,
                f"MAAS refused the key from {target.source} (401)",
                "generate a new key: `maas apikey --generate --username=USER` "
                "(a deleted user's keys stop working)",
            )
        )
        for name in later:
            add(Check(name, Result.SKIP, "needs a valid API key"))
        return
    except maas.MaasError as exc:
        why = f"users/?op=whoami failed: {_short(exc)}"
        add(Check("API key", Result.FAIL, why, "check MAAS's regiond log"))
        return
    add(Check("API key", Result.PASS, f"accepted: user {user.username!r}"))
    if user.is_superuser:
        add(Check("admin", Result.PASS, f"{user.username!r} is a MAAS admin"))
    else:
        add(Check("admin", Result.FAIL, f"{user.username!r} is not a MAAS admin", ADMIN_FIX))
    await _inventory(client, add)
    if bare_metal:
        add(Check("VM hosts", Result.SKIP, "--bare-metal: LXD VMs (provisioningMode: lxd) not needed"))
        return
    await _vm_hosts(client, user.is_superuser, add)


async def _inventory(client: maas.MaasClient, add: Callable[[Check], None]) -> None:
    add(await _zones(client))
    try:
        pools = sorted(p.name for p in await client.pools.list())
    except maas.MaasError as exc:
        why = f"resourcepools/ failed: {_short(exc)}"
        add(Check("resource pools", Result.FAIL, why, "check the user's permissions"))
    else:
        add(Check("resource pools", Result.PASS, ", ".join(pools) or "none"))


async def _zones(client: maas.MaasClient) -> Check:
    """The failure domains a MaasCluster without ``spec.failureDomains`` would offer CAPI: the zones that
    hold a machine this user can see (as the operator discovers them); the others are named as left out."""
    try:
        zones = sorted(z.name for z in await client.zones.list())
    except maas.MaasError as exc:
        return Check("zones", Result.FAIL, f"zones/ failed: {_short(exc)}", "check the user's permissions")
    try:
        used = {m.zone.name for m in await client.machines.list()}
    except maas.MaasError as exc:
        return Check("zones", Result.FAIL, f"machines/ failed: {_short(exc)}", "check the user's permissions")
    offered = [z for z in zones if z in used]
    empty = [z for z in zones if z not in used]
    left_out = f"; left out, no machine: {', '.join(empty)}" if empty else ""
    if len(offered) > 1:
        detail = (
            f"{', '.join(offered)} offered as CAPI failure domains (the zones holding a machine the key sees)"
            f"{left_out}"
        )
        return Check("zones", Result.PASS, detail)
    held = f"only {offered[0]} holds a machine" if offered else "no zone holds a machine"
    return Check(
        "zones",
        Result.WARN,
        f"{held}{left_out}: machines cannot be spread over failure domains",
        "put machines in at least two zones in MAAS to spread control planes (a MaasCluster without "
        "spec.failureDomains offers CAPI only the zones that hold a machine)",
    )


async def _vm_hosts(client: maas.MaasClient, admin: bool, add: Callable[[Check], None]) -> None:
    try:
        hosts = await client.vm_hosts.list()
    except maas.GoneError:
        add(
            Check(
                "VM hosts",
                Result.FAIL,
                "vm-hosts/ answered 410 Gone: this MAAS (4.0+) has no VM hosts, so no LXD VMs",
                "use bare-metal machines only (provisioningMode: baremetal) and run with --bare-metal, or a "
                "MAAS 3.x region for LXD VMs",
            )
        )
        return
    except maas.ForbiddenError:
        add(Check("VM hosts", Result.FAIL, "vm-hosts/ refused (403)", ADMIN_FIX))
        return
    except maas.MaasError as exc:
        add(Check("VM hosts", Result.FAIL, f"vm-hosts/ failed: {_short(exc)}", "check MAAS's regiond log"))
        return
    if not hosts:
        add(
            Check(
                "VM hosts",
                Result.WARN,
                "supported, none registered yet",
                "LXD VMs need a VM host: register one in MAAS, or let capmaas turn deployed control-plane "
                "machines into VM hosts (lxdConfig)" + ("" if admin else "; registering needs an admin"),
            )
        )
        return
    names = ", ".join(sorted(h.name for h in hosts)[:6]) + (" …" if len(hosts) > 6 else "")
    add(Check("VM hosts", Result.PASS, f"{len(hosts)} registered: {names}"))


# -- output -------------------------------------------------------------------------------------------------
def render(report: Report) -> str:
    rows = [("CHECK", "RESULT", "DETAIL")] + [(c.name, c.result.value, c.detail) for c in report.checks]
    w0, w1 = (max(len(r[i]) for r in rows) for i in (0, 1))
    lines = [f"capmaas preflight: {report.target.endpoint} (credentials: {report.target.source})", ""]
    lines += [f"{a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in rows]
    fixes = [c for c in report.checks if c.fix and c.result in (Result.FAIL, Result.WARN)]
    if fixes:
        lines += ["", "to fix:"]
        lines += [f"  {c.name}: {c.fix}" for c in fixes]
    lines += ["", f"{len(report.failed)} failed" if report.failed else "OK: capmaas can use this MAAS"]
    return "\n".join(lines)


# -- the command --------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", metavar="URL", help="MAAS URL, e.g. http://maas.example:5240/MAAS")
    parser.add_argument("--api-key", metavar="KEY", help="consumer_key:token_key:token_secret")
    parser.add_argument("--ca-file", metavar="PEM", help="CA bundle that signed MAAS's TLS certificate")
    parser.add_argument(
        "--insecure-skip-tls-verify", action="store_true", help="do not verify MAAS's certificate (warned)"
    )
    parser.add_argument(
        "--identity-secret",
        metavar="FILE|NAMESPACE/NAME",
        help="read the credentials from an identity Secret: a manifest file, or namespace/name (kubeconfig)",
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="for --identity-secret NAMESPACE/NAME")
    parser.add_argument(
        "--bare-metal", action="store_true", help="LXD VMs will not be used: skip the VM-host check"
    )
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request (10)")


def target_from_args(args: argparse.Namespace) -> Target:
    if args.identity_secret:
        if args.endpoint or args.api_key:
            raise PreflightError("give either --identity-secret or --endpoint/--api-key, not both")
        ref = str(args.identity_secret)
        path = Path(ref)
        if path.is_file():
            target = target_from_secret_file(path)
        elif ref.count("/") == 1 and all(ref.split("/")):
            namespace, name = ref.split("/")
            target = target_from_cluster_secret(namespace, name, args.kubeconfig)
        else:
            raise PreflightError(f"--identity-secret {ref!r} is neither a file nor namespace/name")
    else:
        if not args.endpoint or not args.api_key:
            raise PreflightError("give --endpoint and --api-key (or --identity-secret)")
        target = Target(args.endpoint, args.api_key, source="--api-key")
    if args.ca_file:
        try:
            ca = Path(args.ca_file).read_text()
        except OSError as exc:
            raise PreflightError(f"cannot read --ca-file: {exc}") from exc
        target = Target(target.endpoint, target.api_key, ca, target.insecure, target.source)
    if args.insecure_skip_tls_verify:
        target = Target(target.endpoint, target.api_key, target.ca_data, True, target.source)
    return target


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        target = target_from_args(args)
    except PreflightError as exc:
        print(f"capmaas preflight: {exc}", file=out)
        return 2
    report = asyncio.run(run_checks(target, bare_metal=args.bare_metal, request_timeout=args.timeout))
    print(render(report), file=out, flush=True)
    return 1 if report.failed else 0
