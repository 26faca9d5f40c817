"""capmaas.operator."""
