"""mooncake.reshard: contracts, ids and digests, wire format, geometry, the
N-D planner (spec components.md 2.2-2.4), and the RL weight flow of 2.6
through a real store (mooncake_master + MooncakeDistributedStore tensors).
"""

import hashlib
import json
import pickle
import random
import uuid

import numpy as np
import pytest

from mooncake.reshard import ResourceKind
from mooncake.reshard.contracts import canonical_json
from mooncake.reshard.geometry import OVERLAP_BUDGET, boxes_exactly_cover, boxes_overlap
from mooncake.reshard.weight import (OwnershipAxis, ParallelRank, ParallelTopology,
                                     PlacementFragment, PlanningLimits, ReplicatedAxis,
                                     SplitAxis, TensorDescriptor, TopologyParticipant,
                                     WeightPlacementManifest, plan_placement_transfer,
                                     weight_placement_from_json, weight_placement_to_json)

F32 = 4


def topo(tp=1, dp=1, pp=1):
    ps = [TopologyParticipant(f"p{d}{p}{t}", ParallelRank(dp=d, tp=t, pp=p))
          for d in range(dp) for p in range(pp) for t in range(tp)]
    return ParallelTopology(tp, pp, 1, dp, tuple(sorted(ps, key=lambda x: x.participant_id)))


def tensor(tid, shape, split_dim=None, fp="row-major"):
    axes = (SplitAxis("tp", split_dim),) if split_dim is not None else (ReplicatedAxis("tp"),)
    return TensorDescriptor(tid, tuple(shape), "float32", F32,
                            (split_dim,) if split_dim is not None else (), fp, axes)


def split_fragments(t, tp, dp=1):
    """Even TP split of t along its split dim, for every dp replica."""
    out = []
    for d in range(dp):
        for r in range(tp):
            if not t.shard_dims:
                off, shp = (0,) * len(t.global_shape), t.global_shape
            else:
                dim = t.shard_dims[0]
                n = t.global_shape[dim] // tp
                off = tuple(r * n if i == dim else 0 for i in range(len(t.global_shape)))
                shp = tuple(n if i == dim else s for i, s in enumerate(t.global_shape))
            out.append(PlacementFragment(t.tensor_id, off, shp, int(np.prod(shp)) * F32,
                                         ParallelRank(dp=d, tp=r)))
    return out


def manifest(tensors, tp, dp=1, gen=1, frags=None):
    tp_ = topo(tp=tp, dp=dp)
    if frags is None:
        frags = [f for t in tensors for f in split_fragments(t, tp, dp)]
    return WeightPlacementManifest.from_fragments("model", "rev1", gen, "set", tp_, tensors,
                                                  frags)

# ---- ids and canonical JSON -------------------------------------------------------------


def test_fragment_id_is_sha256_of_canonical_json():
    f = PlacementFragment("w", (0, 0), (2, 4), 32, ParallelRank())
    text = ('{"aliases":[],"global_offset":[0,0],"local_shape":[2,4],"nbytes":32,'
            '"rank":{"dp":0,"ep":0,"pp":0,"tp":0},"schema":"weight-placement-fragment",'
            '"tensor_id":"w"}')
    assert f.placement_fragment_id == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    # the optional stage is part of the identity only when given
    g = PlacementFragment("w", (0, 0), (2, 4), 32, ParallelRank(), pipeline_stage_id=0)
    assert g.placement_fragment_id != f.placement_fragment_id
    # ids use ASCII escapes
    assert canonical_json({"b": "é", "a": 1}) == '{"a":1,"b":"\\u00e9"}'


