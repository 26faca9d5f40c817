"""Operator configuration: typed sections loaded from ``CAPMAAS_*`` environment variables and secret files.

Why pydantic-settings: one declared schema gives defaults, types, units (in each field's docstring) and
the loading rules: env prefix ``CAPMAAS_``; nested delimiter ``__``, so ``CAPMAAS_POLLING__FAST_INTERVAL=0.5``
reaches ``polling.fast_interval``; ``secrets_dir``, so the default MAAS key can be mounted from a Secret as a
file named ``maas__api_key``. The object is built once in the CLI path (``capmaas run``) and passed down;
nothing here runs at import time and there is no module-level instance.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NestedSecretsSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)


class KubeSection(BaseModel):
    """Which Kubernetes objects this operator instance serves."""

    namespace: str | None = None
    """Namespace to watch; ``None`` watches every namespace (cluster-wide RBAC needed)."""

    watch_filter: str | None = None
    """Only reconcile MaasClusters/MaasMachines carrying this label, as ``key=value`` (``key``: any value).
    Lets several instances share one management cluster (CAPI's ``--watch-filter``)."""

    resync_interval: float = 300.0
    """Seconds; a reconcile runs at least this often per object even when nothing wakes it (a safety net)."""

    secret_cache_ttl: float = 30.0
    """Seconds a read Secret (MAAS identity, workload kubeconfig) is reused before it is read again;
    bounds how long a rotated key takes to be picked up."""

    field_validation: Literal["Ignore", "Warn", "Strict"] = "Warn"
    """``fieldValidation`` of the operator's writes to MaasMachines/MaasClusters. ``Warn`` is the apiserver's
    default (an unknown field is dropped with a warning); the tests run ``Strict``, so a wrong key fails."""


class MaasSection(BaseModel):
    """Default MAAS credentials, used by MaasClusters without ``spec.identityRef``, and client behaviour."""

    endpoint: str | None = None
    """MAAS region URL, e.g. ``http://maas:5240/MAAS``; ``None``: every MaasCluster needs an identityRef."""

    api_key: SecretStr | None = None
    """``consumer:token:secret`` API key; prefer mounting it as the secret file ``maas__api_key``."""

    ca_file: str | None = None
    """Path of a PEM CA bundle used to verify the MAAS TLS certificate (``None``: system trust store)."""

    insecure_skip_tls_verify: bool = False
    """Disable TLS verification for the default credentials' MAAS (logged as a warning at start, shown as
    ``MaasTransportSecure=False`` on the MaasClusters using them). Never the default. It does not apply to
    identity Secrets: each opts out on its own (``MAAS_INSECURE_SKIP_TLS_VERIFY``)."""

    allow_plaintext_http: bool = False
    """Let the default credentials use an ``http://`` endpoint (every request then carries the API key's
    secret in the clear; shown as ``MaasTransportSecure=False``). Off: refused, with
    ``PlaintextEndpointRefused`` on the MaasClusters, unless the endpoint is a loopback IP address. Identity
    Secrets opt in on their own (``MAAS_ALLOW_PLAINTEXT_HTTP``)."""

    default_identity_namespaces: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Namespaces whose MaasClusters (without ``spec.identityRef``) may use the default credentials;
    ``*``: every namespace. Comma-separated in the environment. Empty, and no selector: none may (each
    refused MaasCluster says ``DefaultIdentityNotAllowed``). See docs/security.md."""

    default_identity_namespace_selector: str = ""
    """A label selector (``tenant-tier=trusted``, ``team in (a,b)``, ``!untrusted``): namespaces whose labels
    match may use the default credentials too (the operator reads Namespaces: ``get`` RBAC)."""

    request_timeout: float = 30.0
    """Seconds per MAAS HTTP request."""

    max_concurrent_writes: int = 16
    """Allocate/deploy/release/power requests in flight per MAAS endpoint and identity; more wait their turn
    (a burst of new machines queues here instead of timing out in the HTTP connection pool)."""

    max_retries: int = 3
    """Client-side retries of one MAAS request (transport errors, 503) before the reconcile sees it."""

    allowed_endpoints: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Hosts a MAAS endpoint may name (identity Secrets and the default): IP addresses, CIDRs (matching
    endpoints written as IP literals), host names and ``*.domain`` wildcards (matching names, never resolved);
    comma-separated in the environment (``CAPMAAS_MAAS__ALLOWED_ENDPOINTS=10.0.0.0/8,maas.example.net``).
    Empty (the default): any host. A tenant's endpoint outside the list gets InvalidCredentials on its
    MaasCluster and no request is sent. See docs/security.md."""

    max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    """Bytes; the largest MAAS answer read for one object (a bigger one is refused while it streams)."""

    max_list_response_bytes: int = Field(default=64 * 1024 * 1024, ge=64 * 1024)
    """Bytes; the largest MAAS answer read for a collection (the machine poll lists up to
    ``polling.batch_size`` machines per call)."""

    @field_validator("allowed_endpoints", "default_identity_namespaces", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


class LxdSection(BaseModel):
    """VM hosts on a shared management cluster (docs/security.md, "VM-host tenancy and DNS names")."""

    vm_host_namespaces: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Namespaces whose MaasMachines may register their machine as a MAAS VM host (``registerVMHost``, or the
    MaasCluster's ``lxdConfig.enabled``); ``*``: every namespace. Comma-separated in the environment
    (``CAPMAAS_LXD__VM_HOST_NAMESPACES``). Empty (the default): none may (``VMHostRegistrationNotAllowed``).
    A registered host is tagged ``capmaas-ns-<namespace>`` and only that namespace's LXD machines use it."""

    @field_validator("vm_host_namespaces", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


class DnsSection(BaseModel):
    """The control-plane DNS records capmaas creates in MAAS."""

    namespace_domains: dict[str, list[str]] = Field(default_factory=dict)
    """Per namespace (``*``: every namespace), the MAAS DNS domains its MaasClusters' records may be created
    in; JSON in the environment (``CAPMAAS_DNS__NAMESPACE_DOMAINS='{"team-a": ["a.maas"], "*": ["maas"]}'``).
    Empty (the default): any domain. Another domain gives ``DNSDomainNotAllowed``."""

    adopt_records_by_name: bool = False
    """One-time migration: let a MaasCluster without the ``…/dns-record`` annotation (created before capmaas
    recorded record ids) adopt the existing record named for its UID. Off (the default) such a record is a
    ``DNSRecordConflict``: a name is no proof of ownership. Turn it on for one upgrade, then off again."""


class PollingSection(BaseModel):
    """The shared per-endpoint poller: one list call per interval covers every machine in flight."""

    fast_interval: float = 1.0
    """Seconds between polls while any watched machine is changing state (deploying, releasing, ...)."""

    hot_max_interval: float = 2.5
    """Seconds between polls while machines deploy but fewer than ten began since the last poll: a deploy
    that takes MAAS minutes, or a trickle of a few a second, is listed this often, not every fast interval
    (the readiness lag can grow by the difference; equal to ``fast_interval`` lists every fast interval)."""

    idle_interval: float = 30.0
    """Seconds between polls when every watched machine is steady (deployed, or nothing in flight)."""

    batch_size: int = 100
    """System IDs per list call of the shared poll (a round's calls go one after the other). Bounds the URL
    length, and what one answer costs in memory while it is read: pydantic's JSON parser holds a whole
    answer's parsed tree at once, several times its bytes, and a MAAS machine is kilobytes of JSON, so at a
    few hundred machines in flight the list answer was the operator's peak (docs/scaling.md, "Memory:
    session 39"). Larger: fewer list calls per round (the steady machines' reads too), a higher peak."""

    poll_deadline: float = 120.0
    """Seconds one poll round (all its list calls, retries included) may take; past it the round is given up
    and the next one starts at the error interval. Bounds what a slow or hostile endpoint holds."""

    connect_failure_ttl: float = 5.0
    """Seconds a first connect of an identity that timed out is remembered: its connects fail at once
    meanwhile instead of each waiting for the endpoint again."""

    leak_audit_interval: float = 60.0
    """Seconds between leak audits: MAAS machines still held for MaasMachines seen deleted
    (``capmaas_machines_leaked``; see capmaas.operator.leaks). 0 turns the audit off."""

    orphan_report_interval: float = 300.0
    """Seconds between orphan reports: MAAS machines, VM hosts and DNS records of capmaas that no live object
    names (``capmaas_orphans``; see capmaas.operator.orphans). One machine listing, one VM host listing and
    one DNS listing per MAAS identity and pass. 0 turns the report off."""


class CapacitySection(BaseModel):
    """MaasMachineTemplate capacity counted in MAAS (``status.available``, ``status.capacity``; see
    capmaas.operator.capacity)."""

    inventory_interval: float = 30.0
    """Seconds between listings of the Ready machines (and, for LXD templates, the VM hosts) of each MAAS
    identity a template is counted against: one ``GET machines/?status=ready`` per interval for every
    template of that identity together. capmaas's own allocations and releases show without waiting for it."""

    device_resources: dict[str, str] = Field(
        default_factory=lambda: {"10de": "nvidia.com/gpu", "1002": "amd.com/gpu"}
    )
    """Per PCI vendor id (four lower-case hex digits), the Node resource name a template's matching devices
    are published under in ``status.capacity`` when the template selects devices; JSON in the environment
    (``CAPMAAS_CAPACITY__DEVICE_RESOURCES='{"10de": "nvidia.com/gpu"}'``). A vendor not listed is not
    published."""

    device_reads_per_round: int = Field(20, ge=1)
    """Machines whose PCI/USB devices are read per inventory round (``GET nodes/{id}/devices/``; MAAS's
    machine listing has no devices). Each Ready machine a device-selecting template could take is read once,
    while it stays Ready."""


class MachineSection(BaseModel):
    """Bare-metal MaasMachine behaviour."""

    deploy_timeout: float = 3600.0
    """Seconds from the deploy request to MAAS reporting Deployed before the machine is replaced."""

    max_deploy_attempts: int = 3
    """Machines tried per MaasMachine (failed deployment, Broken, timeout) before a terminal condition."""

    retry_base_delay: float = 5.0
    """Seconds; first retry delay after a transient failure (doubles per consecutive failure)."""

    retry_max_delay: float = 300.0
    """Seconds; cap of the retry delay."""

    power_on_retry: float = 60.0
    """Seconds between power-on requests for a Deployed machine that stays off."""

    node_retry: float = 30.0
    """Seconds between looks for the workload Node whose providerID is still to be set."""

    reuse_wait: float = 60.0
    """Seconds a new MaasMachine of a ``nodeReuse`` template waits, from its creation, for a server released
    by its MachineDeployment/control plane before it allocates a fresh one (docs/operating.md, Node reuse)."""

    reuse_ttl: float = 1800.0
    """Seconds a released server stays recorded as reusable for its owner; older records are dropped."""


class ServerSection(BaseModel):
    """HTTP endpoints the operator exposes."""

    bind_address: str = "0.0.0.0"  # in a pod the kubelet probes from outside loopback
    """Address of the liveness listener."""

    metrics_bind_address: str = "127.0.0.1"
    """Address of the metrics listener. Loopback by default: the endpoint has no authentication and tells
    about every tenant's machines; expose it (``0.0.0.0``) only behind a NetworkPolicy or an authenticating
    proxy sidecar (docs/security.md)."""

    health_port: int = 8080
    """TCP port of the liveness endpoint ``/healthz`` (0 disables it)."""

    metrics_port: int = 9090
    """TCP port of the Prometheus metrics endpoint (0 disables it)."""


class LoggingSection(BaseModel):
    """Log output."""

    format: Literal["json", "text"] = "json"
    """``json`` (one object per line, for log shippers) or ``text`` (for people)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Minimum level written to stderr."""

    events_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Minimum level of Kubernetes Events posted on objects: Normal Events are INFO, Warnings WARNING
    (``WARNING``: no Normal Event, two writes fewer per machine lifecycle; also kopf's ``posting.level``)."""

    events_burst: int = Field(default=10, ge=0)
    """Normal lifecycle Events of one reason from more than this many MaasMachines of a cluster within a
    burst (no two more than 2 s apart) are posted as one Event on its MaasCluster, with their count and a
    sample of their messages (client-go's EventAggregator, keyed by cluster). A burst's first Event is posted
    at once on its object; up to this many, the others too, once the burst ends. 0: never combined nor held.
    Warnings never are (docs/scaling.md, "Kubernetes writes per machine")."""


class LeaderElectionSection(BaseModel):
    """Leader election on a ``coordination.k8s.io/v1`` Lease (the controller-runtime model): of the processes
    configured with the same Lease, only the holder runs the per-object loops, the MAAS pollers and any MAAS
    or Kubernetes write; the others keep their watch caches warm and take over when the Lease expires."""

    enabled: bool = True
    """Off (``--no-leader-elect``) only when exactly one process can ever run: two processes without it both
    allocate a MAAS machine for every MaasMachine."""

    lease_name: str | None = None
    """Lease name; ``None``: ``capmaas-leader``, plus a hash of the namespace and watch filter when either is
    set, so shards serving different objects never share a Lease and replicas of one shard always do."""

    namespace: str | None = None
    """Namespace of the Lease; ``None``: ``POD_NAMESPACE``, the pod's service-account namespace, the watched
    namespace, else ``default``."""

    identity: str | None = None
    """Holder identity; ``None``: pod name (``POD_NAME`` or host name) + ``_`` + a random UUID."""

    lease_duration: float = 15.0
    """Seconds a standby waits, from the last change it saw to the Lease, before taking it over."""

    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before it stops every loop and write; must be below
    ``lease_duration`` (the difference is the margin in which a deposed leader has stopped)."""

    retry_period: float = 2.0
    """Seconds between renewals (leader) and acquisition attempts (standby); below ``renew_deadline``."""

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionSection:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs 0 < retry_period < renew_deadline < lease_duration")
        return self


class OperatorConfig(BaseSettings):
    """Everything ``capmaas run`` can be told. See each section for fields and units."""

    model_config = SettingsConfigDict(
        env_prefix="CAPMAAS_",
        env_nested_delimiter="__",
        secrets_dir=None,
        secrets_nested_delimiter="__",
        secrets_prefix="",
        extra="ignore",
    )

    kube: KubeSection = Field(default_factory=KubeSection)
    maas: MaasSection = Field(default_factory=MaasSection)
    polling: PollingSection = Field(default_factory=PollingSection)
    lxd: LxdSection = Field(default_factory=LxdSection)
    dns: DnsSection = Field(default_factory=DnsSection)
    capacity: CapacitySection = Field(default_factory=CapacitySection)
    machine: MachineSection = Field(default_factory=MachineSection)
    server: ServerSection = Field(default_factory=ServerSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    leader_election: LeaderElectionSection = Field(default_factory=LeaderElectionSection)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Env wins over secret files; secret files are nested by ``__`` (``maas__api_key``) like env vars."""
        return (init_settings, env_settings, NestedSecretsSettingsSource(file_secret_settings))


def load_config(secrets_dir: str | None = None) -> OperatorConfig:
    """Build the config from the environment (and ``secrets_dir`` files when that directory exists).

    ``secrets_dir`` defaults to ``CAPMAAS_SECRETS_DIR``; a missing directory is ignored rather than an error
    so the same image runs with and without a mounted Secret.
    """
    directory = secrets_dir or os.environ.get("CAPMAAS_SECRETS_DIR")
    if directory and os.path.isdir(directory):
        return OperatorConfig(_secrets_dir=directory)
    return OperatorConfig()
