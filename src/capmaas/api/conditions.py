"""Condition types and reasons written by capmaas, as named constants.

Why constants: reconcilers, tests, dashboards and users' alerts all match on these strings, so each one
is defined exactly once, and code never compares against a literal (or, worse, a message text).
Conditions use the ``metav1.Condition`` shape (``capmaas.api.v1beta1.Condition``); CAPI mirrors our
``Ready`` into the owning Machine's / Cluster's ``InfrastructureReady``.

Naming: ``*_CONDITION`` is a condition ``type``; ``*_REASON`` is a ``reason`` (CamelCase, as the apiserver's
condition reason pattern requires).
"""

from __future__ import annotations

# --- condition types ------------------------------------------------------------------------------

READY_CONDITION = "Ready"  # summary of the object; covers the whole lifecycle, deletion included
PAUSED_CONDITION = "Paused"  # CAPI's pause contract: True while the Cluster or the object is paused
INFRASTRUCTURE_READY_CONDITION = "InfrastructureReady"  # CAPI's copy of our Ready on Machine/Cluster
MACHINE_PROVISIONED_CONDITION = "MachineProvisioned"  # MaasMachine: a MAAS machine is allocated and deployed
MAAS_CONNECTED_CONDITION = "MaasConnected"  # MaasCluster: the MAAS API answers with the given credentials
IDENTITY_REF_APPLIED_CONDITION = "IdentityRefApplied"  # MaasCluster: identityRef in use (False: refs held)
DNS_READY_CONDITION = "DNSReady"  # MaasCluster: the API server DNS record exists and lists the control plane
FAILURE_DOMAINS_DISCOVERED_CONDITION = "FailureDomainsDiscovered"  # MaasCluster: zones read from MAAS / spec
LXD_HOST_SELECTED_CONDITION = "LXDHostSelected"  # LXD MaasMachine: a VM host was chosen by placement
LXD_RESOURCES_ALLOCATED_CONDITION = "LXDResourcesAllocated"  # LXD: cores/memory/disk reserved on that host
LXD_VM_CREATED_CONDITION = "LXDVMCreated"  # LXD: MAAS composed the VM and it finished commissioning
LXD_VM_DEPLOYED_CONDITION = "LXDVMDeployed"  # LXD: the composed VM is Deployed and powered on
NODE_PROVIDER_ID_CONDITION = "NodeProviderIDSet"  # MaasMachine: written once the Node step hit a problem
SETTINGS_APPLIED_CONDITION = "SettingsApplied"  # every spec field the user set is applied through MAAS
MAAS_TRANSPORT_SECURE_CONDITION = "MaasTransportSecure"  # MaasCluster: TLS verified (or loopback HTTP)
MAAS_CAPACITY_CONDITION = "MaasCapacity"  # MaasMachineTemplate: capacity counted from MAAS's Ready servers
POWER_CYCLED_CONDITION = "PowerCycled"  # MaasRemediation: MAAS powered the server off and on again
REDEPLOYED_CONDITION = "Redeployed"  # MaasRemediation: the same server was released and deployed again

# --- reasons: success -----------------------------------------------------------------------------

