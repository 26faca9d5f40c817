"""The NODE_STATUS lifecycle: what allocate, deploy, release, erase, commission and compose do to a machine.

Asynchronous steps (deploy completing, a release observing power-off, erasing, commissioning) are timers in
``State.timers``; :meth:`Lifecycle.tick` runs the due ones. The simulator calls ``tick`` at the start of every
request and from its background task, so a test that reads after a deadline always sees the new state.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Callable, Sequence
from typing import Any

from capmaas_dev.simulator.faults import Faults, Timings
from capmaas_dev.simulator.http import HttpError
from capmaas_dev.simulator.inventory import new_system_id
from capmaas_dev.simulator.models import RELEASABLE, Disk, Interface, Machine, NodeStatus, StoragePool, VmHost
from capmaas_dev.simulator.serialize import machine_dict
from capmaas_dev.simulator.state import State

S = NodeStatus
PETNAME_A = ["able", "brave", "calm", "eager", "fair", "keen", "noble", "proud", "quick", "wise"]
PETNAME_B = ["ant", "bee", "cat", "doe", "eel", "fox", "gnu", "hen", "owl", "yak"]
DeployHook = Callable[[dict[str, Any]], object]


class Lifecycle:
    state: State
    timings: Timings
    faults: Faults
    clock: Callable[[], float]
    rng: random.Random
    maas4: bool
    on_deployed: DeployHook | None
    #: Runs when a Deployed machine powered on by ``op=power_on`` has booted (see :meth:`power_action`).
    on_powered_on: DeployHook | None
    #: (system_id, "on"/"off") of every power action MAAS sent for ``op=power_on``/``op=power_off``.
    power_log: list[tuple[str, str]]
    violations: list[str]
    _hook_tasks: set[asyncio.Future[Any]]

    def tick(self) -> int:
        """Run every timer that is due now (including ones scheduled by the steps it runs)."""
        done = 0
        while True:
            due = self.state.pop_due(self.clock())
            if not due:
                return done
            for machine, action in due:
                getattr(self, f"_on_{action}")(machine)
                done += 1

    def _after(self, m: Machine, seconds: float, action: str) -> None:
        self.state.schedule(m, self.clock() + seconds, action)

    @staticmethod
    def switch_power(m: Machine, state: str) -> None:
        """What MAAS's power driver does: nothing for ``manual`` (MAAS neither switches nor queries it, so its
        ``power_state`` stays whatever it was, typically ``unknown``)."""
        if m.power_type != "manual":
            m.power_state = state

    def power_action(self, m: Machine, state: str) -> bool:
        """A power ON/OFF workflow the API asked for (``op=power_on`` outside Allocated, ``op=power_off``):
        False when MAAS sends none (``manual`` power). Every one sent is logged in ``power_log``. Powering on
        a Deployed machine that was off boots its OS: ``on_powered_on`` runs ``Timings.boot`` seconds later
        (the workload's kubelet reporting again), unless it was powered off or changed state meanwhile."""
        if m.power_type == "manual":
            return False
        was = m.power_state
        self.power_log.append((m.system_id, state))
        self.switch_power(m, state)
        m.boot_due = None
        if state == "on" and was != "on" and m.status is S.DEPLOYED:
            m.boot_due = self.clock() + self.timings.boot
            self._after(m, self.timings.boot, "booted")
        return True

    def _on_booted(self, m: Machine) -> None:
        """A boot's timer; an earlier boot's (powered off and on again meanwhile) finds ``boot_due`` moved."""
        due, m.boot_due = m.boot_due, None
        if due is None or self.clock() < due or m.power_state != "on":
            m.boot_due = due
            return
        if self.on_powered_on is not None:
            self._run_hook(self.on_powered_on(machine_dict(self.state, m, self.maas4)))

    def _run_hook(self, result: object) -> None:
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._hook_tasks.add(task)
            task.add_done_callback(self._hook_tasks.discard)

    # -- allocate / deploy ---------------------------------------------------------------------------------
    def acquire(self, m: Machine, username: str, agent_name: str = "", comment: str | None = None) -> None:
        if m.owner is not None and m.owner != username:
            self.violations.append(f"machine {m.system_id} acquired by {username} while owned by {m.owner}")
        self.state.set_status(m, S.ALLOCATED)
        self.state.create_acquired_filesystems(m)
        m.owner = username
        self.state.set_agent(m, agent_name)
        m.status_message = "Allocated" if not comment else f"Allocated - {comment}"
        m.status_action = ""

    def start_deploy(self, m: Machine) -> None:
        """Deploying; the AUTO IPs come in MAAS's post-commit hook, so the deploy answer has none yet.

        That hook runs before MAAS answers, and when it cannot claim an address (a ``reservedips/`` entry
        whose subnet the NIC has no AUTO link on, an exhausted subnet) MAAS puts the machine back to
        Allocated and answers with the claim's error (404/503): so the claim is planned here, first, and
        its error raised with the machine still Allocated (``Node.start``'s errbacks).
        """
        self.state.plan_auto_ips(m)
        self.state.set_status(m, S.DEPLOYING)
        self.switch_power(m, "on")
        m.error_description = ""
        m.status_message = "Deploying"
        if any(i.auto and not i.ip for i in m.interfaces):
            low, high = self.timings.auto_ip
            self._after(m, self.rng.uniform(low, high) if high > low else low, "auto_ips")
        self._after(m, self.timings.deploy, "deployed")

    def _on_auto_ips(self, m: Machine) -> None:
        self._claim_late(m)

    def _claim_late(self, m: Machine) -> None:
        """The claim planned at deploy, made now; an address taken in between leaves the link without one."""
        try:
            self.state.claim_auto_ips(m)
        except HttpError:
            m.cached_json = None

    def _on_deployed(self, m: Machine) -> None:
        self._claim_late(m)  # a deploy faster than the IP claim still boots with its address
        if self.faults.goes_broken():
            self.state.set_status(m, S.BROKEN)
            self.switch_power(m, "off")
            m.error_description = "Simulated hardware failure"
            m.status_message = "Marked broken"
            return
        if self.faults.deploy_fails():
            self.state.set_status(m, S.FAILED_DEPLOYMENT)
            m.error_description = "Simulated deployment failure: curtin install failed"
            m.status_message = "Failed deployment"
            return
        self.state.set_status(m, S.DEPLOYED)
        m.status_message = "Deployed"
        if (m.register_vmhost or m.install_kvm) and not self.state.hosts_of(m.system_id):
            self.register_vm_host(m)
        if self.on_deployed is not None:
            self._run_hook(self.on_deployed(machine_dict(self.state, m, self.maas4)))

    def abort(self, m: Machine) -> None:
        if m.status is S.DEPLOYING:
            self.switch_power(m, "off")
            self.state.set_status(m, S.ALLOCATED)
        elif m.status is S.DISK_ERASING:
            self.state.set_status(m, S.FAILED_DISK_ERASING)
        elif m.status is S.COMMISSIONING:
            self.state.set_status(m, S.NEW)
            self.switch_power(m, "off")
        else:  # TESTING
            self.state.set_status(m, S.READY if m.commissioned else S.NEW)
        m.status_message = "Aborted"

    # -- release / erase -----------------------------------------------------------------------------------
    def start_release(self, m: Machine, erase: bool) -> None:
        """``Node._release``: a machine MAAS cannot power-query (``manual``) or one already off is READY at
        once (no Releasing step); others are Releasing until the power-off is seen."""
        self._clear_deployment(m)
        if erase:
            self.state.set_status(m, S.DISK_ERASING)
            self.switch_power(m, "on")
            m.status_message = "Erasing disks"
            self._after(m, self.timings.erase, "erased")
            return
        self.state.set_status(m, S.RELEASING)
        m.status_message = "Releasing"
        if self._releases_at_once(m):
            self.finalize_release(m)
        else:
            self._after(m, self.timings.release, "released")

    @staticmethod
    def _releases_at_once(m: Machine) -> bool:
        return m.power_state == "off" or m.power_type == "manual"

    def _clear_deployment(self, m: Machine) -> None:
        """``Node._release``'s clean-up: the deployment's settings and the acquired filesystems go; bonds and
        VLAN interfaces made while allocated stay (they are not ``acquired``)."""
        self.state.clear_acquired_filesystems(m)
        self.state.set_agent(m, "")
        m.osystem = m.distro_series = ""
        m.hwe_kernel = None
        m.ephemeral_deploy = m.enable_hw_sync = m.install_kvm = m.register_vmhost = False
        m.user_data = None

    def _on_released(self, m: Machine) -> None:
        self.switch_power(m, "off")
        self.finalize_release(m)

    def _on_erased(self, m: Machine) -> None:
        self.switch_power(m, "off")
        self.finalize_release(m)

    def _on_powered_off(self, m: Machine) -> None:
        self.switch_power(m, "off")
        m.cached_json = None

    def finalize_release(self, m: Machine) -> None:
        """``_finalize_release``: composed-by-allocate machines vanish; the rest free their AUTO IPs and
        return READY (NEW when commissioning never passed), unowned."""
        if m.dynamic:
            self.state.release_auto_ips(m)
            self.delete_machine(m)
            return
        self.state.release_auto_ips(m)
        self.state.set_status(m, S.READY if m.commissioned else S.NEW)
        m.owner = None
        m.annotations = {}
        m.error_description = ""
        m.status_message = "Released"

    def mark_broken(self, m: Machine, comment: str) -> None:
        """``Node.mark_broken``: a releasable machine is released first (``_release``), then BROKEN. One
        that is off or ``manual`` is finalized at once (owner cleared, AUTO IPs freed, power left alone); one
        that is on is powered off and keeps its owner (MAAS finalizes only RELEASING machines it sees off)."""
        previous = m.status
        if previous in RELEASABLE:
            self._clear_deployment(m)
            if self._releases_at_once(m):
                self.state.release_auto_ips(m)
                m.owner = None
                m.annotations = {}
        self.state.set_status(m, S.BROKEN)
        m.previous_status = previous
        if previous in RELEASABLE and not self._releases_at_once(m):
            self._after(m, self.timings.release, "powered_off")  # scheduled in the BROKEN epoch
        m.error_description = comment
        m.status_message = "Marked broken"

    def mark_fixed(self, m: Machine) -> None:
        if m.previous_status is S.DEPLOYED and m.owner is not None:
            self.state.set_status(m, S.DEPLOYED)
            self.switch_power(m, "on")
        else:
            self.state.set_status(m, S.READY)
            m.owner = None
            m.annotations = {}
        m.error_description = ""
        m.status_message = "Marked fixed"

    # -- commission / compose ------------------------------------------------------------------------------
    def commission(self, m: Machine) -> None:
        self.state.set_status(m, S.COMMISSIONING)
        self.switch_power(m, "on")
        m.status_message = "Commissioning"
        self._after(m, self.timings.commission, "commissioned")

    def _on_commissioned(self, m: Machine) -> None:
        self.switch_power(m, "off")
        m.commissioned = True
        if self.faults.goes_broken():
            self.state.set_status(m, S.FAILED_COMMISSIONING)
            m.error_description = "Simulated commissioning failure"
            return
        self.state.set_status(m, S.READY)
        m.status_message = "Ready"

    def petname(self) -> str:
        while True:
            name = f"{self.rng.choice(PETNAME_A)}-{self.rng.choice(PETNAME_B)}"
            if name not in self.state.by_hostname:
                return name
            name = f"{name}-{self.rng.randrange(1000)}"
            if name not in self.state.by_hostname:
                return name

    def compose(
        self,
        host: VmHost,
        *,
        cores: int,
        memory: int,
        disks: list[tuple[str, int, StoragePool]],
        hostname: str,
        zone_id: int,
        pool_id: int,
        architecture: str,
        skip_commissioning: bool = False,
        dynamic: bool = False,
        nics: Sequence[tuple[str, int | None, str | None]] = (),
    ) -> Machine:
        """Create the VM's machine and charge the host; the caller has checked the capacity.

        One NIC per ``(name, subnet_id, ip)`` of ``nics`` (the compose ``interfaces`` labels; none asked:
        one ``eth0``). A NIC sits on its subnet with a static ``ip``, or without one as an AUTO link, which
        gets its address when deployment starts, like any machine; without a subnet it is on the host's own
        network (LXD bridges it there).
        """
        state = self.state
        sid = new_system_id(state, self.rng)
        host_machine = state.machines.get(host.host_system_id or "")
        host_subnet = (
            next((i.subnet_id for i in host_machine.interfaces if i.subnet_id), None)
            if host_machine
            else None
        )
        interfaces = []
        for name, asked, ip in nics or [("eth0", None, None)]:
            iface_id = state.new_id("interface")
            mac = f"00:16:3e:{(iface_id >> 16) & 255:02x}:{(iface_id >> 8) & 255:02x}:{iface_id & 255:02x}"
            subnet_id = host_subnet if asked is None and ip is None else asked
            interfaces.append(
                Interface(iface_id, name, mac, subnet_id, ip, auto=ip is None and subnet_id is not None)
            )
        m = Machine(
            id=state.new_id("machine"),
            system_id=sid,
            hostname=hostname,
            domain_id=state.default_domain_id,
            zone_id=zone_id,
            pool_id=pool_id,
            architecture=architecture,
            cpu_count=cores,
            memory=memory,
            disks=[Disk(state.new_id("disk"), label, size, pool_id=pool.id) for label, size, pool in disks],
            interfaces=interfaces,
            power_type=host.type,
            power_state="off",
            status=S.READY if skip_commissioning else S.NEW,
            pod_id=host.id,
            virtualmachine_id=state.new_id("vm"),
            dynamic=dynamic,
            commissioned=skip_commissioning,
        )
        state.add_machine(m)
        storage: dict[int, int] = {}
        for _, size, pool in disks:
            storage[pool.id] = storage.get(pool.id, 0) + size
        host.vms[sid] = (cores, memory, storage)
        if not skip_commissioning:
            self.commission(m)
        return m

    def delete_machine(self, m: Machine) -> None:
        """Delete (and for a composed VM, decompose: the host gets its resources back)."""
        if m.pod_id is not None and m.pod_id in self.state.vm_hosts:
            self.state.vm_hosts[m.pod_id].vms.pop(m.system_id, None)
        self.state.remove_machine(m)

    def register_vm_host(self, m: Machine) -> VmHost:
        """``register_vmhost=true`` once Deployed: the machine becomes an LXD VM host of its own size."""
        state = self.state
        hid = state.new_id("vmhost")
        pool = StoragePool(
            state.new_id("storage_pool"),
            "default",
            sum(d.size for d in m.disks),
            default=True,
        )
        host = VmHost(
            id=hid,
            name=m.hostname,
            zone_id=m.zone_id,
            pool_id=m.pool_id,
            cores=m.cpu_count,
            memory=m.memory,
            storage_pools=[pool],
            type="lxd" if m.register_vmhost else "virsh",
            host_system_id=m.system_id,
            architectures=[m.architecture],
            power_address=f"https://{m.hostname}:8443",
        )
        state.vm_hosts[hid] = host
        return host
