# SPDX-License-Identifier: MIT
"""Reference counts and memory: nothing kept over 10,000 calls."""

import sys
import tracemalloc

import numpy as np
import pytest

import nelssa
from conftest import SANITIZED, Req, bf16_bits, open_session, random_items

N = 10000


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def measure(fn, n=N):
    """Python-heap growth (tracemalloc) and RSS growth over n calls of fn."""
    for _ in range(200):  # warm caches and free lists
        fn()
    tracemalloc.start()
    base_py = tracemalloc.get_traced_memory()[0]
    base_rss = rss_kib()
    for _ in range(n):
        fn()
    grown_py = tracemalloc.get_traced_memory()[0] - base_py
    tracemalloc.stop()
    return grown_py, rss_kib() - base_rss


def check(fn, n=N):
    py, rss = measure(fn, n)
    assert py < 64 * 1024, "Python heap grew %d bytes over %d calls" % (py, n)
    # ASan's quarantine keeps freed memory: RSS says nothing there.
    if not SANITIZED:
        assert rss < 8 * 1024, "RSS grew %d KiB over %d calls" % (rss, n)


def test_algorithms_keep_nothing(rng):
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k = bf16_bits(rng.standard_normal((300, 64)))
    v = bf16_bits(rng.standard_normal((300, 64)))
    ix = nelssa.ClusterIndex(k)
    cen, sizes = ix.centroids, ix.sizes
    ids = [1, 2, 3]
    o = np.zeros((4, 64), np.float32)
    lse = np.zeros(4, np.float32)
    inputs = (q, k, v, cen, sizes, o, lse, ids)
    before = [sys.getrefcount(x) for x in inputs]

    def calls():
        wo, wl = nelssa.window_attn(q, k, v, out=o, lse_out=lse)
        sc = nelssa.centroid_scores(q, cen, sizes)
        sel = nelssa.topk(sc, 8)
        nelssa.final_merge(wo, wl, [wo], [wl])
        nelssa.estimate_attn(q, cen, cen, sizes, ids)
        nelssa.unselected(sel, sizes)
        ix.perm

    check(calls)
    assert [sys.getrefcount(x) for x in inputs] == before


def test_error_paths_keep_nothing(rng):
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k = bf16_bits(rng.standard_normal((50, 64)))
    bad_q = q.astype(np.float64)
    nc = np.asfortranarray(q)
    inputs = (q, k, bad_q, nc)
    before = [sys.getrefcount(x) for x in inputs]

    def calls():
        for args in ((bad_q, k, k), (nc, k, k), (q, k, k[:10]), (q, k, "x")):
            try:
                nelssa.attn_dense(*args)
            except (TypeError, ValueError):
                pass
        try:
            nelssa.unselected([1, -1], [1, 1])
        except ValueError:
            pass

    check(calls)
    assert [sys.getrefcount(x) for x in inputs] == before


def test_torch_inputs_keep_nothing(rng):
    torch = pytest.importorskip("torch")
    q = torch.from_numpy(rng.standard_normal((4, 64)).astype(np.float32))
    k = torch.from_numpy(rng.standard_normal((100, 64)).astype(np.float32)).to(torch.bfloat16)
    before = [sys.getrefcount(x) for x in (q, k)]
    py, _ = measure(lambda: nelssa.attn_dense(q, k, k), n=N)
    assert py < 64 * 1024
    assert [sys.getrefcount(x) for x in (q, k)] == before


def test_steps_keep_nothing(daemon, rng):
    with daemon.client() as c:
        s = open_session(c)
        r = Req(rng, c, s, 1, 200)
        items, q = random_items(rng, [r], 0)
        o = np.zeros((len(items), 4, 64), np.float32)
        lse = np.zeros((len(items), 4), np.float32)
        sels = [it[2] for it in items]
        before = [sys.getrefcount(x) for x in [q, o, lse] + sels]

        def calls():
            c.step(s, 0, items, q, out=o, lse_out=lse)

        def split():
            p = c.step_send(s, 0, items, q)
            while not p.poll(timeout_ms=1000):
                pass
            p.result()

        check(calls)
        py, _ = measure(split, n=2000)
        assert py < 64 * 1024
        try:
            c.step(s + 99, 0, items, q)
        except ValueError:
            pass
        assert [sys.getrefcount(x) for x in [q, o, lse] + sels] == before
