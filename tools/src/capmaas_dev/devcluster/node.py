"""A one-node cluster: the local control plane plus containerd and a kubelet, so Pods really run.

``make image`` builds the operator image; this starts a node that runs it, so the Helm chart's Deployment,
its probes, read-only root filesystem and RBAC are proven the way a user runs them. What it takes here
(every item was needed on the project's machines, which have no Docker and no systemd):

- Network: the node needs a non-loopback address. It, the ``kubernetes`` Service IP and the Pods' bridge exist
  only inside a network namespace made for this node (:mod:`capmaas_dev.devcluster.netns`), and every process
  of the cluster (etcd, apiserver, controllers, containerd, kubelet, the Pods) runs in it. The namespace has
  no route anywhere else. Callers talk to the cluster from inside it (:meth:`Node.entered`).
- containerd (Debian package) with its root, state, socket, CNI configuration and runc root under the work
  directory; ``restrict_oom_score_adj`` because this root may lack CAP_SYS_RESOURCE (without it every sandbox
  fails with "can't get final child's PID from pipe"); the sandbox ("pause") image is built locally
  (``hack/build-tools.sh pause``) since nothing can be pulled; the CNI ``bridge`` + ``host-local`` plugins.
- kubelet with a client certificate ``CN=system:node:<name>, O=system:nodes`` and a serving certificate from
  the control plane's CA, ``failCgroupV1: false`` on cgroup v1, image garbage collection off (the imported
  images are the only copies). Images are imported from OCI archives into containerd's ``k8s.io`` namespace;
  Pods use ``imagePullPolicy: Never``.
- Clean-up: the kubelet and containerd write a few things outside their directories (``/var/lib/kubelet/
  device-plugins``, ``/var/log/containers``, ``/var/lib/cni``, ``/run/containerd``, the ``kubepods`` cgroups);
  what was not there before the start is removed by :meth:`Node.stop`, after the Pods' processes are killed
  and every mount under the work directory is unmounted. The kubelet also sets a few host-wide kernel settings
  (``vm.overcommit_memory``, ``kernel.panic``, ...): their earlier values are written back.

    with Node.start(images=[Path("build/image/capmaas-dev.oci.tar")]) as node, node.entered():
        node.kubectl("get", "pods", "-A")
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from capmaas_dev.devcluster import process
from capmaas_dev.devcluster.controlplane import SERVICE_IP, Component, ControlPlane, StartError
from capmaas_dev.devcluster.netns import Netns
from capmaas_dev.devcluster.pki import issue_cert
from capmaas_dev.devcluster.tools import MissingToolError, cache_dir, find_binary, run_kubectl
from capmaas_dev.devcluster.versions import PAUSE_VERSION

NODE_NAME = "capmaas-node"
# TEST-NET-1 (RFC 5737, documentation only): routed nowhere, and here it exists only inside the namespace.
NODE_IP = "192.0.2.10"
POD_CIDR = "10.244.0.0/24"
PAUSE_IMAGE = f"localhost/capmaas-pause:{PAUSE_VERSION}"
NODE_STATE = "node.json"
CNI_BIN = Path("/usr/lib/cni")
NODE_HINT = "run `make node` (it installs containerd, runc and the CNI plugins, and builds kubelet)"
_MNT_DETACH = 2

# Paths outside the work directory the kubelet, containerd or CNI write to; removed on stop when new.
OUTSIDE = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/run/containerd",
    "/run/netns",  # `ip netns add` makes it (a shared mount) when absent
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Kernel settings the kubelet sets at start (protectKernelDefaults=false; true would refuse to start unless
# they already had its values). They are host-wide: saved before and put back on stop.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


@dataclass
class Footprint:
    """What existed outside the work directory before the node started (so stop removes only its own)."""

    existed: dict[str, list[str] | None]  # path -> its entries then, or None when absent
    sysctls: dict[str, str]  # /proc/sys path -> value then

    @classmethod
    def take(cls) -> Footprint:
        existed: dict[str, list[str] | None] = {}
        for path in (*OUTSIDE, *(str(d) for d in _cgroup_dirs())):
            p = Path(path)
            existed[path] = sorted(os.listdir(p)) if p.is_dir() else None
        sysctls = {}
        for name in KUBELET_SYSCTLS:
            with contextlib.suppress(OSError):
                sysctls[name] = (Path("/proc/sys") / name).read_text().strip()
        return cls(existed, sysctls)

    def clean(self, workdir: Path, marker: str) -> None:
        """Put back the kernel settings; remove what did not exist before. In a directory that did exist (a
        real kubelet's or containerd's on this machine), remove only what is recognisably this node's: names
        containing ``marker`` (the CNI network is named after the namespace) and symlinks into ``workdir``
        (the kubelet's ``/var/log/containers`` links)."""
        for name, value in self.sysctls.items():
            target = Path("/proc/sys") / name
            with contextlib.suppress(OSError):
                if target.read_text().strip() != value:
                    target.write_text(value + "\n")
        for path, before in self.existed.items():
            p = Path(path)
            if path.startswith(str(CGROUP_ROOT)):
                if before is None:
                    _rmdir_cgroup(p)
                continue
            if before is None:
                _unmount_under(p)
                shutil.rmtree(p, ignore_errors=True)
            elif p.is_dir() and path != "/run/netns":  # the namespace itself is removed by Netns.delete
                for dirpath, _dirs, files in os.walk(p):
                    for name in files:
                        target = Path(dirpath) / name
                        link = os.readlink(target) if target.is_symlink() else ""
                        if marker in name or (link and Path(link).is_relative_to(workdir)):
                            target.unlink(missing_ok=True)


def _cgroup_dirs() -> list[Path]:
    """The ``kubepods`` cgroup of every v1 hierarchy (or of the v2 root)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / "kubepods"]
    return [d / "kubepods" for d in sorted(CGROUP_ROOT.iterdir()) if d.is_dir() and not d.is_symlink()]


def _rmdir_cgroup(path: Path) -> None:
    """Remove an (empty of processes) cgroup tree: only directories can be removed, deepest first."""
    if not path.is_dir():
        return
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root)
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return points


def _unmount_under(root: Path) -> None:
    """Lazily unmount everything mounted at or below ``root`` (overlay roots, tmpfs volumes, netns files)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(3):
        points = _mounts_under(root)
        if not points:
            return
        for point in sorted(points, key=len, reverse=True):
            libc.umount2(point.encode(), _MNT_DETACH)


def cgroup_v1() -> bool:
    return not (CGROUP_ROOT / "cgroup.controllers").exists()


def pause_archive() -> Path:
    """The locally built sandbox image (``hack/build-tools.sh pause``)."""
    path = cache_dir() / "image" / f"capmaas-pause-{PAUSE_VERSION}.oci.tar"
    if not path.is_file():
        raise MissingToolError(f"the pause image {path} is missing: {NODE_HINT}")
    return path


def _system_binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        raise MissingToolError(f"{name} not found: {NODE_HINT}")
    return found


class Node:
    """A running one-node cluster. Build one with :meth:`start` (or :meth:`from_state` when detached)."""

    def __init__(
        self,
        workdir: Path,
        *,
        owns_workdir: bool,
        netns: Netns,
        controlplane: ControlPlane,
        footprint: Footprint,
        detached: bool,
    ) -> None:
        self.workdir = workdir
        self.owns_workdir = owns_workdir
        self.netns = netns
        self.controlplane = controlplane
        self.footprint = footprint
        self.detached = detached
        self.components: list[Component] = []
        self.name = NODE_NAME
        self.ip = NODE_IP
        self._stopped = False

    # -- paths -----------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.controlplane.kubeconfig

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    # -- starting --------------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        workdir: str | os.PathLike[str] | None = None,
        *,
        images: tuple[Path, ...] = (),
        netns_name: str | None = None,
        detach: bool = False,
        timeout: float = 180.0,
    ) -> Node:
        """Start the namespace, control plane, containerd and kubelet; import ``images`` (OCI archives);
        return once the Node is Ready. ``detach`` leaves it running after this interpreter exits (the CLI).
        :class:`MissingToolError` says what to build or install when something is absent."""
        binaries = {
            "kubelet": str(find_binary("kubelet")),
            "containerd": _system_binary("containerd"),
            "ctr": _system_binary("ctr"),
            "runc": _system_binary("runc"),
        }
        for plugin in ("bridge", "host-local", "loopback"):
            if not (CNI_BIN / plugin).is_file():
                raise MissingToolError(f"CNI plugin {CNI_BIN / plugin} not found: {NODE_HINT}")
        archives = (pause_archive(), *images)
        for archive in archives:
            if not archive.is_file():
                raise MissingToolError(f"image archive {archive} not found (run `make image`)")
        owns = workdir is None
        path = Path(tempfile.mkdtemp(prefix="capmaas-node-")) if workdir is None else Path(workdir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)  # containerd's and the kubelet's directories below are traversed by the Pods' user
        footprint = Footprint.take()
        netns = Netns.create(
            netns_name or f"capmaas-{os.getpid()}-{secrets.token_hex(3)}",
            (f"{NODE_IP}/32", f"{SERVICE_IP}/32"),
        )
        node: Node | None = None
        try:
            with netns.entered():
                cp = ControlPlane.start(
                    path / "controlplane", node_ip=NODE_IP, detach=detach, timeout=timeout
                )
                node = cls(
                    path,
                    owns_workdir=owns,
                    netns=netns,
                    controlplane=cp,
                    footprint=footprint,
                    detached=detach,
                )
                if not detach:
                    process.register_cleanup(id(node), node.stop)
                node._start_node(binaries, archives, time.monotonic() + timeout)
        except BaseException:
            if node is not None:
                node.stop(remove_logs=False)
            else:
                netns.delete()
                footprint.clean(path, netns.name)
                if owns:
                    shutil.rmtree(path, ignore_errors=True)
            raise
        return node

    def _start_node(self, binaries: dict[str, str], archives: tuple[Path, ...], deadline: float) -> None:
        pki_dir = self.workdir / "node-pki"
        pki = self.controlplane.pki
        client_cert, client_key = issue_cert(
            pki, pki_dir, "kubelet-client", f"system:node:{self.name}", org="system:nodes", client=True
        )
        serving_cert, serving_key = issue_cert(
            pki, pki_dir, "kubelet-serving", self.name, server_ips=(NODE_IP,), server_names=(self.name,)
        )
        kubelet_kubeconfig = self.workdir / "kubelet.kubeconfig"
        _write_kubeconfig(kubelet_kubeconfig, self.controlplane.server, pki.ca_cert, client_cert, client_key)

        config = self._write_containerd_config()
        self._spawn("containerd", binaries["containerd"], ["--config", str(config)])
        self._wait("containerd", deadline, self._containerd_up)
        self._ctr(binaries["ctr"], "images", "import", str(archives[0]))  # the sandbox image, first

        kubelet_config = self._write_kubelet_config(serving_cert, serving_key, pki.ca_cert)
        self._spawn(
            "kubelet",
            binaries["kubelet"],
            [
                f"--config={kubelet_config}",
                f"--kubeconfig={kubelet_kubeconfig}",
                f"--root-dir={self.workdir / 'kubelet'}",
                f"--cert-dir={pki_dir}",
                f"--hostname-override={self.name}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )
        # The other images are unpacked while the kubelet starts (the operator's takes the longest).
        for archive in archives[1:]:
            self._ctr(binaries["ctr"], "images", "import", str(archive))
        self._wait("kubelet", deadline, self._node_ready)
        self.write_state()

    def _write_containerd_config(self) -> Path:
        base = self.workdir / "containerd"
        cni_conf = self.workdir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        conflist = {
            "cniVersion": "0.4.0",
            "name": self.netns.name,  # unique: its cache files in /var/lib/cni carry it
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "capmaas0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.workdir / "cni" / "ipam"),
                    },
                }
            ],
        }
        # Written before containerd starts: without a CNI configuration the Node stays NotReady.
        (cni_conf / "10-capmaas.conflist").write_text(json.dumps(conflist, indent=2) + "\n")
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
# The opt plugin would install into /opt/containerd; the snapshotters other than overlayfs are not used.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{self.containerd_socket}"

