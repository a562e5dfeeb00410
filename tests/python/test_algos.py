# SPDX-License-Identifier: MIT
"""The GPU-node algorithms against float64 numpy references."""

import os
import subprocess
import sys
from statistics import NormalDist

import numpy as np
import pytest

import nelssa
from conftest import assert_attn, attn_ref, bf16_bits, bf16_float, kv_float, merge_ref


def keys(rng, n, d=64, fp16=False):
    x = rng.standard_normal((n, d))
    return x.astype(np.float16) if fp16 else bf16_bits(x)


def test_version():
    v = nelssa.version()
    assert isinstance(v, str) and len(v.split(".")) == 3
    assert nelssa.__version__ == v


@pytest.mark.parametrize("fp16", [False, True])
def test_kmeans_index(rng, fp16):
    k = keys(rng, 900, fp16=fp16)
    ix = nelssa.kmeans_build(k, cluster_tokens=16)
    assert ix.head_dim == 64 and ix.n_tokens == 900
    perm, table, sizes = ix.perm, ix.table, ix.sizes
    assert perm.dtype == np.uint32 and sorted(perm) == list(range(900))
    assert table.shape == (ix.n_clusters, 2)
    np.testing.assert_array_equal(table[:, 1], sizes)
    assert (sizes > 0).all() and sizes.sum() == 900
    np.testing.assert_array_equal(table[:, 0], np.concatenate([[0], np.cumsum(sizes)[:-1]]))
    kf = kv_float(k)
    # Each centroid is the mean of its members' raw keys.
    for c in range(ix.n_clusters):
        members = perm[table[c, 0]:table[c, 0] + table[c, 1]]
        np.testing.assert_allclose(ix.centroids[c], kf[members].mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(ix.key_mean, kf.mean(axis=0), atol=1e-5)
    # Deterministic.
    again = nelssa.ClusterIndex(k, cluster_tokens=16)
    np.testing.assert_array_equal(again.perm, perm)
    # reorder(): rows in cluster-contiguous order.
    np.testing.assert_array_equal(ix.reorder(k), k[perm])
    # value_sums(): per-cluster sums of V.
    v = keys(rng, 900, fp16=fp16)
    vs = ix.value_sums(v)
    vf = kv_float(v)
    for c in (0, ix.n_clusters - 1):
        members = perm[table[c, 0]:table[c, 0] + table[c, 1]]
        np.testing.assert_allclose(vs[c], vf[members].sum(axis=0), rtol=1e-5, atol=1e-4)
    # far_keys(): a member of the cluster, the farthest from the centroid.
    far = ix.far_keys(k)
    members = perm[table[0, 0]:table[0, 0] + table[0, 1]]
    dist = ((kf[members] - ix.centroids[0].astype(np.float64)) ** 2).sum(axis=1)
    np.testing.assert_allclose(far[0], kf[members][np.argmax(dist)], atol=1e-6)


def test_kmeans_append(rng):
    k = keys(rng, 700)
    ix = nelssa.ClusterIndex(k[:500])
    before = ix.n_clusters
    table0 = ix.table
    assert ix.append(k[500:]) == before
    assert ix.n_tokens == 700 and ix.n_clusters > before
    np.testing.assert_array_equal(ix.table[:before], table0)
    assert sorted(ix.perm[ix.table[before, 0]:]) == list(range(500, 700))
    ix.free()
    with pytest.raises(ValueError, match="freed"):
        ix.n_clusters
    assert "freed" in repr(ix)


def centroid_scores_ref(q, cen, sizes, scale):
    s = scale * (q.astype(np.float64) @ cen.astype(np.float64).T)
    s[:, sizes == 0] = -np.inf
    s -= s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=1, keepdims=True)).sum(axis=0)


