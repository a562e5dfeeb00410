# SPDX-License-Identifier: MIT
"""Client against a live nelssad: every output checked against float64
attention over the offloaded KV of the selected clusters."""

import errno
import time

import numpy as np
import pytest

import nelssa
from conftest import (GROUP, DIM, KV_HEADS, LAYERS, Req, bf16_bits, bf16_float, check_step,
                      open_session, random_items)


def test_connect_devices_stats(daemon):
    with daemon.client() as c:
        assert c.devices >= 1
        assert not c.closed
        st = c.stats()
        assert st["devices"] == c.devices
        for key in ("sessions", "steps", "items", "kv_bytes", "recv_ns", "dispatch_ns",
                    "device_ns", "aggregate_ns", "send_ns"):
            assert isinstance(st[key], int)
        c.set_timeout(5000)
        assert c.timeout_ms == 5000
    assert c.closed


def test_step_matches_float64(daemon, rng):
    with daemon.client() as c:
        s = open_session(c)
        reqs = [Req(rng, c, s, 100 + i, 300 + 200 * i) for i in range(2)]
        before = c.stats()
        for step in range(4):
            layer = step % LAYERS
            items, q = random_items(rng, reqs, layer)
            o, lse = c.step(s, layer, items, q)
            assert o.shape == (len(items), GROUP, DIM) and o.dtype == np.float32
            assert lse.shape == (len(items), GROUP)
            check_step(reqs, layer, items, q, o, lse)
        after = c.stats()
        assert after["steps"] >= before["steps"] + 4
        assert after["kv_bytes"] >= before["kv_bytes"]
        c.close_session(s)


def test_append_then_step(daemon, rng):
    with daemon.client() as c:
        s = open_session(c)
        r = Req(rng, c, s, 7, 400, extra=150)
        old = [[r.ix[l][h].n_clusters for h in range(KV_HEADS)] for l in range(LAYERS)]
        r.grow(c, s, 150)
        for l in range(LAYERS):
            assert r.ix[l][0].n_tokens == 550
            assert r.ix[l][0].n_clusters > old[l][0]
            # Only the appended clusters selected: exactly the new tokens' attention.
            new = [(r.id, h, np.arange(old[l][h], r.ix[l][h].n_clusters, dtype=np.uint32))
                   for h in range(KV_HEADS)]
            q = rng.standard_normal((KV_HEADS, GROUP, DIM)).astype(np.float32)
            o, lse = c.step(s, l, new, q)
            check_step([r], l, new, q, o, lse)
            items, q = random_items(rng, [r], l)
            o, lse = c.step(s, l, items, q)
            check_step([r], l, items, q, o, lse)


@pytest.mark.parametrize("kv_layout", [nelssa.KV_PACKED, nelssa.KV_ADJACENT])
def test_append_of_new_rows_only(daemon, rng, kv_layout):
    """append(base=): the new tokens' rows alone go, steps equal float64; a
    row the call would read below base is refused before anything is sent;
    the index's per-cluster arrays take the same rows."""
    with daemon.client() as c:
        s = open_session(c, kv_layout=kv_layout)
        r = Req(rng, c, s, 7, 403, extra=61)
        ix = r.ix[0][0]
        old = ix.append(r.k[0, 0, 403:464])
        with pytest.raises(nelssa.Error) as e:
            c.append(s, 7, 0, 0, ix, r.k[0, 0, 404:464], r.v[0, 0, 404:464], old, base=404)
        assert e.value.errno == errno.EINVAL and "rows given" in c.last_error
        with pytest.raises(ValueError, match="base"):
            c.append(s, 7, 0, 0, ix, r.k[0, 0, :0], r.v[0, 0, :0], old, base=465)
        with pytest.raises(ValueError):     # rows for 403.. but base says 400
            c.append(s, 7, 0, 0, ix, r.k[0, 0, 403:464], r.v[0, 0, 403:464], old, base=400)
        np.testing.assert_array_equal(ix.far_keys(r.k[0, 0, 403:464], first=old, base=403),
                                      ix.far_keys(r.k[0, 0, :464], first=old))
        np.testing.assert_array_equal(ix.value_sums(r.v[0, 0, 403:464], first=old, base=403),
                                      ix.value_sums(r.v[0, 0, :464], first=old))
        with pytest.raises(ValueError, match="member"):
            ix.key_spread(r.k[0, 0, 404:464], first=old, base=404)
        # Undo the trial append's index change: grow() appends for real.
        r.ix[0][0] = ix = nelssa.ClusterIndex(r.k[0, 0, :403])
        c.offload(s, 7, 0, 0, ix, r.k[0, 0, :403], r.v[0, 0, :403])
        r.grow(c, s, 61, new_rows_only=True)
        for layer in range(LAYERS):
            items, q = random_items(rng, [r], layer)
            o, lse = c.step(s, layer, items, q)
            check_step([r], layer, items, q, o, lse)
        c.close_session(s)