def test_wire_round_trip_and_digest():
    m = manifest([tensor("a.w", (8, 6), 0), tensor("a.b", (6,))], tp=2, dp=2)
    text = weight_placement_to_json(m)
    d = json.loads(text)
    assert text == json.dumps(d, sort_keys=True, separators=(",", ":"))
    assert d["resource_kind"] == ResourceKind.MODEL_WEIGHT.value
    assert set(d) == {"resource_kind", "resource_id", "revision", "weight_generation",
                      "placement_set_id", "placement_id", "topology", "tensors", "parts"}
    back = weight_placement_from_json(text)
    assert back.placement_id == m.placement_id and back.digest == m.digest
    assert m.digest == hashlib.sha256(text.encode()).hexdigest()
    assert m.topology.world_size == 4
    # a different generation is a different placement
    assert manifest([tensor("a.w", (8, 6), 0), tensor("a.b", (6,))], tp=2, dp=2,
                    gen=2).placement_id != m.placement_id


@pytest.mark.parametrize("mutate, rule", [
    (lambda d: d.update(extra=1), "unknown fields"),
    (lambda d: d.pop("revision"), "missing fields"),
    (lambda d: d.update(resource_kind="kv_cache"), "resource_kind must be 'model_weight'"),
    (lambda d: d.update(placement_id="sha256:" + "0" * 64), "placement_id does not match"),
    (lambda d: d["topology"].update(topology_id="sha256:00"), "topology_id does not match"),
    (lambda d: d["parts"][0]["fragments"][0].update(nbytes=4), "nbytes != prod"),
    (lambda d: d["parts"][0]["fragments"][0].update(zzz=1), "fragment: unknown fields"),
    (lambda d: d["tensors"][0].update(itemsize=True), "itemsize must be an int"),
])
def test_wire_rejects(mutate, rule):
    d = json.loads(weight_placement_to_json(manifest([tensor("w", (8, 6), 0)], tp=2)))
    mutate(d)
    with pytest.raises(ValueError, match=rule):
        weight_placement_from_json(json.dumps(d))


def test_wire_rejects_duplicates_and_non_finite():
    text = weight_placement_to_json(manifest([tensor("w", (4,), 0)], tp=2))
    with pytest.raises(ValueError, match="duplicate field 'revision'"):
        weight_placement_from_json(text[:-1] + ',"revision":"x"}')
    with pytest.raises(ValueError, match="non-finite"):
        weight_placement_from_json(text.replace('"weight_generation":1', '"weight_generation":NaN'))


def test_legacy_fragment_without_stage_is_accepted():
    d = json.loads(weight_placement_to_json(manifest([tensor("w", (4,), 0)], tp=2)))
    assert all("pipeline_stage_id" not in f for p in d["parts"] for f in p["fragments"])
    weight_placement_from_json(json.dumps(d))

# ---- contract rules -----------------------------------------------------------------------


@pytest.mark.parametrize("build, rule", [
    (lambda: ParallelRank(dp=True), "must be an int"),
    (lambda: ParallelRank(tp=-1), r"must be in \[0"),
    (lambda: SplitAxis("pp", 0), "SplitAxis kind must be 'ep' or 'tp'"),
    (lambda: SplitAxis("ep", 1), "EP must split dim 0"),
    (lambda: TensorDescriptor("w", (4, 4), "f", 4, (1,), "x", (SplitAxis("tp", 0),)),
     "shard_dims must equal"),
    (lambda: TensorDescriptor("w", (4, 0), "f", 4, (), "x", ()), r"must be in \[1"),
    (lambda: TensorDescriptor("w", (4,), "f", 4, (), "x",
                              (ReplicatedAxis("tp"), ReplicatedAxis("dp"))), "sorted dp, pp, ep, tp"),
    (lambda: TensorDescriptor("w", (4,), "f", 4, (0,), "x", (SplitAxis("ep", 0),), expert_id=3),
     "expert_id with an EP SplitAxis"),
    (lambda: PlacementFragment("w", (0,), (4,), 16, ParallelRank(), aliases=("w",)),
     "at least 2 and include tensor_id"),
    (lambda: PlacementFragment("w", (0,), (4,), 16, ParallelRank(), aliases=("z", "w")),
     "sorted and unique"),
    (lambda: ParallelTopology(2, 1, 1, 1, (TopologyParticipant("a", ParallelRank(tp=2)),)),
     "tp rank 2 >= tp_size"),
    (lambda: ParallelTopology(1, 1, 1, 1, (TopologyParticipant("b", ParallelRank()),
                                           TopologyParticipant("a", ParallelRank(dp=1)))),
     "sorted by id"),
])
def test_contract_rules_named(build, rule):
    with pytest.raises(ValueError, match=rule):
        build()


