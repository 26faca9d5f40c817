"""capmaas.simulator."""
