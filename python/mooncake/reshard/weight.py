"""Model-weight placement contracts, their wire format and the planner
(spec components.md 2.2-2.4), written from the spec.

Every contract is a frozen dataclass validated in __post_init__; a broken
rule raises ValueError whose message names the rule.  Ids are "sha256:" +
sha256 of canonical JSON (contracts.canonical_json), the placement digest
the sha256 hex of weight_placement_to_json.
"""

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from math import prod
from typing import Optional, Tuple

from mooncake.reshard import ResourceKind
from mooncake.reshard.contracts import (canonical_json, check_int, check_ints, check_str,
                                        sha256_hex, sha256_id)
from mooncake.reshard.geometry import box_contains, box_intersection, boxes_exactly_cover

AXIS_ORDER = ("dp", "pp", "ep", "tp")
U64_MAX = (1 << 64) - 1

# ---- ranks and axes ---------------------------------------------------------------------


@dataclass(frozen=True)
class ParallelRank:
    dp: int = 0
    tp: int = 0
    pp: int = 0
    ep: int = 0

    def __post_init__(self):
        for k in ("dp", "tp", "pp", "ep"):
            check_int(f"ParallelRank.{k}", getattr(self, k))

    def to_json(self):
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "ep": self.ep}

    def get(self, kind):
        return getattr(self, kind)


@dataclass(frozen=True)
class SplitAxis:
    kind: str
    dim: int

    def __post_init__(self):
        if self.kind not in ("ep", "tp"):
            raise ValueError(f"SplitAxis kind must be 'ep' or 'tp', not {self.kind!r}")
        check_int("SplitAxis.dim", self.dim)
        if self.kind == "ep" and self.dim != 0:
            raise ValueError("SplitAxis: EP must split dim 0")

    def to_json(self):
        return {"semantics": "split", "kind": self.kind, "dim": self.dim}


@dataclass(frozen=True)
class ReplicatedAxis:
    kind: str

    def __post_init__(self):
        if self.kind not in AXIS_ORDER:
            raise ValueError(f"ReplicatedAxis kind must be one of {AXIS_ORDER}")

    def to_json(self):
        return {"semantics": "replicated", "kind": self.kind}


@dataclass(frozen=True)
class OwnershipAxis:
    kind: str

    def __post_init__(self):
        if self.kind not in AXIS_ORDER:
            raise ValueError(f"OwnershipAxis kind must be one of {AXIS_ORDER}")

    def to_json(self):
        return {"semantics": "ownership", "kind": self.kind}


def _axis_from_json(d):
    sem = d.get("semantics")
    if sem == "split":
        _fields(d, {"semantics", "kind", "dim"}, "parallel axis")
        return SplitAxis(d["kind"], d["dim"])
    _fields(d, {"semantics", "kind"}, "parallel axis")
    if sem == "replicated":
        return ReplicatedAxis(d["kind"])
    if sem == "ownership":
        return OwnershipAxis(d["kind"])
    raise ValueError(f"unknown parallel axis semantics {sem!r}")

# ---- tensors and fragments ------------------------------------------------------------------


@dataclass(frozen=True)
class TensorDescriptor:
    tensor_id: str
    global_shape: Tuple[int, ...]
    dtype: str
    itemsize: int
    shard_dims: Tuple[int, ...]
    layout_fingerprint: str
    parallel_axes: tuple
    layer_id: Optional[int] = None
    expert_id: Optional[int] = None

    def __post_init__(self):
        check_str("tensor_id", self.tensor_id)
        shape = check_ints("global_shape", self.global_shape, lo=1)
        if not shape:
            raise ValueError(f"tensor {self.tensor_id}: global_shape must be non-empty")
        object.__setattr__(self, "global_shape", shape)
        check_str("dtype", self.dtype)
        check_int("itemsize", self.itemsize, lo=1)
        check_str("layout_fingerprint", self.layout_fingerprint)
        dims = check_ints("shard_dims", self.shard_dims)
        if list(dims) != sorted(set(dims)) or any(d >= len(shape) for d in dims):
            raise ValueError(f"tensor {self.tensor_id}: shard_dims must be sorted, unique and "
                             f"in range")
        object.__setattr__(self, "shard_dims", dims)
        axes = tuple(self.parallel_axes)
        kinds = [a.kind for a in axes]
        if kinds != sorted(kinds, key=AXIS_ORDER.index):
            raise ValueError(f"tensor {self.tensor_id}: parallel_axes must be sorted dp, pp, ep, tp")
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"tensor {self.tensor_id}: duplicate parallel axis kind")
        split = [a for a in axes if isinstance(a, SplitAxis)]
        sdims = [a.dim for a in split]
        if len(set(sdims)) != len(sdims):
            raise ValueError(f"tensor {self.tensor_id}: split axes share a dim")
        if sorted(sdims) != list(dims):
            raise ValueError(f"tensor {self.tensor_id}: shard_dims must equal the split axes' dims")
        if self.expert_id is not None and any(a.kind == "ep" for a in split):
            raise ValueError(f"tensor {self.tensor_id}: expert_id with an EP SplitAxis "
                             f"(individual experts use OwnershipAxis)")
        for k in ("layer_id", "expert_id"):
            if getattr(self, k) is not None:
                check_int(k, getattr(self, k))
        object.__setattr__(self, "parallel_axes", axes)

    def axis(self, kind):
        return next((a for a in self.parallel_axes if a.kind == kind), None)

    def to_json(self):
        return {"tensor_id": self.tensor_id, "global_shape": list(self.global_shape),
                "dtype": self.dtype, "itemsize": self.itemsize,
                "shard_dims": list(self.shard_dims),
                "layout_fingerprint": self.layout_fingerprint,
                "parallel_axes": [a.to_json() for a in self.parallel_axes],
                "layer_id": self.layer_id, "expert_id": self.expert_id}

    @classmethod
    def from_json(cls, d):
        _fields(d, {"tensor_id", "global_shape", "dtype", "itemsize", "shard_dims",
                    "layout_fingerprint", "parallel_axes", "layer_id", "expert_id"}, "tensor")
        return cls(d["tensor_id"], tuple(d["global_shape"]), d["dtype"], d["itemsize"],
                   tuple(d["shard_dims"]), d["layout_fingerprint"],
                   tuple(_axis_from_json(a) for a in d["parallel_axes"]), d["layer_id"],
                   d["expert_id"])


