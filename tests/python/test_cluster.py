# SPDX-License-Identifier: MIT
"""The cluster registry (Documentation/cluster.rst) against a real etcd
that each test starts on free ports with a data directory of its own:
nelssad registers, updates and withdraws its record; a node killed -9
leaves the registry within its lease; etcd killed, restarted or wiped
under running nodes; a node that stops renewing; records no node wrote;
authentication.  What the registry holds is read with etcdctl, an
independent client, as well as with 'nelssactl cluster'.

Every wait polls a condition against a deadline well past the documented
bound: no assertion depends on how fast this machine is."""

import errno
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import (ETCD, ETCDCTL, TTL, Etcd, Req, free_port, nelssactl, open_session,
                      wait_for)

pytestmark = pytest.mark.skipif(not ETCD or not ETCDCTL,
                                reason="etcd and etcdctl not installed (etcd-server, etcd-client)")

def ctl_cluster(etcd_url, *extra, check=True):
    r = subprocess.run([nelssactl(), "--json", "cluster", "--etcd", etcd_url, "--cluster", "t"] +
                       list(extra), capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    if check:
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout), r.stderr
    return r


def test_nodes_register_and_list(etcd, nodes):
    ds = [nodes(etcd.url, "n%d" % i) for i in range(3)]
    recs = wait_for("three records", lambda: len(etcd.records()) == 3 and etcd.records())
    for i, d in enumerate(ds):
        rec, lease = recs["n%d" % i]
        assert rec["schema"] == "nelssa.node/1"
        assert rec["control"] == "127.0.0.1:%d" % d.port
        assert 0 < rec["data_port"] < 65536
        assert rec["devices"] == 2
        assert rec["kv_bytes_total"] > 2 * 255 * 2**20 and rec["kv_bytes_total"] <= 2 * 2**28
        assert rec["kv_bytes_free"] == rec["kv_bytes_total"]
        assert rec["sessions"] == 0 and rec["requests"] == 0 and rec["held"] == []
        # Under a lease of the TTL asked for.
        ttl = etcd.ctl("lease", "timetolive", "%x" % int(lease), "-w", "json").stdout
        assert 0 < json.loads(ttl)["granted-ttl"] <= TTL
    view, err = ctl_cluster(etcd.url)
    assert err == ""
    assert [n["id"] for n in view["nodes"]] == ["n0", "n1", "n2"]
    assert view["ignored"] == [] and view["cluster"] == "t"
    for n, d in zip(view["nodes"], ds):
        assert n["control"] == "127.0.0.1:%d" % d.port
        assert n["data_port"] == recs[n["id"]][0]["data_port"]
    # The table names every node too.
    txt = subprocess.run([nelssactl(), "cluster", "--etcd", etcd.url, "--cluster", "t"],
                         capture_output=True, text=True, timeout=60)
    assert txt.returncode == 0 and "3 nodes" in txt.stdout
    assert all(("n%d" % i) in txt.stdout for i in range(3))


def test_record_follows_requests(etcd, nodes, rng):
    d = nodes(etcd.url, "n0")
    wait_for("the record", lambda: "n0" in etcd.records())
    with d.client() as c:
        s = open_session(c)
        Req(rng, c, s, 100, 300)
        Req(rng, c, s, (1 << 64) - 1, 500)

        # A record may be written between a request's allocation and its KV.
        def held():
            rec = etcd.records()["n0"][0]
            return rec["requests"] == 2 and rec["tokens_held"] == 800 and rec
        rec = wait_for("two requests and their tokens in the record", held)
        assert rec["sessions"] == 1
        assert rec["kv_bytes_free"] < rec["kv_bytes_total"]
        got = sorted((int(h["request"]), h["tokens"]) for h in rec["held"])
        assert got == [(100, 300), ((1 << 64) - 1, 500)]
        view, _ = ctl_cluster(etcd.url)
        # Request ids as the record has them: decimal strings, all 64 bits.
        assert sorted(h["request"] for h in view["nodes"][0]["held"]) == \
            ["100", str((1 << 64) - 1)]
        c.free_request(s, 100)
        wait_for("one request left", lambda: etcd.records()["n0"][0]["requests"] == 1)
        c.close_session(s)
    wait_for("the session gone", lambda: etcd.records()["n0"][0]["sessions"] == 0)


