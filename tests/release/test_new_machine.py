"""The release build on a new machine (``new_machine``): every command the build runs against buildah gets the
machine's storage and cache (``Options.env``), the image builds' output is kept for the from-scratch test,
what the first build left reaches the other pytest-xdist workers whole (``shared_build``'s record), and the
machine's removal never lets buildah at the machine's own storage."""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import new_machine
import pytest
from new_machine import FirstBuild, NewMachine

from capmaas_dev.release import build

OS_RELEASE = 'ID=debian\nVERSION_ID="12"\n'


def test_every_buildah_command_of_the_build_runs_on_the_given_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine = NewMachine(tmp_path / "machine")
    seen: list[tuple[str, str | None, str | None]] = []

    def fake_run(args: list[str], *, env: Mapping[str, str] | None = None, **_: object) -> str:
        env = env or {}
        seen.append((" ".join(args[:2]), env.get("CONTAINERS_STORAGE_CONF"), env.get("CAPMAAS_CACHE")))
        if args[0] == "bash":  # hack/image.sh
            return "image: making the base ...\n"
        command = args[args.index("--") + 1 :] if "--" in args else []
        if command[:2] == ["cat", "/etc/os-release"]:
            return OS_RELEASE
        if command[:1] == ["python"]:
            return "[]"
        return "ctr\n"

    def fake_subprocess_run(args: list[str], *, env: Mapping[str, str] | None = None, **_: Any) -> None:
        fake_run(args, env=env)  # the working container's removal

    monkeypatch.setattr(build, "_run", fake_run)
    monkeypatch.setattr(build, "subprocess", types.SimpleNamespace(run=fake_subprocess_run))
    monkeypatch.setattr(build, "find_binary", Path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1")
    options = build.Options("9.9.9", tmp_path / "dist", root=tmp_path / "checkout", env=machine.env)
    release = build.Release(options)
    release.partial.mkdir(parents=True)
    (release.partial / release.names.python_sbom).write_text(json.dumps({"components": []}))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    release._build_image(1, wheels)
    release.image_sboms("sha256:" + "0" * 64)

    want = (machine.env["CONTAINERS_STORAGE_CONF"], machine.env["CAPMAAS_CACHE"])
    image_sh = "bash " + str(release.source / "hack" / "image.sh")
    buildah = ["buildah from", "buildah run", "buildah run", "buildah run", "buildah rm"]
    assert [cmd for cmd, *_ in seen] == [image_sh, *buildah]
    assert all((storage, cache) == want for _, storage, cache in seen), seen
    assert release.image_logs == {1: "image: making the base ...\n"}


def test_what_the_first_build_left_survives_the_shared_record() -> None:
    first = FirstBuild(
        images_before=[],
        logs=["image: making the base\n", "image: reusing 45 wheels\n"],
        images=["localhost/capmaas-base:bookworm", "localhost/capmaas:0.2.0"],
        containers=[],
        stale_left=False,
        cache=[],
        outputs=["capmaas-0.2.0.digest", "capmaas-0.2.0.oci.tar", "context"],
        context=["wheels"],
        archive="/x/capmaas-0.2.0.oci.tar",
        digest="sha256:00\n",
    )
    assert FirstBuild(**json.loads(json.dumps(asdict(first)))) == first


def test_a_machine_without_its_storage_conf_is_removed_without_buildah(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that failed before the storage was laid out (no root, no mmdebstrap) leaves no storage.conf:
    buildah would then read the machine's own storage, and ``rmi --all`` there would empty it."""
    calls: list[list[str]] = []
    fake = types.SimpleNamespace(run=lambda args, **_: calls.append(list(args)))
    monkeypatch.setattr(new_machine, "subprocess", fake)
    machine = NewMachine(tmp_path / "machine")
    (machine.stale / "etc").mkdir(parents=True)
    machine.remove()
    assert [c for c in calls if c[0] == "buildah"] == []
    assert not machine.root.exists()
