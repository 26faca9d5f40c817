"""The :class:`Simulator`: state, users, timers, faults and the ASGI app that serves MAAS's API 2.0.

One request is handled by one synchronous call (:meth:`Simulator.handle`) after the only ``await`` (fault
latency). asyncio therefore never interleaves two handlers: allocate's "pick the cheapest match and mark it
Allocated" is atomic, which is what MAAS gets from its ``node_acquire`` database lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import quote

from capmaas_dev.simulator import (
    addresses,
    bonds,
    catalog,
    devices,
    dnsrecords,
    info,
    machines,
    networks,
    nodes,
    router,
    storage,
    vmhosts,
)
from capmaas_dev.simulator.auth import Authenticator, SignedRequest, User, challenge, new_api_key
from capmaas_dev.simulator.constraints import Constraints, pod_allowed
from capmaas_dev.simulator.faults import ConnectionDropped, Faults, Timings, WriteFault
from capmaas_dev.simulator.forms import FormData, FormError, parse_body, parse_query
from capmaas_dev.simulator.http import TEXT_TYPE, HttpError, Request, Response, bad_request, json_response
from capmaas_dev.simulator.inventory import Inventory
from capmaas_dev.simulator.lifecycle import DeployHook, Lifecycle
from capmaas_dev.simulator.models import OWNED, Machine, NodeStatus, StoragePool, VmHost
from capmaas_dev.simulator.serialize import machine_dict

log = logging.getLogger(__name__)
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
CounterKey = tuple[str, str, str | None]
URLENCODED = "application/x-www-form-urlencoded"
UNAVAILABLE = "Unable to connect to any rack controller; no connections available."


class Simulator(Lifecycle):
    """An in-memory MAAS 3.7 region. ``sim.app`` is the ASGI application."""

    def __init__(
        self,
        inventory: Inventory | None = None,
        *,
        timings: Timings | None = None,
        faults: Faults | None = None,
        api_key: str | None = None,
        maas4: bool = False,
        dynamic_compose: bool = True,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        auth_clock: Callable[[], float] = time.time,
        on_deployed: DeployHook | None = None,
        on_powered_on: DeployHook | None = None,
        tick_interval: float = 0.05,
    ) -> None:
        self.inventory = inventory if inventory is not None else Inventory()
        self.state = self.inventory.build()
        self.timings = timings or Timings.fast()
        self.faults = faults or Faults()
        self.clock = clock
        self.rng = random.Random(seed)
        self.maas4 = maas4
        self.dynamic_compose = dynamic_compose
        self.on_deployed = on_deployed
        self.on_powered_on = on_powered_on
        self.power_log: list[tuple[str, str]] = []
        #: Releases MAAS acted on, as (system ID, whether it erases the disks): what node reuse tests read.
        self.release_log: list[tuple[str, bool]] = []
        self.tick_interval = tick_interval
        self.violations: list[str] = []
        self._hook_tasks: set[asyncio.Future[Any]] = set()
        self.auth = Authenticator(auth_clock, maas4=maas4)
        self.admin = self.auth.add_user(
            "admin", admin=True, api_key=api_key or new_api_key(), password="admin"
        )
        for spec in self.inventory.users():
            self.auth.add_user(spec.username, admin=spec.admin, api_key=spec.api_key, password=spec.password)
        self.resources: list[router.Resource] = [
            *machines.RESOURCES,
            *bonds.RESOURCES,  # ops on nodes' interfaces resource (registered there), no URL of their own
            *storage.RESOURCES,  # ops on nodes' block device and machines' machine resources
            *vmhosts.RESOURCES,
            *catalog.RESOURCES,
            *dnsrecords.RESOURCES,
            *nodes.RESOURCES,
            *networks.RESOURCES,
            *devices.RESOURCES,
            *addresses.RESOURCES,
            *info.RESOURCES,
        ]
        self.api_hash = info.api_hash(self)
        self.counters: Counter[CounterKey] = Counter()
        self._task: asyncio.Task[None] | None = None

    # -- public helpers ---------------------------------------------------------------------------------
    @property
    def api_key(self) -> str:
        return self.admin.api_key

    def add_user(
        self, username: str, *, admin: bool = False, api_key: str | None = None, password: str | None = None
    ) -> User:
        """Add a user; ``user.api_key`` is its ``consumer:token:secret``."""
        return self.auth.add_user(username, admin=admin, api_key=api_key, password=password)

    def reset_counters(self) -> None:
        self.counters.clear()

    def machine(self, system_id: str) -> dict[str, Any]:
        """A machine's JSON as the API shows it (KeyError when unknown)."""
        return machine_dict(self.state, self.state.machines[system_id], self.maas4)

    def machines_by_agent(self, agent_name: str) -> list[dict[str, Any]]:
        return [self.machine(sid) for sid in sorted(self.state.by_agent.get(agent_name, {}))]

    def machines_in(self, status: NodeStatus) -> list[str]:
        return list(self.state.by_status[status])

    async def start(self) -> None:
        """Start the background task that completes deploys, releases, erases and commissioning on time."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="maas-simulator-ticker")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for hook in list(self._hook_tasks):
            hook.cancel()

    async def __aenter__(self) -> Simulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(self.tick_interval)

    def check_invariants(self) -> list[str]:
        """Violations of what must always hold; ``[]`` when the simulator is consistent."""
        state = self.state
        problems = list(self.violations)
        for agent, bucket in state.by_agent.items():
            if len(bucket) > 1:
                problems.append(f"agent_name {agent!r} is on {len(bucket)} machines: {sorted(bucket)}")
        for m in state.machines.values():
            if state.by_status[m.status].get(m.system_id) is not m:
                problems.append(f"machine {m.system_id} missing from the {m.status.name} index")
            if m.status is NodeStatus.READY and m.owner is not None:
                problems.append(f"machine {m.system_id} is Ready but owned by {m.owner}")
            if m.status in OWNED and m.owner is None:
                problems.append(f"machine {m.system_id} is {m.status.label} without an owner")
            if m.pod_id is not None:
                host = state.vm_hosts.get(m.pod_id)
                if host is None or m.system_id not in host.vms:
                    problems.append(f"composed machine {m.system_id} is not backed by VM host {m.pod_id}")
        ips = Counter(i.ip for m in state.machines.values() for i in m.interfaces if i.ip)
        problems += [f"IP address {ip} is on {n} interfaces" for ip, n in sorted(ips.items()) if n > 1]
        if sum(len(b) for b in state.by_status.values()) != len(state.machines):
            problems.append("status index size differs from the machine count")
        if len(state.ready) != len(state.by_status[NodeStatus.READY]):
            problems.append("READY-by-cost index differs from the READY status index")
        for host in state.vm_hosts.values():
            cores, memory, storage = host.used()
            if cores > host.cores * host.cpu_over_commit_ratio:
                problems.append(f"VM host {host.name} uses {cores} cores, over its over-committed capacity")
            if memory > host.memory * host.memory_over_commit_ratio:
                problems.append(f"VM host {host.name} uses {memory} MiB, over its over-committed capacity")
            for pool in host.storage_pools:
                if storage.get(pool.id, 0) > pool.total:
                    problems.append(f"VM host {host.name} storage pool {pool.name} is over capacity")
            for sid in host.vms:
                vm = state.machines.get(sid)
                if vm is None or vm.pod_id != host.id:
                    problems.append(f"VM host {host.name} charges for {sid}, which it does not host")
        return problems

    # -- lifecycle pieces that need handler modules -------------------------------------------------------
    def compose_for_allocate(self, c: Constraints) -> Machine | None:
        """MAAS 3.7 composes a VM when no machine matches (and no system_id was asked for)."""
        if not self.dynamic_compose:
            return None
        for _, host in sorted(self.state.vm_hosts.items()):
            zone, pool = self.state.zones[host.zone_id], self.state.pools[host.pool_id]
            if (c.zone and zone.name != c.zone) or (c.pool and pool.name != c.pool):
                continue
            if not pod_allowed(c, host.name, host.type, set(host.tags)):
                continue
            if c.arch and c.arch not in host.architectures:
                continue
            cores, memory = max(1, c.cpu_count or 1), max(1024, c.mem or 2048)
            if cores > host.cores or memory > host.memory:  # ComposeMachineForm's bounds (the pod's hints)
                continue
            disks: list[tuple[str, int, StoragePool]] = []
            for g in c.storage or []:
                sp = vmhosts.pick_storage_pool(host, set(g.tags))
                if sp is None:
                    break
                disks.append((g.label, g.size, sp))
            else:
                if not disks:
                    disks = [("root", 8 * 1000**3, vmhosts.pick_storage_pool(host, set()))]  # type: ignore[list-item]
                if vmhosts.fits(host, cores, memory, disks):
                    return self.compose(
                        host,
                        cores=cores,
                        memory=memory,
                        disks=disks,
                        hostname=self.petname(),
                        zone_id=host.zone_id,
                        pool_id=host.pool_id,
                        architecture=host.architectures[0],
                        skip_commissioning=True,
                        dynamic=True,
                    )
        return None

    def remove_hosted_vm_hosts(self, m: Machine, *, force: bool) -> None:
        hosts = self.state.hosts_of(m.system_id)
        if not hosts:
            return
        if not force:
            names = ", ".join(h.name for h in hosts)
            raise bad_request(f"The following VM hosts must be removed first: {names}")
        for host in hosts:
            self.delete_vm_host(host, decompose=True)

    def delete_vm_host(self, host: VmHost, *, decompose: bool) -> None:
        """3.7 ``Pod.async_delete``: the machines of the host's VMs are deleted from MAAS either way;
        ``decompose`` only decides whether the VMs are destroyed on the host too (which the simulator does not
        model). The host's own machine stays as it is."""
        for sid in list(host.vms):
            vm = self.state.machines.get(sid)
            if vm is not None:
                self.delete_machine(vm)
        host.vms.clear()
        del self.state.vm_hosts[host.id]

    # -- HTTP ---------------------------------------------------------------------------------------------
    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope["path"]
        if self.faults.latency and path.startswith(router.API_PREFIX):
            await asyncio.sleep(self.faults.latency)
        query = scope["query_string"].decode("latin-1")
        api = path.startswith(router.API_PREFIX)
        fault = self.faults.write_fault(scope["method"], query) if api else None
        if fault is WriteFault.LATE_COMMIT:  # taken up only after the client has given up on the answer
            await asyncio.sleep(self.faults.late_commit_delay)
        raw_path = scope.get("raw_path")
        response = self.handle(
            scope["method"],
            path,
            scope["query_string"].decode("latin-1"),
            headers,
            b"".join(chunks),
            scheme=scope.get("scheme", "http"),
            raw_path=raw_path.decode("latin-1") if raw_path else None,
        )
        if response is None or fault is WriteFault.DROP_AFTER_COMMIT:
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4096")]}
            )
            await send({"type": "http.response.body", "body": b'{"system_id": ', "more_body": True})
            raise ConnectionDropped("simulated dropped connection")
        raw_headers = [
            (b"content-type", response.content_type.encode()),
            (b"content-length", str(len(response.body)).encode()),
        ]
        raw_headers += [(k.lower().encode(), v.encode()) for k, v in response.headers.items()]
        await send({"type": "http.response.start", "status": response.status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": response.body})

    def handle(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        body: bytes,
        *,
        scheme: str = "http",
        raw_path: str | None = None,
    ) -> Response | None:
        """Answer one request synchronously; None means "drop the connection" (fault injection).

        ``scheme``, the Host header and ``raw_path`` (the path as sent) make the URL an HMAC-SHA1 signature
        covers, as Django's ``build_absolute_uri`` does.
        """
        self.tick()
        try:
            url = f"{scheme}://{headers.get('host', '')}{raw_path or quote(path)}"
            response = self._dispatch(method, path, query, headers, body, url=url)
        except HttpError as exc:
            response = exc.response()
        except Exception as exc:  # MAAS answers anything unexpected with 500 and str(exc)
            log.exception("simulator handler failed")
            response = Response(500, str(exc).encode(), TEXT_TYPE)
        if response is not None and path.startswith(router.API_PREFIX):
            response.headers.setdefault("X-MAAS-API-Hash", self.api_hash)
        return response

    def _dispatch(
        self, method: str, path: str, query: str, headers: dict[str, str], body: bytes, *, url: str
    ) -> Response | None:
        if path == "/MAAS/api/version/":
            return Response(200, b"2.0", TEXT_TYPE)
        if path.rstrip("/") == "/MAAS/accounts/authenticate":
            return self._login(method, headers, body)
        if not path.startswith(router.API_PREFIX):
            return Response(404, b"Not Found", TEXT_TYPE)
        found = router.match(self.resources, path[len(router.API_PREFIX) :])
        if found is None:
            raise HttpError(404, f"Unknown API endpoint: {path}.")
        res, params, path_op = found
        q = parse_query(query)
        try:
            form = (
                parse_body(headers.get("content-type", ""), body) if method in ("POST", "PUT") else FormData()
            )
        except FormError as exc:
            raise bad_request(str(exc)) from None
        op = q.get("op") or form.get("op") or path_op
        self.counters[(method, res.template, op)] += 1
        if self.maas4 and res.vmhost:
            raise HttpError(410, vmhosts.GONE)
        if res.name != "DebugHandler":
            if self.faults.unavailable():
                raise HttpError(503, UNAVAILABLE, {"Retry-After": str(self.faults.retry_after)})
            if self.faults.drops():
                return None
        req = Request(method, path, q, form, headers, params, None, op)
        anon = res.anon_ops.get((method, op))
        if res.anonymous_only:
            if anon is None:
                raise machines.unrecognised(req)
            return self._call(anon, req)
        oauth = Authenticator.oauth_params(headers, q, form)
        if oauth is None:
            if anon is not None:
                return self._call(anon, req)
            if method in res.anon_methods:
                raise machines.unrecognised(req)
            raise challenge()
        urlencoded = headers.get("content-type", "").split(";")[0].strip().lower() == URLENCODED
        signed = SignedRequest.build(method, url, headers, query, form if urlencoded else None)
        req.user = self.auth.authenticate(oauth, signed)
        entry = res.ops.get((method, op))
        if entry is None:
            if method not in res.methods():
                allow = ", ".join(sorted(res.methods()))
                return Response(405, b"", TEXT_TYPE, {"Allow": allow})
            raise machines.unrecognised(req)
        return self._call(entry, req)

    def _call(self, entry: router.Operation, req: Request) -> Response:
        result = entry.fn(self, req)
        return result if isinstance(result, Response) else json_response(result)

    def _login(self, method: str, headers: dict[str, str], body: bytes) -> Response:
        """``POST /MAAS/accounts/authenticate/``: username + password -> a token (403, empty, otherwise)."""
        if method != "POST":
            return Response(405, b"", TEXT_TYPE, {"Allow": "POST"})
        try:
            form = parse_body(headers.get("content-type", ""), body)
        except FormError:
            return Response(403, b"", TEXT_TYPE)
        user = self.auth.users.get(form.get("username") or "")
        if user is None or user.password is None or user.password != form.get("password"):
            return Response(403, b"", TEXT_TYPE)
        return json_response(
            {
                "consumer_key": user.consumer_key,
                "name": form.get("consumer") or "Simulated token",
                "token_key": user.token_key,
                "token_secret": user.token_secret,
            }
        )