def test_clean_exit_withdraws_at_once(etcd, nodes):
    a = nodes(etcd.url, "a")
    nodes(etcd.url, "b")
    wait_for("two records", lambda: len(etcd.records()) == 2)
    a.kill(signal.SIGTERM)
    assert a.proc.wait(timeout=30) == 0
    # Withdrawn before the process exits: no lease to wait out.
    assert list(etcd.records()) == ["b"]
    assert "withdrew /nelssa/t/nodes/a" in a.read_log()


def test_killed_node_leaves_within_its_lease(etcd, nodes):
    a = nodes(etcd.url, "a")
    nodes(etcd.url, "b")
    wait_for("two records", lambda: len(etcd.records()) == 2)
    a.kill()
    a.proc.wait(timeout=30)
    t0 = time.monotonic()
    # etcd expires a lease within its TTL plus its own checking period (0.5 s).
    wait_for("the dead node's record to expire", lambda: list(etcd.records()) == ["b"],
             timeout=10 * TTL)
    print("# detection after kill -9: %.2f s (TTL %d s)" % (time.monotonic() - t0, TTL))


def test_etcd_killed_and_restarted(etcd, nodes):
    a = nodes(etcd.url, "a")
    wait_for("the record", lambda: "a" in etcd.records())
    etcd.kill()
    wait_for("the node to notice", lambda: "registering again when etcd answers" in a.read_log())
    # Serving goes on without etcd.
    with a.client() as c:
        assert c.stats()["devices"] == 2
    etcd.start()
    rec = wait_for("the record back", lambda: etcd.records().get("a"))
    assert rec[0]["control"] == "127.0.0.1:%d" % a.port
    assert a.read_log().count("registry: registered") >= 2


def test_etcd_wiped_node_registers_again(etcd, nodes):
    a = nodes(etcd.url, "a")
    wait_for("the record", lambda: "a" in etcd.records())
    etcd.kill()
    etcd.start(wipe=True)    # a new etcd: the lease is unknown there
    wait_for("the record back", lambda: "a" in etcd.records())
    log = a.read_log()
    assert log.count("registry: registered") >= 2, log


def test_etcd_down_at_start(nodes):
    port = free_port()
    a = nodes("http://127.0.0.1:%d" % port, "a")
    wait_for("the failure logged", lambda: "cannot register" in a.read_log())
    with a.client() as c:
        assert c.stats()["devices"] == 2
    e = Etcd(port=port)
    try:
        wait_for("the record", lambda: "a" in e.records())
    finally:
        e.stop()


def test_node_that_stops_renewing(etcd, nodes):
    a = nodes(etcd.url, "a", env={"NELSSAD_TEST_REGISTRY_STALL": "1"})
    wait_for("the record", lambda: "a" in etcd.records())
    wait_for("the record to expire", lambda: "a" not in etcd.records(), timeout=10 * TTL)
    # The registry no longer lists it; its clients are still served.
    with a.client() as c:
        assert c.stats()["devices"] == 2


def test_records_no_node_wrote_are_ignored(etcd, nodes):
    nodes(etcd.url, "good")
    wait_for("the record", lambda: "good" in etcd.records())
    rec = json.dumps(etcd.records()["good"][0])
    etcd.ctl("put", "/nelssa/t/nodes/junk", "not json {")
    etcd.ctl("put", "/nelssa/t/nodes/old", rec.replace("nelssa.node/1", "nelssa.node/0"))
    etcd.ctl("put", "/nelssa/t/nodes/other", rec)           # 'good's record under another key
    etcd.ctl("put", "/nelssa/t/nodes/a/b", rec)             # not a node name
    etcd.ctl("put", "/nelssa/t/nodes/huge", stdin="[" + "1," * 300000 + "1]")
    view, err = ctl_cluster(etcd.url)
    assert [n["id"] for n in view["nodes"]] == ["good"]
    ignored = {i["key"].rsplit("/nodes/", 1)[1]: i["why"] for i in view["ignored"]}
    assert set(ignored) == {"junk", "old", "other", "a/b", "huge"}
    assert "JSON" in ignored["junk"] and "schema" in ignored["old"]
    assert "under the key of other" in ignored["other"]
    assert "node name" in ignored["a/b"] and "bytes" in ignored["huge"]
    assert err.count("ignoring /nelssa/t/nodes/") == 5