@dataclass(frozen=True)
class PlacementFragment:
    tensor_id: str
    global_offset: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    nbytes: int
    rank: ParallelRank
    pipeline_stage_id: Optional[int] = None
    aliases: Tuple[str, ...] = ()
    placement_fragment_id: Optional[str] = None

    def __post_init__(self):
        check_str("tensor_id", self.tensor_id)
        object.__setattr__(self, "global_offset", check_ints("global_offset", self.global_offset))
        object.__setattr__(self, "local_shape", check_ints("local_shape", self.local_shape, lo=1))
        check_int("nbytes", self.nbytes, lo=1)
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("fragment rank must be a ParallelRank")
        if self.pipeline_stage_id is not None:
            check_int("pipeline_stage_id", self.pipeline_stage_id)
        aliases = tuple(self.aliases)
        if aliases:
            if list(aliases) != sorted(set(aliases)):
                raise ValueError("fragment aliases must be sorted and unique")
            if len(aliases) < 2 or self.tensor_id not in aliases:
                raise ValueError("fragment aliases must be at least 2 and include tensor_id")
        object.__setattr__(self, "aliases", aliases)
        if self.placement_fragment_id is None:
            object.__setattr__(self, "placement_fragment_id", sha256_id(self.identity()))
        else:
            check_str("placement_fragment_id", self.placement_fragment_id)

    def identity(self):
        d = {"schema": "weight-placement-fragment", "tensor_id": self.tensor_id,
             "global_offset": list(self.global_offset), "local_shape": list(self.local_shape),
             "nbytes": self.nbytes, "rank": self.rank.to_json(), "aliases": list(self.aliases)}
        if self.pipeline_stage_id is not None:
            d["pipeline_stage_id"] = self.pipeline_stage_id
        return d

    def check_against(self, t):
        if len(self.global_offset) != len(t.global_shape) or \
                len(self.local_shape) != len(t.global_shape):
            raise ValueError(f"fragment of {t.tensor_id}: rank of offset/shape differs from the "
                             f"tensor's")
        if not box_contains((0,) * len(t.global_shape), t.global_shape, self.global_offset,
                            self.local_shape):
            raise ValueError(f"fragment of {t.tensor_id}: out of the tensor's bounds")
        if self.nbytes != prod(self.local_shape) * t.itemsize:
            raise ValueError(f"fragment of {t.tensor_id}: nbytes != prod(local_shape) * itemsize")

    def to_json(self):
        d = {"placement_fragment_id": self.placement_fragment_id, "tensor_id": self.tensor_id,
             "global_offset": list(self.global_offset), "local_shape": list(self.local_shape),
             "nbytes": self.nbytes, "rank": self.rank.to_json(), "aliases": list(self.aliases)}
        if self.pipeline_stage_id is not None:
            d["pipeline_stage_id"] = self.pipeline_stage_id
        return d

    @classmethod
    def from_json(cls, d):
        need = {"placement_fragment_id", "tensor_id", "global_offset", "local_shape", "nbytes",
                "rank", "aliases"}
        _fields(d, need | ({"pipeline_stage_id"} if "pipeline_stage_id" in d else set()),
                "fragment")
        return cls(d["tensor_id"], tuple(d["global_offset"]), tuple(d["local_shape"]),
                   d["nbytes"], _rank_from_json(d["rank"]), d.get("pipeline_stage_id"),
                   tuple(d["aliases"]), d["placement_fragment_id"])


