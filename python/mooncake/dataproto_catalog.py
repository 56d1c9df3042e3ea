"""DataProtoCatalog: which stored DataProto row holds each (key, field).

An in-memory map partition -> key -> {tags, field -> (fragment_id, row)}.
It is not locked: callers serialise access (one owner thread, or their own
lock).

- ``update(partition, keys, tags=None, handle=None)`` merges ``tags`` (one
  dict for every key, or one per key) and, with ``handle``, publishes one
  single-stage DataProto handle (``MooncakeDataProtoRef`` or its
  ``to_dict()``): its ``batch_size`` must equal ``len(keys)``, row ``i``
  belongs to ``keys[i]``, and the fragment id is the stage's manifest key.
  A different handle under an id already known is rejected.  Fragments are
  reference counted by the (key, field) entries that point at them.
- ``resolve(partition, keys, fields=None)`` returns ``{"keys", "tags",
  "fields", "field_groups", "handles"}``; ``fields=None`` means the first
  key's fields.  A missing key or field raises KeyError; nothing changes.
  Each field group names one fragment, the fields read from it, the
  positions in ``keys`` and the rows in the fragment.
- ``list(partition=None)``: the partitions, or one partition's keys (sorted).
- ``remove(partition, keys)``: drops the keys (KeyError for a missing one,
  nothing removed); returns the handles no entry references any more, for
  the caller to ``remove_bundle``.
- ``materialize(transfer, resolved)``: the resolved fields' rows fetched
  through a ``MooncakeBundleTransfer``, in ``keys`` order.
"""

from mooncake.structured_object_store import (BundleTransferPolicy, MooncakeDataProtoRef,
                                              np)

__all__ = ["DataProtoCatalog", "materialize"]


class DataProtoCatalog:
    def __init__(self):
        self._parts = {}  # partition -> key -> {"tags": {}, "fields": {f: (fid, row)}}
        self._frags = {}  # fid -> [handle, refcount]

    # ---- writing ----
    def update(self, partition, keys, tags=None, handle=None):
        _partition(partition)
        keys = _keys(keys)
        if isinstance(tags, dict) or tags is None:
            tag_list = [dict(tags or {}) for _ in keys]
        else:
            tag_list = [dict(t) for t in tags]
            if len(tag_list) != len(keys):
                raise ValueError(f"{len(tag_list)} tag dicts for {len(keys)} keys")
        fid = stage = None
        if handle is not None:
            if isinstance(handle, dict):
                handle = MooncakeDataProtoRef.from_dict(handle)
            if not isinstance(handle, MooncakeDataProtoRef):
                raise TypeError("handle must be a MooncakeDataProtoRef or its to_dict()")
            if len(handle.stages) != 1:
                raise ValueError("update publishes a single-stage handle")
            stage = handle.stages[0]
            if stage.batch_size != len(keys):
                raise ValueError(f"handle batch_size {stage.batch_size} != {len(keys)} keys")
            fid = stage.manifest_key
            known = self._frags.get(fid)
            if known is not None and known[0] != handle:
                raise ValueError(f"fragment {fid!r} is already published with another handle")
        # validated: mutate
        part = self._parts.setdefault(partition, {})
        if fid is not None:
            self._frags.setdefault(fid, [handle, 0])
        for row, (key, t) in enumerate(zip(keys, tag_list)):
            ent = part.setdefault(key, {"tags": {}, "fields": {}})
            ent["tags"].update(t)
            if stage is None:
                continue
            for f in stage.fields:
                self._frags[fid][1] += 1  # before the old entry's unref: it may be fid
                self._unref(ent["fields"].get(f))
                ent["fields"][f] = (fid, row)
        return fid

    def _unref(self, loc):
        if loc is None:
            return None
        frag = self._frags[loc[0]]
        frag[1] -= 1
        if frag[1] == 0:
            del self._frags[loc[0]]
            return frag[0]
        return None

    def remove(self, partition, keys):
        _partition(partition)
        keys = _keys(keys)
        part = self._parts.get(partition, {})
        missing = [k for k in keys if k not in part]
        if missing:
            raise KeyError(f"keys not in partition {partition!r}: {missing}")
        freed = []
        for k in dict.fromkeys(keys):
            for loc in part.pop(k)["fields"].values():
                h = self._unref(loc)
                if h is not None:
                    freed.append(h)
        if not part:
            self._parts.pop(partition, None)
        return freed

    # ---- reading ----
    def list(self, partition=None):
        if partition is not None:
            _partition(partition)
        if partition is None:
            return sorted(self._parts)
        return sorted(self._parts.get(partition, {}))

    def resolve(self, partition, keys, fields=None):
        _partition(partition)
        keys = _keys(keys)
        part = self._parts.get(partition, {})
        missing = [k for k in keys if k not in part]
        if missing:
            raise KeyError(f"keys not in partition {partition!r}: {missing}")
        ents = [part[k] for k in keys]
        fields = list(ents[0]["fields"]) if fields is None else list(fields)
        for k, e in zip(keys, ents):
            lacking = [f for f in fields if f not in e["fields"]]
            if lacking:
                raise KeyError(f"key {k!r} has no fields {lacking}")
        by_frag = {}  # fid -> field -> [(position, row)]
        for pos, e in enumerate(ents):
            for f in fields:
                fid, row = e["fields"][f]
                by_frag.setdefault(fid, {}).setdefault(f, []).append((pos, row))
        groups = []
        for fid, per_field in by_frag.items():
            shapes = {}
            for f, pr in per_field.items():
                shapes.setdefault(tuple(pr), []).append(f)
            for pr, fs in shapes.items():
                groups.append({"fragment_id": fid, "fields": fs,
                               "positions": [p for p, _ in pr], "rows": [r for _, r in pr]})
        return {"keys": keys, "tags": [dict(e["tags"]) for e in ents], "fields": fields,
                "field_groups": groups,
                "handles": {fid: self._frags[fid][0] for fid in by_frag}}


def materialize(transfer, resolved):
    """``{field: array}`` with one row per resolved key, in key order."""
    n = len(resolved["keys"])
    out = {}
    for g in resolved["field_groups"]:
        handle = resolved["handles"][g["fragment_id"]]
        spec = transfer.read_spec(handle.stages[0]).select_members(g["fields"])
        rows = transfer.materialize(spec.select_rows(g["rows"]), BundleTransferPolicy("copy"))
        for f, arr in rows.items():
            if f not in out:
                out[f] = _empty_like(arr, n)
            out[f][np.asarray(g["positions"])] = arr
    return out


def _empty_like(arr, n):
    if type(arr).__module__.startswith("torch"):
        import torch
        return torch.empty((n, *arr.shape[1:]), dtype=arr.dtype)
    return np.empty((n, *arr.shape[1:]), dtype=arr.dtype)


def _partition(partition):
    if not isinstance(partition, str):
        raise TypeError("partition must be a str, not %s" % type(partition).__name__)
    return partition


def _keys(keys):
    keys = [keys] if isinstance(keys, str) else list(keys)
    if not all(isinstance(k, str) for k in keys):
        raise TypeError("keys must be strings")
    if not keys or not all(keys):
        raise ValueError("keys must be a non-empty list of non-empty strings")
    if len(set(keys)) != len(keys):
        raise ValueError("keys must be distinct")
    return keys