def test_centroid_scores_topk(rng):
    q = rng.standard_normal((4, 64)).astype(np.float32)
    cen = rng.standard_normal((50, 64)).astype(np.float32)
    sizes = rng.integers(1, 30, 50).astype(np.uint32)
    sizes[7] = 0
    sc = nelssa.centroid_scores(q, cen, sizes)
    assert sc.dtype == np.float32 and sc.shape == (50,)
    assert sc[7] == -np.inf
    fin = np.isfinite(sc)
    np.testing.assert_allclose(sc[fin], centroid_scores_ref(q, cen, sizes, 0.125)[fin],
                               rtol=1e-4, atol=1e-6)
    sc2 = nelssa.centroid_scores(q, cen, list(sizes), scale=0.3)
    np.testing.assert_allclose(sc2[fin], centroid_scores_ref(q, cen, sizes, 0.3)[fin],
                               rtol=1e-4, atol=1e-6)
    ids = nelssa.topk(sc, 10)
    assert ids.dtype == np.uint32
    np.testing.assert_array_equal(ids, np.argsort(-sc, kind="stable")[:10])
    # Ties go to the lower id; -inf never selected.
    tied = np.array([1, 3, 3, -np.inf, 3], dtype=np.float32)
    np.testing.assert_array_equal(nelssa.topk(tied, 5), [1, 2, 4, 0])
    with pytest.raises(nelssa.Error) as e:
        nelssa.topk(np.array([1, np.nan], dtype=np.float32), 1)
    assert e.value.errno == 22


def test_select_unselected(rng):
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k = keys(rng, 800)
    ix = nelssa.ClusterIndex(k)
    cen, sizes = ix.centroids, ix.sizes
    ids, tokens = nelssa.select(q, cen, sizes, 200)
    assert len(set(ids.tolist())) == len(ids)
    assert tokens == int(sizes[ids].sum()) and tokens <= 200
    # With no far probes: the centroid ranking, filling the budget in rank order.
    rank = nelssa.topk(nelssa.centroid_scores(q, cen, sizes), ix.n_clusters)
    pos = [list(rank).index(i) for i in ids]
    assert pos == sorted(pos)
    ids2, tokens2 = nelssa.select(q, cen, sizes, 200, far=ix.far_keys(k))
    assert tokens2 == int(sizes[ids2].sum()) and tokens2 <= 200
    rest = nelssa.unselected(ids, sizes)
    assert sorted(list(ids) + list(rest)) == list(range(ix.n_clusters))
    assert list(rest) == sorted(rest)


@pytest.mark.parametrize("fp16", [False, True])
def test_window_and_dense(rng, fp16):
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k, v = keys(rng, 300, fp16=fp16), keys(rng, 300, fp16=fp16)
    o, lse = nelssa.attn_dense(q, k, v)
    assert_attn(o, lse, attn_ref(q, k, v))
    o, lse = nelssa.window_attn(q, k, v, sink=4, recent=64)
    tok = np.r_[0:4, 236:300]
    assert_attn(o, lse, attn_ref(q, k[tok], v[tok]))
    o, lse = nelssa.window_attn(q, k, v, n_tokens=100, sink=2, recent=10, scale=0.2)
    tok = np.r_[0:2, 90:100]
    assert_attn(o, lse, attn_ref(q, k[tok], v[tok], scale=0.2))
    # Short context: the windows overlap, each token once.
    o, lse = nelssa.window_attn(q, k, v, n_tokens=20)
    assert_attn(o, lse, attn_ref(q, k[:20], v[:20]))
    o, lse = nelssa.window_attn(q, k, v, n_tokens=0)
    assert (np.asarray(o) == 0).all() and (np.asarray(lse) == -np.inf).all()


def bf16_round(x):
    """float32 values rounded to bf16 (RNE), as float64."""
    return bf16_float(bf16_bits(x))


@pytest.mark.parametrize("fp16", [False, True])
def test_bf16_dots(rng, fp16):
    """ATTN_BF16_DOTS: float64 over bf16(q), the weights' rounding within 2^-8 max|v| (twice)."""
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k, v = keys(rng, 300, fp16=fp16), keys(rng, 300, fp16=fp16)
    ro, rl = attn_ref(bf16_round(q), k, v)
    tol_o = 2e-4 + 2 * 2.0 ** -8 * np.abs(kv_float(v)).max()
    o, lse = nelssa.attn_dense(q, k, v, attn_flags=nelssa.ATTN_BF16_DOTS)
    np.testing.assert_allclose(np.asarray(o, np.float64), ro, rtol=0, atol=tol_o)
    np.testing.assert_allclose(np.asarray(lse, np.float64), rl, rtol=2e-4, atol=2e-4)
    o, lse = nelssa.window_attn(q, k, v, sink=4, recent=64, attn_flags=nelssa.ATTN_BF16_DOTS)
    tok = np.r_[0:4, 236:300]
    ro, rl = attn_ref(bf16_round(q), k[tok], v[tok])
    np.testing.assert_allclose(np.asarray(o, np.float64), ro, rtol=0, atol=tol_o)
    np.testing.assert_allclose(np.asarray(lse, np.float64), rl, rtol=2e-4, atol=2e-4)
    with pytest.raises(nelssa.Error):
        nelssa.attn_dense(q, k, v, attn_flags=2)