def _rank_from_json(d):
    _fields(d, {"dp", "tp", "pp", "ep"}, "rank")
    return ParallelRank(d["dp"], d["tp"], d["pp"], d["ep"])

# ---- topology -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopologyParticipant:
    participant_id: str
    rank: ParallelRank

    def __post_init__(self):
        check_str("participant_id", self.participant_id)
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("participant rank must be a ParallelRank")

    def to_json(self):
        return {"participant_id": self.participant_id, "rank": self.rank.to_json()}


@dataclass(frozen=True)
class ParallelTopology:
    tp_size: int
    pp_size: int
    ep_size: int
    dp_size: int
    participants: Tuple[TopologyParticipant, ...]
    topology_id: Optional[str] = None

    def __post_init__(self):
        for k in ("tp_size", "pp_size", "ep_size", "dp_size"):
            check_int(k, getattr(self, k), lo=1)
        ps = tuple(self.participants)
        if not ps:
            raise ValueError("topology: participants must be non-empty")
        ids = [p.participant_id for p in ps]
        if ids != sorted(ids):
            raise ValueError("topology: participants must be sorted by id")
        if len(set(ids)) != len(ids):
            raise ValueError("topology: participant ids must be unique")
        if len({p.rank for p in ps}) != len(ps):
            raise ValueError("topology: participant ranks must be unique")
        for p in ps:
            for k in ("dp", "tp", "pp", "ep"):
                if p.rank.get(k) >= getattr(self, k + "_size"):
                    raise ValueError(f"topology: participant {p.participant_id} has {k} rank "
                                     f"{p.rank.get(k)} >= {k}_size")
        object.__setattr__(self, "participants", ps)
        derived = sha256_id({"schema": "weight-parallel-topology", "sizes": self.sizes(),
                             "participants": [p.to_json() for p in ps]})
        if self.topology_id is None:
            object.__setattr__(self, "topology_id", derived)
        elif self.topology_id != derived:
            raise ValueError("topology: topology_id does not match its content")

    def sizes(self):
        return {"tp_size": self.tp_size, "pp_size": self.pp_size, "ep_size": self.ep_size,
                "dp_size": self.dp_size}

    @property
    def world_size(self):
        return len(self.participants)

    def participant_of(self, rank):
        return next((p for p in self.participants if p.rank == rank), None)

    def to_json(self):
        return dict(self.sizes(), topology_id=self.topology_id,
                    participants=[p.to_json() for p in self.participants])

# ---- manifests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightPlacementPart:
    resource_id: str
    revision: str
    weight_generation: int
    placement_set_id: str
    topology_id: str
    participant_id: str
    rank: ParallelRank
    tensors: Tuple[TensorDescriptor, ...]
    fragments: Tuple[PlacementFragment, ...]

    def __post_init__(self):
        for k in ("resource_id", "revision", "placement_set_id", "topology_id", "participant_id"):
            check_str(k, getattr(self, k))
        check_int("weight_generation", self.weight_generation, hi=U64_MAX)
        frags, tens = tuple(self.fragments), tuple(self.tensors)
        if any(f.rank != self.rank for f in frags):
            raise ValueError(f"part {self.participant_id}: every fragment rank must equal the "
                             f"part rank")
        if [f.placement_fragment_id for f in frags] != sorted(f.placement_fragment_id for f in frags):
            raise ValueError(f"part {self.participant_id}: fragments must be sorted by id")
        if [t.tensor_id for t in tens] != sorted(t.tensor_id for t in tens):
            raise ValueError(f"part {self.participant_id}: tensors must be sorted by id")
        used = {f.tensor_id for f in frags}
        if any(t.tensor_id not in used for t in tens):
            raise ValueError(f"part {self.participant_id}: every declared tensor must be "
                             f"referenced by a fragment")
        by_id = {t.tensor_id: t for t in tens}
        for f in frags:
            if f.tensor_id not in by_id:
                raise ValueError(f"part {self.participant_id}: fragment of undeclared tensor "
                                 f"{f.tensor_id}")
            f.check_against(by_id[f.tensor_id])
        object.__setattr__(self, "fragments", frags)
        object.__setattr__(self, "tensors", tens)