READY_REASON = "Ready"  # Ready=True: everything the object needs is in place
PROVISIONED_REASON = "Provisioned"  # MachineProvisioned=True: deployed and powered on
NOT_PAUSED_REASON = "NotPaused"  # Paused=False (the CAPI helper's reason)
MACHINE_ALLOCATED_REASON = "MachineAllocated"  # a MAAS machine is held for us, not deploying yet
MACHINE_DEPLOYING_REASON = "MachineDeploying"  # MAAS is installing the image (status Deploying)
MACHINE_DEPLOYED_REASON = "MachineDeployed"  # MAAS reports Deployed
DNS_RECORD_READY_REASON = "DNSRecordReady"  # DNSReady=True: the record lists every running control-plane IP
CUSTOM_ENDPOINT_REASON = "CustomEndpoint"  # DNSReady=True without DNS: the user gave the endpoint host
FAILURE_DOMAINS_FROM_SPEC_REASON = "FromSpec"  # failure domains taken from spec.failureDomains
FAILURE_DOMAINS_FROM_MAAS_REASON = "FromMaas"  # failure domains discovered from the MAAS zones
MAAS_CONNECTED_REASON = "Connected"  # MaasConnected=True
TLS_VERIFIED_REASON = "TLSVerified"  # MaasTransportSecure=True: https with the certificate verified
LOOPBACK_HTTP_REASON = "LoopbackHTTP"  # MaasTransportSecure=True: http:// to a loopback address only
TLS_VERIFICATION_DISABLED_REASON = "TLSVerificationDisabled"  # MaasTransportSecure=False: identity's opt-in
PLAINTEXT_HTTP_REASON = "PlaintextHTTP"  # MaasTransportSecure=False: http:// by the identity's opt-in
VM_HOST_SELECTED_REASON = "VMHostSelected"  # LXDHostSelected=True
RESOURCES_RESERVED_REASON = "ResourcesReserved"  # LXDResourcesAllocated=True
VM_COMPOSED_REASON = "VMComposed"  # LXDVMCreated=True
VM_COMMISSIONING_REASON = "VMCommissioning"  # LXDVMCreated=False: composed, MAAS still commissioning it
ALL_SETTINGS_APPLIED_REASON = "AllSettingsApplied"  # SettingsApplied=True
COUNTED_IN_MAAS_REASON = "CountedInMaas"  # MaasCapacity=True: capacity from the matching servers' hardware
NO_MATCHING_SERVERS_REASON = "NoMatchingServers"  # MaasCapacity=False: none Ready matches; the minimums
MAAS_NOT_LISTED_REASON = "MaasNotListed"  # MaasCapacity=False: MAAS not listed (yet); the minimums
INSUFFICIENT_MAAS_CAPACITY_REASON = "InsufficientMaasCapacity"  # Warning Event: MachineDeployment over-asks

# --- reasons: waiting on something outside capmaas ------------------------------------------------

WAITING_FOR_CLUSTER_OWNER_REASON = "WaitingForClusterOwner"  # MaasCluster has no Cluster ownerRef yet
WAITING_FOR_MACHINE_OWNER_REASON = "WaitingForMachineOwner"  # MaasMachine has no Machine ownerRef yet
WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON = "WaitingForClusterInfrastructure"  # Cluster infra not provisioned
WAITING_FOR_BOOTSTRAP_DATA_REASON = "WaitingForBootstrapData"  # Machine.spec.bootstrap.dataSecretName unset
WAITING_FOR_CONTROL_PLANE_REASON = "WaitingForControlPlane"  # DNS: no running control-plane machine has an IP
PAUSED_REASON = "Paused"  # Paused=True: Cluster.spec.paused or the cluster.x-k8s.io/paused annotation
EXTERNALLY_MANAGED_REASON = "ExternallyManaged"  # MaasCluster marked cluster.x-k8s.io/managed-by

# --- reasons: failures and retries ----------------------------------------------------------------

