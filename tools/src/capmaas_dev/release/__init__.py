"""Release tooling: ``make release VERSION=X.Y.Z`` (``python -m capmaas_dev.release``) builds ``dist/``.

Not part of the operator: nothing under ``capmaas_dev.release`` is imported by ``capmaas run``, and its extra
tools (``build``, ``cyclonedx-bom``) are the ``release`` extra of capmaas-dev, never the product's.

- :mod:`capmaas_dev.release.build`: the steps, in order (wheel and sdist, the image twice for the digest
  check, chart, clusterctl assets, SBOMs, ``SHA256SUMS``), into ``dist.partial/`` renamed to ``dist/`` when
  complete;
- :mod:`capmaas_dev.release.oci`: the OCI archive's manifest digest, and a byte-stable repack of the archive;
- :mod:`capmaas_dev.release.debsbom`: a CycloneDX SBOM from a dpkg status file (no maintained generator for
  Debian packages is installable here: syft and trivy are not on PyPI or in Debian);
- :mod:`capmaas_dev.release.verify`: every check of a built ``dist/`` (the build runs it last; the tests too).
"""