def test_bf16_dots_round_the_weights():
    """Two tokens: a zero V row under logit 0, ones under c: o = bf16(e^c) / (1 + e^c)."""
    q = np.zeros((1, 64), np.float32)
    q[0, 0] = -0.3571
    k = np.zeros((2, 64), np.float32)
    k[1, 0] = 1.0
    v = np.zeros((2, 64), np.float32)
    v[1] = 1.0
    c = bf16_round(q[0, :1])[0]
    w = np.float32(np.exp(np.float32(c)))
    want = bf16_round(np.array([w], np.float32))[0] / (1.0 + w)
    assert abs(want - w / (1.0 + w)) > 2e-4 * want
    o, lse = nelssa.attn_dense(q, bf16_bits(k), bf16_bits(v), scale=1.0,
                               attn_flags=nelssa.ATTN_BF16_DOTS)
    np.testing.assert_allclose(np.asarray(o)[0], want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(lse)[0], np.log1p(w), rtol=1e-6)


def test_estimate(rng):
    q = rng.standard_normal((2, 64)).astype(np.float32)
    cen = rng.standard_normal((20, 64)).astype(np.float32)
    vsum = rng.standard_normal((20, 64)).astype(np.float32)
    sizes = rng.integers(1, 20, 20).astype(np.uint32)
    ids = np.array([1, 4, 9, 13], dtype=np.uint32)
    o, lse = nelssa.estimate_attn(q, cen, vsum, sizes, ids)
    s = 0.125 * (q.astype(np.float64) @ cen[ids].astype(np.float64).T)
    w = np.exp(s)
    ro = (w @ vsum[ids].astype(np.float64)) / (w * sizes[ids]).sum(axis=1, keepdims=True)
    rl = np.log((w * sizes[ids]).sum(axis=1))
    assert_attn(o, lse, (ro, rl))
    o, lse = nelssa.estimate_attn(q, cen, vsum, sizes, [])
    assert (np.asarray(lse) == -np.inf).all()


