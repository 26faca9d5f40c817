"""Fixtures for the hostile-tenant suite (issue 10): the real apiserver, the operator as a subprocess, the
MAAS simulator, and small hostile servers on loopback.

A tenant here is what a namespaced user is on a shared management cluster: a ``User`` (impersonated with
``kubectl --as``) bound to a Role that lets it do anything with Secrets, Cluster API objects and our objects,
in its own namespace only. The operator's harness (``tests/operator/operator_harness.py``) plays Cluster API
core with the admin identity, as CAPI's controllers would.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from operator_harness import crds, harness, operator_env, sim
from security_support import attacker, policy, tenant

__all__ = ["attacker", "crds", "harness", "operator_env", "policy", "sim", "tenant"]