def _check_coverage(topology, tensors, fragments):
    """Spec 2.2 'Coverage' (the rule named in every message)."""
    by_tensor = defaultdict(list)
    for f in fragments:
        by_tensor[f.tensor_id].append(f)
    # alias groups complete across the catalog
    groups = {f.aliases for f in fragments if f.aliases}
    for g in groups:
        missing = [t for t in g if t not in tensors]
        if missing:
            raise ValueError(f"coverage: alias group {list(g)} names undeclared tensors {missing}")
    sizes = {k: topology.sizes()[k + "_size"] for k in AXIS_ORDER}
    for tid, t in tensors.items():
        frs = by_tensor.get(tid)
        if not frs:
            raise ValueError(f"coverage: tensor {tid} has no fragment")
        split = [a.kind for a in t.parallel_axes if isinstance(a, SplitAxis)]
        owned = [a.kind for a in t.parallel_axes if isinstance(a, OwnershipAxis)]
        # a replica: the fragments that agree on every non-split coordinate
        keys = [k for k in AXIS_ORDER if k not in split]
        replicas = defaultdict(list)
        for f in frs:
            replicas[tuple(f.rank.get(k) for k in keys)].append(f)
        for key, rfr in replicas.items():
            boxes = {(f.global_offset, f.local_shape) for f in rfr}
            if len(boxes) != len(rfr) or not boxes_exactly_cover(
                    (0,) * len(t.global_shape), t.global_shape, list(boxes)):
                raise ValueError(f"coverage: tensor {tid} replica {dict(zip(keys, key))} is not "
                                 f"one non-overlapping cover of the tensor")
            coords = {tuple(f.rank.get(k) for k in split) for f in rfr}
            want = set(_product([range(sizes[k]) for k in split]))
            if coords != want:
                raise ValueError(f"coverage: tensor {tid} replica {dict(zip(keys, key))}: split "
                                 f"ranks {sorted(coords)} are not every declared split rank "
                                 f"(a Cartesian product over {split})")
        if "dp" not in owned:
            dps = {f.rank.dp for f in frs}
            if dps != set(range(sizes["dp"])):
                raise ValueError(f"coverage: tensor {tid} is not covered by every DP replica "
                                 f"(has dp {sorted(dps)} of {sizes['dp']})")


def _product(ranges):
    out = [()]
    for r in ranges:
        out = [o + (x,) for o in out for x in r]
    return out


@dataclass(frozen=True)
class WeightPlacementManifest:
    resource_id: str
    revision: str
    weight_generation: int
    placement_set_id: str
    topology: ParallelTopology
    parts: Tuple[WeightPlacementPart, ...]
    placement_id: Optional[str] = None

    def __post_init__(self):
        check_str("resource_id", self.resource_id)
        check_str("revision", self.revision)
        check_str("placement_set_id", self.placement_set_id)
        check_int("weight_generation", self.weight_generation, hi=U64_MAX)
        parts = tuple(self.parts)
        if [p.participant_id for p in parts] != [p.participant_id for p in self.topology.participants]:
            raise ValueError("parts must be exactly the topology participants, in order")
        for p, tp in zip(parts, self.topology.participants):
            if p.rank != tp.rank:
                raise ValueError(f"part {p.participant_id}: rank differs from the topology's")
            if (p.resource_id, p.revision, p.weight_generation, p.placement_set_id,
                    p.topology_id) != (self.resource_id, self.revision, self.weight_generation,
                                       self.placement_set_id, self.topology.topology_id):
                raise ValueError(f"part {p.participant_id}: resource/revision/generation/set/"
                                 f"topology differ from the manifest's")
        tensors = {}
        for p in parts:
            for t in p.tensors:
                if t.tensor_id in tensors and tensors[t.tensor_id] != t:
                    raise ValueError(f"tensor {t.tensor_id}: descriptors differ between parts")
                tensors[t.tensor_id] = t
        frags = [f for p in parts for f in p.fragments]
        _check_coverage(self.topology, tensors, frags)
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "_tensors", tensors)
        derived = sha256_id(self._identity())
        if self.placement_id is None:
            object.__setattr__(self, "placement_id", derived)
        elif self.placement_id != derived:
            raise ValueError("placement_id does not match the manifest's content")

    @property
    def tensors(self):
        return dict(sorted(self._tensors.items()))

    @property
    def fragments(self):
        return [f for p in self.parts for f in p.fragments]

    def _identity(self):
        return {"schema": "complete-weight-placement", "resource_id": self.resource_id,
                "revision": self.revision, "weight_generation": self.weight_generation,
                "placement_set_id": self.placement_set_id,
                "topology": self.topology.to_json(),
                "tensors": [t.to_json() for t in self.tensors.values()],
                "parts": [{"participant_id": p.participant_id, "rank": p.rank.to_json(),
                           "fragments": [f.to_json() for f in p.fragments]} for p in self.parts]}

    @property
    def digest(self):
        return sha256_hex(weight_placement_to_json(self))

    @classmethod
    def from_fragments(cls, resource_id, revision, weight_generation, placement_set_id,
                       topology, tensors, fragments):
        """Group fragments by their topology participant (by rank)."""
        by_rank = defaultdict(list)
        for f in fragments:
            if topology.participant_of(f.rank) is None:
                raise ValueError(f"fragment {f.placement_fragment_id}: no participant has rank "
                                 f"{f.rank}")
            by_rank[f.rank].append(f)
        tmap = {t.tensor_id: t for t in tensors}
        parts = []
        for p in topology.participants:
            fr = sorted(by_rank.get(p.rank, []), key=lambda f: f.placement_fragment_id)
            used = sorted({f.tensor_id for f in fr})
            parts.append(WeightPlacementPart(resource_id, revision, weight_generation,
                                             placement_set_id, topology.topology_id,
                                             p.participant_id, p.rank,
                                             tuple(tmap[t] for t in used), tuple(fr)))
        return cls(resource_id, revision, weight_generation, placement_set_id, topology,
                   tuple(parts))

