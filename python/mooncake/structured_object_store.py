"""Structured objects and DataProto bundles in Mooncake Store.

A *structured object* is a set of named members (numpy arrays, torch CPU
tensors, bytes) stored as one payload key per member plus a manifest key
that describes them (JSON: member name, payload key, kind, dtype, shape,
bytes, and the caller's metadata).  Payloads are written first and the
manifest last, so a reader that finds the manifest finds every payload; a
payload missing later (evicted, removed) makes the read fail with
``StructuredObjectError``, never a partial object.

Reading goes through a ``StructuredReadSpec``: ``read_spec(ref)`` selects
every member, ``.select_members(names)`` narrows it, ``.slice_member(name,
start, stop)`` keeps rows ``start:stop`` of one member (axis 0) and
``.select_rows(rows)`` keeps the given rows of every selected member.
``materialize(spec, policy)`` returns ``{name: array}``; with
``BundleTransferPolicy(copy_mode="zero_copy")`` the arrays are views of the
store's returned buffers (no copy after the fetch; a row range stays a
view), with ``"copy"`` they own their memory, and ``"auto"`` takes zero
copy where the selection allows it (a row list needs a copy).
``materialize_into(spec, out)`` fills caller arrays.

A *DataProto bundle* (``put_bundle``) is a structured object whose members
are the ``batch`` fields sharing one leading (batch) dimension, plus
``meta_info``; ``put_bundle`` returns a ``MooncakeDataProtoRef`` (one stage:
manifest key, batch size, fields) that ``to_dict``/``from_dict`` export and
import (``mooncake.dataproto_catalog`` keeps these), and ``remove_bundle``
removes its keys.

Written from the spec's behaviour (components.md section 5, store.md 9.1);
the manifest format is ours (JSON, ``"format": "mooncake-structured/1"``),
not upstream's msgpack one, so the two do not read each other's objects.
numpy is needed (Debian: python3-numpy); torch only for torch members.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Dict, Sequence, Tuple

from mooncake._optional import optional, require

np = require("numpy", "mooncake.structured_object_store")

__all__ = [
    "FORMAT", "StructuredObjectError", "StructuredObjectPayload", "StructuredObjectRef",
    "StructuredMemberSlice", "StructuredReadSpec", "BundleTransferPolicy",
    "MooncakeDataProtoRef", "DataProtoStage", "MooncakeBundleTransfer",
]

FORMAT = "mooncake-structured/1"
COPY_MODES = ("auto", "copy", "zero_copy")


class StructuredObjectError(RuntimeError):
    """A store call failed, or a manifest or payload is missing or malformed."""


@dataclass
class StructuredObjectPayload:
    """Members to store: name -> numpy array, torch CPU tensor or bytes."""
    members: Dict[str, object]
    meta: Dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class StructuredObjectRef:
    """Where a stored object lives: its manifest key."""
    manifest_key: str


@dataclass(frozen=True)
class StructuredMemberSlice:
    """Rows ``start:stop`` (axis 0) of one member."""
    member: str
    start: int
    stop: int


@dataclass(frozen=True)
class BundleTransferPolicy:
    """``copy_mode``: "auto", "copy" or "zero_copy"."""
    copy_mode: str = "auto"

    def __post_init__(self):
        if self.copy_mode not in COPY_MODES:
            raise ValueError(f"copy_mode must be one of {COPY_MODES}, got {self.copy_mode!r}")


def _as_bytes_view(name, value) -> Tuple[memoryview, dict]:
    """The member's bytes (no copy for contiguous arrays) and its description."""
    torch = optional("torch") if type(value).__module__.startswith("torch") else None
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError(f"member {name!r}: only CPU tensors are supported")
        dtype = str(value.dtype).replace("torch.", "")
        value = value.detach().contiguous()
        if value.dtype == torch.bfloat16:  # numpy has no bfloat16: carry the bits
            value = value.view(torch.int16)
        arr = value.numpy()
        desc = {"kind": "torch", "dtype": dtype}
    elif isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError(f"member {name!r}: object arrays cannot be stored")
        arr = np.ascontiguousarray(value)
        desc = {"kind": "ndarray", "dtype": arr.dtype.str}
    elif isinstance(value, (bytes, bytearray, memoryview)):
        arr = np.frombuffer(value, dtype=np.uint8)
        desc = {"kind": "bytes", "dtype": "|u1"}
    else:
        raise TypeError(f"member {name!r}: expected a numpy array, torch tensor or bytes, "
                        f"got {type(value).__name__}")
    desc.update(shape=list(arr.shape), nbytes=int(arr.nbytes))
    return memoryview(arr.reshape(-1).view(np.uint8)), desc