def test_coverage_rules():
    t = tensor("w", (8, 6), 0)
    frags = split_fragments(t, 2)
    # a gap: one TP rank's fragment is half as tall
    short = PlacementFragment("w", (4, 0), (2, 6), 48, ParallelRank(tp=1))
    with pytest.raises(ValueError, match="coverage: .* not one non-overlapping cover"):
        manifest([t], 2, frags=[frags[0], short])
    # overlap: two fragments of the same rows
    over = PlacementFragment("w", (2, 0), (6, 6), 144, ParallelRank(tp=1))
    with pytest.raises(ValueError, match="coverage"):
        manifest([t], 2, frags=[frags[0], over])
    # out of the tensor
    with pytest.raises(ValueError, match="out of the tensor's bounds"):
        manifest([t], 2, frags=[frags[0],
                                PlacementFragment("w", (4, 0), (8, 6), 192, ParallelRank(tp=1))])
    # a DP replica missing
    with pytest.raises(ValueError, match="not covered by every DP replica"):
        manifest([t], 2, dp=2, frags=split_fragments(t, 2, dp=1))
    # a declared split rank missing: rank 1 holds everything, rank 0 a replicated tensor only
    b = tensor("b", (6,))
    with pytest.raises(ValueError, match="coverage"):
        manifest([t, b], 2, frags=[PlacementFragment("w", (0, 0), (8, 6), 192, ParallelRank(tp=1))]
                 + split_fragments(b, 2))

# ---- geometry -----------------------------------------------------------------------------


def brute(boxes):
    for i in range(len(boxes)):
        for j in range(i):
            (a, s), (b, t) = boxes[i], boxes[j]
            if all(x < y + v and y < x + u for x, u, y, v in zip(a, s, b, t)):
                return True
    return False


def test_overlap_agrees_with_brute_force():
    rng = random.Random(7)
    for case in range(300):
        nd = 1 + case % 3
        boxes = [(tuple(rng.randrange(8) for _ in range(nd)),
                  tuple(rng.randrange(1, 4) for _ in range(nd))) for _ in range(rng.randrange(1, 6))]
        assert boxes_overlap(boxes) == brute(boxes), boxes


def test_cover_and_budget():
    rows = [((i, 0), (1, 16)) for i in range(4096)]
    assert boxes_exactly_cover((0, 0), (4096, 16), rows)
    assert not boxes_exactly_cover((0, 0), (4096, 16), rows[:-1])
    # 1500 disjoint boxes all active on the sweep axis: ~1.1 M pairs, past the budget
    stack = [((0, i, 0), (10, 1, 1)) for i in range(1500)]
    with pytest.raises(ValueError, match="overlap budget exceeded"):
        boxes_overlap(stack)
    assert OVERLAP_BUDGET == 1_000_000
    assert not boxes_overlap(stack[:200])  # within it: answered
    assert boxes_overlap(stack[:200] + [((5, 100, 0), (1, 1, 1))])

# ---- planner ------------------------------------------------------------------------------


def run_plan(plan, src, dst, full):
    """Move bytes as the plan says: source fragments cut from full, then
    compare every target fragment with full's slice."""
    def cut(f):
        sl = tuple(slice(o, o + s) for o, s in zip(f.global_offset, f.local_shape))
        return np.ascontiguousarray(full[f.tensor_id][sl]).view(np.uint8).reshape(-1)
    sbytes = {f.placement_fragment_id: cut(f) for f in src.fragments}
    tbytes = {f.placement_fragment_id: np.zeros(f.nbytes, np.uint8) for f in dst.fragments}
    for r in plan.operations:
        r.validate_bounds(sbytes[r.source].size, tbytes[r.target].size)
        for so, to, n in r.iter_segments():
            tbytes[r.target][to:to + n] = sbytes[r.source][so:so + n]
    for f in dst.fragments:
        assert np.array_equal(tbytes[f.placement_fragment_id], cut(f)), f