# ---- wire format (2.3) ----------------------------------------------------------------------


def _fields(d, want, what):
    if not isinstance(d, dict):
        raise ValueError(f"{what}: must be an object")
    have = set(d)
    if have != set(want):
        extra, missing = sorted(have - set(want)), sorted(set(want) - have)
        raise ValueError(f"{what}: unknown fields {extra}, missing fields {missing}")


def weight_placement_to_json(m):
    return canonical_json({
        "resource_kind": ResourceKind.MODEL_WEIGHT.value, "resource_id": m.resource_id,
        "revision": m.revision, "weight_generation": m.weight_generation,
        "placement_set_id": m.placement_set_id, "placement_id": m.placement_id,
        "topology": m.topology.to_json(),
        "tensors": [t.to_json() for t in m.tensors.values()],
        "parts": [{"participant_id": p.participant_id, "rank": p.rank.to_json(),
                   "fragments": [f.to_json() for f in p.fragments]} for p in m.parts]})


def _no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate field {k!r}")
        d[k] = v
    return d


def _no_nonfinite(x):
    raise ValueError(f"non-finite number {x}")


def weight_placement_from_json(text):
    d = json.loads(text, object_pairs_hook=_no_dups, parse_constant=_no_nonfinite)
    _fields(d, {"resource_kind", "resource_id", "revision", "weight_generation",
                "placement_set_id", "placement_id", "topology", "tensors", "parts"}, "manifest")
    if d["resource_kind"] != ResourceKind.MODEL_WEIGHT.value:
        raise ValueError(f"resource_kind must be 'model_weight', not {d['resource_kind']!r}")
    t = d["topology"]
    _fields(t, {"tp_size", "pp_size", "ep_size", "dp_size", "topology_id", "participants"},
            "topology")
    parts_in = []
    for p in t["participants"]:
        _fields(p, {"participant_id", "rank"}, "participant")
        parts_in.append(TopologyParticipant(p["participant_id"], _rank_from_json(p["rank"])))
    topo = ParallelTopology(t["tp_size"], t["pp_size"], t["ep_size"], t["dp_size"],
                            tuple(parts_in), t["topology_id"])
    tensors = {}
    for x in d["tensors"]:
        td = TensorDescriptor.from_json(x)
        if td.tensor_id in tensors:
            raise ValueError(f"tensor {td.tensor_id} declared twice")
        tensors[td.tensor_id] = td
    parts = []
    for p in d["parts"]:
        _fields(p, {"participant_id", "rank", "fragments"}, "part")
        frs = tuple(PlacementFragment.from_json(f) for f in p["fragments"])
        used = sorted({f.tensor_id for f in frs})
        missing = [u for u in used if u not in tensors]
        if missing:
            raise ValueError(f"part {p['participant_id']}: fragments of undeclared tensors {missing}")
        parts.append(WeightPlacementPart(d["resource_id"], d["revision"], d["weight_generation"],
                                         d["placement_set_id"], topo.topology_id,
                                         p["participant_id"], _rank_from_json(p["rank"]),
                                         tuple(tensors[u] for u in used), frs))
    return WeightPlacementManifest(d["resource_id"], d["revision"], d["weight_generation"],
                                   d["placement_set_id"], topo, tuple(parts), d["placement_id"])

# ---- planner (2.4) --------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanningLimits:
    max_transfer_regions: int = 1_000_000
    max_segments_per_region: int = 1_000_000
    max_total_lowered_segments: int = 10_000_000


def _row_major_strides(shape, itemsize):
    st, acc = [], itemsize
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))