def test_int8_session(daemon, rng):
    """8-bit KV on the devices: bf16 rows in, quantised by the library.

    The exact check (against the store quantised on its own) is the C e2e
    scenario kv8; here the Python path: int8's error bound per element is
    amax / 254 of its 16-token, 32-channel group, so outputs of unit
    normal rows stay within a few percent of bf16 attention."""
    with daemon.client() as c:
        s = open_session(c, kv_dtype=nelssa.KV_INT8)
        r = Req(rng, c, s, 1, 300)
        items, q = random_items(rng, [r], 1)
        o, lse = c.step(s, 1, items, q)
        for i, (rid, h, sel) in enumerate(items):
            ro, rl = r.ref(1, h, list(sel), q[i])
            err = np.linalg.norm(o[i] - ro) / np.linalg.norm(ro)
            assert err < 0.05 and np.all(np.abs(lse[i] - rl) < 0.05)
        # fp16 rows for an 8-bit session are refused before anything is sent.
        with pytest.raises(TypeError, match="quantises"):
            c.offload(s, 1, 0, 0, r.ix[0][0], r.k[0, 0, :300].view(np.float16),
                      r.v[0, 0, :300].view(np.float16))
        c.close_session(s)


def test_bf16_dots_session(daemon, rng):
    """attn_flags=ATTN_BF16_DOTS: the devices' outputs are float64 attention over
    bf16(q), and not over q (the flag reached them)."""
    with daemon.client() as c:
        with pytest.raises(nelssa.Error) as e:
            open_session(c, attn_flags=2)
        assert e.value.errno == errno.EINVAL
        s = open_session(c, attn_flags=nelssa.ATTN_BF16_DOTS)
        r = Req(rng, c, s, 1, 300)
        items, q = random_items(rng, [r], 1)
        o, lse = c.step(s, 1, items, q)
        moved = 0
        for i, (rid, h, sel) in enumerate(items):
            ro, rl = r.ref(1, h, list(sel), bf16_float(bf16_bits(q[i])))
            vmax = np.abs(bf16_float(r.v[1, h])).max()
            np.testing.assert_allclose(o[i], ro, rtol=0, atol=2e-4 + 2 * 2.0 ** -8 * vmax)
            np.testing.assert_allclose(lse[i], rl, rtol=2e-4, atol=2e-4)
            moved += np.abs(lse[i] - r.ref(1, h, list(sel), q[i])[1]).max() > 1e-5
        assert moved > 0
        c.close_session(s)


