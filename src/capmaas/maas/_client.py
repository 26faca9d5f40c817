"""`MaasClient`: one object per MAAS endpoint, owning the HTTP connection pool and the API key.

Construction does no I/O, so an operator can build clients from Secrets freely; the first call connects.
The collections hang off the client as attributes (``client.machines.allocate(...)``), mirroring MAAS's own
URL families so a reader can map any call to the MAAS API reference.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import httpx

from capmaas.maas import _allowlist, _auth, _http, _transports, errors, models
from capmaas.maas.resources import (
    block_devices,
    boot_resources,
    dns,
    domains,
    fabrics,
    interfaces,
    ip_addresses,
    ip_ranges,
    machines,
    pools,
    reserved_ips,
    subnets,
    tags,
    users,
    vm_hosts,
    zones,
)

__all__ = ["MaasClient", "normalize_base_url"]

log = logging.getLogger("capmaas.maas")

_API_SUFFIX = "/api/2.0"


def normalize_base_url(url: str) -> str:
    """The API root ``<scheme>://<host>[:port]<path>/api/2.0/`` from any of the usual spellings.

    Accepts ``http://h:5240/MAAS``, ``http://h:5240/MAAS/`` and ``http://h:5240/MAAS/api/2.0/`` (what the
    MAAS CLI, libmaas and the Go provider's Secrets contain). The path is kept as given, so a MAAS served
    under another prefix (behind a proxy) works; query strings and fragments are refused.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise errors.InvalidBaseUrlError(
            f"MAAS URL must be absolute http(s), like http://maas.example:5240/MAAS; got {url!r}"
        )
    if parts.query or parts.fragment:
        raise errors.InvalidBaseUrlError(f"MAAS URL must not have a query or fragment; got {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith(_API_SUFFIX):
        path = path[: -len(_API_SUFFIX)]
    return urlunsplit((parts.scheme, parts.netloc, f"{path}{_API_SUFFIX}/", "", ""))


def _verify(
    verify: bool | str | ssl.SSLContext, ca_data: str | None, insecure: bool
) -> bool | ssl.SSLContext:
    """What httpx should verify against: a context or a bool (httpx 0.28 deprecates path strings).

    ``verify=False`` is taken as ``insecure=True``: either way the switch is logged, never silent.
    """
    if insecure or verify is False:
        log.warning("TLS certificate verification of the MAAS endpoint is DISABLED (insecure=True)")
        return False
    if isinstance(verify, ssl.SSLContext):
        context = verify
    elif isinstance(verify, str):
        context = ssl.create_default_context(cafile=verify)
    elif ca_data is not None:
        context = ssl.create_default_context()
    else:
        return True
    if ca_data is not None:
        _transports.load_ca(context, ca_data)
    return context


class _AnswerCookies(httpx.Cookies):
    """The client's cookies, read from an answer only when it sets one.

    httpx hands every answer to urllib's cookie jar, which first builds a urllib ``Request`` of the URL and a
    copy of every header, then finds no ``Set-Cookie`` (MAAS's answers to OAuth-signed API calls carry none)
    and changes nothing: a fixed cost per MAAS request. An answer with neither header is skipped here; one
    with either goes through httpx as before, so cookies MAAS does set are kept and sent back as ever."""

    def extract_cookies(self, response: httpx.Response) -> None:
        headers = response.headers
        if "set-cookie" in headers or "set-cookie2" in headers:
            super().extract_cookies(response)


class MaasClient:
    """An async client for one MAAS region's REST API 2.0.

    ``api_key`` is ``consumer_key:token_key:token_secret`` (or :class:`Credentials`). ``transport`` replaces
    the network (tests pass ``httpx.MockTransport`` or ``httpx.ASGITransport(app=sim.app)``). TLS is verified
    by default; ``verify`` takes a CA bundle path or an :class:`ssl.SSLContext`, ``ca_data`` PEM text (from a
    Secret), and only ``insecure=True`` switches verification off. ``on_response(method, endpoint, status,
    seconds)`` is called once per HTTP answer (status 0 when there was none) with the endpoint *template* and
    how long that attempt took. ``limits``
    bounds each answer's size and each attempt's duration (:class:`Limits`; its deadline defaults to
    ``timeout``). ``allowed_endpoints`` (an :class:`EndpointAllowList`, empty: any) refuses, at construction,
    a URL whose host is not on it (:class:`~capmaas.maas.errors.EndpointNotAllowedError`).
    ``on_invalid_item(endpoint)`` is called for each item a lenient list call leaves out.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | _auth.Credentials,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: bool | str | ssl.SSLContext = True,
        ca_data: str | None = None,
        insecure: bool = False,
        timeout: float = 30.0,
        max_retries: int = 3,
        retry: _http.RetryPolicy | None = None,
        sleep: _http.Sleep = asyncio.sleep,
        on_response: _http.OnResponse | None = None,
        limits: _http.Limits | None = None,
        on_invalid_item: _http.OnInvalidItem | None = None,
        allowed_endpoints: _allowlist.EndpointAllowList | None = None,
    ) -> None:
        credentials = api_key if isinstance(api_key, _auth.Credentials) else _auth.Credentials.parse(api_key)
        self.api_root = normalize_base_url(url)
        if allowed_endpoints is not None:
            allowed_endpoints.check(self.api_root)
        if limits is None:
            limits = _http.Limits(deadline=timeout)
        policy = retry if retry is not None else _http.RetryPolicy(max_retries=max_retries)
        self._client = httpx.AsyncClient(
            auth=_auth.MaasAuth(credentials),
            transport=transport,
            verify=_verify(verify, ca_data, insecure),
            timeout=httpx.Timeout(timeout),
            headers={"Accept": "application/json", "User-Agent": "capmaas"},
            follow_redirects=False,
        )
        # The setter would copy into a plain httpx.Cookies; tests/unit/maas/test_maas_cookies.py fails if
        # httpx stops reading the store from this attribute.
        self._client._cookies = _AnswerCookies()
        self._http = _http.Http(
            self._client,
            api_root=self.api_root,
            credentials=credentials,
            retry=policy,
            sleep=sleep,
            on_response=on_response,
            limits=limits,
            on_invalid_item=on_invalid_item,
        )
        self.machines = machines.Machines(self._http)
        self.vm_hosts = vm_hosts.VmHosts(self._http)
        self.zones = zones.Zones(self._http)
        self.pools = pools.ResourcePools(self._http)
        self.tags = tags.Tags(self._http)
        self.dns_resources = dns.DnsResources(self._http)
        self.domains = domains.Domains(self._http)
        self.subnets = subnets.Subnets(self._http)
        self.boot_resources = boot_resources.BootResources(self._http)
        self.users = users.Users(self._http)
        self.interfaces = interfaces.Interfaces(self._http)
        self.ip_addresses = ip_addresses.IpAddresses(self._http)
        self.reserved_ips = reserved_ips.ReservedIps(self._http)
        self.ip_ranges = ip_ranges.IpRanges(self._http)
        self.fabrics = fabrics.Fabrics(self._http)
        self.block_devices = block_devices.BlockDevices(self._http)

    def __repr__(self) -> str:
        return f"MaasClient({self.api_root!r})"

    async def version(self) -> models.Version:
        """MAAS's version and capabilities (``version/``)."""
        return await self._http.model(models.Version, "GET", "version/")

    async def whoami(self) -> models.User:
        """The user the API key belongs to; a cheap way to check the key works."""
        return await self.users.whoami()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def __aenter__(self) -> MaasClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