def weights(tensors, seed=0):
    g = np.random.default_rng(seed)
    return {t.tensor_id: g.standard_normal(t.global_shape).astype(np.float32) for t in tensors}


def test_plan_tp2_rows_to_tp3_columns_and_dp():
    src_t = [tensor("w", (8, 6), 0), tensor("b", (6,))]
    dst_t = [tensor("w", (8, 6), 1), tensor("b", (6,))]
    src = manifest(src_t, tp=2, dp=1)
    dst = manifest(dst_t, tp=3, dp=2)
    plan = plan_placement_transfer(src, dst)
    full = weights(src_t)
    run_plan(plan, src, dst, full)
    # rows -> columns: each target gets a 4x2 block from each source: 4 rows of 8 bytes
    w_ops = [r for r in plan.operations if r.tensor_id == "w"]
    assert len(w_ops) == 2 * 3 * 2 and all(r.segment_count == 4 and r.inner_bytes == 8
                                           for r in w_ops)
    assert plan.total_bytes == 2 * (8 * 6 + 6 * 3) * F32
    assert {e.participant_id for e in plan.target_executors} == {p.participant_id
                                                                for p in dst.parts}
    keys = [(r.target, r.target_base_offset, r.source, r.source_base_offset) for r in plan.operations]
    assert keys == sorted(keys)
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_plan_errors_named():
    a = manifest([tensor("w", (8, 6), 0)], tp=2)
    with pytest.raises(ValueError, match="layout mismatch"):
        plan_placement_transfer(a, manifest([tensor("w", (8, 6), 0, fp="col-major")], tp=2))
    with pytest.raises(ValueError, match="differ in weight_generation"):
        plan_placement_transfer(a, manifest([tensor("w", (8, 6), 0)], tp=2, gen=9))
    with pytest.raises(ValueError, match="max_segments_per_region"):
        plan_placement_transfer(a, manifest([tensor("w", (8, 6), 1)], tp=2),
                                planning_limits=PlanningLimits(max_segments_per_region=2))
    with pytest.raises(ValueError, match="max_transfer_regions"):
        plan_placement_transfer(a, manifest([tensor("w", (8, 6), 1)], tp=2),
                                planning_limits=PlanningLimits(max_transfer_regions=1))

# ---- the RL weight flow through the store (2.6) -------------------------------------------


def test_rl_weight_update_through_store(mc_master):
    """A trainer (TP=2) publishes its fragments as tensors; an inference
    engine (TP=1) plans the reshard and pulls them; rollout samples go the
    other way.  Both through a real store."""
    torch = pytest.importorskip("torch")
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", mc_master.meta_uri, 16 << 20, 16 << 20, "tcp", "",
                   mc_master.addr, tenant_id="reshard") == 0
    try:
        run = uuid.uuid4().hex[:8]
        tens = [tensor("layer0.w", (16, 8), 0), tensor("layer0.b", (8,))]
        train = manifest(tens, tp=2)
        # inference holds whole tensors: a TP=1 topology with the same descriptors
        infer = manifest(tens, tp=1)
        full = weights(tens, seed=3)
        for f in train.fragments:  # trainer side: put_tensor each fragment it holds
            sl = tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))
            key = f"rl/{run}/gen{train.weight_generation}/{f.placement_fragment_id}"
            assert s.put_tensor(key, torch.from_numpy(np.ascontiguousarray(full[f.tensor_id][sl]))) == 0
        plan = plan_placement_transfer(train, infer)
        got = {f.placement_fragment_id: np.zeros(f.nbytes, np.uint8) for f in infer.fragments}
        fetched = {}
        for r in plan.operations:  # inference side: get_tensor what the plan names
            if r.source not in fetched:
                t = s.get_tensor(f"rl/{run}/gen{train.weight_generation}/{r.source}")
                assert t is not None
                fetched[r.source] = t.numpy().view(np.uint8).reshape(-1)
            for so, to, n in r.iter_segments():
                got[r.target][to:to + n] = fetched[r.source][so:so + n]
        for f in infer.fragments:
            assert np.array_equal(got[f.placement_fragment_id].view(np.float32).reshape(
                f.local_shape), full[f.tensor_id])
        # rollouts: sample tensors put by the rollout side, got by the trainer
        for rollout in range(3):
            sample = torch.arange(rollout * 10, rollout * 10 + 10, dtype=torch.int64)
            assert s.put_tensor(f"rl/{run}/rollout/{rollout}", sample) == 0
        for rollout in range(3):
            back = s.get_tensor(f"rl/{run}/rollout/{rollout}")
            assert back is not None and back.tolist() == list(range(rollout * 10, rollout * 10 + 10))
    finally:
        assert s.close() == 0

