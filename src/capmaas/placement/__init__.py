"""capmaas.placement."""
