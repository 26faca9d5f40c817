"""``capmaas dev-cluster up|down|env|status``: a detached local control plane for people (tests use the API).

``up`` starts etcd + kube-apiserver (+ kube-controller-manager when built) and returns, leaving them running
with a state file in ``--dir`` (default ``~/.cache/capmaas/dev-cluster``); ``env`` prints ``export
KUBECONFIG=...`` (``eval "$(capmaas dev-cluster env)"``); ``down`` stops the processes and removes the files.
``up --kind`` creates a kind cluster instead, where Docker and kind exist (untested on the project's
machines).

``up --node`` starts a one-node cluster instead (:mod:`capmaas_dev.devcluster.node`: the same control plane
plus kube-scheduler, containerd and a kubelet, inside a network namespace of its own), importing the image
archives given with ``--load`` (default: ``make image``'s ``build/image/capmaas-dev.oci.tar`` when present).
The cluster is reachable only inside that namespace: ``env`` prints the ``ip netns exec`` prefix to use. Needs
root and ``make node``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from capmaas_dev.devcluster import kind
from capmaas_dev.devcluster.controlplane import STATE_FILE, ControlPlane, StartError
from capmaas_dev.devcluster.netns import NetnsError
from capmaas_dev.devcluster.node import NODE_STATE, Node
from capmaas_dev.devcluster.tools import (
    KubectlError,
    MissingToolError,
    apply_capi_crds,
    cache_dir,
    capi_crds_dir,
)
from capmaas_dev.devcluster.versions import CAPI_VERSION


def default_dir() -> Path:
    return cache_dir() / "dev-cluster"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "down", "env", "status"], help="what to do")
    parser.add_argument("--dir", type=Path, default=None, help="state directory (default: %(prog)s cache)")
    parser.add_argument("--kind", action="store_true", help="up: create a kind cluster (needs Docker + kind)")
    parser.add_argument(
        "--node",
        action="store_true",
        help="up: a one-node cluster (containerd + kubelet) in a network namespace of its own (root)",
    )
    parser.add_argument(
        "--load",
        action="append",
        metavar="ARCHIVE",
        type=Path,
        default=None,
        help="up --node: OCI image archive to import (repeatable; default: build/image/capmaas-dev.oci.tar)",
    )
    parser.add_argument("--netns", default="capmaas-dev", help="up --node: the network namespace's name")
    parser.add_argument("--name", default="capmaas", help="up --kind: the kind cluster name")
    parser.add_argument("--image", default=None, help="up --kind: node image (kind's default otherwise)")
    parser.add_argument(
        "--controller-manager",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="up: run kube-controller-manager (default: when it is built)",
    )
    parser.add_argument(
        "--capi-crds",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"up: apply the Cluster API {CAPI_VERSION} core CRDs (default: when downloaded)",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="up: seconds to wait for readiness")


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _state(directory: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    return data


def _export_line(kubeconfig: str) -> str:
    return f"export KUBECONFIG={shlex.quote(kubeconfig)}"


def run(args: argparse.Namespace) -> int:
    directory: Path = (args.dir or default_dir()).expanduser().resolve()
    action: str = args.action
    try:
        if (directory / NODE_STATE).exists():
            return _node_action(args, directory)
        if action == "up":
            if args.node:
                return _node_up(args, directory)
            return _kind_up(args, directory) if args.kind else _up(args, directory)
        if action == "down":
            return _down(directory)
        if action == "env":
            state = _state(directory)
            if state is None:
                _say(f"no dev cluster in {directory}: run `capmaas dev-cluster up`")
                return 1
            print(_export_line(state["kubeconfig"]))
            return 0
        return _status(directory)
    except MissingToolError as exc:
        _say(f"error: {exc}")
        return 2


def _node_up(args: argparse.Namespace, directory: Path) -> int:
    if _state(directory) is not None:
        _say(f"a dev cluster is already recorded in {directory}; run `down` first")
        return 1
    images = args.load
    if images is None:
        default = Path("build/image/capmaas-dev.oci.tar")
        images = [default] if default.is_file() else []
        if not images:
            _say(
                f"note: {default} not found (run `make image`); starting the node without the operator image"
            )
    started = time.monotonic()
    try:
        node = Node.start(
            directory,
            images=tuple(p.resolve() for p in images),
            netns_name=args.netns,
            detach=True,
            timeout=max(args.timeout, 180.0),
        )
    except (StartError, NetnsError) as exc:
        _say(f"error: {exc}")
        return 1
    _say(
        f"node {node.name} Ready in {time.monotonic() - started:.1f}s; the cluster is reachable only inside "
        f"the network namespace {node.netns.name}: prefix commands with `ip netns exec {node.netns.name}`"
    )
    print(_export_line(str(node.kubeconfig)))
    return 0


def _node_action(args: argparse.Namespace, directory: Path) -> int:
    node = Node.from_state(directory)
    if args.action == "up":
        if node.running():
            _say(f"already running (network namespace {node.netns.name})")
            print(_export_line(str(node.kubeconfig)))
            return 0
        _say("found a stale node cluster; cleaning it up (run `up --node` again)")
        node.stop()
        (directory / NODE_STATE).unlink(missing_ok=True)
        return 1
    if args.action == "down":
        node.stop()
        (directory / NODE_STATE).unlink(missing_ok=True)
        _say(f"stopped the node cluster in {directory}")
        return 0
    if args.action == "env":
        print(_export_line(str(node.kubeconfig)))
        _say(f"# the cluster is reachable only inside: ip netns exec {node.netns.name} <command>")
        return 0
    up = node.running()
    print(f"{'running' if up else 'NOT running'}: node {node.name} in network namespace {node.netns.name}")
    return 0 if up else 1


def _up(args: argparse.Namespace, directory: Path) -> int:
    state = _state(directory)
    if state is not None:
        if state.get("kind") == "local" and ControlPlane.from_state(directory).running():
            _say(f"already running: {state['server']}")
            print(_export_line(state["kubeconfig"]))
            return 0
        if state.get("kind") == "kind":
            _say(f"a kind cluster {state['name']!r} is recorded in {directory}; run `down` first")
            return 1
        _say("found a stale dev cluster; cleaning it up")
        ControlPlane.from_state(directory).stop()
    started = time.monotonic()
    try:
        cp = ControlPlane.start(
            directory, controller_manager=args.controller_manager, detach=True, timeout=args.timeout
        )
    except StartError as exc:
        _say(f"error: {exc}")
        return 1
    names = ", ".join(c.name for c in cp.components)
    _say(f"control plane up at {cp.server} ({names}) in {time.monotonic() - started:.1f}s")
    want_crds = args.capi_crds
    if want_crds is None:
        try:
            capi_crds_dir()
            want_crds = True
        except MissingToolError as exc:
            _say(f"note: not applying Cluster API CRDs: {exc}")
            want_crds = False
    if want_crds:
        try:
            crds = apply_capi_crds(cp.kubeconfig)
        except (KubectlError, MissingToolError) as exc:
            _say(f"error applying Cluster API CRDs: {exc}")
            cp.stop()
            return 1
        _say(f"applied {len(crds)} Cluster API {CAPI_VERSION} CRDs")
    print(_export_line(str(cp.kubeconfig)))
    return 0


def _down(directory: Path) -> int:
    state = _state(directory)
    if state is None:
        _say(f"no dev cluster in {directory}; nothing to do")
        return 0
    if state.get("kind") == "kind":
        _say(kind.UNTESTED)
        code = kind.delete(state["name"], Path(state["kubeconfig"]))
        if code == 0:
            (directory / STATE_FILE).unlink(missing_ok=True)
            Path(state["kubeconfig"]).unlink(missing_ok=True)
        return code
    ControlPlane.from_state(directory).stop()
    _say(f"stopped the dev cluster in {directory}")
    return 0


def _status(directory: Path) -> int:
    state = _state(directory)
    if state is None:
        _say(f"no dev cluster in {directory}")
        return 1
    if state.get("kind") == "kind":
        print(f"kind cluster {state['name']} (kubeconfig {state['kubeconfig']})")
        return 0
    cp = ControlPlane.from_state(directory)
    up = cp.running()
    print(f"{'running' if up else 'NOT running'}: {cp.server} pids {cp.pids()}")
    return 0 if up else 1


def _kind_up(args: argparse.Namespace, directory: Path) -> int:
    _say(kind.UNTESTED)
    reason = kind.unavailable_reason()
    if reason is not None:
        _say(f"error: cannot create a kind cluster: {reason}. Without Docker use `capmaas dev-cluster up`.")
        return 2
    if _state(directory) is not None:
        _say(f"a dev cluster is already recorded in {directory}; run `down` first")
        return 1
    directory.mkdir(parents=True, exist_ok=True)
    kubeconfig = directory / "kubeconfig"
    code = kind.create(args.name, kubeconfig, image=args.image)
    if code != 0:
        return code
    state = {"kind": "kind", "name": args.name, "kubeconfig": str(kubeconfig)}
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    if args.capi_crds is not False:
        try:
            apply_capi_crds(kubeconfig)
        except (KubectlError, MissingToolError) as exc:
            _say(f"note: Cluster API CRDs not applied: {exc}")
    print(_export_line(str(kubeconfig)))
    return 0