# ---- runtime bindings and stored manifests ------------------------------------------------

from mooncake.reshard.weight import (RuntimeBindingFragment, StoredFragment,  # noqa: E402
                                     WeightManifest, WeightRuntimeBindingManifest,
                                     plan_stored_transfer_to_target_placement,
                                     validate_runtime_binding, validate_runtime_bindings)


def bind(m, participant, base=0x10000):
    part = next(p for p in m.parts if p.participant_id == participant)
    frs, off = [], 0
    for f in part.fragments:
        strides = tuple(int(np.prod(f.local_shape[i + 1:])) * F32 for i in range(len(f.local_shape)))
        frs.append(RuntimeBindingFragment(f.placement_fragment_id, f"rt-{off}", base + off,
                                          f.nbytes, "w0", "127.0.0.1:1", "cpu", F32,
                                          f.local_shape, strides, base, 1 << 20, off))
        off += f.nbytes
    return WeightRuntimeBindingManifest(m.resource_id, m.placement_id, m.digest, "inst", 1,
                                        "lease", m.revision, participant, tuple(frs))


def test_runtime_bindings():
    m = manifest([tensor("w", (8, 6), 0)], tp=2)
    bs = [bind(m, p.participant_id) for p in m.parts]
    validate_runtime_bindings(m, bs)
    with pytest.raises(ValueError, match="not exactly one per participant"):
        validate_runtime_bindings(m, bs[:1])
    other = manifest([tensor("w", (8, 6), 0)], tp=2, gen=2)
    with pytest.raises(ValueError, match="binding identity: placement_id differs"):
        validate_runtime_binding(other, bs[0])
    with pytest.raises(ValueError, match="not exactly the participant's"):
        validate_runtime_binding(m, WeightRuntimeBindingManifest(
            m.resource_id, m.placement_id, m.digest, "i", 1, "l", "r", bs[0].participant_id, ()))
    good = dict(placement_fragment_id="x", fragment_id="y", address=0x1100, nbytes=96,
                worker_id="w", endpoint="e", device="cpu", itemsize=4, local_shape=(4, 6),
                strides_bytes=(24, 4), storage_address=0x1000, storage_nbytes=4096,
                storage_offset_bytes=0x100)
    RuntimeBindingFragment(**good)
    for change, rule in [(dict(address=0x1104), "address must equal"),
                         (dict(address=0, storage_address=0, storage_offset_bytes=0),
                          "address 0 is reserved"),
                         (dict(storage_nbytes=0x120), "inside the storage"),
                         (dict(strides_bytes=(4, 16)), "row-major"),
                         (dict(nbytes=95), "nbytes != prod"),
                         (dict(storage_address=(1 << 64) - 0x200, address=(1 << 64) - 0x100),
                          "does not fit in u64")]:
        with pytest.raises(ValueError, match=rule):
            RuntimeBindingFragment(**dict(good, **change))
    # a singleton dimension's stride is free
    RuntimeBindingFragment(**dict(good, local_shape=(1, 24), strides_bytes=(7, 4)))