NO_MACHINE_AVAILABLE_REASON = "NoMachineAvailable"  # MAAS has no Ready machine matching the constraints
CONSTRAINTS_REFUSED_REASON = "ConstraintsRefused"  # MAAS's allocate form refused a constraint (its text)
DEPLOYMENT_FAILED_REASON = "DeploymentFailed"  # MAAS reports Failed deployment (machine released, retrying)
DEPLOYMENT_TIMED_OUT_REASON = "DeploymentTimedOut"  # Deploying for longer than the deploy timeout
INVALID_IMAGE_REASON = "InvalidImage"  # MAAS refused the deploy's image or kernel (distro_series, hwe_kernel)
DEPLOY_REQUEST_REFUSED_REASON = "DeployRequestRefused"  # MAAS refused another field of our deploy request
MACHINE_BROKEN_REASON = "MachineBroken"  # the allocated machine turned Broken
MACHINE_NOT_FOUND_REASON = "MachineNotFound"  # spec.systemID no longer exists in MAAS
MACHINE_POWERED_OFF_REASON = "MachinePoweredOff"  # Deployed but MAAS reports power off
ADOPTION_NOT_DEPLOYED_REASON = "AdoptionNotDeployed"  # spec.adopt names a machine MAAS does not show Deployed
ADOPTION_OTHER_OWNER_REASON = "AdoptionOtherOwner"  # spec.adopt: owned by another MAAS user (or invisible)
ADOPTION_HELD_ELSEWHERE_REASON = "AdoptionHeldElsewhere"  # spec.adopt: another MaasMachine holds or marks it
ALLOCATION_IN_DOUBT_REASON = "AllocationInDoubt"  # an allocate whose answer was lost may still reach MAAS
RETRIES_EXHAUSTED_REASON = "RetriesExhausted"  # allocate/deploy failed too often; needs a person
INVALID_SPEC_REASON = "InvalidSpec"  # the spec does not parse into the API model (an older CRD)
MAAS_UNREACHABLE_REASON = "MaasUnreachable"  # connection refused / timed out / 5xx from the MAAS region
INVALID_CREDENTIALS_REASON = "InvalidCredentials"  # identity Secret malformed or rejected (401/403)
IDENTITY_SECRET_NOT_FOUND_REASON = "IdentitySecretNotFound"  # identityRef names a Secret that does not exist
IDENTITY_CHANGED_REASON = "IdentityChanged"  # references from another MAAS identity: forgotten, nothing sent
IDENTITY_CHANGE_REFUSED_REASON = "IdentityChangeRefused"  # identityRef changed while references are held
IDENTITY_REF_APPLIED_REASON = "IdentityRefApplied"  # IdentityRefApplied=True
IDENTITY_KEPT_REASON = "IdentityKept"  # a MaasMachine's references stay with the credentials they came from
DEFAULT_IDENTITY_NOT_ALLOWED_REASON = "DefaultIdentityNotAllowed"  # no identityRef; namespace not allowed
PLAINTEXT_ENDPOINT_REFUSED_REASON = "PlaintextEndpointRefused"  # http:// endpoint without the opt-in
DNS_UPDATE_FAILED_REASON = "DNSUpdateFailed"  # MAAS refused to create/update the DNS resource
RELEASE_REFUSED_REASON = "ReleaseRefused"  # MAAS refused spec.releaseOptions (its form errors follow)
WAITING_FOR_IP_ADDRESS_REASON = "WaitingForIPAddress"  # a spec.addresses claim has no address yet
WAITING_FOR_REUSABLE_MACHINE_REASON = "WaitingForReusableMachine"  # nodeReuse: no kept server yet
LAYOUT_REFUSED_REASON = "LayoutRefused"  # server/MAAS refused spec.network/filesystems; released
IP_ADDRESS_REFUSED_REASON = "IPAddressRefused"  # MAAS/the server refused an address; released
VIP_UNAVAILABLE_REASON = "VIPUnavailable"  # MAAS refused to reserve spec.controlPlaneVIP (its words follow)
VIP_NEEDS_DNS_RECORD_REASON = "VIPNeedsDNSRecord"  # controlPlaneVIP with an endpoint host of the user's own
VIP_READY_REASON = "VIPReady"  # DNSReady=True: the record points at the reserved control-plane VIP
DNS_RECORD_CONFLICT_REASON = "DNSRecordConflict"  # the endpoint's DNS record exists and is not ours
DNS_NAME_NOT_OWN_REASON = "DNSNameNotOwn"  # a managed-shaped endpoint host not named for this cluster
DNS_DOMAIN_NOT_ALLOWED_REASON = "DNSDomainNotAllowed"  # dnsDomain not listed for the namespace
ZONE_NOT_FOUND_REASON = "ZoneNotFound"  # a failure domain names a zone MAAS does not have
NO_VM_HOST_AVAILABLE_REASON = "NoVMHostAvailable"  # placement found no VM host that fits (message says why)
VM_HOST_NOT_FOUND_REASON = "VMHostNotFound"  # lxdConfig.vmHost names a host MAAS does not have
VM_HOST_NOT_ALLOWED_REASON = "VMHostNotAllowed"  # lxdConfig.vmHost: a host not tagged for the namespace
VM_HOST_REGISTRATION_NOT_ALLOWED_REASON = "VMHostRegistrationNotAllowed"  # not in lxd.vm_host_namespaces
VM_COMPOSE_FAILED_REASON = "VMComposeFailed"  # MAAS refused the compose (over-commit, host gone)
VM_HOSTS_UNSUPPORTED_REASON = "VMHostsUnsupported"  # the MAAS region has no VM-host API (410, MAAS >= 4.0)
VM_HOST_IN_USE_REASON = "VMHostInUse"  # deleting a machine that hosts a VM host: VMs left, or not ours
KUBECONFIG_REJECTED_REASON = "KubeconfigRejected"  # <cluster>-kubeconfig not CAPI's, or a field not allowed
NODE_PROVIDER_ID_SET_REASON = "NodeProviderIDSet"  # NodeProviderIDSet=True: the problem is solved
NO_MAAS_EQUIVALENT_REASON = "NoMaasEquivalent"  # SettingsApplied=False: ClusterLXDConfig.not_applied() fields
INVALID_PREFERRED_SUBNETS_REASON = "InvalidPreferredSubnets"  # maas-preferred-subnet ConfigMap is not CIDRs
NO_ADDRESS_IN_PREFERRED_SUBNETS_REASON = "NoAddressInPreferredSubnets"  # CP machine outside preferredSubnets

