"""``--shards N``: N operator processes on one apiserver and one MAAS, each serving the objects of its label.

Each shard is what a sharded installation runs (the chart's ``shards``): ``capmaas run --watch-filter
cluster.x-k8s.io/watch-filter=shard-<i>`` with leader election on a Lease of its own, serving one CAPI
Cluster whose Machines, MaasCluster and MaasMachines carry that label like the Cluster (each shard then caches
only its own CAPI objects: the watch filter is a label selector on those watches too). The processes are
started here (not by the demo stack, whose single operator runs without leader election and without a
filter).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capmaas_dev.demo import manifests as M
from capmaas_dev.demo.capi import Capi
from capmaas_dev.demo.kube import CLUSTERS, MAASCLUSTERS
from capmaas_dev.demo.stack import OperatorProcess
from capmaas_dev.devcluster import process as devprocess

#: CAPI's label convention for ``--watch-filter`` (the value names the shard).
WATCH_FILTER_LABEL = "cluster.x-k8s.io/watch-filter"


def shard_value(i: int) -> str:
    return f"shard-{i}"


class ShardCapi(Capi):
    """CAPI core for one cluster whose MaasCluster carries the shard's watch-filter label (the Cluster and the
    Machines carry it too, as a sharded installation would label a cluster's objects)."""

    def __init__(self, *args: object, labels: dict[str, str]) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.labels = labels

    def create_cluster(
        self, maas_endpoint: str, maas_api_key: str, *, allow_plaintext_http: bool = False
    ) -> None:
        ns = self.namespace
        secret = M.identity_secret(
            self.identity, ns, maas_endpoint, maas_api_key, allow_plaintext_http=allow_plaintext_http
        )
        self.kube.create_secret(secret)
        cluster = M.cluster(self.cluster, ns)
        cluster["metadata"].setdefault("labels", {}).update(self.labels)
        self.cluster_uid = self.kube.create(CLUSTERS, cluster)["metadata"]["uid"]
        mc = M.maascluster(self.cluster, ns, identity=self.identity, cluster_uid=self.cluster_uid)
        mc["metadata"].setdefault("labels", {}).update(self.labels)
        self.kube.create(MAASCLUSTERS, mc)


@dataclass
class ShardSettings:
    index: int
    watch_filter: str
    lease: str


class ShardOperator(OperatorProcess):
    """``capmaas run --namespace NS --watch-filter LABEL=shard-i`` with leader election (its own Lease)."""

    def __init__(self, base_env: dict[str, str], namespace: str, log: Path, shard: ShardSettings) -> None:
        env = dict(base_env)
        env.update(
            POD_NAME=f"bench-shard-{shard.index}",
            CAPMAAS_SERVER__HEALTH_PORT=str(devprocess.free_port()),
            CAPMAAS_SERVER__METRICS_PORT=str(devprocess.free_port()),
            CAPMAAS_LEADER_ELECTION__ENABLED="true",
            CAPMAAS_LEADER_ELECTION__LEASE_NAME=shard.lease,
            CAPMAAS_LEADER_ELECTION__NAMESPACE=namespace,
            # One process per shard and no standby here: generous timings, so that a renew delayed by a
            # saturated machine does not end the shard's only process in the middle of the measurement.
            CAPMAAS_LEADER_ELECTION__LEASE_DURATION="60",
            CAPMAAS_LEADER_ELECTION__RENEW_DEADLINE="45",
            CAPMAAS_LEADER_ELECTION__RETRY_PERIOD="5",
        )
        super().__init__(env, namespace, log)
        self.shard = shard

    def run_args(self) -> list[str]:
        return ["--namespace", self.namespace, "--watch-filter", self.shard.watch_filter]


def shard_settings(n: int) -> list[ShardSettings]:
    return [
        ShardSettings(i, f"{WATCH_FILTER_LABEL}={shard_value(i)}", f"capmaas-bench-{shard_value(i)}")
        for i in range(n)
    ]