def stored(tens, name="g1"):
    frs = []
    for t in tens:
        rows = t.global_shape[0]
        half = rows // 2
        for i, (o, n) in enumerate([(0, half), (half, rows - half)]):
            shp = (n,) + t.global_shape[1:]
            frs.append(StoredFragment(f"{t.tensor_id}#{i}", t.tensor_id,
                                      (o,) + (0,) * (len(shp) - 1), shp, f"{name}/payload/{t.tensor_id}",
                                      i * half * int(np.prod(t.global_shape[1:])) * F32,
                                      int(np.prod(shp)) * F32))
    return WeightManifest("ns", "model", "rev1", 1, name, f"{name}/manifest", tuple(tens),
                          tuple(frs), "2026-12-03T15:00:00Zé")


def test_stored_manifest_rules_and_digest():
    w = stored([tensor("w", (8, 6), 0)])
    text = w.to_json()
    assert "é" in text and text == json.dumps(json.loads(text), sort_keys=True,
                                                  separators=(",", ":"), ensure_ascii=False)
    assert w.manifest_digest == hashlib.sha256(text.encode()).hexdigest()
    assert WeightManifest.from_json(text) == w
    assert w.manifest_identity().content_sha256 == w.manifest_digest
    with pytest.raises(ValueError, match="duplicate field"):
        WeightManifest.from_json(text[:-1] + ',"namespace":"x"}')
    with pytest.raises(ValueError, match="non-finite"):
        WeightManifest.from_json(text.replace('"weight_generation":1', '"weight_generation":Infinity'))
    with pytest.raises(ValueError, match="manifest_key must be"):
        WeightManifest("ns", "m", "r", 1, "g1", "g2/manifest", w.tensors, w.fragments, "t")
    with pytest.raises(ValueError, match="must start with 'g2/payload/'"):
        WeightManifest("ns", "m", "r", 1, "g2", "g2/manifest", w.tensors, w.fragments, "t")
    with pytest.raises(ValueError, match="coverage: stored tensor w"):
        WeightManifest("ns", "m", "r", 1, "g1", "g1/manifest", w.tensors, w.fragments[:1], "t")
    clash = StoredFragment("w#1", "w", (4, 0), (4, 6), "g1/payload/w", 10, 96)
    with pytest.raises(ValueError, match="byte ranges overlap"):
        WeightManifest("ns", "m", "r", 1, "g1", "g1/manifest", w.tensors,
                       (w.fragments[0], clash), "t")


def test_plan_from_stored_snapshot():
    tens = [tensor("w", (8, 6), 1)]
    w = stored(tens)
    dst = manifest(tens, tp=3)
    plan = plan_stored_transfer_to_target_placement(w, dst)
    full = weights(tens, seed=9)
    objects = {}
    for f in w.fragments:  # the payload objects as a store would hold them
        sl = tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))
        buf = objects.setdefault(f.object_key, np.zeros(8 * 6 * F32, np.uint8))
        buf[f.object_offset:f.object_offset + f.nbytes] = \
            np.ascontiguousarray(full["w"][sl]).view(np.uint8).reshape(-1)
    by_id = {f.fragment_id: f for f in w.fragments}
    for f in dst.fragments:
        out = np.zeros(f.nbytes, np.uint8)
        for r in plan.operations:
            if r.target != f.placement_fragment_id:
                continue
            src = by_id[r.source]
            obj = objects[src.object_key]
            for so, to, n in r.iter_segments():
                out[to:to + n] = obj[src.object_offset + so:src.object_offset + so + n]
        sl = tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))
        assert np.array_equal(out.view(np.float32).reshape(f.local_shape), full["w"][sl])


