"""capmaas.api: the pydantic models of the capmaas CRDs, the CRD generator and the condition constants.

- ``capmaas.api.v1beta1``: ``MaasCluster``, ``MaasMachine``, ``MaasMachineTemplate``,
  ``MaasClusterTemplate`` and their spec/status parts. Parse with ``Model.from_body(body)``,
  serialise with ``.to_k8s()``.
- ``capmaas.api.conditions``: condition types and reasons.
- ``capmaas_dev.crdgen``: ``capmaas crds`` (models -> ``crds/*.yaml``).
"""
