"""capmaas.reconcilers."""
