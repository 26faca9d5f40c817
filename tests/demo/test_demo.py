"""``capmaas demo`` and ``python -m capmaas_dev.bench`` run for real, as a user runs them: a subprocess each,
with its own control plane, simulator and operator. Small numbers and fast timings; no timing is asserted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

TABLE_HEADER = re.compile(
    r"^NAME\s+ROLE\s+ZONE\s+SYSTEM ID\s+MAAS HOST\s+MAAS STATE\s+ADDRESS\s+READY\s+MACHINE\s+NODE$"
)
WORKDIR = re.compile(r"working directory (/\S+) \(removed at exit\)")


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def final_table(out: str) -> list[list[str]]:
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if TABLE_HEADER.match(line)]
    assert len(starts) == 1, f"expected one machine table in:\n{out}"
    start = starts[0]
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def start_like_in_a_terminal(args: list[str]) -> subprocess.Popen[str]:
    """Start the demo so that Ctrl-C reaches it as it does in a terminal. A shell that runs a job in the
    background without job control starts it with SIGINT ignored; an ignored signal stays ignored across exec
    (and Python then never installs its KeyboardInterrupt handler), whereas a handled one is reset to the
    default. So SIGINT is handled here while the child starts, whatever this process inherited."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def processes_mentioning(path: str) -> list[int]:
    """PIDs whose command line or environment mentions ``path`` (what the demo started there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if path.encode() in blob:
            found.append(int(entry.name))
    return found


def describe_block(out: str) -> str:
    """What the demo printed of ``clusterctl describe cluster`` (from its command line to a blank line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$ clusterctl describe cluster demo"))
    block = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        block.append(line)
    return "\n".join(block)


def test_demo_provisions_every_machine_and_releases_them() -> None:
    proc = run(
        "-m", "capmaas", "demo", "--control-planes", "1", "--workers", "2", "--deploy-seconds", "1",
        timeout=400,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    rows = final_table(proc.stdout)
    names = [r[0] for r in rows]
    # cp-0 is a Machine the user wrote; the workers' names come from the MachineDeployment's MachineSet.
    assert names[0] == "cp-0", out
    workers = names[1:]
    assert len(workers) == 2, out
    assert all(re.fullmatch(r"demo-workers-[a-z0-9]+-[a-z0-9]+", n) for n in workers), out
    for name, role, zone, sid, host, state, address, ready, machine, node in rows:
        assert ready == "yes", out
        assert state == "Deployed", out
        assert role == ("control-plane" if name == "cp-0" else "worker")
        assert zone.startswith("az")
        assert sid != "-"
        assert host != "-"
        assert address.startswith("10.")
        # CAPI's Machine is Running, with a nodeRef to the Node the stand-in's kubelet registered (its name is
        # the MAAS hostname).
        assert machine == "Running", out
        assert node == host, out
    assert "3/3 machines Ready (MaasMachines), 3/3 Machines Running with a nodeRef" in proc.stdout
    assert "MachineDeployment demo-workers: 2/2 available" in proc.stdout
    assert re.search(r"MaasCluster demo ready: endpoint [a-z0-9.-]+:6443,", proc.stdout), out
    # The Cluster API core manager ran the Machines: clusterctl sees the cluster, its MachineDeployment and
    # every Machine.
    tree = describe_block(proc.stdout)
    assert "Cluster/demo" in tree, out
    assert "MachineDeployment/demo-workers" in tree, out
    for name in names:
        assert f"Machine/{name}" in tree, out
    assert re.search(
        r"Cluster deleted in [0-9.]+s: Machines left: 0; released 3/3 MAAS machines; ", proc.stdout
    )
    assert "machines still allocated: 0; DNS records left: 0; simulator invariants: ok" in proc.stdout
    assert re.search(r"^OK: total [0-9.]+s \(everything up [0-9.]+s, ", proc.stdout, re.M), out
    workdir = WORKDIR.search(proc.stdout)
    assert workdir is not None, out
    assert not Path(workdir.group(1)).exists()
    assert processes_mentioning(workdir.group(1)) == []


def test_demo_lxd_vms_show_their_address_and_are_decomposed() -> None:
    proc = run(
        "-m", "capmaas", "demo", "--lxd", "--control-planes", "1", "--workers", "1", "--deploy-seconds", "1",
        timeout=400,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    rows = final_table(proc.stdout)
    assert rows[0][0] == "cp-0", out
    assert len(rows) == 2, out
    addresses = [r[6] for r in rows]
    # The VMs sit on their hosts' network (inventory-lxd.yaml: 10.20.0.0/24) and get one address each.
    assert all(a.startswith("10.20.0.") for a in addresses), out
    assert len(set(addresses)) == 2, out
    assert all(r[7] == "yes" and r[8] == "Running" for r in rows), out
    assert "decomposed 2/2 MAAS machines" in proc.stdout
    assert "machines still allocated: 0; DNS records left: 0; simulator invariants: ok" in proc.stdout


def test_demo_keep_prints_commands_that_work() -> None:
    """``--keep``: the printed ``export KUBECONFIG=...``, kubectl and clusterctl lines run as printed, against
    the cluster the demo left up; Ctrl-C then stops everything."""
    proc = start_like_in_a_terminal(
        [sys.executable, "-m", "capmaas", "demo", "--keep", "--control-planes", "1", "--workers", "1",
         "--deploy-seconds", "1"],
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []
    keep: list[str] = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if keep or line.startswith("--keep:"):
                keep.append(line.rstrip("\n"))
            if line.startswith("  logs:"):
                break
        out = "".join(seen)
        assert keep, out
        commands = [k.strip() for k in keep[1:]]
        export = next(c for c in commands if c.startswith("export KUBECONFIG="))
        path = next(c for c in commands if c.startswith("export PATH="))
        kubectl = next(c for c in commands if c.startswith("kubectl get cluster,"))
        clusterctl = next(c for c in commands if " describe cluster demo " in c)
        script = f"set -e; {export}; {path}; {kubectl} -o name; {clusterctl}"
        shell = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False
        )
        assert shell.returncode == 0, f"{script}\n{shell.stdout}{shell.stderr}\n{out}"
        assert "cluster.cluster.x-k8s.io/demo" in shell.stdout
        assert "machinedeployment.cluster.x-k8s.io/demo-workers" in shell.stdout
        assert "maasmachine.infrastructure.cluster.x-k8s.io/cp-0" in shell.stdout
        assert "Cluster/demo" in shell.stdout
        workdir = WORKDIR.search(out)
        assert workdir is not None, out
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + rest
    assert not Path(workdir.group(1)).exists()


def test_demo_cleans_up_on_ctrl_c() -> None:
    proc = start_like_in_a_terminal(
        [sys.executable, "-m", "capmaas", "demo", "--control-planes", "1", "--workers", "1",
         "--deploy-seconds", "30"],
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []
    workdir = None
    try:
        for line in proc.stdout:
            seen.append(line)
            if m := WORKDIR.search(line):
                workdir = m.group(1)
            if "Deploying" in line:  # machines are allocated in MAAS and the operator is busy: interrupt now
                break
        assert workdir is not None, "".join(seen)
        assert processes_mentioning(workdir), "the demo's processes should be running now"
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(seen) + rest
    assert proc.returncode == 130, out
    assert "interrupted" in rest
    assert not Path(workdir).exists(), out
    deadline = time.monotonic() + 10
    while processes_mentioning(workdir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(workdir) == [], out


FIGURES = [
    "machines Ready",
    "time to all Ready",
    "readiness lag p50",
    "readiness lag p99",
    "MAAS requests / machine lifecycle",
    "Kubernetes API writes / machine",
    "operator peak RSS",
    "operator CPU (create..released)",
    "operator CPU (whole run)",
    "bench harness CPU in the window (create..all Ready)",
    "MAAS simulator CPU in the window (not above)",
    "kube-apiserver CPU in the window",
    "etcd CPU in the window",
    "released after delete",
    "simulator invariants",
]


def test_bench_prints_every_figure(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    proc = run("-m", "capmaas_dev.bench", "--machines", "5", "--json", str(figures), timeout=400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for name in FIGURES:
        assert re.search(rf"^{re.escape(name)}\s+\S", proc.stdout, re.M), f"{name!r} missing\n{out}"
    assert "MAAS requests by endpoint" in proc.stdout
    assert re.search(r"^POST\s+/MAAS/api/2.0/machines/\?op=allocate\s+\d+", proc.stdout, re.M), out
    assert re.search(r"^PATCH\s+maasmachines\S*\s+\d+", proc.stdout, re.M), out
    data = json.loads(figures.read_text())
    assert data["ready"] == 5
    assert data["released"] == 5
    assert data["maas_machines_still_allocated"] == 0
    assert data["simulator_invariants"] == []
    assert data["readiness_lag_samples"] == 5
    for key in (
        "time_to_all_ready_seconds", "readiness_lag_p50_seconds", "readiness_lag_p99_seconds",
        "maas_requests_per_machine", "kube_writes_per_machine", "operator_peak_rss_mb",
        "operator_cpu_seconds_window", "operator_cpu_seconds_total",
        "bench_harness_cpu_seconds_to_ready", "bench_watch_cpu_seconds_to_ready",
        "simulator_cpu_seconds_to_ready",
    ):  # fmt: skip
        value = data[key]
        assert isinstance(value, int | float), (key, value)
        assert value == value, (key, value)  # not NaN
        assert value >= 0, (key, value)
    assert set(data["control_plane_cpu_seconds_to_ready"]) >= {"kube-apiserver", "etcd"}
    assert data["maas_requests_per_machine"] >= 3  # at least allocate, deploy and release per machine
    assert data["operator_peak_rss_mb"] > 10