@pytest.mark.parametrize("kv_dtype", [nelssa.KV_BF16, nelssa.KV_FP16])
def test_adjacent_kv_session(daemon, rng, kv_dtype):
    """kv_layout=KV_ADJACENT: the same float64 attention, after a prefill
    and an append that starts mid-block; a layout no version has is refused."""
    fp16 = kv_dtype == nelssa.KV_FP16
    with daemon.client() as c:
        with pytest.raises(nelssa.Error) as e:
            open_session(c, kv_layout=2)
        assert e.value.errno == errno.EINVAL
        s = open_session(c, fp16=fp16, kv_layout=nelssa.KV_ADJACENT)
        before = c.stats()["kv_bytes"]
        r = Req(rng, c, s, 1, 299, extra=37, fp16=fp16)
        r.grow(c, s, 37)
        # Whole 16-row K and V blocks went in, but the append's first 5 rows
        # (to the boundary at 304) as K and V rows apart.
        row = DIM * 2
        table = sum(8 * r.ix[l][h].n_clusters for l in range(LAYERS) for h in range(KV_HEADS))
        blocks = -(-299 // 16) + -(-(336 - 304) // 16)
        assert c.stats()["kv_bytes"] - before == LAYERS * KV_HEADS * 2 * row * (
            16 * blocks + 5) + table
        for layer in range(LAYERS):
            items, q = random_items(rng, [r], layer)
            o, lse = c.step(s, layer, items, q)
            check_step([r], layer, items, q, o, lse)
        c.close_session(s)


def test_fp16_session(daemon, rng):
    with daemon.client() as c:
        s = open_session(c, fp16=True)
        r = Req(rng, c, s, 1, 300, fp16=True)
        items, q = random_items(rng, [r], 1)
        o, lse = c.step(s, 1, items, q)
        check_step([r], 1, items, q, o, lse)
        # A bf16 array for an fp16 session is refused before anything is sent.
        with pytest.raises(TypeError, match="float16"):
            c.offload(s, 1, 0, 0, r.ix[0][0], r.k[0, 0, :300].view(np.uint16),
                      r.v[0, 0, :300].view(np.uint16))


def test_step_out_and_times(daemon, rng):
    with daemon.client() as c:
        s = open_session(c)
        r = Req(rng, c, s, 3, 250)
        items, q = random_items(rng, [r], 0)
        o = np.full((len(items), GROUP, DIM), np.nan, dtype=np.float32)
        lse = np.full((len(items), GROUP), np.nan, dtype=np.float32)
        ro, rl, t = c.step(s, 0, items, q, out=o, lse_out=lse, return_times=True)
        assert ro is o and rl is lse
        check_step([r], 0, items, q, o, lse)
        assert set(t) == {"rtt_ns", "recv_ns", "dispatch_ns", "device_ns", "aggregate_ns"}
        assert t["rtt_ns"] > 0
        # Selections as lists and int64 arrays are converted.
        items2 = [(rid, h, [int(x) for x in sel]) for rid, h, sel in items]
        o2, l2 = c.step(s, 0, items2, q)
        np.testing.assert_array_equal(o2, o)
        items3 = [(rid, h, sel.astype(np.int64)) for rid, h, sel in items]
        o3, _ = c.step(s, 0, items3, q)
        np.testing.assert_array_equal(o3, o)


def test_torch_inputs(daemon, rng):
    torch = pytest.importorskip("torch")
    with daemon.client() as c:
        s = open_session(c)
        k = torch.from_numpy(rng.standard_normal((300, DIM)).astype(np.float32)).to(torch.bfloat16)
        v = torch.from_numpy(rng.standard_normal((300, DIM)).astype(np.float32)).to(torch.bfloat16)
        c.alloc_request(s, 5, 300, 300)
        ix = nelssa.ClusterIndex(k)
        c.offload(s, 5, 0, 1, ix, k, v)
        q = torch.randn(1, GROUP, DIM, generator=torch.Generator().manual_seed(3))
        sel = torch.arange(ix.n_clusters, dtype=torch.int32)
        o_out = torch.empty(1, GROUP, DIM)
        o, lse = c.step(s, 0, [(5, 1, sel)], q, out=o_out)
        assert o is o_out
        kb = k.view(torch.int16).numpy()
        vb = v.view(torch.int16).numpy()
        from conftest import attn_ref, assert_attn
        assert_attn(o[0].numpy(), lse[0], attn_ref(q[0].numpy(), kb, vb))


def test_step_send_poll(daemon, rng):
    with daemon.client() as c:
        s1, s2 = open_session(c), open_session(c)
        r1, r2 = Req(rng, c, s1, 1, 300), Req(rng, c, s2, 1, 260)
        i1, q1 = random_items(rng, [r1], 0)
        i2, q2 = random_items(rng, [r2], 1)
        p1 = c.step_send(s1, 0, i1, q1)
        p2 = c.step_send(s2, 1, i2, q2)
        # The inputs may be reused at once: the library copied them.
        q1_keep, q1[:] = q1.copy(), np.nan
        assert p1.state == "in flight"
        with pytest.raises(ValueError, match="poll"):
            p1.result()
        for p in (p2, p1):
            while not p.poll(timeout_ms=1000):
                pass
            assert p.done and p.state == "done"
            assert p.poll() is True
            assert p.times["rtt_ns"] > 0
        check_step([r1], 0, i1, q1_keep, *p1.result())
        check_step([r2], 1, i2, q2, *p2.result())


def test_step_send_cancel_and_drop(daemon, rng):
    with daemon.client() as c:
        s = open_session(c)
        r = Req(rng, c, s, 1, 200)
        items, q = random_items(rng, [r], 0)
        p = c.step_send(s, 0, items, q)
        p.cancel()
        assert p.state == "cancelled"
        with pytest.raises(ValueError, match="cancelled"):
            p.poll()
        p.cancel()  # twice is fine
        # More than the 16 slots' worth of dropped steps: each gives its slot back.
        for _ in range(40):
            p = c.step_send(s, 0, items, q)
            del p
        # A dropped step still runs on the daemon, which refuses a second
        # step of the session meanwhile (EBUSY): retry, bounded.
        for _ in range(500):
            try:
                o, lse = c.step(s, 0, items, q)
                break
            except nelssa.Error as e:
                assert e.errno == errno.EBUSY
                time.sleep(0.01)
        else:
            pytest.fail("the session stayed busy")
        check_step([r], 0, items, q, o, lse)


def test_daemon_refusals(daemon, rng):
    with daemon.client() as c:
        s = open_session(c)
        r = Req(rng, c, s, 1, 200)
        with pytest.raises(nelssa.Error) as e:
            c.alloc_request(s, 1, 10, 10)
        assert e.value.errno == errno.EEXIST
        items, q = random_items(rng, [r], 0)
        bad = [(999, 0, items[0][2])]
        with pytest.raises(nelssa.Error) as e:
            c.step(s, 0, bad, q[:1])
        assert e.value.errno == errno.ENOENT and e.value.strerror
        beyond = [(1, 0, np.array([r.ix[0][0].n_clusters + 5], dtype=np.uint32))]
        with pytest.raises(nelssa.Error) as e:
            c.step(s, 0, beyond, q[:1])
        assert e.value.errno == errno.ERANGE
        with pytest.raises(nelssa.Error) as e:
            c.alloc_request(s, 2, 1 << 30, 1000)
        assert e.value.errno == errno.ENOSPC
        assert "capacity" in str(e.value) or e.value.strerror
        assert c.last_error
        with pytest.raises(nelssa.Error) as e:
            c.open_session(LAYERS, 8, 2, DIM, capacity_tokens=1 << 40)
        assert e.value.errno == errno.ENOSPC
        # The connection still serves.
        o, lse = c.step(s, 0, items, q)
        check_step([r], 0, items, q, o, lse)
        c.free_request(s, 1)
        c.close_session(s)


def test_log_fn_gets_messages(daemon):
    got = []
    nelssa.set_log_fn(lambda level, source, msg: got.append((level, source, msg)))
    try:
        with daemon.client() as c:
            with pytest.raises(nelssa.Error):
                c.open_session(LAYERS, 8, 2, DIM, capacity_tokens=1 << 40)
    finally:
        nelssa.set_log_fn(None)
    assert got and all(isinstance(m, str) for _, _, m in got)
    assert any(src == "client" for _, src, _ in got)
    with pytest.raises(TypeError):
        nelssa.set_log_fn(42)


def test_connect_refused(make_daemon):
    d = make_daemon()
    port = d.port
    d.stop()
    with pytest.raises(nelssa.Error) as e:
        nelssa.Client("127.0.0.1", port, timeout_ms=3000)
    assert isinstance(e.value, OSError)
    assert e.value.errno in (errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EIO)
    assert e.value.strerror