class StructuredReadSpec:
    """What to read from one object: members, per-member row ranges, rows."""

    def __init__(self, ref, manifest, members=None, slices=None, rows=None):
        self.ref = ref
        self.manifest = manifest
        self.members = list(manifest["members"]) if members is None else list(members)
        self.slices = dict(slices or {})
        self.rows = rows

    def _derive(self, **kw):
        args = dict(members=self.members, slices=self.slices, rows=self.rows)
        args.update(kw)
        return StructuredReadSpec(self.ref, self.manifest, **args)

    @property
    def meta(self):
        return self.manifest.get("meta", {})

    def member_info(self, name):
        try:
            return self.manifest["members"][name]
        except KeyError:
            raise KeyError(f"no member {name!r} in {self.ref.manifest_key}") from None

    def select_members(self, names: Sequence[str]) -> "StructuredReadSpec":
        names = [names] if isinstance(names, str) else list(names)
        for n in names:
            self.member_info(n)
        return self._derive(members=names,
                            slices={n: s for n, s in self.slices.items() if n in names})

    def slice_member(self, name, start=0, stop=None) -> "StructuredReadSpec":
        """Rows ``start:stop`` of member ``name`` (or a StructuredMemberSlice)."""
        if isinstance(name, StructuredMemberSlice):
            name, start, stop = name.member, name.start, name.stop
        info = self.member_info(name)
        if name not in self.members:
            raise KeyError(f"member {name!r} is not selected")
        if not info["shape"]:
            raise ValueError(f"member {name!r} is a scalar and has no rows")
        n = info["shape"][0]
        stop = n if stop is None else stop
        if not (isinstance(start, int) and isinstance(stop, int)):
            raise TypeError("start and stop must be int")
        if not 0 <= start <= stop <= n:
            raise ValueError(f"rows {start}:{stop} outside member {name!r} with {n} rows")
        return self._derive(slices={**self.slices,
                                    name: StructuredMemberSlice(name, start, stop)})

    def select_rows(self, rows) -> "StructuredReadSpec":
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        for n in self.members:
            shape = self.member_info(n)["shape"]
            if not shape:
                raise ValueError(f"member {n!r} is a scalar and has no rows")
            if rows.size and (rows.min() < 0 or rows.max() >= shape[0]):
                raise IndexError(f"row index outside member {n!r} with {shape[0]} rows")
        return self._derive(rows=rows)


def _to_kind(arr, info):
    if info["kind"] == "torch":
        torch = require("torch", "a torch member")
        t = torch.from_numpy(arr)
        return t.view(torch.bfloat16) if info["dtype"] == "bfloat16" else t
    return arr


@dataclass(frozen=True)
class DataProtoStage:
    manifest_key: str
    batch_size: int
    fields: Tuple[str, ...]


@dataclass(frozen=True)
class MooncakeDataProtoRef:
    """A DataProto handle: its stages (one per ``put_bundle``)."""
    stages: Tuple[DataProtoStage, ...]

    @property
    def batch_size(self):
        return sum(s.batch_size for s in self.stages)

    def to_dict(self):
        return {"format": FORMAT, "stages": [
            {"manifest_key": s.manifest_key, "batch_size": s.batch_size,
             "fields": list(s.fields)} for s in self.stages]}

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("not a MooncakeDataProtoRef dict")
        return cls(tuple(DataProtoStage(str(s["manifest_key"]), int(s["batch_size"]),
                                        tuple(s["fields"])) for s in d["stages"]))