def test_bad_options(etcd):
    exe = os.environ["NELSSAD"]
    for bad in (["--etcd", "127.0.0.1:2379"], ["--etcd", "ftp://x:1"],
                ["--etcd", etcd.url, "--cluster", "a/b"], ["--node-id", ".."],
                ["--etcd-ttl", "1"], ["--etcd-update-ms", "10"]):
        r = subprocess.run([exe, "--listen", "127.0.0.1:0"] + bad, capture_output=True,
                           text=True, timeout=30,
                           env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
        assert r.returncode == 2, (bad, r.stderr)
        assert "nelssad: --" in r.stderr
    r = ctl_cluster("http://127.0.0.1:%d" % free_port(), check=False)
    assert r.returncode == 3 and "127.0.0.1" in r.stderr and r.stdout == ""
    r = ctl_cluster("localhost:2379", check=False)
    assert r.returncode == 2 and "not an etcd endpoint" in r.stderr
    r = ctl_cluster(etcd.url, "--cluster", "x y", check=False)
    assert r.returncode == 2


def test_authentication(etcd, nodes, tmp_path):
    etcd.ctl("user", "add", "root", "--new-user-password", "s3cret")
    etcd.ctl("auth", "enable")
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    bad = tmp_path / "bad"
    bad.write_text("wrong\n")
    a = nodes(etcd.url, "a", "--etcd-user", "root", "--etcd-password-file", str(pw))
    b = nodes(etcd.url, "b", "--etcd-user", "root", "--etcd-password-file", str(bad))
    wait_for("a's record", lambda: "a" in etcd.records(user="root:s3cret"))
    wait_for("b refused", lambda: "cannot register" in b.read_log())
    assert "authentication failed" in b.read_log()
    r = ctl_cluster(etcd.url, check=False)
    assert r.returncode == 3, r.stderr
    view, _ = ctl_cluster(etcd.url, "--etcd-user", "root", "--etcd-password-file", str(pw))
    assert [n["id"] for n in view["nodes"]] == ["a"]
    a.kill(signal.SIGTERM)
    assert a.proc.wait(timeout=30) == 0
    assert "withdrew" in a.read_log()



# --- placement (nelssa.Placer, <nelssa/placement.h>) ---------------------------------------

def record(node_id, *, devices=2, total=1 << 30, tokens=0, held=(), port=1000, sessions=None):
    """A node record as nelssad writes it, with the load we choose."""
    held = [{"session": s, "request": str(r), "tokens": t} for s, r, t in held]
    return {"schema": "nelssa.node/1", "id": node_id, "version": "0.1.0",
            "control": "127.0.0.1:%d" % port, "data_port": port + 1, "devices": devices,
            "kv_bytes_total": total, "kv_bytes_free": total, "tokens_held": tokens,
            "max_sessions": 64, "sessions": len({h["session"] for h in held})
            if sessions is None else sessions, "requests": len(held),
            "steps_in_flight": 0, "kv_in_flight": 0, "step_us": 0, "steps": 0,
            "updated_ms": 0, "held": held, "held_more": 0}


def put_record(etcd, rec, lease=None):
    args = ["put", "/nelssa/t/nodes/" + rec["id"]]
    if lease:
        args.append("--lease=" + lease)
    etcd.ctl(*args, stdin=json.dumps(rec))


def ref_place(nodes, placed, mine, tokens, token_bytes, fill, excluded=()):
    """The documented policy in Python: the reference the C placer is held to."""
    best = None
    for rec in nodes:
        nid = rec["id"]
        if nid in excluded:
            continue
        own = sum(h["tokens"] for h in rec["held"] if h["session"] in mine.get(nid, ()))
        used = max(rec["tokens_held"] - own, 0) + placed.get(nid, 0)
        cap = int(rec["kv_bytes_total"] * fill / token_bytes)
        if used + tokens > cap:
            continue
        key = ((used + tokens) / rec["devices"], rec["steps_in_flight"], nid)
        if best is None or key < best[0]:
            best = (key, nid)
    return best and best[1]


def test_placer_follows_the_documented_policy(etcd, rng):
    import nelssa
    tb = 1 << 16                     # bytes a token takes: 16384 tokens a GiB
    recs = [record("a", devices=1, total=1 << 30, tokens=2000),
            record("b", devices=2, total=1 << 30, tokens=9000,
                   held=[(7, 1, 3000), (8, 2, 6000)]),
            record("c", devices=4, total=2 << 30, tokens=20000),
            record("d", devices=2, total=1 << 29)]
    for r in recs:
        put_record(etcd, r)
    with nelssa.Placer(etcd.url, cluster="t", token_bytes=tb, max_fill=0.9,
                       refresh_ms=60000) as p:
        ids = [n["id"] for n in p.nodes()]
        assert ids == ["a", "b", "c", "d"]
        assert [n["cap_tokens"] for n in p.nodes()] == [14745, 14745, 29491, 7372]
        # Session 7 on b is ours: its 3000 tokens count as placed, not twice.
        p.own_session(ids.index("b"), 7)
        mine = {"b": {7}}
        got = ids[p.place(3000)]
        assert got == ref_place(recs, {}, mine, 3000, tb, 0.9)
        placed = {got: 3000}
        for _ in range(200):
            t = int(rng.integers(100, 4000))
            want = ref_place(recs, placed, mine, t, tb, 0.9)
            if want is None:
                with pytest.raises(nelssa.Error) as e:
                    p.place(t)
                assert e.value.errno == errno.ENOSPC and "no node" in str(e.value)
                break
            got = ids[p.place(t)]
            assert got == want, (t, placed)
            placed[got] = placed.get(got, 0) + t
        else:
            pytest.fail("200 placements and the cluster never filled")
        # No node over its cap, and the placer's counts are the reference's.
        for n in p.nodes():
            assert n["used_tokens"] <= n["cap_tokens"], n
            assert n["placed_tokens"] == placed.get(n["id"], 0)
        # Room again once released.
        node = max(placed, key=placed.get)
        p.release(ids.index(node), placed[node])
        placed[node] = 0
        assert ids[p.place(100)] == ref_place(recs, placed, mine, 100, tb, 0.9)
        with pytest.raises(nelssa.Error):
            p.release(0, 1 << 40)                # more than placed
        with pytest.raises(nelssa.Error):
            p.place(0)


def test_placer_views_excluded_gone_and_stale(etcd):
    import nelssa
    lease = etcd.ctl("lease", "grant", "600").stdout.split()[1]
    put_record(etcd, record("a", devices=4), lease)
    put_record(etcd, record("b", devices=1))
    with nelssa.Placer(etcd.url, cluster="t", token_bytes=1 << 16, refresh_ms=100) as p:
        a, b = p.find("a"), p.find("b")
        assert p.place(10) == a                  # four devices: the least per device
        # Found dead by the caller: b takes everything, even after a refresh...
        p.exclude(a)
        p.refresh()
        assert p.place(10) == b
        # ... until a registers again, under a new lease.
        put_record(etcd, record("a", devices=4))
        p.refresh()
        assert not p.nodes()[a]["excluded"]
        assert p.place(10) == a
        # Found full (it refused room): skipped until tokens placed there go.
        p.full(a)
        assert p.nodes()[a]["full"] and p.place(10) == b
        p.release(a, 10)
        assert not p.nodes()[a]["full"] and p.place(10) == a
        # Gone from the registry: not placed on; its index stays.
        etcd.ctl("del", "/nelssa/t/nodes/a")
        p.refresh()
        assert p.nodes()[a]["listed"] is False and p.find("a") == a
        assert p.place(10) == b
        # etcd away: the last view goes on, and refresh says why.
        etcd.kill()
        time.sleep(0.15)                         # older than refresh_ms: place re-reads
        assert p.place(10) == b
        with pytest.raises(nelssa.Error) as e:
            p.refresh()
        assert "127.0.0.1:%d" % etcd.port in str(e.value)
        stale = p.view_age_ms
        assert stale >= 100
        etcd.start()
        p.refresh()
        assert p.view_age_ms < stale


def test_placer_bad_arguments(etcd):
    import nelssa
    for kw in ({"token_bytes": 0}, {"token_bytes": 1, "max_fill": 1.5},
               {"token_bytes": 1, "cluster": "a/b"}):
        with pytest.raises((ValueError, nelssa.Error)):
            nelssa.Placer(etcd.url, **kw)
    with pytest.raises(nelssa.Error):
        nelssa.Placer("localhost:2379", token_bytes=1)
    # No etcd: a placer with an empty view, which says why.
    p = nelssa.Placer("http://127.0.0.1:%d" % free_port(), token_bytes=1, timeout_ms=500)
    assert p.nodes() == [] and p.view_age_ms is None
    with pytest.raises(nelssa.Error) as e:
        p.place(1)
    assert e.value.errno == errno.ENOSPC
    p.close()
    with pytest.raises(ValueError):
        p.place(1)


def test_placer_skips_a_node_that_stopped_renewing(etcd, nodes, rng):
    """A node that lost etcd but not its clients: its record expires, nothing
    new is placed on it, and the session it holds is still served."""
    import nelssa
    from conftest import LAYERS, check_step, random_items
    s_node = nodes(etcd.url, "s", env={"NELSSAD_TEST_REGISTRY_STALL": "1"})
    nodes(etcd.url, "n", devices="sim:1")
    wait_for("two records", lambda: len(etcd.records()) == 2)
    with nelssa.Placer(etcd.url, cluster="t", token_bytes=1 << 10, refresh_ms=100) as p:
        s_i, n_i = p.find("s"), p.find("n")
        assert p.place(100) == s_i                # two devices against one
        with s_node.client() as c:
            sess = open_session(c)
            p.own_session(s_i, sess)
            r = Req(rng, c, sess, 1, 300)
            wait_for("s's record to expire", lambda: "s" not in etcd.records(),
                     timeout=10 * TTL)
            p.refresh()
            assert not p.nodes()[s_i]["listed"]
            assert all(p.place(100) == n_i for _ in range(5))
            for layer in range(LAYERS):
                items, q = random_items(rng, [r], layer)
                o, lse = c.step(sess, layer, items, q)
                check_step([r], layer, items, q, o, lse)


def test_two_clients_place_sixty_requests_checked_against_float64(etcd, nodes):
    """3 nodes, 2 clients at once, 60 long requests: each placed with the
    placer, its KV on one node only (sessions opened lazily), every step's
    output checked against float64 attention; the registry ends up listing
    each request on the node it was placed on."""
    import threading
    import numpy as np
    import nelssa
    from conftest import DIM, KV_HEADS, LAYERS, check_step, random_items
    ds = {n: nodes(etcd.url, n) for n in ("n0", "n1", "n2")}
    wait_for("three records", lambda: len(etcd.records()) == 3)
    token_bytes = LAYERS * KV_HEADS * 2 * DIM * 2
    placed, errors = [{}, {}], []

    def client(i):
        rng = np.random.default_rng(100 + i)
        conns = {}
        try:
            with nelssa.Placer(etcd.url, cluster="t", token_bytes=token_bytes) as p:
                ids = [x["id"] for x in p.nodes()]
                for j in range(30):
                    rid, n = 1000 * i + j, int(rng.integers(200, 600))
                    k = p.place(n)
                    if k not in conns:      # the first request there: connect, open a session
                        c = ds[ids[k]].client()
                        s = open_session(c, capacity_tokens=1 << 15, max_batch=64)
                        p.own_session(k, s)
                        conns[k] = (c, s, [])
                    c, s, reqs = conns[k]
                    reqs.append(Req(rng, c, s, rid, n))
                    placed[i][rid] = ids[k]
                for c, s, reqs in conns.values():
                    for layer in range(LAYERS):
                        items, q = random_items(rng, reqs, layer)
                        o, lse = c.step(s, layer, items, q)
                        check_step(reqs, layer, items, q, o, lse)
                # Held until the registry shows all 60 (the test's thread watches).
                done.wait(120)
        except BaseException as e:          # reported by the test's thread
            errors.append(e)
        finally:
            for c, s, _ in conns.values():
                c.close()

    done = threading.Event()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        def listed():
            if errors:
                return True
            recs = {k: v[0] for k, v in etcd.records().items()}
            held = {int(h["request"]): k for k, r in recs.items() for h in r["held"]}
            return len(held) == 60 and held
        held = wait_for("all 60 requests in the records", listed, timeout=120)
    finally:
        done.set()
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors
    want = {**placed[0], **placed[1]}
    assert held == want                      # each request on the node it was placed on, once
    assert set(want.values()) == {"n0", "n1", "n2"}


def test_placer_ignores_bad_records_with_a_log_line(etcd):
    """Garbage and another schema's record: never placed on, each logged."""
    import nelssa
    put_record(etcd, record("good"))
    etcd.ctl("put", "/nelssa/t/nodes/junk", "{not json")
    etcd.ctl("put", "/nelssa/t/nodes/v2", json.dumps(dict(record("v2"), schema="nelssa.node/2")))
    got = []
    nelssa.set_log_fn(lambda level, source, msg: got.append((level, source, msg)))
    try:
        with nelssa.Placer(etcd.url, cluster="t", token_bytes=1 << 10) as p:
            assert [n["id"] for n in p.nodes()] == ["good"]
            assert p.place(10) == p.find("good")
    finally:
        nelssa.set_log_fn(None)
    lines = [m for lvl, src, m in got if src == "client" and lvl == nelssa.LOG_WARNING]
    assert any("ignoring /nelssa/t/nodes/junk: not a JSON object" in m for m in lines), got
    assert any("ignoring /nelssa/t/nodes/v2: schema 'nelssa.node/2'" in m for m in lines), got


def test_tls(nodes, tmp_path):
    """etcd on https with client certificates: a node with the CA, its
    certificate and key registers; one trusting another CA, or without a
    client certificate, is refused and says why; nelssactl likewise."""
    from conftest import make_certs
    c = make_certs(str(tmp_path))
    e = Etcd(tls=c)
    try:
        tls = ["--etcd-cacert", c["ca"], "--etcd-cert", c["crt"], "--etcd-key", c["key"]]
        a = nodes(e.url, "a", *tls)
        b = nodes(e.url, "b", "--etcd-cacert", c["other"], "--etcd-cert", c["crt"],
                  "--etcd-key", c["key"])
        d = nodes(e.url, "d", "--etcd-cacert", c["ca"])
        wait_for("a's record", lambda: "a" in e.records())
        wait_for("b refused", lambda: "cannot register" in b.read_log())
        wait_for("d refused", lambda: "cannot register" in d.read_log())
        assert "certificate" in b.read_log().lower(), b.read_log()
        assert sorted(e.records()) == ["a"]
        view, _ = ctl_cluster(e.url, *tls)
        assert [n["id"] for n in view["nodes"]] == ["a"]
        r = ctl_cluster(e.url, "--etcd-cacert", c["other"], check=False)
        assert r.returncode == 3 and r.stderr
        a.kill(signal.SIGTERM)
        assert a.proc.wait(timeout=30) == 0
        assert e.records() == {}
    finally:
        e.stop()


def test_placer_watches_the_registry(etcd, nodes):
    """With the periodic read off (refresh_ms huge), the placer's watch alone
    brings in a node that registers, a node that dies, and -- after etcd is
    killed and restarted -- a node that registers then."""
    import nelssa
    nodes(etcd.url, "a")
    wait_for("a's record", lambda: "a" in etcd.records())
    with nelssa.Placer(etcd.url, cluster="t", token_bytes=1 << 10, refresh_ms=1 << 30) as p:
        def listed():
            p.sync()                # reads the registry only if the watch saw a change
            return [n["id"] for n in p.nodes() if n["listed"]]

        assert listed() == ["a"]
        wait_for("the watch", lambda: p.watching)
        b = nodes(etcd.url, "b")
        wait_for("the watch to bring in b", lambda: listed() == ["a", "b"])
        b.kill()
        wait_for("the watch to see b's lease expire", lambda: listed() == ["a"],
                 timeout=10 * TTL)
        etcd.kill()
        etcd.start()
        wait_for("the watch made again", lambda: p.watching)
        nodes(etcd.url, "c")
        wait_for("the watch to bring in c", lambda: "c" in listed())


def test_tokens_etcd_forgets_are_renewed(nodes, tmp_path):
    """etcd with authentication forgets its tokens when it restarts (and
    after --auth-token-ttl): the daemon's calls and the placer's watch
    authenticate again instead of failing for good."""
    import nelssa
    e = Etcd(extra=["--auth-token-ttl", "1"])
    try:
        e.ctl("user", "add", "root", "--new-user-password", "s3cret")
        e.ctl("auth", "enable")
        e.user = "root:s3cret"
        pw = tmp_path / "pw"
        pw.write_text("s3cret\n")
        who = ["--etcd-user", "root", "--etcd-password-file", str(pw)]
        nodes(e.url, "a", *who)
        wait_for("a's record", lambda: "a" in e.records(user="root:s3cret"))
        with nelssa.Placer(e.url, cluster="t", token_bytes=1 << 10, refresh_ms=1 << 30,
                           user="root", password="s3cret") as p:
            def listed():
                p.sync()
                return [n["id"] for n in p.nodes() if n["listed"]]

            assert listed() == ["a"]
            wait_for("the watch", lambda: p.watching)
            e.kill()
            e.start()
            # The watch is made again -- with a token etcd knows: it forgot the old one.
            wait_for("the watch made again, authenticated", lambda: p.watching)
            nodes(e.url, "b", *who)
            wait_for("the watch, authenticated again, to bring in b",
                     lambda: listed() == ["a", "b"])
    finally:
        e.stop()
