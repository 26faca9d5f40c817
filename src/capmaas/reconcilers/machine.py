"""MaasMachine reconciliation: load the scope, then hand the machine to the provisioner of its mode.

A pass loads the owner Machine, the Cluster and the MaasCluster from the caches, honours the pause contract,
waits for the cluster infrastructure and the bootstrap data, opens the MAAS session of the MaasCluster's
credentials, and dispatches on ``spec.provisioningMode`` to a
:class:`~capmaas.reconcilers.lifecycle.Provisioner` (:class:`~capmaas.reconcilers.baremetal.BareMetal`,
:class:`~capmaas.reconcilers.lxd.Lxd`), which the shared :class:`~capmaas.reconcilers.lifecycle.Lifecycle`
drives. Deletion starts here too: nothing is sent to MAAS while clusterctl moves the object (the machine lives
on) or while the cluster is paused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from capmaas.api import conditions as C
from capmaas.api.related import CapiCluster, CapiMachine
from capmaas.reconcilers import addresses, identity, reuse
from capmaas.reconcilers.baremetal import BareMetal
from capmaas.reconcilers.credentials import DEFAULT_REF, connect_ref
from capmaas.reconcilers.errors import ReconcileError, TransientError
from capmaas.reconcilers.handoff import Handoff
from capmaas.reconcilers.keys import MACHINE_FINALIZER, REMEDIATION
from capmaas.reconcilers.lifecycle import Lifecycle, MachineSettings, Provisioner
from capmaas.reconcilers.lxd import Lxd
from capmaas.reconcilers.owners import Owners, recheck
from capmaas.reconcilers.ports import (
    MAASMACHINE,
    Body,
    KubePort,
    MaasConnector,
    MaasCredentials,
    MaasPort,
    NullRecorder,
    Recorder,
)
from capmaas.reconcilers.scope import MachineScope, Requeue, is_paused, owner_ref
from capmaas.reconcilers.tenancy import Tenancy

__all__ = ["MachineReconciler", "MachineScope", "MachineSettings"]


class MachineReconciler:
    """Reconciles one MaasMachine per call; holds only soft, rebuildable memory between calls."""

    def __init__(
        self,
        kube: KubePort,
        connector: MaasConnector,
        *,
        default_credentials: MaasCredentials | None,
        settings: MachineSettings | None = None,
        recorder: Recorder | None = None,
        clock: Callable[[], float] = time.time,
        tenancy: Tenancy | None = None,
    ) -> None:
        self.kube = kube
        self.connector = connector
        self.default_credentials = default_credentials
        self.settings = settings or MachineSettings()
        recorder = recorder or NullRecorder()
        self.life = Lifecycle(kube, settings=self.settings, recorder=recorder, clock=clock, tenancy=tenancy)
        ownership = self.life.ownership
        self.bare_metal = BareMetal(kube, ownership, settings=self.settings, recorder=recorder, clock=clock)
        self.lxd = Lxd(kube, ownership, settings=self.settings, recorder=recorder, clock=clock)
        self.provisioners: Mapping[str, Provisioner] = {p.mode: p for p in (self.bare_metal, self.lxd)}
        self.owners = Owners(kube)
        self.handoff = Handoff()

    def provisioner(self, scope: MachineScope) -> Provisioner:
        """The provisioner of the machine's ``spec.provisioningMode`` (bare metal when unset)."""
        return self.provisioners.get(scope.want.provisioning_mode, self.bare_metal)

    async def reconcile(self, body: Body) -> Requeue:
        scope = MachineScope(self.kube, MAASMACHINE, body)
        try:
            if scope.deleting:
                return recheck(scope, await self._delete(scope))
            return recheck(scope, await self._normal(scope))
        except ReconcileError as exc:
            if scope.deleting:  # the deletion's condition says why it does not go on (not just the log)
                scope.set_deletion(exc.reason, exc.message)
            else:
                scope.wait(exc.reason, exc.message)
            raise
        finally:
            await scope.close()

    # --- loading -----------------------------------------------------------------------------------------
    async def load(self, scope: MachineScope) -> str | None:
        """Fill the scope from the caches (an owner a watch filter hides: from the apiserver, see
        :mod:`~capmaas.reconcilers.owners`); returns why it cannot continue (a waiting reason), or None."""
        ref = owner_ref(scope.body, "Machine")
        if ref is None:
            scope.wait(C.WAITING_FOR_MACHINE_OWNER_REASON, "waiting for Cluster API to set the Machine owner")
            return C.WAITING_FOR_MACHINE_OWNER_REASON
        scope.machine = CapiMachine.view(await self.owners.get(scope, "machines", str(ref.get("name"))))
        if scope.machine is None:
            scope.wait(C.WAITING_FOR_MACHINE_OWNER_REASON, f"owner Machine {ref.get('name')} not found yet")
            return C.WAITING_FOR_MACHINE_OWNER_REASON
        name = scope.cluster_name
        # The Cluster's Warning is its MaasCluster's (one, not one per machine of the cluster).
        scope.cluster = CapiCluster.view(
            await self.owners.get(scope, "clusters", name, warn=False) if name else None
        )
        if scope.cluster is None:
            scope.wait(C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON, f"Cluster {name} not found yet")
            return C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON
        if scope.cluster.infra_name:
            scope.maascluster = self.kube.get_maascluster(scope.namespace, scope.cluster.infra_name)
        return None

    async def session(self, scope: MachineScope) -> MaasPort | None:
        """The MAAS connection of this pass, identity checked (:mod:`~capmaas.reconcilers.identity`): None
        when the MaasMachine's references came from another identity (forgotten; send nothing)."""
        if scope.maascluster is None and scope.deleting and scope.cluster_name:
            # The Cluster may already be gone (namespace deletion): the MaasCluster conventionally shares its
            # name; without one, the credentials recorded with the references (never silently the default).
            scope.maascluster = self.kube.get_maascluster(scope.namespace, scope.cluster_name)
        ref = identity.machine_ref(scope)
        if scope.maascluster is None and not (
            scope.deleting and (ref != DEFAULT_REF or self.default_credentials)
        ):
            raise TransientError(
                C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON,
                "the Cluster's MaasCluster is not found",
                delay=15,
            )
        if (kept := identity.kept_ref(scope, ref)) is not None:
            port, _ = await connect_ref(
                self.kube, self.connector, scope.namespace, kept, self.default_credentials
            )
            if identity.is_bound_to(scope, port):
                identity.connected(scope, port, kept)
                return port
        port, _ = await connect_ref(self.kube, self.connector, scope.namespace, ref, self.default_credentials)
        identity.connected(scope, port, ref)
        if identity.check_machine(scope, port):
            return port
        await scope.flush()
        return None

    # --- normal ------------------------------------------------------------------------------------------
    async def _normal(self, scope: MachineScope) -> Requeue:
        if await self.load(scope) is not None:
            return Requeue()
        paused, why = is_paused(scope.body, scope.cluster)
        scope.set_paused_condition(paused, why)
        if paused:
            return Requeue()
        scope.add_finalizer(MACHINE_FINALIZER)
        # Remediation hook (issue 24): while a MaasRemediation holds the server (power cycle, redeploy) this
        # object sends nothing to MAAS; removing the hold wakes it (capmaas.reconcilers.remediation).
        if scope.annotation(REMEDIATION):
            return Requeue()
        assert scope.cluster is not None
        assert scope.machine is not None
        if not scope.want.system_id:
            if not scope.cluster.infra_provisioned:
                scope.wait(
                    C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON, "Cluster infrastructure not provisioned"
                )
                return Requeue()
            # Adoption hook (issue 24): nothing is deployed on an adopted machine, so no bootstrap data.
            if not scope.machine.bootstrap_secret and scope.want.adopt is None:
                scope.wait(
                    C.WAITING_FOR_BOOTSTRAP_DATA_REASON, "Machine.spec.bootstrap.dataSecretName not set"
                )
                return Requeue()
        port = await self.session(scope)
        if port is None:
            return Requeue(0.0)
        return await self.life.run(self.provisioner(scope), scope, port)

    # --- delete ------------------------------------------------------------------------------------------
    async def _delete(self, scope: MachineScope) -> Requeue:
        """Hands off when the finalizer is not ours (any more), clusterctl is moving the object (what the
        provisioner keeps lives on in MAAS: :mod:`~capmaas.reconcilers.handoff`) or the cluster is
        paused; otherwise the provisioner deletes."""
        if MACHINE_FINALIZER not in scope.finalizers:
            return Requeue()
        p = self.provisioner(scope)
        await self.load(scope)
        if scope.cluster is None and scope.cluster_name:  # the Machine is gone: the Cluster by its label
            scope.cluster = CapiCluster.view(
                await self.owners.get(scope, "clusters", scope.cluster_name, warn=False)
            )
        if self.handoff.moving_out(scope, scope.cluster, scope.cluster_name):
            scope.set_deletion(C.DELETE_FOR_MOVE_REASON, f"moved; {p.kept} kept")
            scope.remove_finalizer(MACHINE_FINALIZER)
            return Requeue()
        paused, why = is_paused(scope.body, scope.cluster)
        scope.set_paused_condition(paused, why)
        if paused:
            return Requeue()
        if not identity.holds_maas(scope):  # nothing to give back: MAAS is not contacted
            self.lxd.placer.forget(scope.uid)
            done = self.life.finished(scope)
        elif (port := await self.session(scope)) is None:
            done = self.life.finished(scope)  # references of another identity, forgotten: nothing of ours
        else:
            done = await self.life.delete(p, scope, port)
        if MACHINE_FINALIZER not in scope.finalizers:  # released: the addresses go back to their pools
            await addresses.drop_claims(scope, self.kube)
            await reuse.drop_claims(scope, self.kube)  # node reuse hook: a server it claimed is free again
        return done
