"""mooncake.reshard: address-free contracts and a logical N-D planner for
resharding model weights between parallel layouts (TP, PP, EP, DP).

Written from the spec (components.md 2), not from upstream's code: the
contracts of 2.2 with their ids and digests (canonical JSON: sorted keys,
compact separators, sha256), the wire format of 2.3, the geometry and the
planner of 2.4.  It moves no data: mooncake.store / the engine do that
with the plan's byte segments (tests/python/test_reshard.py shows the RL
weight flow through the store).
"""

import enum
from typing import Protocol


class ResourceKind(str, enum.Enum):
    MODEL_WEIGHT = "model_weight"
    KV_CACHE = "kv_cache"  # reserved


class ResourceManifest(Protocol):
    resource_id: str


class PlacementManifest(ResourceManifest, Protocol):
    placement_id: str


class RuntimeBindingManifest(ResourceManifest, Protocol):
    placement_id: str


__all__ = ["ResourceKind", "ResourceManifest", "PlacementManifest", "RuntimeBindingManifest"]
