"""The test tree has no packages (no ``__init__.py``), so pytest imports every test module by its basename:
two test modules with the same file name in different folders make the second fail to import ("import file
mismatch") as soon as both are collected in one run, which only the whole suite does."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename (rename one): {clashes}"


def test_every_traced_directory_exists() -> None:
    """``suite_plan.TRACED`` names the tests the coverage gate's figures come from (``make test`` traces only
    those): a directory renamed or moved away would silently leave the gate to whatever else is traced."""
    import suite_plan

    missing = [d for d in suite_plan.TRACED if not (TESTS.parent / d).is_dir()]
    assert not missing, f"suite_plan.TRACED names directories that do not exist: {missing}"
    assert suite_plan.traced("tests/unit/maas/test_x.py::test_y")
