"""capmaas.api."""