class MooncakeBundleTransfer:
    """Structured objects and DataProto bundles through a store client
    (``mooncake.store.MooncakeDistributedStore``, set up) under ``key_prefix``."""

    def __init__(self, store, key_prefix="mooncake/structured", policy=None):
        if not isinstance(key_prefix, str):
            raise TypeError("key_prefix must be a str")
        if not key_prefix:
            raise ValueError("key_prefix must be a non-empty string")
        missing = [m for m in _STORE_CALLS if not callable(getattr(store, m, None))]
        if missing:
            raise TypeError("store must be a set-up MooncakeDistributedStore (%s has no %s)"
                            % (type(store).__name__, ", ".join(missing)))
        if policy is not None and not isinstance(policy, BundleTransferPolicy):
            raise TypeError("policy must be a BundleTransferPolicy or None")
        self.store = store
        self.key_prefix = key_prefix.rstrip("/")
        self.policy = policy or BundleTransferPolicy()

    # ---- writing ----
    def put_structured_object(self, name, payload, meta=None, config=None):
        """Store ``payload`` (StructuredObjectPayload or dict) as ``name``;
        returns a StructuredObjectRef.  An existing object of that name is
        refused (the store's put keeps an existing key's value and reports
        success, so a second writer would otherwise get the first's object)."""
        if not isinstance(name, str):
            raise TypeError("name must be a str")
        if not name:
            raise ValueError("name must be a non-empty string")
        if isinstance(payload, dict):
            payload = StructuredObjectPayload(payload, dict(meta or {}))
        elif meta is not None:
            raise ValueError("meta is given twice (payload.meta and meta=)")
        if not payload.members:
            raise ValueError("a structured object needs at least one member")
        base = f"{self.key_prefix}/{name}"
        if self.store.is_exist(f"{base}/manifest") == 1:
            raise StructuredObjectError(f"object {name!r} already exists; remove it first")
        keys, views, members = [], [], {}
        for i, (mname, value) in enumerate(payload.members.items()):
            if not isinstance(mname, str) or not mname:
                raise TypeError("member names must be non-empty strings")
            view, desc = _as_bytes_view(mname, value)
            desc["key"] = f"{base}/p{i}"
            keys.append(desc["key"])
            views.append(view if view.nbytes else b"\0")  # the store refuses empty values
            members[mname] = desc
        manifest = {"format": FORMAT, "members": members, "meta": payload.meta}
        try:
            blob = json.dumps(manifest).encode()
        except TypeError as e:
            raise TypeError(f"meta must be JSON-serialisable: {e}") from None
        args = () if config is None else (config,)
        rc = self.store.put_batch(keys, views, *args)
        if rc != 0:
            raise StructuredObjectError(f"put of {name!r} payloads failed: {rc}")
        rc = self.store.put(f"{base}/manifest", blob, *args)
        if rc != 0:
            self.store.batch_remove(keys)
            raise StructuredObjectError(f"put of {name!r} manifest failed: {rc}")
        return StructuredObjectRef(f"{base}/manifest")

    def put_bundle(self, name, batch, meta_info=None, config=None):
        """Store a DataProto's ``batch`` (field -> array/tensor, one shared
        leading dimension) and ``meta_info``; returns a MooncakeDataProtoRef."""
        if not isinstance(batch, dict) or not batch:
            raise ValueError("batch must be a non-empty dict of field -> array")
        sizes = {f: (len(v) if getattr(v, "ndim", 1) else None) for f, v in batch.items()}
        if None in sizes.values() or len(set(sizes.values())) != 1:
            raise ValueError(f"batch fields must share their leading dimension: {sizes}")
        ref = self.put_structured_object(name, StructuredObjectPayload(
            dict(batch), {"dataproto": True, "meta_info": dict(meta_info or {})}), config=config)
        n = next(iter(sizes.values()))
        return MooncakeDataProtoRef((DataProtoStage(ref.manifest_key, n, tuple(batch)),))

    # ---- reading ----
    def read_spec(self, ref) -> StructuredReadSpec:
        key = ref.manifest_key if isinstance(ref, (StructuredObjectRef, DataProtoStage)) else ref
        if isinstance(ref, MooncakeDataProtoRef):
            if len(ref.stages) != 1:
                raise ValueError("read_spec takes one stage; pass ref.stages[i]")
            key = ref.stages[0].manifest_key
        if not isinstance(key, str):
            raise TypeError("ref must be a StructuredObjectRef, a stage or a manifest key")
        blob = self.store.get(key)
        if not blob:
            raise StructuredObjectError(f"no manifest at {key!r}")
        try:
            manifest = json.loads(bytes(blob))
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise StructuredObjectError(f"{key!r} is not a {FORMAT} manifest")
        return StructuredReadSpec(StructuredObjectRef(key), manifest)

    def _fetch(self, spec):
        infos = [spec.member_info(n) for n in spec.members]
        handles = self.store.batch_get_buffer([i["key"] for i in infos])
        out = {}
        for name, info, h in zip(spec.members, infos, handles):
            if h is None or (len(memoryview(h)) != info["nbytes"] and info["nbytes"]):
                raise StructuredObjectError(f"payload of member {name!r} is missing")
            dtype = np.dtype(info["dtype"]) if info["kind"] != "torch" else _torch_np(info)
            out[name] = np.frombuffer(h, dtype=dtype, count=info["nbytes"] // dtype.itemsize
                                      ).reshape(info["shape"])
        return out

    def _select(self, spec, arrays, copy):
        out = {}
        for name, arr in arrays.items():
            s = spec.slices.get(name)
            if s is not None:
                arr = arr[s.start:s.stop]
            if spec.rows is not None:
                arr = arr[spec.rows]  # a copy
            elif copy:
                arr = arr.copy()
            out[name] = arr
        return out

    def materialize(self, spec, policy=None):
        """``{member: array}`` for the spec's selection (see the module doc)."""
        _check_spec(spec, policy)
        mode = (policy or self.policy).copy_mode
        if mode == "zero_copy" and spec.rows is not None:
            raise ValueError("zero_copy cannot select a row list; use copy or auto")
        res = self._select(spec, self._fetch(spec), copy=(mode == "copy"))
        return {n: _to_kind(a, spec.member_info(n)) for n, a in res.items()}

    def materialize_into(self, spec, out):
        """Copy the selection into ``out[name]`` (arrays or tensors of the
        selection's shape and dtype); returns the bytes copied."""
        _check_spec(spec)
        if not isinstance(out, Mapping):
            raise TypeError("out must be a mapping of member -> array")
        total = 0
        for name, arr in self._select(spec, self._fetch(spec), copy=False).items():
            if name not in out:
                raise KeyError(f"no destination for member {name!r}")
            dst = out[name]
            if type(dst).__module__.startswith("torch"):
                dst = dst.numpy()
            if not isinstance(dst, np.ndarray):
                raise TypeError(f"destination of {name!r} must be an array or CPU tensor")
            if dst.shape != arr.shape or dst.dtype != arr.dtype:
                raise ValueError(f"destination of {name!r} is {dst.dtype}{list(dst.shape)}, "
                                 f"need {arr.dtype}{list(arr.shape)}")
            np.copyto(dst, arr)
            total += arr.nbytes
        return total

    def get_bundle(self, ref, fields=None, rows=None, policy=None):
        """A bundle's fields (all, or ``fields``) and rows; returns
        ``(batch, meta_info)``.  Several stages concatenate their rows."""
        if isinstance(ref, DataProtoStage):
            ref = MooncakeDataProtoRef((ref,))
        if not isinstance(ref, MooncakeDataProtoRef):
            raise TypeError("ref must be a MooncakeDataProtoRef or a DataProtoStage")
        parts, meta = [], {}
        for st in ref.stages:
            spec = self.read_spec(st)
            if fields is not None:
                spec = spec.select_members(fields)
            parts.append(self.materialize(spec, BundleTransferPolicy("copy")))
            meta.update(spec.meta.get("meta_info", {}))
        batch = {f: _concat([p[f] for p in parts]) for f in parts[0]}
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64)
            batch = {f: v[rows] for f, v in batch.items()}
        return batch, meta

    # ---- removing ----
    def remove_structured_object(self, ref, force=False):
        """Remove the manifest and every payload key; returns 0 or the
        first negative store error."""
        spec = self.read_spec(ref)
        keys = [i["key"] for i in spec.manifest["members"].values()]
        first = self.store.remove(spec.ref.manifest_key, force)
        rcs = self.store.batch_remove(keys, force)
        return next((rc for rc in [first, *rcs] if rc < 0), 0)

    def remove_bundle(self, ref, force=False):
        stages = ref.stages if isinstance(ref, MooncakeDataProtoRef) else (ref,)
        if not all(isinstance(st, DataProtoStage) for st in stages):
            raise TypeError("ref must be a MooncakeDataProtoRef or a DataProtoStage")
        rc = 0
        for st in stages:
            r = self.remove_structured_object(st, force)
            rc = rc or r
        return rc


_STORE_CALLS = ("put", "put_batch", "get", "batch_get_buffer", "remove", "batch_remove")


def _check_spec(spec, policy=None):
    if not isinstance(spec, StructuredReadSpec):
        raise TypeError("spec must be a StructuredReadSpec (from read_spec), not %s"
                        % type(spec).__name__)
    if policy is not None and not isinstance(policy, BundleTransferPolicy):
        raise TypeError("policy must be a BundleTransferPolicy or None")


def _torch_np(info):
    if info["dtype"] == "bfloat16":
        return np.dtype(np.int16)  # the bits; _to_kind views them as bfloat16
    torch = require("torch", "a torch member")
    return np.dtype(torch.empty(0, dtype=getattr(torch, info["dtype"])).numpy().dtype)


def _concat(arrs):
    if len(arrs) == 1:
        return arrs[0]
    if type(arrs[0]).__module__.startswith("torch"):
        return require("torch", "a torch member").cat(arrs)
    return np.concatenate(arrs)