@pytest.mark.parametrize("fp16", [False, True])
def test_key_spread_and_spread_estimate(rng, fp16):
    """key_spread() and estimate_attn(m2=) against float64, and what they are for."""
    k, v = keys(rng, 600, fp16=fp16), keys(rng, 600, fp16=fp16)
    ix = nelssa.ClusterIndex(k, cluster_tokens=16)
    m2, cen, sizes, vsum = ix.key_spread(k), ix.centroids, ix.sizes, ix.value_sums(v)
    assert m2.shape == (ix.n_clusters, 64) and m2.dtype == np.float32
    kf, perm, table = kv_float(k), ix.perm, ix.table
    for c in range(ix.n_clusters):
        members = kf[perm[table[c, 0]:table[c, 0] + table[c, 1]]]
        want = ((members - cen[c].astype(np.float64)) ** 2).mean(axis=0)
        np.testing.assert_allclose(m2[c], want, rtol=1e-5, atol=1e-6)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    ids = np.arange(0, ix.n_clusters, 3, dtype=np.uint32)
    o, lse = nelssa.estimate_attn(q, cen, vsum, sizes, ids, m2=m2)
    qd, scale = q.astype(np.float64), 0.125
    # The gain: half the logit variance, bounded past sigma = a_n, the
    # expected largest of n normal draws (Blom's position; sparse.h).
    hv = scale ** 2 / 2 * (qd ** 2) @ m2[ids].T
    n = sizes[ids].astype(np.float64)
    an = np.array([NormalDist().inv_cdf((x - 0.375) / (x + 0.25)) for x in n])
    gain = np.where(hv <= an ** 2 / 2, hv, an * np.sqrt(2 * hv) - an ** 2 / 2)
    s = scale * qd @ cen[ids].astype(np.float64).T + gain
    w = np.exp(s)
    ro = (w @ vsum[ids].astype(np.float64)) / (w * sizes[ids]).sum(axis=1, keepdims=True)
    assert_attn(o, lse, (ro, np.log((w * sizes[ids]).sum(axis=1))))
    # No spread is the mean estimate; m2=None too.
    om, lm = nelssa.estimate_attn(q, cen, vsum, sizes, ids)
    o0, l0 = nelssa.estimate_attn(q, cen, vsum, sizes, ids, m2=np.zeros_like(m2))
    np.testing.assert_array_equal(o0, om)
    np.testing.assert_array_equal(l0, lm)
    # The members' true log-mass: the mean key underweighs each cluster
    # (Jensen), the second-order mean comes closer on every row.
    members = np.concatenate([perm[table[c, 0]:table[c, 0] + table[c, 1]] for c in ids])
    true = np.log(np.exp(scale * qd @ kf[members].T).sum(axis=1))
    err_spread = np.abs(np.asarray(lse, np.float64) - true)
    err_mean = np.abs(np.asarray(lm, np.float64) - true)
    assert (np.asarray(lm) < true).all()
    assert (err_spread < err_mean).all(), (err_spread, err_mean)
    with pytest.raises(ValueError, match="m2"):
        nelssa.estimate_attn(q, cen, vsum, sizes, ids, m2=m2[1:])


def test_per_cluster_arrays_from_a_cluster_on(rng):
    """first=: the full result's rows from there, bit for bit; after
    append() the clusters before it keep theirs."""
    k, v = keys(rng, 700), keys(rng, 700)
    ix = nelssa.ClusterIndex(k[:500])
    rows = {"far_keys": k, "value_sums": v, "key_spread": k}
    before = {m: getattr(ix, m)(r[:500]) for m, r in rows.items()}
    n0 = ix.append(k[500:])
    assert 0 < n0 < ix.n_clusters
    for m, r in rows.items():
        full = getattr(ix, m)(r)
        assert full.shape == (ix.n_clusters, 64)
        np.testing.assert_array_equal(full[:n0], before[m])
        for first in (0, 1, n0, ix.n_clusters - 1, ix.n_clusters):
            part = getattr(ix, m)(r, first=first)
            assert part.shape == (ix.n_clusters - first, 64)
            np.testing.assert_array_equal(part, full[first:])
        with pytest.raises(ValueError, match="beyond the"):
            getattr(ix, m)(r, first=ix.n_clusters + 1)
        with pytest.raises((ValueError, OverflowError, TypeError)):
            getattr(ix, m)(r, first=-1)
        with pytest.raises(TypeError):
            getattr(ix, m)(r, 3)  # first is keyword-only