# --- reasons: deletion ----------------------------------------------------------------------------

DELETING_REASON = "Deleting"  # Ready=False while deletion runs
RELEASING_REASON = "Releasing"  # MAAS is releasing (optionally erasing) the machine
DECOMPOSING_REASON = "Decomposing"  # the LXD VM is being deleted from its host
DELETE_FOR_MOVE_REASON = "DeleteForMove"  # clusterctl move: the MAAS machine is left alone on purpose

# --- reasons: MaasIPPool and the IPAddressClaims it fulfils (Cluster API IPAM) ---------------------

INVALID_POOL_REASON = "InvalidPool"  # MaasIPPool Ready=False: the spec's addresses do not parse
SUBNET_NOT_FOUND_REASON = "SubnetNotFound"  # MaasIPPool Ready=False: MAAS has no subnet of spec.subnet's CIDR
ADDRESS_IN_DYNAMIC_RANGE_REASON = "AddressInDynamicRange"  # MaasIPPool Ready=False: addresses in a DHCP range
POOL_OUTSIDE_RESERVED_RANGE_REASON = "PoolOutsideReservedRange"  # Warning Event: MAAS AUTO may use them
POOL_NOT_READY_REASON = "PoolNotReady"  # claim Ready=False: its MaasIPPool is missing or not Ready (CAPI's)
POOL_EXHAUSTED_REASON = "PoolExhausted"  # claim Ready=False: every address of the pool is held (CAPI's)
ALLOCATION_FAILED_REASON = "AllocationFailed"  # claim Ready=False: an IPAddress of its name is another's
ADDRESS_ALLOCATED_REASON = "AddressAllocated"  # claim Ready=True: its IPAddress exists, status.addressRef set

# --- reasons: MaasRemediation (Cluster API external remediation) -------------------------------------

REMEDIATING_REASON = "Remediating"  # Ready=False: a power cycle or redeploy is under way (message: which)
REMEDIATED_REASON = "Remediated"  # Ready=True: the Machine was healthy again after the remediation
POWER_CYCLE_REQUESTED_REASON = "PowerCycleRequested"  # PowerCycled=True: MAAS took power_off and power_on
POWER_NOT_CONTROLLABLE_REASON = "PowerNotControllable"  # PowerCycled=False: manual power; MAAS sent nothing
POWER_STATE_UNCONFIRMED_REASON = "PowerStateUnconfirmed"  # PowerCycled: MAAS never reported the server off
NODE_NOT_HEALTHY_IN_TIME_REASON = "NodeNotHealthyInTime"  # the Machine stayed unhealthy after the step
REDEPLOYING_REASON = "Redeploying"  # Redeployed=False: the same server is being released/allocated/deployed
REDEPLOY_FAILED_REASON = "RedeployFailed"  # Redeployed=False: MAAS refused (the server was taken meanwhile)
REMEDIATION_FAILED_REASON = "RemediationFailed"  # Ready=False: gave up; the Machine's owner replaces it
NOTHING_TO_REMEDIATE_REASON = "NothingToRemediate"  # the Machine has no MaasMachine holding a MAAS server
REMEDIATION_WAITING_REASON = "WaitingForRemediation"  # Machine OwnerRemediated=False (CAPI's): replace it
