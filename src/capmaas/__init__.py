"""capmaas: a Cluster API infrastructure provider for MAAS, written on kopf."""

__version__ = "0.1.0"

__all__ = ["__version__"]
