"""``python -m capmaas_dev.release VERSION [--out dist]`` (``make release VERSION=X.Y.Z``); ``--verify`` only
checks an existing ``dist/``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from capmaas_dev.release.build import ROOT, Options, Release, ReleaseError
from capmaas_dev.release.verify import VerifyError, verify


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capmaas_dev.release", description=__doc__)
    parser.add_argument("version", help="X.Y.Z: must be capmaas.__version__")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output directory (default: dist/)")
    parser.add_argument(
        "--no-reproducibility-check",
        action="store_true",
        help="build the image once (the default builds it twice and compares the digests)",
    )
    parser.add_argument("--verify", action="store_true", help="only verify an existing release directory")
    args = parser.parse_args(argv)
    try:
        if args.verify:
            report = verify(args.out, args.version)
        else:
            release = Release(
                Options(args.version, args.out, check_reproducible=not args.no_reproducibility_check)
            )
            report = release.run()
            if release.reproducible:
                print(f"image digest reproducible: two builds gave {release.reproducible[0]}")
    except (ReleaseError, VerifyError) as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
