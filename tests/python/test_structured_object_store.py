"""mooncake.structured_object_store and mooncake.dataproto_catalog against a
real mooncake_master (the mc_master fixture)."""

import uuid

import numpy as np
import pytest

from conftest import MiB

from mooncake.store import MooncakeDistributedStore
from mooncake.structured_object_store import (BundleTransferPolicy, MooncakeBundleTransfer,
                                              MooncakeDataProtoRef, StructuredMemberSlice,
                                              StructuredObjectError, StructuredObjectPayload,
                                              StructuredObjectRef)
from mooncake.dataproto_catalog import DataProtoCatalog, materialize

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


@pytest.fixture(scope="module")
def store(mc_master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 64 * MiB, 16 * MiB, "tcp", "",
                   mc_master.addr) == 0
    yield s
    assert s.close() == 0


@pytest.fixture
def bt(store):
    return MooncakeBundleTransfer(store, f"so-{uuid.uuid4().hex[:8]}")


def members():
    return {"x": np.arange(40, dtype=np.float32).reshape(10, 4),
            "ids": np.arange(10, dtype=np.int64) * 7,
            "blob": b"hello structured"}


def test_put_and_materialize_every_mode(bt, store):
    ref = bt.put_structured_object("obj", members(), meta={"step": 3})
    assert isinstance(ref, StructuredObjectRef) and ref.manifest_key.endswith("obj/manifest")
    assert store.is_exist(ref.manifest_key) == 1
    spec = bt.read_spec(ref)
    assert spec.meta == {"step": 3} and spec.members == ["x", "ids", "blob"]
    for mode in ("auto", "copy", "zero_copy"):
        got = bt.materialize(spec, BundleTransferPolicy(mode))
        assert np.array_equal(got["x"], members()["x"]) and got["x"].dtype == np.float32
        assert np.array_equal(got["ids"], members()["ids"])
        assert got["blob"].tobytes() == b"hello structured"
        assert got["x"].flags.owndata == (mode == "copy")


def test_member_selection_slices_and_rows(bt):
    ref = bt.put_structured_object("sel", StructuredObjectPayload(members()))
    spec = bt.read_spec(ref).select_members(["x", "ids"]).slice_member("x", 2, 5)
    got = bt.materialize(spec, BundleTransferPolicy("zero_copy"))
    assert set(got) == {"x", "ids"}
    assert np.array_equal(got["x"], members()["x"][2:5]) and not got["x"].flags.owndata
    assert np.array_equal(got["ids"], members()["ids"])
    spec2 = bt.read_spec(ref).select_members("ids").slice_member(StructuredMemberSlice("ids", 1, 9))
    rows = spec2.select_rows([0, 3, 3, 7])
    assert np.array_equal(bt.materialize(rows)["ids"], members()["ids"][1:9][[0, 3, 3, 7]])
    with pytest.raises(ValueError, match="zero_copy cannot select a row list"):
        bt.materialize(rows, BundleTransferPolicy("zero_copy"))
    out = {"x": np.zeros((3, 4), np.float32), "ids": np.zeros(10, np.int64)}
    assert bt.materialize_into(spec, out) == 3 * 16 + 80
    assert np.array_equal(out["x"], members()["x"][2:5])
    with pytest.raises(ValueError, match="need float32"):
        bt.materialize_into(spec, {"x": np.zeros((3, 4), np.float64), "ids": out["ids"]})
    with pytest.raises(KeyError, match="no destination"):
        bt.materialize_into(spec, {"x": out["x"]})


def test_bad_input_is_refused(bt):
    ref = bt.put_structured_object("bad", members())
    spec = bt.read_spec(ref)
    with pytest.raises(KeyError):
        spec.select_members(["nope"])
    with pytest.raises(ValueError, match="outside member"):
        spec.slice_member("x", 3, 11)
    with pytest.raises(TypeError):
        spec.slice_member("x", 1.5, 3)
    with pytest.raises(IndexError):
        spec.select_rows([10])
    with pytest.raises(ValueError, match="copy_mode"):
        BundleTransferPolicy("fast")
    with pytest.raises(TypeError, match="expected a numpy array"):
        bt.put_structured_object("t", {"a": [1, 2]})
    with pytest.raises(TypeError, match="object arrays"):
        bt.put_structured_object("t", {"a": np.array([object()])})
    with pytest.raises(ValueError, match="at least one member"):
        bt.put_structured_object("t", {})
    with pytest.raises(TypeError, match="JSON"):
        bt.put_structured_object("t", {"a": b"x"}, meta={"o": object()})
    with pytest.raises(StructuredObjectError, match="no manifest"):
        bt.read_spec(StructuredObjectRef(bt.key_prefix + "/none/manifest"))
    with pytest.raises(ValueError):
        MooncakeBundleTransfer(bt.store, "")


def test_missing_payload_is_an_error_not_a_partial_object(bt, store):
    ref = bt.put_structured_object("gone", members())
    spec = bt.read_spec(ref)
    assert store.remove(spec.member_info("ids")["key"], True) == 0
    with pytest.raises(StructuredObjectError, match="payload of member 'ids' is missing"):
        bt.materialize(spec)
    assert np.array_equal(bt.materialize(spec.select_members(["x"]))["x"], members()["x"])


