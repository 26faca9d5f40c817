"""capmaas.maas."""
