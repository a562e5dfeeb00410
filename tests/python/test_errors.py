# SPDX-License-Identifier: MIT
"""Bad input is refused with a message that says what was expected."""

import errno

import numpy as np
import pytest

import nelssa
from conftest import GROUP, DIM, Req, bf16_bits, open_session, random_items


@pytest.fixture
def qkv(rng):
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k = bf16_bits(rng.standard_normal((100, 64)))
    v = bf16_bits(rng.standard_normal((100, 64)))
    return q, k, v


def test_error_is_oserror():
    assert issubclass(nelssa.Error, OSError)
    e = nelssa.Error(errno.ECONNRESET, "words")
    assert e.errno == errno.ECONNRESET and e.strerror == "words"


def test_wrong_dtypes(qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match="q must be float32, not float64"):
        nelssa.attn_dense(q.astype(np.float64), k, v)
    with pytest.raises(TypeError, match="k must be bf16 bits as uint16.*or float16, not float32"):
        nelssa.attn_dense(q, k.astype(np.float32), v)
    with pytest.raises(TypeError, match="same type"):
        nelssa.attn_dense(q, k, v.view(np.float16))
    with pytest.raises(TypeError, match="buffer protocol"):
        nelssa.attn_dense(q, "not an array", v)
    with pytest.raises(TypeError, match="integer array"):
        nelssa.unselected(np.zeros(3, np.float32), [1, 2, 3])
    with pytest.raises(TypeError, match="out must be float32"):
        nelssa.attn_dense(q, k, v, out=np.zeros((4, 64), np.float64))
    with pytest.raises(TypeError):
        nelssa.kmeans_build(np.zeros((10, 8), np.int32))


def test_wrong_shapes(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"k \(tokens, head_dim\) must have shape"):
        nelssa.attn_dense(q, k[:, :32].copy(), v)
    with pytest.raises(ValueError, match="v .* must have shape"):
        nelssa.attn_dense(q, k, v[:50])
    with pytest.raises(ValueError, match="q .* must have shape"):
        nelssa.attn_dense(q.reshape(-1), k, v)
    with pytest.raises(ValueError, match="out must have shape"):
        nelssa.attn_dense(q, k, v, out=np.zeros((4, 32), np.float32))
    with pytest.raises(ValueError, match="n_tokens"):
        nelssa.window_attn(q, k, v, n_tokens=101)
    with pytest.raises(ValueError, match="sizes"):
        nelssa.centroid_scores(q, np.zeros((5, 64), np.float32), np.ones(4, np.uint32))
    with pytest.raises(ValueError, match="differ in length"):
        nelssa.final_merge(q, q[:, 0].copy(), [q], [])
    with pytest.raises(ValueError, match="beyond"):
        nelssa.estimate_attn(q, np.zeros((5, 64), np.float32), np.zeros((5, 64), np.float32),
                             np.ones(5, np.uint32), [5])
    # The library's own limits come back as Error(EINVAL) with its words.
    with pytest.raises(nelssa.Error) as e:
        nelssa.attn_dense(np.zeros((65, 64), np.float32), k, v)
    assert e.value.errno == errno.EINVAL and "group" in e.value.strerror


def test_layouts(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="C-contiguous"):
        nelssa.attn_dense(np.asfortranarray(q), k, v)
    with pytest.raises(ValueError, match="C-contiguous"):
        nelssa.attn_dense(q, k[::2], v[::2])
    ro = q.copy()
    ro.flags.writeable = False
    nelssa.attn_dense(ro, k, v)  # read-only inputs are fine
    with pytest.raises(ValueError, match="writable"):
        nelssa.attn_dense(q, k, v, out=ro)
    # Misaligned floats are refused (they would be undefined behaviour in C).
    raw = np.zeros(4 * 64 * 4 + 1, np.uint8)
    mis = raw[1:].view(np.float32).reshape(4, 64)
    with pytest.raises(ValueError, match="aligned"):
        nelssa.attn_dense(mis, k, v)


def test_bad_ids_and_ints(qkv):
    q, k, v = qkv
    sizes = np.ones(4, np.uint32)
    with pytest.raises(ValueError, match="out of range"):
        nelssa.unselected(np.array([-1], np.int64), sizes)
    with pytest.raises(ValueError, match="not an integer"):
        nelssa.unselected([1.5], sizes)
    with pytest.raises(ValueError, match="not an integer"):
        nelssa.unselected([2**40], sizes)
    with pytest.raises(OverflowError):
        nelssa.topk(np.zeros(3, np.float32), -1)
    with pytest.raises(TypeError):
        nelssa.topk(np.zeros(3, np.float32), 1.0)


def test_closed_client_and_index(daemon, rng):
    c = daemon.client()
    s = open_session(c)
    r = Req(rng, c, s, 1, 100)
    items, q = random_items(rng, [r], 0)
    p = c.step_send(s, 0, items, q)
    c.close()
    c.close()
    assert c.closed
    for call in (lambda: c.stats(), lambda: c.step(s, 0, items, q), lambda: c.devices,
                 lambda: c.open_session(2, 8, 2, 64), lambda: c.set_timeout(1)):
        with pytest.raises(ValueError, match="closed"):
            call()
    with pytest.raises(ValueError, match="closed"):
        p.poll()
    with pytest.raises(ValueError, match="closed"):
        with c:
            pass
    ix = r.ix[0][0]
    ix.free()
    with pytest.raises(ValueError, match="freed"):
        ix.perm


def test_client_argument_checks(daemon, rng):
    with daemon.client() as c:
        with pytest.raises(ValueError, match="multiple"):
            c.open_session(2, 7, 2, 64)
        with pytest.raises(OverflowError):
            c.open_session(2, 8, 2, 70000)
        s = open_session(c)
        r = Req(rng, c, s, 1, 100)
        items, q = random_items(rng, [r], 0)
        with pytest.raises(ValueError, match="no session"):
            c.step(s + 1000, 0, items, q)
        with pytest.raises(ValueError, match="layer"):
            c.step(s, 9, items, q)
        with pytest.raises(ValueError, match="at least one item"):
            c.step(s, 0, [], q[:0])
        with pytest.raises(ValueError, match=r"q \(items, group, head_dim\)"):
            c.step(s, 0, items, q[:, :2].copy())
        with pytest.raises(TypeError, match="tuple"):
            c.step(s, 0, [[1, 0, [0]]] * len(items), q)
        with pytest.raises(ValueError, match="KV head"):
            c.step(s, 0, [(1, 5, [0])], q[:1])
        with pytest.raises(ValueError, match="max_sel"):
            c.step(s, 0, [(1, 0, np.zeros(5000, np.uint32))], q[:1])
        with pytest.raises(TypeError, match="ClusterIndex"):
            c.offload(s, 1, 0, 0, "index", r.k[0, 0, :100], r.v[0, 0, :100])
        with pytest.raises(ValueError, match="k must have shape"):
            c.offload(s, 1, 0, 0, r.ix[0][0], r.k[0, 0, :50], r.v[0, 0, :50])
        with pytest.raises(ValueError, match="from_cluster"):
            c.append(s, 1, 0, 0, r.ix[0][0], r.k[0, 0, :100], r.v[0, 0, :100], 10**6)
        # Nothing of that reached the daemon: the connection serves.
        o, lse = c.step(s, 0, items, q)
        assert o.shape == (len(items), GROUP, DIM)