def test_remove_structured_object(bt, store):
    ref = bt.put_structured_object("rm", members())
    keys = [i["key"] for i in bt.read_spec(ref).manifest["members"].values()]
    assert bt.remove_structured_object(ref, force=True) == 0
    assert store.is_exist(ref.manifest_key) == 0
    assert all(store.is_exist(k) == 0 for k in keys)


@pytest.mark.skipif(torch is None, reason="torch (python3-torch) is not installed")
def test_torch_members_come_back_as_tensors(bt):
    t = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    ref = bt.put_structured_object("tt", {"t": t, "h": torch.ones(3, dtype=torch.float16)})
    got = bt.materialize(bt.read_spec(ref).slice_member("t", 1, 3), BundleTransferPolicy("copy"))
    assert isinstance(got["t"], torch.Tensor) and got["t"].dtype == torch.int32
    assert torch.equal(got["t"], t[1:3]) and got["h"].dtype == torch.float16
    bf = torch.tensor([[1.5, -2.0], [3.25, 0.0]], dtype=torch.bfloat16)
    ref = bt.put_structured_object("bf", {"bf": bf})
    for mode in ("copy", "zero_copy"):
        got = bt.materialize(bt.read_spec(ref), BundleTransferPolicy(mode))["bf"]
        assert got.dtype == torch.bfloat16 and torch.equal(got, bf)
    got = bt.materialize(bt.read_spec(ref).select_rows([1]))["bf"]
    assert torch.equal(got, bf[[1]])


def test_bundle_roundtrip_and_handle_export(bt):
    batch = {"tokens": np.arange(12, dtype=np.int32).reshape(4, 3),
             "reward": np.array([0.5, 1.0, -1.0, 2.0], np.float32)}
    ref = bt.put_bundle("dp0", batch, meta_info={"temperature": 0.7})
    assert isinstance(ref, MooncakeDataProtoRef) and ref.batch_size == 4
    assert MooncakeDataProtoRef.from_dict(ref.to_dict()) == ref
    got, meta = bt.get_bundle(ref, fields=["reward"], rows=[3, 0])
    assert meta == {"temperature": 0.7} and set(got) == {"reward"}
    assert np.array_equal(got["reward"], batch["reward"][[3, 0]])
    with pytest.raises(ValueError, match="leading dimension"):
        bt.put_bundle("dp1", {"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(ValueError):
        MooncakeDataProtoRef.from_dict({"stages": []})
    assert bt.remove_bundle(ref, force=True) == 0
    with pytest.raises(StructuredObjectError):
        bt.get_bundle(ref)


def test_catalog_update_resolve_materialize_remove(bt):
    cat = DataProtoCatalog()
    b1 = {"tokens": np.arange(6, dtype=np.int32).reshape(3, 2),
          "reward": np.array([1, 2, 3], np.float32)}
    h1 = bt.put_bundle("c1", b1)
    fid = cat.update("train", ["a", "b", "c"], tags={"stage": "rollout"}, handle=h1.to_dict())
    assert fid == h1.stages[0].manifest_key
    b2 = {"reward": np.array([20, 30], np.float32)}
    h2 = bt.put_bundle("c2", b2)
    cat.update("train", ["b", "c"], tags=[{"scored": True}, {"scored": True}], handle=h2)
    assert cat.list() == ["train"] and cat.list("train") == ["a", "b", "c"]
    r = cat.resolve("train", ["c", "a"])
    assert r["fields"] == ["tokens", "reward"]
    assert r["tags"] == [{"stage": "rollout", "scored": True}, {"stage": "rollout"}]
    assert set(r["handles"]) == {h1.stages[0].manifest_key, h2.stages[0].manifest_key}
    got = materialize(bt, r)
    assert np.array_equal(got["tokens"], b1["tokens"][[2, 0]])
    assert np.array_equal(got["reward"], np.array([30, 1], np.float32))
    # failures change nothing
    with pytest.raises(KeyError):
        cat.resolve("train", ["a", "zz"])
    with pytest.raises(KeyError):
        cat.resolve("train", ["a"], fields=["nope"])
    with pytest.raises(ValueError, match="batch_size"):
        cat.update("train", ["a"], handle=h1)
    other = MooncakeDataProtoRef.from_dict({**h1.to_dict(), "stages": [
        {**h1.to_dict()["stages"][0], "fields": ["tokens"]}]})
    with pytest.raises(ValueError, match="another handle"):
        cat.update("train", ["x", "y", "z"], handle=other)
    with pytest.raises(KeyError):
        cat.remove("train", ["a", "zz"])
    assert cat.list("train") == ["a", "b", "c"]
    # h1's reward rows of b and c were replaced; tokens still reference it
    assert cat.remove("train", ["b", "c"]) == [h2]
    assert cat.remove("train", ["a"]) == [h1]
    assert cat.list() == []
    # re-publishing the same handle for the same keys keeps it referenced once
    cat.update("p", ["k"], handle=bt.put_bundle("c3", {"v": np.zeros(1)}))
    h3 = cat.resolve("p", ["k"])["handles"]
    cat.update("p", ["k"], handle=next(iter(h3.values())))
    assert cat.remove("p", ["k"]) == list(h3.values())


def test_second_put_of_a_name_keeps_the_first(bt):
    ref = bt.put_structured_object("dup", members())
    with pytest.raises(StructuredObjectError, match="already exists"):
        bt.put_structured_object("dup", {"x": np.zeros(3)})
    assert np.array_equal(bt.materialize(bt.read_spec(ref))["x"], members()["x"])
