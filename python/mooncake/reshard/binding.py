"""Runtime bindings: where a placement's fragments live in a running
engine (spec components.md 2.2, RuntimeBindingFragment and
WeightRuntimeBindingManifest), and their validation against a placement.
Re-exported by mooncake.reshard.weight.
"""

from dataclasses import dataclass
from math import prod
from typing import Optional, Tuple

from mooncake.reshard import ResourceKind
from mooncake.reshard.contracts import check_int, check_ints, check_str

U64_MAX = (1 << 64) - 1


def canonical_strides(shape, itemsize):
    st, acc = [], itemsize
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))


def strides_are_canonical(shape, strides, itemsize):
    """Row-major contiguous; a singleton dimension's stride is free."""
    want = canonical_strides(shape, itemsize)
    return len(strides) == len(shape) and all(
        n == 1 or s == w for n, s, w in zip(shape, strides, want))


@dataclass(frozen=True)
class RuntimeBindingFragment:
    placement_fragment_id: str
    fragment_id: str
    address: int
    nbytes: int
    worker_id: str
    endpoint: str
    device: str
    itemsize: int
    local_shape: Tuple[int, ...]
    strides_bytes: Tuple[int, ...]
    storage_address: int
    storage_nbytes: int
    storage_offset_bytes: int
    owner: Optional[str] = None

    def __post_init__(self):
        for k in ("placement_fragment_id", "fragment_id", "worker_id", "endpoint", "device"):
            check_str(k, getattr(self, k))
        for k in ("address", "nbytes", "storage_address", "storage_nbytes",
                  "storage_offset_bytes"):
            check_int(k, getattr(self, k), hi=U64_MAX)
        check_int("itemsize", self.itemsize, lo=1)
        object.__setattr__(self, "local_shape", check_ints("local_shape", self.local_shape, lo=1))
        object.__setattr__(self, "strides_bytes", check_ints("strides_bytes", self.strides_bytes))
        if self.address == 0:
            raise ValueError("binding: address 0 is reserved")
        if self.address != self.storage_address + self.storage_offset_bytes:
            raise ValueError("binding: address must equal storage_address + storage_offset_bytes")
        if self.storage_address + self.storage_nbytes > U64_MAX:
            raise ValueError("binding: storage range does not fit in u64")
        if self.nbytes != prod(self.local_shape) * self.itemsize:
            raise ValueError("binding: nbytes != prod(local_shape) * itemsize")
        if not strides_are_canonical(self.local_shape, self.strides_bytes, self.itemsize):
            raise ValueError("binding: strides must be row-major contiguous")
        if self.storage_offset_bytes + self.nbytes > self.storage_nbytes:
            raise ValueError("binding: the view does not lie inside the storage")
        if self.owner is not None:
            check_str("owner", self.owner)


@dataclass(frozen=True)
class WeightRuntimeBindingManifest:
    resource_id: str
    placement_id: str
    placement_digest: str
    instance_id: str
    generation: int
    lease_id: str
    revision: str
    participant_id: str
    fragments: Tuple[RuntimeBindingFragment, ...]
    resource_kind: str = ResourceKind.MODEL_WEIGHT.value

    def __post_init__(self):
        for k in ("resource_id", "placement_id", "instance_id", "lease_id", "revision",
                  "participant_id"):
            check_str(k, getattr(self, k))
        d = self.placement_digest
        if type(d) is not str or len(d) != 64 or any(c not in "0123456789abcdef" for c in d):
            raise ValueError("binding: placement_digest must be a lowercase sha256 hex digest")
        check_int("generation", self.generation, hi=U64_MAX)
        object.__setattr__(self, "fragments", tuple(self.fragments))
        ids = [f.placement_fragment_id for f in self.fragments]
        if len(set(ids)) != len(ids):
            raise ValueError("binding: a placement fragment is bound twice")


def validate_resource_binding_identity(placement, binding):
    """Kind, resource id, placement id and digest equal."""
    if getattr(binding, "resource_kind", ResourceKind.MODEL_WEIGHT.value) != \
            ResourceKind.MODEL_WEIGHT.value:
        raise ValueError("binding identity: resource kind differs")
    if binding.resource_id != placement.resource_id:
        raise ValueError("binding identity: resource_id differs from the placement's")
    if binding.placement_id != placement.placement_id:
        raise ValueError("binding identity: placement_id differs from the placement's")
    if binding.placement_digest != placement.digest:
        raise ValueError("binding identity: placement_digest differs from the placement's")


def validate_runtime_binding(placement, binding):
    validate_resource_binding_identity(placement, binding)
    part = next((p for p in placement.parts if p.participant_id == binding.participant_id), None)
    if part is None:
        raise ValueError(f"binding: participant {binding.participant_id} is not in the placement")
    want = {f.placement_fragment_id: f for f in part.fragments}
    have = {f.placement_fragment_id: f for f in binding.fragments}
    if set(want) != set(have):
        raise ValueError(f"binding of {binding.participant_id}: fragments are not exactly the "
                         f"participant's (missing {sorted(set(want) - set(have))}, extra "
                         f"{sorted(set(have) - set(want))})")
    tensors = placement.tensors
    for fid, b in have.items():
        f = want[fid]
        t = tensors[f.tensor_id]
        if b.nbytes != f.nbytes or tuple(b.local_shape) != tuple(f.local_shape) or \
                b.itemsize != t.itemsize:
            raise ValueError(f"binding of {fid}: nbytes, shape or itemsize differ from the "
                             f"placement's")


def validate_runtime_bindings(placement, bindings):
    """Exactly one binding per participant that owns fragments."""
    owners = {p.participant_id for p in placement.parts if p.fragments}
    seen = [b.participant_id for b in bindings]
    if len(set(seen)) != len(seen):
        raise ValueError("bindings: a participant is bound twice")
    if set(seen) != owners:
        raise ValueError(f"bindings: not exactly one per participant owning fragments (missing "
                         f"{sorted(owners - set(seen))}, extra {sorted(set(seen) - owners)})")
    for b in bindings:
        validate_runtime_binding(placement, b)