def test_merges_rebuild_dense(rng):
    """Window + cluster states merged equal attention over their union."""
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k, v = keys(rng, 500), keys(rng, 500)
    ix = nelssa.ClusterIndex(k[4:436])  # the tokens past sink, before the recent window
    win_o, win_lse = nelssa.window_attn(q, k, v, sink=4, recent=64)
    pnm = []
    perm, table = ix.perm + 4, ix.table
    for part in np.array_split(np.arange(ix.n_clusters), 3):
        tok = np.concatenate([perm[table[c, 0]:table[c, 0] + table[c, 1]] for c in part])
        pnm.append(nelssa.attn_dense(q, np.ascontiguousarray(k[tok]),
                                     np.ascontiguousarray(v[tok])))
    o, lse = nelssa.final_merge(win_o, win_lse, [p[0] for p in pnm], [p[1] for p in pnm])
    assert_attn(o, lse, attn_ref(q, k, v))
    ref = merge_ref([(np.float64(win_o), np.float64(win_lse))] +
                    [(np.float64(a), np.float64(b)) for a, b in pnm])
    assert_attn(o, lse, ref)
    # In place into the window state.
    wo, wl = win_o.copy(), win_lse.copy()
    ro, rl = nelssa.final_merge(wo, wl, [p[0] for p in pnm], [p[1] for p in pnm],
                                out=wo, lse_out=wl)
    assert ro is wo and rl is wl
    np.testing.assert_array_equal(wo, o)
    # No PNM state leaves the window's.
    o0, l0 = nelssa.final_merge(win_o, win_lse, [], [])
    np.testing.assert_array_equal(o0, win_o)
    # lse_merge, pairwise and in place.
    a_o, a_l = pnm[0][0].copy(), pnm[0][1].copy()
    assert nelssa.lse_merge(a_o, a_l, pnm[1][0], pnm[1][1]) is None
    assert_attn(a_o, a_l, merge_ref([(np.float64(pnm[0][0]), np.float64(pnm[0][1])),
                                     (np.float64(pnm[1][0]), np.float64(pnm[1][1]))]))
    # Two empty states: (0, -inf), never NaN.
    e_o, e_l = np.zeros((4, 64), np.float32), np.full(4, -np.inf, np.float32)
    nelssa.lse_merge(e_o, e_l, np.zeros((4, 64), np.float32), np.full(4, -np.inf, np.float32))
    assert not np.isnan(e_o).any() and (e_l == -np.inf).all()


def test_torch_tensors(rng):
    torch = pytest.importorskip("torch")
    kf = rng.standard_normal((200, 64)).astype(np.float32)
    vf = rng.standard_normal((200, 64)).astype(np.float32)
    q = torch.from_numpy(rng.standard_normal((4, 64)).astype(np.float32))
    kt = torch.from_numpy(kf).to(torch.bfloat16)
    vt = torch.from_numpy(vf).to(torch.bfloat16)
    o, lse = nelssa.attn_dense(q, kt, vt)
    kb, vb = kt.view(torch.int16).numpy(), vt.view(torch.int16).numpy()
    assert_attn(o, lse, attn_ref(q.numpy(), kb, vb))
    # Same bits as uint16 arrays: the same result, bit for bit.
    o2, _ = nelssa.attn_dense(q.numpy(), kb.view(np.uint16), vb.view(np.uint16))
    np.testing.assert_array_equal(o, o2)
    # float16 tensors, a tensor that requires grad, and out= tensors.
    kh, vh = torch.from_numpy(kf).half(), torch.from_numpy(vf).half()
    qg = q.clone().requires_grad_(True)
    out = torch.zeros(4, 64)
    lse_out = torch.zeros(4)
    ro, rl = nelssa.window_attn(qg, kh, vh, out=out, lse_out=lse_out)
    assert ro is out and rl is lse_out
    assert_attn(out.numpy(), lse_out.numpy(),
                attn_ref(q.numpy(), np.r_[kf[:4], kf[136:]].astype(np.float16),
                         np.r_[vf[:4], vf[136:]].astype(np.float16)))
    ix = nelssa.ClusterIndex(kt)
    np.testing.assert_array_equal(ix.perm, nelssa.ClusterIndex(kb.view(np.uint16)).perm)
    sc = nelssa.centroid_scores(q, torch.from_numpy(ix.centroids),
                                torch.from_numpy(ix.sizes.astype(np.int64)))
    assert abs(float(np.sum(sc)) - 4.0) < 1e-4
    # A non-contiguous tensor is refused, not copied.
    with pytest.raises(ValueError, match="C-contiguous"):
        nelssa.attn_dense(q.t(), kt, vt)


def test_memoryview_outputs_without_numpy():
    """numpy is optional: outputs are then memoryviews of the right format."""
    code = r"""
import sys
sys.modules['numpy'] = None
import array, nelssa
q = array.array('f', [0.5] * 8)
k = array.array('H', [0x3f80] * 8)   # bf16 1.0
mq = memoryview(q).cast('B').cast('f', [2, 4])
mk = memoryview(k).cast('B').cast('H', [2, 4])
o, lse = nelssa.attn_dense(mq, mk, mk)
assert isinstance(o, memoryview) and o.format == 'f' and o.shape == (2, 4), (o, o.shape)
assert abs(o.tolist()[0][0] - 1.0) < 1e-6, o.tolist()
print('ok')
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
