"""The MaasIPPool reconciler: parse, check against MAAS when due, publish status."""

from __future__ import annotations

import ipaddress
import time
from typing import Any

from pydantic import ValidationError

from capmaas.api import conditions as C
from capmaas.api.ip_pools import InvalidPoolAddresses, PoolAddresses, parse_pool
from capmaas.api.v1beta1 import MaasIPPoolSpec
from capmaas.reconcilers.credentials import DEFAULT_REF, SECRET_REF_PREFIX, connect_ref, maas_step
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.ippool.maascheck import MaasFacts, check_against_maas
from capmaas.reconcilers.ippool.objects import (
    ADDRESSES,
    POOL_RECHECK,
    POOLS,
    IpamKube,
    condition,
    meta_of,
    same_condition,
    used_addresses,
    with_condition,
)
from capmaas.reconcilers.ports import Body, KubePort, MaasConnector, MaasCredentials, MaasPort
from capmaas.reconcilers.scope import Requeue


class PoolReconciler:
    """One pass over a MaasIPPool: parse, check against MAAS when due, publish status."""

    def __init__(
        self,
        kube: KubePort,
        ipam: IpamKube,
        connector: MaasConnector,
        *,
        default_credentials: MaasCredentials | None,
        recheck: float = POOL_RECHECK,
    ) -> None:
        self.kube, self.ipam, self.connector = kube, ipam, connector
        self.default, self.recheck = default_credentials, recheck
        self._facts: dict[str, MaasFacts] = {}  # pool UID -> the last check
        self._warned: dict[str, str] = {}  # pool UID -> the reserved-range warning last posted as an Event

    def forget(self, uid: str) -> None:
        self._facts.pop(uid, None)
        self._warned.pop(uid, None)

    async def reconcile(self, body: Body) -> Requeue:
        meta = meta_of(body)
        ns, name, uid = str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
        generation = int(meta.get("generation") or 0)
        if meta.get("deletionTimestamp"):
            self.forget(uid)
            return Requeue()
        try:
            spec = MaasIPPoolSpec.from_body(body.get("spec") or {})
            parsed = parse_pool(
                spec.subnet,
                spec.addresses,
                spec.excluded_addresses or (),
                gateway=spec.gateway,
                prefix=spec.prefix,
            )
        except (ValidationError, InvalidPoolAddresses, ValueError) as exc:
            text = str(exc).splitlines()[0] if isinstance(exc, ValidationError) else str(exc)
            await self._publish(body, None, None, (C.INVALID_POOL_REASON, text), "")
            return Requeue()
        ref = SECRET_REF_PREFIX + spec.identity_ref.name if spec.identity_ref else DEFAULT_REF
        try:
            port, _ = await connect_ref(self.kube, self.connector, ns, ref, self.default)
        except TransientError as exc:
            self.forget(uid)  # facts of the identity it had are not kept for whatever comes next
            await self._publish(body, None, None, (exc.reason, exc.message), "")
            raise
        facts = self._facts.get(uid)
        if (
            facts is None
            or facts.identity != port.identity
            or facts.generation != generation
            or time.monotonic() - facts.at > self.recheck
        ):
            current = facts is not None and facts.identity == port.identity and facts.generation == generation
            try:
                facts = await self._check(port, spec, parsed, generation, name)
            except TransientError as exc:
                if not current:  # nothing checked for this spec and identity: claims must wait, and see why
                    self.forget(uid)
                    await self._publish(body, parsed, None, (exc.reason, exc.message), "")
                raise  # a due recheck that failed: what this identity said stays until one succeeds
            self._facts[uid] = facts
        if facts.problem is None and facts.gateway and not spec.gateway:
            parsed = parse_pool(  # the MAAS gateway is never handed out either
                spec.subnet,
                spec.addresses,
                spec.excluded_addresses or (),
                gateway=facts.gateway,
                prefix=spec.prefix,
            )
        if facts.warning and self._warned.get(uid) != facts.warning:
            self._warned[uid] = facts.warning
            self.ipam.emit_event(body, "Warning", C.POOL_OUTSIDE_RESERVED_RANGE_REASON, facts.warning)
        await self._publish(body, parsed, facts, facts.problem, facts.warning)
        return Requeue(after=self.recheck)

    async def _check(
        self, port: MaasPort, spec: MaasIPPoolSpec, parsed: PoolAddresses, generation: int, name: str
    ) -> MaasFacts:
        with maas_step(f"checking MaasIPPool {name}"):
            subnets = await port.subnets()
            ranges = await port.ip_ranges()
        problem, subnet, warning = check_against_maas(spec, parsed, subnets, ranges)
        gateway = spec.gateway or (subnet.gateway_ip if subnet is not None else None) or None
        prefix = (
            spec.prefix
            if spec.prefix is not None
            else ipaddress.ip_network(spec.subnet, strict=False).prefixlen
        )
        return MaasFacts(port.identity, generation, time.monotonic(), problem, gateway, prefix, warning)

    async def _publish(
        self,
        body: Body,
        parsed: PoolAddresses | None,
        facts: MaasFacts | None,
        problem: tuple[str, str] | None,
        warning: str,
    ) -> None:
        meta = meta_of(body)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        status: dict[str, Any] = {"observedGeneration": meta.get("generation")}
        if parsed is not None:
            used = used_addresses(self.ipam.items(ADDRESSES, ns), name)
            held = {a for a in used if parsed.holds(a)}
            status.update(addresses=parsed.size, used=len(used), free=parsed.count_free(held))
        else:
            status.update(addresses=None, used=None, free=None)
        ok = problem is None and facts is not None
        if ok and facts is not None:
            status.update(gateway=facts.gateway, prefix=facts.prefix, identity=facts.identity)
        else:
            status.update(gateway=None, prefix=None, identity=None)  # never facts of another identity
        reason, message = (C.READY_REASON, warning) if problem is None else problem
        old = body.get("status") or {}
        same = all(old.get(k) == v for k, v in status.items()) and same_condition(
            condition(body, C.READY_CONDITION), ok, reason, message
        )
        ready = condition(body, C.READY_CONDITION)
        if same and ready is not None and ready.get("observedGeneration") == meta.get("generation"):
            return
        status["conditions"] = with_condition(
            old.get("conditions"), C.READY_CONDITION, ok, reason, message, generation=meta.get("generation")
        )
        await self.ipam.patch(POOLS, ns, name, {"status": status}, status=True)
