"""capmaas's development tools, a distribution of their own (``capmaas-dev``, ``tools/`` of the repository).

Nothing here runs in the operator's Pod and the product package ``capmaas`` never imports it (import contract
"The product never imports the tooling"); the image installs the product's wheel only. The subpackages:

- :mod:`capmaas_dev.simulator`: an independent MAAS 3.7 region API (``capmaas simulate``), the oracle tests,
  the demo and the benchmarks run the client and the operator against;
- :mod:`capmaas_dev.devcluster`: a real kube-apiserver + etcd (optionally a kubelet node) without Docker
  (``capmaas dev-cluster``);
- :mod:`capmaas_dev.demo`: the whole system on this machine (``capmaas demo``), and the stack the benchmark
  and the operator tests start;
- :mod:`capmaas_dev.bench`: the operator benchmark (``python -m capmaas_dev.bench``) and the placement one
  (``python -m capmaas_dev.bench.placement``);
- :mod:`capmaas_dev.crdgen`: the CRD YAML from the API models (``capmaas crds``);
- :mod:`capmaas_dev.release` and :mod:`capmaas_dev.clusterctl_repo`: ``make release`` and the clusterctl
  provider repository under ``deploy/clusterctl``.

:mod:`capmaas_dev.commands` tells the ``capmaas`` command line which of these are sub-commands. This module
imports nothing: the CLI loads it (through the entry point) for every command, ``capmaas run`` too.
"""