@dataclass(frozen=True)
class TransferRegion:
    tensor_id: str
    source: str  # placement_fragment_id
    target: str
    overlap_offset: Tuple[int, ...]
    overlap_shape: Tuple[int, ...]
    source_base_offset: int
    target_base_offset: int
    inner_bytes: int
    outer_loop_counts: Tuple[int, ...]
    source_strides: Tuple[int, ...]
    target_strides: Tuple[int, ...]

    @property
    def segment_count(self):
        return prod(self.outer_loop_counts)

    @property
    def total_bytes(self):
        return self.segment_count * self.inner_bytes

    def iter_segments(self, max_segments=None):
        """(source offset, target offset, length) in row-major order."""
        n = self.segment_count
        if max_segments is not None and n > max_segments:
            raise ValueError(f"region has {n} segments, more than max_segments={max_segments}")
        for idx in _product([range(c) for c in self.outer_loop_counts]):
            yield (self.source_base_offset + sum(i * s for i, s in zip(idx, self.source_strides)),
                   self.target_base_offset + sum(i * s for i, s in zip(idx, self.target_strides)),
                   self.inner_bytes)

    def validate_bounds(self, source_nbytes, target_nbytes):
        last = tuple(c - 1 for c in self.outer_loop_counts)
        s_end = self.source_base_offset + sum(i * s for i, s in zip(last, self.source_strides))
        t_end = self.target_base_offset + sum(i * s for i, s in zip(last, self.target_strides))
        if s_end + self.inner_bytes > source_nbytes or t_end + self.inner_bytes > target_nbytes:
            raise ValueError(f"region of {self.tensor_id} runs past a fragment")


def _region(t, src, dst, off, shape):
    item = t.itemsize
    ss, ts = _row_major_strides(src.local_shape, item), _row_major_strides(dst.local_shape, item)
    sbase = sum((o - g) * s for o, g, s in zip(off, src.global_offset, ss))
    tbase = sum((o - g) * s for o, g, s in zip(off, dst.global_offset, ts))
    # merge trailing dims that are whole on both sides, plus the one before them
    k = len(shape)
    while k > 0 and shape[k - 1] == src.local_shape[k - 1] == dst.local_shape[k - 1]:
        k -= 1
    k = max(k - 1, 0)
    inner = item * prod(shape[k:])
    return TransferRegion(t.tensor_id, src.placement_fragment_id, dst.placement_fragment_id,
                          tuple(off), tuple(shape), sbase, tbase, inner, tuple(shape[:k]),
                          ss[:k], ts[:k])


@dataclass(frozen=True)
class PlacementExecutorPlan:
    placement_id: str
    participant_id: str
    rank: ParallelRank
    placement_fragment_ids: Tuple[str, ...]


@dataclass(frozen=True)
class LogicalTransferPlan:
    source_placement_id: str
    target_placement_id: str
    operations: Tuple[TransferRegion, ...]
    source_executors: Tuple[PlacementExecutorPlan, ...]
    target_executors: Tuple[PlacementExecutorPlan, ...]
    pipeline_routes: tuple = ()
    # a plan from a stored snapshot: the identity (with content digest) of the
    # manifest it was planned from; None for a plan between placements
    source_snapshot: Optional["StoredManifestIdentity"] = None

    @property
    def total_bytes(self):
        return sum(r.total_bytes for r in self.operations)

    def revalidate_snapshot(self, snapshot):
        """Check, right before executing, that the source this plan was made
        from is still what the catalog holds: snapshot is a fresh read of it (a
        WeightManifest or its StoredManifestIdentity for a plan from a stored
        snapshot; a WeightPlacementManifest for a plan between placements).
        Returns the plan; a stale plan raises ValueError naming the first field
        that changed ("stale plan: ..."), since its offsets and fragment ids may
        point at bytes that are no longer there: plan again."""
        if self.source_snapshot is None:
            if not isinstance(snapshot, WeightPlacementManifest):
                raise TypeError(f"revalidate_snapshot: a plan between placements is checked "
                                f"against a WeightPlacementManifest, not "
                                f"{type(snapshot).__name__}")
            if snapshot.placement_id != self.source_placement_id:
                raise ValueError(f"stale plan: source placement changed since planning "
                                 f"(placement_id: planned {self.source_placement_id!r}, now "
                                 f"{snapshot.placement_id!r}); plan again")
            return self
        if isinstance(snapshot, WeightManifest):
            snapshot = snapshot.manifest_identity()
        if not isinstance(snapshot, StoredManifestIdentity):
            raise TypeError(f"revalidate_snapshot: a plan from a stored snapshot is checked "
                            f"against a WeightManifest or StoredManifestIdentity, not "
                            f"{type(snapshot).__name__}")
        for k in ("namespace", "resource_id", "revision", "weight_generation", "group_id",
                  "manifest_key", "content_sha256"):
            was, now = getattr(self.source_snapshot, k), getattr(snapshot, k)
            if was != now:
                raise ValueError(f"stale plan: the catalog's manifest "
                                 f"{self.source_snapshot.manifest_key!r} changed since planning "
                                 f"({k}: planned {was!r}, now {now!r}); plan again")
        return self

    def operation_indices_for_executor(self, participant_id, side="target"):
        execs = self.target_executors if side == "target" else self.source_executors
        ids = set()
        for e in execs:
            if e.participant_id == participant_id:
                ids |= set(e.placement_fragment_ids)
        key = "target" if side == "target" else "source"
        return [i for i, r in enumerate(self.operations) if getattr(r, key) in ids]


