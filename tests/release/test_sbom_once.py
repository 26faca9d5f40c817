"""``sbom_once`` as the previous release's build runs it: a release module's ``python -m`` with its
``verify._validate_cyclonedx`` remembering, the marks shared with this process's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import sbom_once

# A release package's tooling, as small as the seam: ``__main__`` validates each argument through
# ``verify.verify`` (which looks ``_validate_cyclonedx`` up when called, as the real one does) and counts
# the validator's runs in a file.
VERIFY = """
from pathlib import Path
COUNT = Path(__file__).parents[3] / "validations"

def _validate_cyclonedx(text):
    with COUNT.open("a") as f:
        f.write(text + "\\n")
    return None if text.startswith("valid") else "not CycloneDX"

def verify(text):
    return _validate_cyclonedx(text)
"""
MAIN = """
import sys
from fake.release.verify import verify
print([verify(text) for text in sys.argv[1:]])
"""


def _tooling(root: Path) -> Path:
    pkg = root / "src" / "fake" / "release"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "verify.py").write_text(textwrap.dedent(VERIFY))
    (pkg / "__main__.py").write_text(textwrap.dedent(MAIN))
    return root / "src"


def _run(src: Path, marks: Path, *texts: str) -> str:
    out = subprocess.run(
        [sys.executable, sbom_once.__file__, str(marks), "fake.release", *texts],
        capture_output=True, text=True, check=False, timeout=60, env={"PYTHONPATH": str(src)},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


def test_the_release_tooling_validates_each_valid_text_once_per_run(tmp_path: Path) -> None:
    src, marks = _tooling(tmp_path), tmp_path / "marks"
    count = tmp_path / "validations"
    # The release's module runs with its arguments; a valid text is validated and marked, an invalid one
    # fails and is not marked.
    assert _run(src, marks, "valid-a", "broken") == "[None, 'not CycloneDX']"
    assert count.read_text().split() == ["valid-a", "broken"]
    # Again in the same run: the valid text passes without the validator, the invalid one fails again.
    assert _run(src, marks, "valid-a", "broken", "valid-b") == "[None, 'not CycloneDX', None]"
    assert count.read_text().split() == ["valid-a", "broken", "broken", "valid-b"]
    # The marks are this process's too (``validate_each_sbom_once``): no validator run for a marked text.
    seen: list[str] = []

    def real(text: str) -> str | None:
        seen.append(text)
        return None

    validate = sbom_once.remembering(real, marks)
    assert [validate("valid-a"), validate("valid-b"), validate("valid-c")] == [None, None, None]
    assert seen == ["valid-c"]


def test_a_release_without_the_seam_runs_as_it_is(tmp_path: Path) -> None:
    src, marks = _tooling(tmp_path), tmp_path / "marks"
    verify = src / "fake" / "release" / "verify.py"
    verify.write_text(verify.read_text().replace("_validate_cyclonedx", "_check"))
    assert _run(src, marks, "valid-a") == "[None]"
    assert _run(src, marks, "valid-a") == "[None]"
    assert (tmp_path / "validations").read_text().split() == ["valid-a", "valid-a"]
    assert not marks.exists() or not list(marks.iterdir())
