"""capmaas: a Cluster API infrastructure provider for MAAS, written on kopf."""

# Between releases main carries the next release's development version (PEP 440 X.Y.Z.devN): `make release
# VERSION=X.Y.Z` builds it as X.Y.Z. The one place the version is set (docs/releasing.md).
__version__ = "0.2.0.dev0"

__all__ = ["__version__"]