def test_plan_revalidate_snapshot():
    """A plan is re-checked against a fresh catalog snapshot before it runs:
    the same manifest passes (and the plan pickles with its snapshot); a
    changed one (another revision's content, a rewritten fragment) is refused
    naming what changed; a plan between placements checks the placement id."""
    tens = [tensor("w", (8, 6), 1)]
    w = stored(tens)
    dst = manifest(tens, tp=3)
    plan = plan_stored_transfer_to_target_placement(w, dst)
    assert plan.revalidate_snapshot(WeightManifest.from_json(w.to_json())) is plan
    assert plan.revalidate_snapshot(w.manifest_identity()) is plan
    assert pickle.loads(pickle.dumps(plan)).revalidate_snapshot(w) == plan
    # the writer replaced the object: same key, other bytes layout
    moved = tuple(StoredFragment(f.fragment_id, f.tensor_id, f.global_offset, f.local_shape,
                                 f.object_key, f.object_offset + 4096, f.nbytes)
                  for f in w.fragments)
    fresh = WeightManifest(w.namespace, w.resource_id, w.revision, w.weight_generation,
                           w.group_id, w.manifest_key, w.tensors, moved, w.created_at)
    with pytest.raises(ValueError, match=r"stale plan: .*content_sha256"):
        plan.revalidate_snapshot(fresh)
    later = WeightManifest(w.namespace, w.resource_id, w.revision, w.weight_generation + 1,
                           w.group_id, w.manifest_key, w.tensors, w.fragments, w.created_at)
    with pytest.raises(ValueError, match=r"stale plan: .*weight_generation: planned 1, now 2"):
        plan.revalidate_snapshot(later)
    with pytest.raises(TypeError, match="WeightManifest or StoredManifestIdentity"):
        plan.revalidate_snapshot(dst)
    # between placements: the source placement's content id
    src = manifest(tens, tp=2)
    p2 = plan_placement_transfer(src, dst)
    assert p2.source_snapshot is None and p2.revalidate_snapshot(src) is p2
    with pytest.raises(ValueError, match="stale plan: source placement changed"):
        p2.revalidate_snapshot(manifest(tens, tp=1))  # re-laid out since


def test_local_target_and_pipeline_routes():
    from mooncake.reshard.weight import plan_placement_transfer_to_local_target
    tens = [tensor("w", (8, 6), 0), tensor("b", (6,))]
    src = manifest(tens, tp=2)
    dst = manifest([tensor("w", (8, 6), 1)], tp=3)  # a subset of the tensors
    with pytest.raises(ValueError, match="target_participant_id is required"):
        plan_placement_transfer_to_local_target(src, dst)
    me = dst.parts[1].participant_id
    plan = plan_placement_transfer_to_local_target(src, dst, me)
    assert {e.participant_id for e in plan.target_executors} == {me}
    assert {r.target for r in plan.operations} == {f.placement_fragment_id
                                                   for f in dst.parts[1].fragments}
    full = weights(tens, seed=4)
    sbytes = {}
    for f in src.fragments:
        sl = tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))
        sbytes[f.placement_fragment_id] = np.ascontiguousarray(full[f.tensor_id][sl]).view(
            np.uint8).reshape(-1)
    for f in dst.parts[1].fragments:
        out = np.zeros(f.nbytes, np.uint8)
        for r in plan.operations:
            if r.target == f.placement_fragment_id:
                for so, to, n in r.iter_segments():
                    out[to:to + n] = sbytes[r.source][so:so + n]
        sl = tuple(slice(o, o + n) for o, n in zip(f.global_offset, f.local_shape))
        assert np.array_equal(out.view(np.float32).reshape(f.local_shape), full["w"][sl])
    with pytest.raises(ValueError, match="tensor sets differ"):
        plan_placement_transfer(src, dst)  # the full planner wants equal sets
    # every operation sits in exactly one pipeline route (one stage each side here)
    assert [g.operation_indices for g in plan.pipeline_routes] == [tuple(range(len(plan.operations)))]
    assert (plan.pipeline_routes[0].source_pp, plan.pipeline_routes[0].target_pp) == (0, 0)


