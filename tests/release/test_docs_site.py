"""``make docs``: the generated reference pages are current, the site builds strictly from ``docs/``, and the
strict build really fails on a broken link (a copy of ``docs/`` with one added)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from capmaas.api import conditions, crdgen
from capmaas.release import docref

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


def test_generated_reference_pages_are_current() -> None:
    assert docref.main(["--check"]) == 0, "run `python -m capmaas.release.docref` and commit"


def test_the_references_cover_every_field_and_reason() -> None:
    crds = docref.crd_reference()
    for kind in crdgen.KINDS:
        assert f"\n## {kind.kind}\n" in crds
    # A field deep in the models, with its description.
    assert "| `identityRef.name` | string | yes |" in crds
    reasons = docref.conditions_reference()
    values = {v for n, v in vars(conditions).items() if n.endswith("_REASON") and isinstance(v, str)}
    assert len(values) > 50
    listed = set(re.findall(r"^\| `([^`]+)` \| `[A-Z0-9_]+_REASON` \| (.+) \|$", reasons, re.M))
    assert {v for v, _ in listed} == values
    assert all(meaning.strip() for _, meaning in listed)  # every reason says what it means


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    out = _build(REPO, tmp_path / "site")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stderr
    site = tmp_path / "site"
    for page in (
        "index.html",
        "reference/crds/index.html",
        "reference/conditions/index.html",
        "search/search_index.json",
    ):
        assert (site / page).is_file(), page
    assert "identityRef.name" in (site / "reference/crds/index.html").read_text()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy2(REPO / "mkdocs.yml", root / "mkdocs.yml")
    with (root / "docs" / "getting-started.md").open("a") as f:
        f.write("\nSee [the missing page](no-such-page.md).\n")
    out = _build(root, tmp_path / "site")
    assert out.returncode != 0
    assert "no-such-page.md" in out.stderr
