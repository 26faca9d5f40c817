"""Each SBOM text's CycloneDX schema validation once per test run: in the tests' process and in the previous
release's build, a child process running that release's own tooling.

Why: the release tests verify the same SBOMs several times per run (the build's own check, the other worker
taking the build, the tampered copies, the previous release's build and then the tests' check of it), and
the validator's IRI format checks (a Lark Earley parser per ``purl``) cost about 9 s of CPU for the Python
SBOM, 3 s for the Debian one (docs/benchmarks/test-durations.md). The validation is a function of the text
alone: a text that passed is marked by its SHA-256 in a directory the run shares (its pytest-xdist workers
and the child process) and passes again without the validator; a text that failed is never marked, so a
failure is seen every time.

Imports nothing of capmaas: run as a script (``python sbom_once.py MARKS MODULE ARGS...``) it is
``python -m MODULE ARGS...`` (``MODULE``: a release's ``<package>.release``, the code on ``PYTHONPATH``,
whatever its layout) with that module's ``verify._validate_cyclonedx`` remembering. A release whose tooling
has no such function is run as it is.
"""

from __future__ import annotations

import hashlib
import importlib
import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

Validator = Callable[[str], "str | None"]


def remembering(real: Validator, root: Path) -> Validator:
    """``real`` (the text -> None when valid, else the complaint), run once per distinct valid text."""
    root.mkdir(parents=True, exist_ok=True)

    def validate(text: str) -> str | None:
        mark = root / hashlib.sha256(text.encode()).hexdigest()
        if mark.is_file():
            return None
        error = real(text)
        if error is None:
            mark.touch()
        return error

    return validate


def main(argv: Sequence[str]) -> None:
    marks, module, *args = argv
    verify = importlib.import_module(f"{module}.verify")
    real = getattr(verify, "_validate_cyclonedx", None)
    if real is not None:
        verify._validate_cyclonedx = remembering(real, Path(marks))  # the one seam
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    sys.path.pop(0)  # this directory (the tests' modules): only the release's code is importable
    main(sys.argv[1:])