def test_plan_nd_ep_tp_to_pp_tp():
    """The N-D planner on 3-D tensors across every kind of axis: a trainer
    with EP=2 x TP=2 (experts split on dim 0, TP on dim 2: each fragment a
    2x6x4 block, a Cartesian product of the two splits) to an inference
    layout with PP=2 x TP=3 (each stage owns one layer, TP on dim 1).  Every
    target byte comes from the right source byte, the regions are row-major
    runs of the merged inner dims, and the pipeline routes split the
    operations by the target's stage."""
    def participants(**sizes):
        kinds = ("dp", "pp", "ep", "tp")
        ps = [TopologyParticipant("p" + "".join(map(str, c)),
                                  ParallelRank(**dict(zip(kinds, c))))
              for c in np.ndindex(*(sizes.get(k, 1) for k in kinds))]
        return ParallelTopology(sizes.get("tp", 1), sizes.get("pp", 1), sizes.get("ep", 1),
                                sizes.get("dp", 1), tuple(ps))
    shape = (4, 6, 8)

    def desc(tid, layer, axes, dims):
        return TensorDescriptor(tid, shape, "float32", F32, dims, "row-major", axes,
                                layer_id=layer)
    layers = ("l0.experts", "l1.experts")
    src_t = [desc(t, i, (SplitAxis("ep", 0), SplitAxis("tp", 2)), (0, 2))
             for i, t in enumerate(layers)]
    dst_t = [desc(t, i, (OwnershipAxis("pp"), SplitAxis("tp", 1)), (1,))
             for i, t in enumerate(layers)]
    src_frags = [PlacementFragment(t.tensor_id, (2 * e, 0, 4 * r), (2, 6, 4), 2 * 6 * 4 * F32,
                                   ParallelRank(ep=e, tp=r))
                 for t in src_t for e in range(2) for r in range(2)]
    dst_frags = [PlacementFragment(t.tensor_id, (0, 2 * r, 0), (4, 2, 8), 4 * 2 * 8 * F32,
                                   ParallelRank(pp=i, tp=r), pipeline_stage_id=i)
                 for i, t in enumerate(dst_t) for r in range(3)]
    src = WeightPlacementManifest.from_fragments("moe", "rev1", 1, "set", participants(ep=2, tp=2),
                                                 src_t, src_frags)
    dst = WeightPlacementManifest.from_fragments("moe", "rev1", 1, "set", participants(pp=2, tp=3),
                                                 dst_t, dst_frags)
    assert weight_placement_from_json(weight_placement_to_json(dst)).digest == dst.digest
    plan = plan_placement_transfer(src, dst)
    run_plan(plan, src, dst, weights(src_t, seed=5))
    # every target block (4x2x8) meets the 4 source blocks (2x6x4) in 2x2x4
    # pieces: 2 rows of 2 runs of 16 bytes each
    assert len(plan.operations) == 2 * 3 * 4
    assert all(r.inner_bytes == 4 * F32 and r.segment_count == 4 for r in plan.operations)
    assert plan.total_bytes == 2 * 4 * 6 * 8 * F32
    routes = {(g.source_pp, g.target_pp, g.target_stage): g.operation_indices
              for g in plan.pipeline_routes}
    assert set(routes) == {(0, 0, 0), (0, 1, 1)}
    assert sorted(i for v in routes.values() for i in v) == list(range(len(plan.operations)))
    for (_, pp, _), idx in routes.items():
        assert {plan.operations[i].tensor_id for i in idx} == {layers[pp]}
    # a stage missing one TP piece of its layer: the coverage rule names it
    with pytest.raises(ValueError, match="coverage: tensor l0.experts replica .* not one "
                                         "non-overlapping cover"):
        WeightPlacementManifest.from_fragments("moe", "rev1", 1, "set", participants(pp=2, tp=3),
                                               dst_t, dst_frags[:2] + dst_frags[3:])
