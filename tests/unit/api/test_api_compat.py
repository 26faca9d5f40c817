"""The api layer's canonical forms: disk sizes with units, the Go provider's spellings folded into ours, the
compose ``interfaces`` map, fields MAAS cannot apply, and the preferred-subnet address choice."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from capmaas.api import preferred_subnets as ps
from capmaas.api.sizes import InvalidSize, gigabytes
from capmaas.api.v1beta1 import (
    GO_DEFAULT_VM_DISK_GB,
    PROVISIONING_MODE_BARE_METAL,
    PROVISIONING_MODE_LXD,
    MaasClusterSpec,
    MaasMachineSpec,
    MachineAddress,
    capacity_for,
)


@pytest.mark.parametrize(
    ("value", "gb"),
    [
        (20, 20),
        ("20", 20),
        ("20G", 20),
        ("20GB", 20),
        ("20Gi", 22),  # 21.47 GB, rounded up: never less disk than asked for
        ("20GiB", 22),
        ("1T", 1000),
        ("1TB", 1000),
        ("1Ti", 1100),
        ("1", 1),
        (65536, 65536),
        ("64T", 64000),
    ],
)
def test_sizes_normalise_to_whole_gigabytes(value: int | str, gb: int) -> None:
    assert gigabytes(value) == gb


@pytest.mark.parametrize(
    "junk", ["", "20 G", "20g", "20MB", "-1", "1.5G", "twenty", "0", 0, "65537", "64Ti", 70000, True]
)
def test_junk_sizes_are_refused(junk: Any) -> None:
    with pytest.raises(InvalidSize, match="whole number of gigabytes"):
        gigabytes(junk)


def spec(**fields: Any) -> MaasMachineSpec:
    return MaasMachineSpec.from_body({"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096, **fields})


def test_junk_size_does_not_parse_in_python_either() -> None:
    with pytest.raises(ValidationError):
        spec(provisioningMode="lxd", lxdConfig={"storage": {"size": "20 gigs"}})


def test_canonical_bare_metal_is_unchanged() -> None:
    s = spec(minDiskSize=40, tags=["a"])
    c = s.canonical()
    assert c == s
    assert c.provisioning_mode == PROVISIONING_MODE_BARE_METAL
    assert c.lxd_config is None
    assert not s.is_lxd


def test_canonical_seed_form_normalises_the_size() -> None:
    c = spec(provisioningMode="lxd", lxdConfig={"storage": {"size": "20Gi", "pool": "fast"}}).canonical()
    assert c.lxd_config is not None
    assert c.lxd_config.storage is not None
    assert c.lxd_config.storage.size == 22
    assert c.lxd_config.storage.pool == "fast"
    assert c.lxd_config.storage.size_gb == 22


def test_canonical_lxd_size_defaults_to_min_disk_size() -> None:
    c = spec(provisioningMode="lxd", minDiskSize=35).canonical()
    assert c.lxd_config is not None
    assert c.lxd_config.storage is not None
    assert c.lxd_config.storage.size == 35


def test_canonical_go_form_becomes_provisioning_mode_lxd() -> None:
    s = spec(
        minDiskSize=30,
        lxd={
            "enabled": True,
            "vmConfig": {
                "diskSize": 50,
                "storagePool": "zfs1",
                "network": "pxe, 10.20.0.0/24",
                "autoStart": True,
            },
        },
    )
    assert s.provisioning_mode == PROVISIONING_MODE_BARE_METAL  # as written (the CRD default)
    assert s.is_lxd
    c = s.canonical()
    assert c.provisioning_mode == PROVISIONING_MODE_LXD
    assert c.lxd is None
    assert c.lxd_config is not None
    assert c.lxd_config.storage is not None
    assert (c.lxd_config.storage.size, c.lxd_config.storage.pool) == (50, "zfs1")
    assert c.lxd_config.network is not None
    assert c.lxd_config.network.subnets == ["pxe", "10.20.0.0/24"]
    assert c.to_k8s()["lxdConfig"]["network"] == {"subnets": ["pxe", "10.20.0.0/24"]}
    # the canonical spec is valid input itself (what a reconciler may write back or log)
    assert MaasMachineSpec.from_body(c.to_k8s()) == c


def test_go_disk_is_the_larger_of_disk_size_and_min_disk_size_default_60() -> None:
    def disk(**fields: Any) -> int | str | None:
        c = spec(**fields).canonical()
        assert c.lxd_config is not None
        assert c.lxd_config.storage is not None
        return c.lxd_config.storage.size

    assert disk(lxd={"enabled": True}) == GO_DEFAULT_VM_DISK_GB
    assert disk(minDiskSize=100, lxd={"enabled": True, "vmConfig": {"diskSize": 40}}) == 100
    assert disk(minDiskSize=10, lxd={"enabled": True, "vmConfig": {"diskSize": 40}}) == 40


def test_go_form_disabled_is_bare_metal() -> None:
    c = spec(lxd={"enabled": False}).canonical()
    assert c.provisioning_mode == PROVISIONING_MODE_BARE_METAL
    assert c.lxd_config is None
    assert c.lxd is None


def test_canonical_does_not_modify_the_original() -> None:
    s = spec(lxd={"enabled": True})
    s.canonical()
    assert s.lxd is not None
    assert s.lxd_config is None


def net(**fields: Any) -> str | None:
    c = spec(provisioningMode="lxd", lxdConfig={"network": fields}).canonical()
    assert c.lxd_config is not None
    assert c.lxd_config.network is not None
    return c.lxd_config.network.compose_interfaces()


def test_compose_interfaces_map() -> None:
    assert net(bridge="br0") == "eth0:name=br0"
    assert net(bridge="br0", devices=["eno2", "br-stor"]) == "eth0:name=br0;eth1:name=eno2;eth2:name=br-stor"
    assert net(subnets=["pxe", "10.1.0.0/24"]) == "eth0:subnet=pxe;eth1:subnet=10.1.0.0/24"
    assert net(bridge="br0", subnets=["pxe"]) == "eth0:name=br0,subnet=pxe"
    assert (
        net(bridge="br0", staticIP={"address": "10.0.0.9", "subnet": "10.0.0.0/24"})
        == "eth0:name=br0,subnet_cidr=10.0.0.0/24,ip=10.0.0.9"
    )
    assert (
        net(devices=["eno2"], staticIP={"address": "10.1.0.9", "interface": "eth1"})
        == "eth1:name=eno2,ip=10.1.0.9"
    )
    assert net() is None


def test_compose_interfaces_default_parent_from_the_cluster() -> None:
    c = spec(lxd={"enabled": True}).canonical()
    assert c.lxd_config is not None
    assert c.lxd_config.network is None
    c2 = spec(provisioningMode="lxd", lxdConfig={"network": {"subnets": ["pxe"]}}).canonical()
    assert c2.lxd_config is not None
    assert c2.lxd_config.network is not None
    assert c2.lxd_config.network.compose_interfaces("br9") == "eth0:name=br9,subnet=pxe"
    c3 = spec(provisioningMode="lxd", lxdConfig={"network": {"bridge": "br0"}}).canonical()
    assert c3.lxd_config is not None
    assert c3.lxd_config.network is not None
    assert c3.lxd_config.network.compose_interfaces("br9") == "eth0:name=br0"  # the machine's own wins


def cluster(**lxd: Any) -> MaasClusterSpec:
    return MaasClusterSpec.from_body({"dnsDomain": "maas", "lxdConfig": lxd})


def test_cluster_canonical_folds_network_bridge_and_sizes() -> None:
    c = cluster(enabled=True, storageSize="50", networkBridge="br0", skipNetworkUpdate=True).canonical()
    assert c.lxd_config is not None
    assert c.lxd_config.storage_size == 50
    assert c.lxd_config.nic_parent == "br0"
    assert c.lxd_config.network_bridge is None
    assert cluster(storageSize="1Ti").canonical().lxd_config.storage_size == 1100  # type: ignore[union-attr]
    plain = MaasClusterSpec.from_body({"dnsDomain": "maas"})
    assert plain.canonical() == plain


def test_cluster_fields_without_a_maas_equivalent_are_listed() -> None:
    hcp = cluster(enabled=True, storageBackend="zfs", skipNetworkUpdate=True, storageSize="50")
    assert hcp.lxd_config is not None
    assert hcp.lxd_config.not_applied() == ["storageBackend", "storageSize"]
    every = cluster(
        enabled=True,
        resourcePool="p",
        zone="z",
        storageBackend="dir",
        storageSize=10,
        nicType="macvlan",
        nicParent="eno1",
        skipNetworkUpdate=False,
    )
    assert every.lxd_config is not None
    assert every.lxd_config.not_applied() == [
        "storageBackend",
        "storageSize",
        "nicType",
        "nicParent",
        "skipNetworkUpdate",
    ]
    applied = cluster(enabled=True, resourcePool="p", zone="z", skipNetworkUpdate=True)
    assert applied.lxd_config is not None
    assert applied.lxd_config.not_applied() == []


# --- preferred subnets ------------------------------------------------------------------------------------
def addrs(*pairs: tuple[str, str]) -> list[MachineAddress]:
    return [MachineAddress.from_body({"type": t, "address": a}) for t, a in pairs]


MULTI = addrs(
    ("Hostname", "cp-1"),
    ("ExternalIP", "10.0.0.5"),  # PXE network, listed first
    ("ExternalIP", "192.168.50.5"),
    ("InternalIP", "172.16.0.5"),
    ("ExternalIP", "fd00::5"),
)


def test_without_preferred_subnets_the_first_external_ip_wins() -> None:
    none = ps.resolve(None, None)
    assert none.source == "none"
    assert ps.pick_address(MULTI, none) == "10.0.0.5"
    assert ps.pick_address(addrs(("InternalIP", "172.16.0.5")), none) == "172.16.0.5"
    assert ps.pick_address(addrs(("Hostname", "x")), none) is None


def test_preferred_subnet_picks_the_address_inside_it() -> None:
    pref = ps.resolve(["192.168.50.0/24"], None)
    assert pref.source == "spec"
    assert ps.pick_address(MULTI, pref) == "192.168.50.5"
    assert ps.pick_address(MULTI, ps.resolve(["172.16.0.0/12"], None)) == "172.16.0.5"
    assert ps.pick_address(MULTI, ps.resolve(["fd00::/64"], None)) == "fd00::5"


def test_preferred_subnet_order_decides_between_matches() -> None:
    pref = ps.resolve(["172.16.0.0/12", "192.168.50.0/24"], None)
    assert ps.pick_address(MULTI, pref) == "172.16.0.5"


def test_machine_outside_every_preferred_subnet_is_left_out() -> None:
    assert ps.pick_address(MULTI, ps.resolve(["10.99.0.0/16"], None)) is None


def test_spec_wins_over_the_configmap() -> None:
    data = {ps.CONFIGMAP_KEY: "172.16.0.0/12"}
    assert ps.pick_address(MULTI, ps.resolve(["192.168.50.0/24"], data)) == "192.168.50.5"
    from_cm = ps.resolve(None, data)
    assert from_cm.source == "configmap"
    assert ps.pick_address(MULTI, from_cm) == "172.16.0.5"
    assert "ConfigMap maas-preferred-subnet" in from_cm.describe()


def test_configmap_csv_with_spaces_and_blanks() -> None:
    got = ps.resolve([], {ps.CONFIGMAP_KEY: " 10.0.0.0/24, ,192.168.50.7/24 "})
    assert [str(n) for n in got.networks] == ["10.0.0.0/24", "192.168.50.0/24"]
    assert ps.resolve(None, {ps.CONFIGMAP_KEY: ""}).source == "none"
    assert ps.resolve(None, {"other": "10.0.0.0/8"}).source == "none"


def test_configmap_junk_is_an_error_naming_the_entry() -> None:
    with pytest.raises(ps.InvalidPreferredSubnets, match=r"'10.0.0.1'.*'banana'"):
        ps.resolve(None, {ps.CONFIGMAP_KEY: "10.0.0.0/24,10.0.0.1,banana"})
    # overridden by the spec: the junk ConfigMap does not matter
    assert ps.resolve(["10.0.0.0/24"], {ps.CONFIGMAP_KEY: "banana"}).source == "spec"


def test_an_interface_by_name_or_tag_picks_its_address_in_the_order_given() -> None:
    ifaces = [
        ps.InterfaceAddresses("eno1", ("pxe",), ("10.0.0.5",)),
        ps.InterfaceAddresses("eno2", ("api", "storage"), ("192.168.50.5",)),
        ps.InterfaceAddresses("eno3", (), ("172.16.0.5",)),
    ]
    assert ps.pick_address(MULTI, ps.resolve(["interface:eno3"], None), ifaces) == "172.16.0.5"
    assert ps.pick_address(MULTI, ps.resolve(["tag:api"], None), ifaces) == "192.168.50.5"
    # The first selector that finds one wins, whatever its kind.
    assert ps.pick_address(MULTI, ps.resolve(["tag:nope", "10.0.0.0/24"], None), ifaces) == "10.0.0.5"
    assert ps.pick_address(MULTI, ps.resolve(["interface:eno2", "10.0.0.0/24"], None), ifaces) == (
        "192.168.50.5"
    )
    # Unknown interfaces (no MAAS view yet): an interface selector finds nothing; the caller keeps the record.
    pref = ps.resolve(["tag:api"], None)
    assert pref.needs_interfaces
    assert ps.pick_address(MULTI, pref, None) is None
    assert not ps.resolve(["10.0.0.0/24"], None).needs_interfaces
    # An address linked to the interface that is not the machine's (stale) is not published.
    stale = [ps.InterfaceAddresses("eno2", ("api",), ("192.0.2.9",))]
    assert ps.pick_address(MULTI, pref, stale) is None


def test_the_configmap_takes_interface_selectors_and_names_junk() -> None:
    got = ps.resolve(None, {ps.CONFIGMAP_KEY: "tag:api, interface:eno2,10.0.0.0/24"})
    assert [str(s) for s in got.selectors] == ["tag:api", "interface:eno2", "10.0.0.0/24"]
    assert "tag:api" in got.describe()
    with pytest.raises(ps.InvalidPreferredSubnets, match=r"'iface:eno2'.*'tag:'"):
        ps.resolve(None, {ps.CONFIGMAP_KEY: "iface:eno2,tag:"})


def test_spec_preferred_subnets_are_a_cidr_list_in_the_model() -> None:
    s = MaasClusterSpec.from_body({"dnsDomain": "maas", "preferredSubnets": ["10.0.0.0/24", "fd00::/64"]})
    assert s.preferred_subnets == ["10.0.0.0/24", "fd00::/64"]


# --- autoscaler capacity of a MaasMachineTemplate ---------------------------------------------------------
def test_capacity_bare_metal_from_the_minimums() -> None:
    got = capacity_for(spec(minDiskSize=100)).to_k8s()
    assert got == {  # every value a string: the autoscaler drops a map with one number in it
        "capacity": {"cpu": "2", "memory": "4096Mi", "ephemeral-storage": "100G"},
        "nodeInfo": {"operatingSystem": "linux"},
    }
    assert "ephemeral-storage" not in capacity_for(spec()).to_k8s()["capacity"]  # not known


def test_capacity_lxd_disk_from_either_spelling() -> None:
    seed = spec(provisioningMode="lxd", lxdConfig={"storage": {"size": "20Gi"}})
    assert capacity_for(seed).to_k8s()["capacity"]["ephemeral-storage"] == "22G"
    go = spec(lxd={"enabled": True, "vmConfig": {"diskSize": 45}})
    assert capacity_for(go).to_k8s()["capacity"]["ephemeral-storage"] == "45G"


def test_capacity_node_info_follows_the_image_os() -> None:
    windows = capacity_for(spec(image="windows/win2022")).node_info
    assert windows is not None
    assert windows.operating_system == "windows"
    custom = capacity_for(spec(image="custom-k8s")).node_info
    assert custom is not None
    assert custom.operating_system == "linux"
