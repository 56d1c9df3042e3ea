"""Weights stored in the Mooncake Store (spec components.md 2.2,
StoredFragment and WeightManifest): a manifest object naming payload
objects, and its identity.  Re-exported by mooncake.reshard.weight.
WeightManifest.to_json is canonical JSON in raw UTF-8 (ensure_ascii=False);
manifest_digest is its sha256.
"""

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Tuple

from mooncake.reshard.contracts import (canonical_json, check_int, check_ints, check_str,
                                        sha256_hex)
from mooncake.reshard.geometry import boxes_exactly_cover

U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class StoredFragment:
    fragment_id: str
    tensor_id: str
    global_offset: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    object_key: str
    object_offset: int
    nbytes: int
    aliases: Tuple[str, ...] = ()

    def __post_init__(self):
        for k in ("fragment_id", "tensor_id", "object_key"):
            check_str(k, getattr(self, k))
        object.__setattr__(self, "global_offset", check_ints("global_offset", self.global_offset))
        object.__setattr__(self, "local_shape", check_ints("local_shape", self.local_shape, lo=1))
        check_int("object_offset", self.object_offset, hi=U64_MAX)
        check_int("nbytes", self.nbytes, lo=1, hi=U64_MAX)
        a = tuple(self.aliases)
        if a and (list(a) != sorted(set(a)) or len(a) < 2 or self.tensor_id not in a):
            raise ValueError("stored fragment aliases must be sorted, unique, at least 2 and "
                             "include tensor_id")
        object.__setattr__(self, "aliases", a)
        # the placement planner reads these names
        object.__setattr__(self, "placement_fragment_id", self.fragment_id)

    def to_dict(self):
        return {"fragment_id": self.fragment_id, "tensor_id": self.tensor_id,
                "global_offset": list(self.global_offset), "local_shape": list(self.local_shape),
                "object_key": self.object_key, "object_offset": self.object_offset,
                "nbytes": self.nbytes, "aliases": list(self.aliases)}


@dataclass(frozen=True)
class StoredManifestIdentity:
    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    group_id: str
    manifest_key: str
    content_sha256: str


@dataclass(frozen=True)
class WeightManifest:
    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    group_id: str
    manifest_key: str
    tensors: tuple
    fragments: Tuple[StoredFragment, ...]
    created_at: str

    def __post_init__(self):
        from mooncake.reshard.weight import TensorDescriptor
        for k in ("namespace", "resource_id", "revision", "group_id", "manifest_key",
                  "created_at"):
            check_str(k, getattr(self, k))
        check_int("weight_generation", self.weight_generation, hi=U64_MAX)
        if self.manifest_key != f"{self.group_id}/manifest":
            raise ValueError("manifest_key must be '<group_id>/manifest'")
        tens = tuple(self.tensors)
        if any(not isinstance(t, TensorDescriptor) for t in tens):
            raise ValueError("tensors must be TensorDescriptors")
        tmap = {t.tensor_id: t for t in tens}
        if len(tmap) != len(tens):
            raise ValueError("a tensor is declared twice")
        frs = tuple(self.fragments)
        prefix = f"{self.group_id}/payload/"
        by_t, by_obj = defaultdict(list), defaultdict(list)
        for f in frs:
            if not f.object_key.startswith(prefix):
                raise ValueError(f"object key {f.object_key!r} must start with '{prefix}'")
            t = tmap.get(f.tensor_id)
            if t is None:
                raise ValueError(f"fragment {f.fragment_id}: undeclared tensor {f.tensor_id}")
            if f.nbytes != t.itemsize * _prod(f.local_shape):
                raise ValueError(f"fragment {f.fragment_id}: nbytes != prod(local_shape) * itemsize")
            for a in f.aliases:
                if a not in tmap:
                    raise ValueError(f"fragment {f.fragment_id}: alias {a} is not declared")
            by_t[f.tensor_id].append(f)
            by_obj[f.object_key].append((f.object_offset, f.object_offset + f.nbytes))
        for tid, t in tmap.items():
            if not boxes_exactly_cover((0,) * len(t.global_shape), t.global_shape,
                                       [(f.global_offset, f.local_shape) for f in by_t[tid]]):
                raise ValueError(f"coverage: stored tensor {tid} is not exactly covered")
        for key, ranges in by_obj.items():
            ranges.sort()
            if any(ranges[i][0] < ranges[i - 1][1] for i in range(1, len(ranges))):
                raise ValueError(f"object {key}: fragment byte ranges overlap")
            if ranges[-1][1] > U64_MAX:
                raise ValueError(f"object {key}: range past u64")
        object.__setattr__(self, "tensors", tens)
        object.__setattr__(self, "fragments", frs)

    def to_dict(self):
        return {"namespace": self.namespace, "resource_id": self.resource_id,
                "revision": self.revision, "weight_generation": self.weight_generation,
                "group_id": self.group_id, "manifest_key": self.manifest_key,
                "tensors": [t.to_json() for t in self.tensors],
                "fragments": [f.to_dict() for f in self.fragments],
                "created_at": self.created_at}

    def to_json(self):
        return canonical_json(self.to_dict(), ensure_ascii=False)

    @property
    def manifest_digest(self):
        return sha256_hex(self.to_json())

    def manifest_identity(self):
        return StoredManifestIdentity(self.namespace, self.resource_id, self.revision,
                                      self.weight_generation, self.group_id, self.manifest_key,
                                      self.manifest_digest)

    @classmethod
    def from_dict(cls, d):
        from mooncake.reshard.weight import TensorDescriptor, _fields
        _fields(d, {"namespace", "resource_id", "revision", "weight_generation", "group_id",
                    "manifest_key", "tensors", "fragments", "created_at"}, "weight manifest")
        frs = []
        for f in d["fragments"]:
            _fields(f, {"fragment_id", "tensor_id", "global_offset", "local_shape",
                        "object_key", "object_offset", "nbytes", "aliases"}, "stored fragment")
            frs.append(StoredFragment(f["fragment_id"], f["tensor_id"], tuple(f["global_offset"]),
                                      tuple(f["local_shape"]), f["object_key"],
                                      f["object_offset"], f["nbytes"], tuple(f["aliases"])))
        return cls(d["namespace"], d["resource_id"], d["revision"], d["weight_generation"],
                   d["group_id"], d["manifest_key"],
                   tuple(TensorDescriptor.from_json(t) for t in d["tensors"]), tuple(frs),
                   d["created_at"])

    @classmethod
    def from_json(cls, text):
        from mooncake.reshard.weight import _no_dups, _no_nonfinite
        return cls.from_dict(json.loads(text, object_pairs_hook=_no_dups,
                                        parse_constant=_no_nonfinite))


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out
