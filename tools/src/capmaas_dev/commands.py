"""The ``capmaas`` sub-commands this distribution adds, found by the product's CLI through the entry point
group
``capmaas.commands`` (tools/pyproject.toml): name -> (module with ``add_arguments``/``run``, help).

Imports nothing, so that listing the commands costs no import of the modules behind them (only the module of
the command being run is imported, as for the product's own commands).
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "crds": ("capmaas_dev.crdgen", "write (or --check) the CRD YAML generated from the pydantic models"),
    "simulate": ("capmaas_dev.simulator.serve", "serve a MAAS 3.7 API simulator from an inventory"),
    "dev-cluster": ("capmaas_dev.devcluster.cli", "start/stop a local kube-apiserver + etcd"),
    "demo": ("capmaas_dev.demo", "run the whole system locally and provision a sample cluster"),
}