def _executors(m, used):
    out = []
    for p in m.parts:
        ids = tuple(f.placement_fragment_id for f in p.fragments if f.placement_fragment_id in used)
        if ids:
            out.append(PlacementExecutorPlan(m.placement_id, p.participant_id, p.rank, ids))
    return tuple(out)


@dataclass(frozen=True)
class PipelineRouteGroup:
    source_pp: int
    source_stage: Optional[int]
    target_pp: int
    target_stage: Optional[int]
    operation_indices: Tuple[int, ...]


def _check_pair(src, dst, subset):
    for k in ("resource_id", "revision", "weight_generation"):
        if getattr(src, k) != getattr(dst, k):
            raise ValueError(f"source and destination differ in {k}")
    st, dt = src.tensors, dst.tensors
    if (not set(dt) <= set(st)) if subset else set(st) != set(dt):
        raise ValueError(f"tensor sets differ: {sorted(set(st) ^ set(dt))}")
    for tid, b in dt.items():
        a = st[tid]
        if a.layout_fingerprint != b.layout_fingerprint:
            raise ValueError(f"tensor {tid}: layout mismatch")
        for k in ("global_shape", "dtype", "itemsize", "layer_id", "expert_id"):
            if getattr(a, k) != getattr(b, k):
                raise ValueError(f"tensor {tid}: {k} differs")


def _plan(src, dst, targets, lim):
    dt = dst.tensors
    # source fragments per (tensor, dp), one per distinct box, deterministic order
    src_by = defaultdict(dict)
    for p in src.parts:
        for f in sorted(p.fragments, key=lambda f: f.placement_fragment_id):
            src_by[(f.tensor_id, f.rank.dp)].setdefault((f.global_offset, f.local_shape), f)
    source_dp = sorted({f.rank.dp for f in src.fragments})
    ops, used_src, used_dst, total_segments = [], set(), set(), 0
    for f in targets:
        t = dt[f.tensor_id]
        owner = t.axis("dp")
        dp = f.rank.dp if isinstance(owner, OwnershipAxis) else source_dp[f.rank.dp % len(source_dp)]
        cands = src_by.get((f.tensor_id, dp), {})
        regions = []
        for sf in cands.values():
            inter = box_intersection(sf.global_offset, sf.local_shape, f.global_offset,
                                     f.local_shape)
            if inter:
                regions.append(_region(t, sf, f, *inter))
        if not regions or not boxes_exactly_cover(f.global_offset, f.local_shape,
                                                  [(r.overlap_offset, r.overlap_shape)
                                                   for r in regions]):
            raise ValueError(f"tensor {f.tensor_id}: target fragment is not fully covered")
        for r in regions:
            if r.segment_count > lim.max_segments_per_region:
                raise ValueError(f"max_segments_per_region ({lim.max_segments_per_region}) "
                                 f"exceeded: {r.segment_count}")
            total_segments += r.segment_count
            used_src.add(r.source)
        used_dst.add(f.placement_fragment_id)
        ops.extend(regions)
        if len(ops) > lim.max_transfer_regions:
            raise ValueError(f"max_transfer_regions ({lim.max_transfer_regions}) exceeded")
        if total_segments > lim.max_total_lowered_segments:
            raise ValueError(f"max_total_lowered_segments ({lim.max_total_lowered_segments}) "
                             f"exceeded")
    ops.sort(key=lambda r: (r.target, r.target_base_offset, r.source, r.source_base_offset))
    sfr = {f.placement_fragment_id: f for f in src.fragments}
    dfr = {f.placement_fragment_id: f for f in dst.fragments}
    routes = defaultdict(list)
    for i, r in enumerate(ops):
        a, b = sfr[r.source], dfr[r.target]
        routes[(a.rank.pp, a.pipeline_stage_id, b.rank.pp, b.pipeline_stage_id)].append(i)
    groups = tuple(PipelineRouteGroup(k[0], k[1], k[2], k[3], tuple(v))
                   for k, v in sorted(routes.items(), key=lambda kv: (
                       kv[0][0], -1 if kv[0][1] is None else kv[0][1],
                       kv[0][2], -1 if kv[0][3] is None else kv[0][3])))
    return LogicalTransferPlan(src.placement_id, dst.placement_id, tuple(ops),
                               _executors(src, used_src), _executors(dst, used_dst), groups)


def plan_placement_transfer(src, dst, *, planning_limits=None):
    """Every fragment of dst, from src (same resource, revision, generation
    and tensor set; descriptors equal)."""
    _check_pair(src, dst, subset=False)
    return _plan(src, dst, dst.fragments, planning_limits or PlanningLimits())


