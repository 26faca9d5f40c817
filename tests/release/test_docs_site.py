"""``make docs``: the generated reference pages are current, the site builds strictly from ``docs/``, the
strict build really fails on a broken link (a copy of ``docs/`` with one added), and the built site renders
in Debian's headless Chromium (``browser_support``): the home page, the CRD reference, and search (JavaScript:
a query must bring results, a query of nothing known none, and a site whose search index is emptied must
fail the same check)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser_support import Page, browser, serve

from capmaas.api import conditions
from capmaas_dev import crdgen
from capmaas_dev.release import docref

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


def test_generated_reference_pages_are_current() -> None:
    assert docref.main(["--check"]) == 0, "run `python -m capmaas_dev.release.docref` and commit"


def test_the_references_cover_every_field_and_reason() -> None:
    crds = docref.crd_reference()
    for kind in crdgen.KINDS:
        assert f"\n## {kind.kind}\n" in crds
    # A field deep in the models, with its description.
    assert "| `identityRef.name` | string | yes |" in crds
    reasons = docref.conditions_reference()
    values = {v for n, v in vars(conditions).items() if n.endswith("_REASON") and isinstance(v, str)}
    assert len(values) > 50
    listed = re.findall(
        r"^### (\S+)\n\n\*\*Means:\*\* (.+) \(`[A-Z0-9_]+_REASON`\)\n\n\*\*What to do:\*\* (.+)$",
        reasons,
        re.M,
    )
    assert {v for v, _, _ in listed} == values
    assert all(meaning.strip() and todo.strip() for _, meaning, todo in listed)  # what it means, what to do


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``make docs`` builds it (strict), once for this module."""
    site = tmp_path_factory.mktemp("docs") / "site"
    out = _build(REPO, site)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stderr
    return site


def test_the_site_builds_strictly(site: Path) -> None:
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


# -- the site in a browser -----------------------------------------------------------------------------------
# Marked slow: `make check` (the inner loop, no Chromium) leaves them to `make test`, which installs Chromium.
BROWSER = pytest.mark.slow
# The text of the elements matched, as a reader sees it (without the permalink's "¶").
TEXTS = "[...document.querySelectorAll({!r})].map(e => e.textContent.replace('\\u00b6', '').trim())"


async def _search(page: Page, base: str, query: str) -> tuple[str, list[str]]:
    """Material's search for ``query`` (its ``?q=`` link): the result count line, and the results' links."""
    await page.open(f"{base}/?q={query}")
    meta = await page.until(
        "(t => !/^(|Initializing search|Type to start searching)$/.test(t) && t)"
        "((document.querySelector('.md-search-result__meta') || {textContent: ''}).textContent.trim())",
        60,
    )
    links = await page.evaluate(
        "[...document.querySelectorAll('.md-search-result__item a')].map(a => a.getAttribute('href'))"
    )
    return str(meta), [str(h) for h in links]


@BROWSER
async def test_the_home_page_and_the_crd_reference_render_in_chromium(site: Path) -> None:
    with serve(site) as base:
        async with browser() as page:
            await page.open(f"{base}/")
            assert await page.evaluate("document.title") == "capmaas"
            assert await page.evaluate(TEXTS.format("article h1")) == ["capmaas"]
            # Material's bundle ran (it defines document$ and fills the navigation).
            assert await page.evaluate("typeof document$ !== 'undefined'")
            assert "CRD fields" in await page.evaluate(TEXTS.format(".md-nav__link"))

            await page.open(f"{base}/reference/crds/")
            assert await page.evaluate(TEXTS.format("article h1")) == ["CRD field reference"]
            assert await page.evaluate(TEXTS.format("article h2")) == [k.kind for k in crdgen.KINDS]
            assert "identityRef.name" in await page.evaluate(TEXTS.format("article td code"))
            assert await page.evaluate("document.querySelectorAll('article table tbody tr').length") > 100

            # The architecture drawing (an SVG of the site's own) loads and has its size.
            await page.open(f"{base}/architecture/")
            size = "(i => i && i.complete && [i.naturalWidth, i.naturalHeight])"
            size += "(document.querySelector('article img'))"
            assert await page.until(size, 30) == [1040, 580]
            assert not page.exceptions, page.exceptions


@BROWSER
async def test_search_renders_results_in_chromium(site: Path) -> None:
    with serve(site) as base:
        async with browser() as page:
            meta, links = await _search(page, base, "identityRef")
            assert re.fullmatch(r"\d+ matching documents?", meta), meta
            assert any("reference/crds/" in link for link in links), links
            meta, links = await _search(page, base, "zzqxjvv")
            assert (meta, links) == ("No matching documents", [])
            assert not page.exceptions, page.exceptions


@BROWSER
async def test_the_search_check_fails_on_an_emptied_index(site: Path, tmp_path: Path) -> None:
    """The same search, on a copy of the site whose search index has no documents: no results, so the check
    of ``test_search_renders_results_in_chromium`` would fail there."""
    broken = tmp_path / "site"
    shutil.copytree(site, broken)
    index = broken / "search" / "search_index.json"
    data = json.loads(index.read_text())
    assert data["docs"]
    index.write_text(json.dumps({**data, "docs": []}))
    with serve(broken) as base:
        async with browser() as page:
            meta, links = await _search(page, base, "identityRef")
    assert (meta, links) == ("No matching documents", [])