[[{cri}]]
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{base / "runc"}"
"""
        config = config.replace(f"[[{cri}]]\n", "")
        path = base / "config.toml"
        base.mkdir(parents=True, exist_ok=True)
        path.write_text(config)
        return path

    def _write_kubelet_config(self, serving_cert: Path, serving_key: Path, ca_cert: Path) -> Path:
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(serving_cert),
            "tlsPrivateKeyFile": str(serving_key),
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "imageServiceEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "podLogsDir": str(self.workdir / "pod-logs"),
            "resolvConf": "",
            "clusterDomain": "cluster.local",
            # The imported images are the only copies (nothing can be pulled): never collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "serializeImagePulls": False,
            "registerNode": True,
            "maxPods": 30,
        }
        if cgroup_v1():
            config["failCgroupV1"] = False
        path = self.workdir / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _spawn(self, name: str, binary: str, args: list[str]) -> None:
        log = self.logs / f"{name}.log"
        popen = process.spawn([binary, *args], log, detach=self.detached)
        self.components.append(Component(name, popen.pid, log, binary, popen))

    def _wait(self, name: str, deadline: float, ready: Any) -> None:
        comp = next(c for c in self.components if c.name == name)
        last = ""
        while time.monotonic() < deadline:
            if comp.popen is not None and comp.popen.poll() is not None:
                raise StartError(
                    f"{name} exited with code {comp.popen.returncode}; log {comp.log}:\n{_tail(comp.log)}"
                )
            ok, last = ready()
            if ok:
                return
            time.sleep(0.3)
        raise StartError(f"{name} not ready in time ({last}); log {comp.log}:\n{_tail(comp.log)}")

    def _containerd_up(self) -> tuple[bool, str]:
        return self.containerd_socket.is_socket(), "no socket yet"

    def _node_ready(self) -> tuple[bool, str]:
        proc = self.kubectl("get", "node", self.name, "-o", "json", check=False)
        if proc.returncode != 0:
            return False, proc.stderr.strip()
        conditions = json.loads(proc.stdout).get("status", {}).get("conditions", [])
        ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        return ready.get("status") == "True", f"Ready={ready.get('status')}: {ready.get('message', '')}"

    def _ctr(self, ctr: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [ctr, f"--address={self.containerd_socket}", "--namespace=k8s.io", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if check and proc.returncode != 0:
            raise StartError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
        return proc

    def images(self) -> list[str]:
        """The image names containerd's CRI knows (``k8s.io`` namespace)."""
        proc = self._ctr(_system_binary("ctr"), "images", "list", "--quiet", check=False)
        return proc.stdout.split()

    def import_image(self, archive: Path, *, digests: bool = False) -> None:
        """Import one more OCI archive (e.g. a rebuilt operator image for ``helm upgrade``).

        ``digests``: also name each image ``repo@sha256:<manifest>``. For a reference pinned by digest
        (``repo:tag@sha256:...``, as a release's chart and clusterctl components have it) containerd's CRI
        drops the tag and looks up ``repo@sha256:...``, a name ``ctr images import`` never creates (its
        ``--digests`` names the image ``import-<date>@sha256:...``): without it the kubelet reports the image
        absent (``ErrImageNeverPull``) although it is there."""
        ctr = _system_binary("ctr")
        self._ctr(ctr, "images", "import", str(archive))
        if not digests:
            return
        with tarfile.open(archive) as tar:
            index = tar.extractfile("index.json")
            manifests = json.load(index)["manifests"] if index is not None else []
        for entry in manifests:
            name = entry.get("annotations", {}).get("org.opencontainers.image.ref.name", "")
            repo = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
            if repo:
                self._ctr(ctr, "images", "tag", "--force", name, f"{repo}@{entry['digest']}")

    # -- using it --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def entered(self) -> Iterator[Node]:
        """Run the calling thread (and the processes, threads and sockets it starts) inside the node's network
        namespace, where the apiserver and the node's address are."""
        with self.netns.entered():
            yield self

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """kubectl against the cluster, run inside the namespace (from any thread)."""
        with self.netns.entered():
            return run_kubectl(self.kubeconfig, *args, check=check, input=input, timeout=timeout)

    # -- state for the detached CLI --------------------------------------------------------------------
    def write_state(self) -> None:
        state = {
            "netns": self.netns.name,
            "controlplane": str(self.controlplane.workdir),
            "owns_workdir": self.owns_workdir,
            "footprint": self.footprint.existed,
            "sysctls": self.footprint.sysctls,
            "components": [
                {"name": c.name, "pid": c.pid, "log": str(c.log), "binary": c.binary} for c in self.components
            ],
        }
        (self.workdir / NODE_STATE).write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def from_state(cls, workdir: str | os.PathLike[str]) -> Node:
        """Re-attach to a node started (detached) in ``workdir``; FileNotFoundError if none."""
        path = Path(workdir).resolve()
        data = json.loads((path / NODE_STATE).read_text())
        node = cls(
            path,
            owns_workdir=bool(data["owns_workdir"]),
            netns=Netns(data["netns"]),
            controlplane=ControlPlane.from_state(data["controlplane"]),
            footprint=Footprint(data["footprint"], data["sysctls"]),
            detached=True,
        )
        node.components = [
            Component(c["name"], int(c["pid"]), Path(c["log"]), c["binary"]) for c in data["components"]
        ]
        return node

    def running(self) -> bool:
        alive = all((c.popen.poll() is None) if c.popen is not None else _is_ours(c) for c in self.components)
        return bool(self.components) and alive and self.netns.exists() and self.controlplane.running()

    # -- stopping --------------------------------------------------------------------------------------
    def stop(self, *, remove_logs: bool = True) -> None:
        """Stop the kubelet, kill every Pod's processes, stop containerd and the control plane, unmount and
        remove what was created (here and outside), delete the namespace. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        process.unregister_cleanup(id(self))
        by_name = {c.name: c for c in self.components}
        if "kubelet" in by_name:
            self._stop_component(by_name["kubelet"])
        if "containerd" in by_name and self._alive(by_name["containerd"]):
            self._kill_tasks()
            self._stop_component(by_name["containerd"])
        self._kill_leftovers()
        with contextlib.suppress(Exception), self.netns.entered():
            self.controlplane.stop(remove_logs=remove_logs)
        _unmount_under(self.workdir)
        self.netns.delete()
        self.footprint.clean(self.workdir, self.netns.name)
        keep = () if remove_logs else ("logs", "controlplane")
        if self.owns_workdir and remove_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            for entry in self.workdir.iterdir() if self.workdir.is_dir() else ():
                if entry.name in keep:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    @staticmethod
    def _alive(comp: Component) -> bool:
        return comp.popen.poll() is None if comp.popen is not None else _is_ours(comp)

    def _stop_component(self, comp: Component) -> None:
        if self._alive(comp):
            process.stop_group(comp.pid, popen=comp.popen)

    def _kill_tasks(self) -> None:
        """SIGKILL every container task (Pods' processes) and remove the containers, through containerd."""
        with contextlib.suppress(Exception):
            ctr = _system_binary("ctr")
            tasks = self._ctr(ctr, "tasks", "list", "--quiet", check=False).stdout.split()
            for task in tasks:
                self._ctr(ctr, "tasks", "kill", "--signal", "SIGKILL", "--all", task, check=False)
            deadline = time.monotonic() + 10
            for task in tasks:
                while time.monotonic() < deadline:
                    if self._ctr(ctr, "tasks", "delete", task, check=False).returncode == 0:
                        break
                    time.sleep(0.2)
            for container in self._ctr(ctr, "containers", "list", "--quiet", check=False).stdout.split():
                self._ctr(ctr, "containers", "delete", container, check=False)

    def _kill_leftovers(self) -> None:
        """Whatever still runs from this node (shims, Pods' processes after a crash): every process whose
        command line names this work directory or whose network namespace is this node's or a Pod's."""
        marker = str(self.workdir)
        ours: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            cmd = " ".join(process.pid_cmdline(pid))
            if marker in cmd:
                ours.append(pid)
        runc_root = self.workdir / "containerd" / "runc"
        for state in runc_root.glob("*/*/state.json") if runc_root.is_dir() else ():
            with contextlib.suppress(Exception):
                ours.append(int(json.loads(state.read_text())["init_process_pid"]))
        for pid in ours:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)

    def __enter__(self) -> Node:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Node(name={self.name!r}, netns={self.netns.name!r}, workdir={str(self.workdir)!r})"


def _is_ours(comp: Component) -> bool:
    cmd = process.pid_cmdline(comp.pid)
    return process.pid_alive(comp.pid) and bool(cmd) and cmd[0] == comp.binary


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "capmaas-dev", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "node", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "node", "context": {"cluster": "capmaas-dev", "user": "node"}}],
        "current-context": "node",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