def plan_placement_transfer_to_local_target(src, dst, target_participant_id=None, *,
                                            planning_limits=None):
    """The fragments of one dst participant (named when dst has several);
    dst's tensors may be a subset of src's."""
    if target_participant_id is None:
        if len(dst.parts) != 1:
            raise ValueError("target_participant_id is required when the destination has "
                             "more than one participant")
        target_participant_id = dst.parts[0].participant_id
    part = next((p for p in dst.parts if p.participant_id == target_participant_id), None)
    if part is None:
        raise ValueError(f"no participant {target_participant_id} in the destination")
    _check_pair(src, dst, subset=True)
    return _plan(src, dst, part.fragments, planning_limits or PlanningLimits())


def plan_stored_transfer_to_target_placement(weight_manifest, dst, *, planning_limits=None):
    """The plan from a stored snapshot (one replica; region sources are
    stored fragment ids, offsets within the fragment: add object_offset)."""
    lim = planning_limits or PlanningLimits()
    for k in ("resource_id", "revision", "weight_generation"):
        if getattr(weight_manifest, k) != getattr(dst, k):
            raise ValueError(f"stored manifest and destination differ in {k}")
    st = {t.tensor_id: t for t in weight_manifest.tensors}
    dt = dst.tensors
    if set(st) != set(dt):
        raise ValueError(f"tensor sets differ: {sorted(set(st) ^ set(dt))}")
    for tid, a in st.items():
        if a.layout_fingerprint != dt[tid].layout_fingerprint:
            raise ValueError(f"tensor {tid}: layout mismatch")
        for k in ("global_shape", "dtype", "itemsize", "layer_id", "expert_id"):
            if getattr(a, k) != getattr(dt[tid], k):
                raise ValueError(f"tensor {tid}: {k} differs")
    by_t = defaultdict(list)
    for f in sorted(weight_manifest.fragments, key=lambda f: f.fragment_id):
        by_t[f.tensor_id].append(f)
    ops, used = [], set()
    for f in dst.fragments:
        t = dt[f.tensor_id]
        regions = []
        for s in by_t[f.tensor_id]:
            inter = box_intersection(s.global_offset, s.local_shape, f.global_offset,
                                     f.local_shape)
            if inter:
                regions.append(_region(t, s, f, *inter))
        if not regions or not boxes_exactly_cover(f.global_offset, f.local_shape,
                                                  [(r.overlap_offset, r.overlap_shape)
                                                   for r in regions]):
            raise ValueError(f"tensor {f.tensor_id}: target fragment is not fully covered")
        for r in regions:
            if r.segment_count > lim.max_segments_per_region:
                raise ValueError(f"max_segments_per_region ({lim.max_segments_per_region}) "
                                 f"exceeded: {r.segment_count}")
        used.add(f.placement_fragment_id)
        ops.extend(regions)
        if len(ops) > lim.max_transfer_regions:
            raise ValueError(f"max_transfer_regions ({lim.max_transfer_regions}) exceeded")
    if sum(r.segment_count for r in ops) > lim.max_total_lowered_segments:
        raise ValueError(f"max_total_lowered_segments ({lim.max_total_lowered_segments}) exceeded")
    ops.sort(key=lambda r: (r.target, r.target_base_offset, r.source, r.source_base_offset))
    return LogicalTransferPlan(weight_manifest.manifest_key, dst.placement_id, tuple(ops), (),
                               _executors(dst, used),
                               source_snapshot=weight_manifest.manifest_identity())


from mooncake.reshard.binding import (RuntimeBindingFragment,  # noqa: E402
                                      WeightRuntimeBindingManifest,
                                      validate_resource_binding_identity,
                                      validate_runtime_binding, validate_runtime_bindings)
from mooncake.reshard.storage import (StoredFragment, StoredManifestIdentity,  # noqa: E402
                                      WeightManifest)


__all__ = [
    "ParallelRank", "SplitAxis", "ReplicatedAxis", "OwnershipAxis", "TensorDescriptor",
    "PlacementFragment", "TopologyParticipant", "ParallelTopology", "WeightPlacementPart",
    "WeightPlacementManifest", "weight_placement_to_json", "weight_placement_from_json",
    "PlanningLimits", "TransferRegion", "PlacementExecutorPlan", "LogicalTransferPlan",
    "plan_placement_transfer", "plan_stored_transfer_to_target_placement",
    "plan_placement_transfer_to_local_target", "PipelineRouteGroup",
    "RuntimeBindingFragment", "WeightRuntimeBindingManifest", "validate_runtime_binding",
    "validate_runtime_bindings", "validate_resource_binding_identity", "StoredFragment",
    "StoredManifestIdentity", "WeightManifest",
]
