"""Identifier types and canonical JSON (spec components.md 2.1-2.2).

canonical_json is json.dumps(sort_keys=True, separators=(",", ":")): ids
and the placement digest use the default ASCII escaping, WeightManifest
style documents raw UTF-8 (ensure_ascii=False).  sha256_id prefixes the hex
digest with "sha256:".
"""

import hashlib
import json
from typing import NewType

ResourceId = NewType("ResourceId", str)
PlacementId = NewType("PlacementId", str)
ParticipantId = NewType("ParticipantId", str)
PlacementFragmentId = NewType("PlacementFragmentId", str)
RuntimeFragmentId = NewType("RuntimeFragmentId", str)
TensorId = NewType("TensorId", str)
TopologyId = NewType("TopologyId", str)
PlacementSetId = NewType("PlacementSetId", str)
RevisionId = NewType("RevisionId", str)
RuntimeInstanceId = NewType("RuntimeInstanceId", str)
LeaseId = NewType("LeaseId", str)
StoredFragmentId = NewType("StoredFragmentId", str)


def canonical_json(obj, ensure_ascii=True):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=ensure_ascii,
                      allow_nan=False)


def sha256_hex(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_id(obj):
    return "sha256:" + sha256_hex(canonical_json(obj))


def check_int(name, v, lo=0, hi=None):
    """An exact int (bool refused) within [lo, hi]."""
    if type(v) is not int:
        raise ValueError(f"{name} must be an int, not {type(v).__name__}")
    if v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be in [{lo}, {hi if hi is not None else 'inf'}], got {v}")
    return v


def check_str(name, v):
    if type(v) is not str or not v:
        raise ValueError(f"{name} must be a non-empty str")
    return v


def check_ints(name, seq, lo=0):
    if not isinstance(seq, (tuple, list)):
        raise ValueError(f"{name} must be a sequence of ints")
    return tuple(check_int(f"{name}[{i}]", x, lo) for i, x in enumerate(seq))


class StoredResourceManifest:
    """What a stored snapshot's manifest offers (structural): namespace,
    resource_id, revision, manifest_key, to_json(), manifest_identity()."""


# The binding contracts live in binding.py; named here as upstream's module
# does, resolved on first use: binding.py imports this module's checks, so
# importing it here at load time made `import mooncake.reshard.binding`
# (binding first) fail on a partially initialised module.
_FROM_BINDING = ("RuntimeBindingFragment", "validate_resource_binding_identity")


def __getattr__(name):
    if name in _FROM_BINDING:
        from mooncake.reshard import binding
        return getattr(binding, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
