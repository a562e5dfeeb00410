# SPDX-License-Identifier: MIT
"""Fixtures for the nelssa package's tests: a nelssad of their own on a
free loopback port with sim devices, reference math in float64, and one
TAP line per test for the meson runner (check-python.sh)."""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zlib

import numpy as np
import pytest

import nelssa

# --- TAP ---------------------------------------------------------------------

_tap = {"n": 0, "state": {}}


def pytest_runtest_logreport(report):
    st = _tap["state"].setdefault(report.nodeid, ["ok", ""])
    if report.failed:
        st[0] = "not ok"
    elif report.skipped and st[0] == "ok":
        st[0] = "skip"
        lr = report.longrepr
        st[1] = lr[2] if isinstance(lr, tuple) else str(lr)


def pytest_runtest_logfinish(nodeid, location):
    path = os.environ.get("NELSSA_TAP")
    st = _tap["state"].pop(nodeid, ["ok", ""])
    if not path:
        return
    _tap["n"] += 1
    name = nodeid.split("::", 1)[-1]
    if st[0] == "skip":
        line = "ok %d - %s # SKIP %s" % (_tap["n"], name, st[1].replace("Skipped: ", ""))
    else:
        line = "%s %d - %s" % (st[0], _tap["n"], name)
    with open(path, "a") as f:
        f.write(line.replace("\n", " ") + "\n")


# --- the daemon --------------------------------------------------------------

SANITIZED = bool(os.environ.get("NELSSA_PY_SANITIZE"))


class Daemon:
    """nelssad on 127.0.0.1, a free port it picks and writes to a file."""

    def __init__(self, env=None, devices=None, args=()):
        self.dir = tempfile.mkdtemp(prefix="nelssa-py-")
        self.portfile = os.path.join(self.dir, "port")
        self.logpath = os.path.join(self.dir, "daemon.log")
        exe = os.environ.get("NELSSAD")
        if not exe:
            pytest.skip("NELSSAD not set (run through check-python.sh)")
        e = dict(os.environ)
        # The daemon is its own program: it needs no runtime preloaded.
        e.pop("LD_PRELOAD", None)
        e.setdefault("UCX_TLS", "tcp")
        e.update(env or {})
        cmd = [exe, "--listen", "127.0.0.1:0", "--port-file", self.portfile,
               "--sim-opts", "mem=256M,cores=1"]
        if devices:
            cmd += ["--devices", devices]
        cmd += list(args)
        self.log = open(self.logpath, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=e)
        self.port = None
        # Ready once the port file is written: polled, bounded at 30 s.
        for _ in range(600):
            if os.path.exists(self.portfile) and os.path.getsize(self.portfile) > 0:
                with open(self.portfile) as f:
                    txt = f.read().strip()
                if txt:
                    self.port = int(txt)
                    break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise RuntimeError("nelssad did not start:\n" + self.read_log())

    def read_log(self):
        with open(self.logpath) as f:
            return f.read()

    def client(self, timeout_ms=10000, **kw):
        return nelssa.Client("127.0.0.1", self.port, timeout_ms=timeout_ms, **kw)

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def pause(self):
        """SIGSTOP, and return once every thread of the daemon is stopped.

        kill() returns before a stop takes hold: one thread takes the signal
        and stops the others, and on a loaded machine the rest of the daemon
        can still answer a request meanwhile.  Each thread's state in
        /proc, polled, bounded at 30 s."""
        self.kill(signal.SIGSTOP)
        tasks = "/proc/%d/task" % self.proc.pid
        for _ in range(3000):
            states = []
            for t in os.listdir(tasks):
                try:
                    with open(os.path.join(tasks, t, "stat")) as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except OSError:
                    pass        # a thread that exited meanwhile
            if states and all(s in ("T", "t") for s in states):
                return
            time.sleep(0.01)
        raise AssertionError("the daemon did not stop within 30 s: %s" % states)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    yield d
    d.stop()
    log = d.read_log()
    assert "Sanitizer" not in log, log[-3000:]


@pytest.fixture
def make_daemon():
    made = []

    def make(**kw):
        d = Daemon(**kw)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()


# --- reference math ----------------------------------------------------------

def bf16_bits(x):
    """float32 values -> bf16 bits (uint16), rounded to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_float(bits):
    """bf16 bits (uint16 or int16) -> float64."""
    b = np.asarray(bits).view(np.uint16).astype(np.uint32) << 16
    return b.view(np.float32).astype(np.float64)


def kv_float(a):
    a = np.asarray(a)
    if a.dtype == np.float16:
        return a.astype(np.float64)
    return bf16_float(a)


def attn_ref(q, k, v, scale=None):
    """float64 attention of q (g, d) over rows k, v (n, d): (o, lse)."""
    q = np.asarray(q, dtype=np.float64)
    k = kv_float(k)
    v = kv_float(v)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[1])
    if k.shape[0] == 0:
        return np.zeros(q.shape), np.full(q.shape[0], -np.inf)
    s = scale * (q @ k.T)
    m = s.max(axis=1, keepdims=True)
    w = np.exp(s - m)
    tot = w.sum(axis=1)
    return (w @ v) / tot[:, None], m[:, 0] + np.log(tot)


def merge_ref(states):
    """float64 merge of (o, lse) states."""
    lses = np.stack([s[1] for s in states])
    m = np.max(lses, axis=0)
    mm = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(lses - mm)
    tot = w.sum(axis=0)
    o = sum(w[i][:, None] * states[i][0] for i in range(len(states)))
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.where(tot[:, None] > 0, o / np.where(tot > 0, tot, 1)[:, None], 0.0)
        lse = np.where(tot > 0, mm + np.log(tot), -np.inf)
    return o, lse


def assert_attn(o, lse, ref, tol=2e-4):
    ro, rl = ref
    o = np.asarray(o, dtype=np.float64)
    lse = np.asarray(lse, dtype=np.float64)
    np.testing.assert_allclose(o, ro, rtol=tol, atol=tol)
    fin = np.isfinite(rl)
    np.testing.assert_array_equal(np.isfinite(lse), fin)
    np.testing.assert_allclose(lse[fin], rl[fin], rtol=tol, atol=tol)


@pytest.fixture
def rng(request):
    # One seed per test: failures reproduce.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


# --- a session with offloaded requests ---------------------------------------

LAYERS, KV_HEADS, GROUP, DIM = 2, 2, 4, 64


class Req:
    """One request's random KV, clustered per (layer, head) and offloaded."""

    def __init__(self, rng, client, session, rid, n, extra=0, fp16=False):
        self.id, self.n = rid, n
        shape = (LAYERS, KV_HEADS, n + extra, DIM)
        if fp16:
            self.k = rng.standard_normal(shape).astype(np.float16)
            self.v = rng.standard_normal(shape).astype(np.float16)
        else:
            self.k = bf16_bits(rng.standard_normal(shape))
            self.v = bf16_bits(rng.standard_normal(shape))
        client.alloc_request(session, rid, n + extra, n + extra)
        self.ix = [[None] * KV_HEADS for _ in range(LAYERS)]
        for l in range(LAYERS):
            for h in range(KV_HEADS):
                ix = nelssa.ClusterIndex(self.k[l, h, :n])
                client.offload(session, rid, l, h, ix, self.k[l, h, :n], self.v[l, h, :n])
                self.ix[l][h] = ix

    def grow(self, client, session, extra, new_rows_only=False):
        """Clusters @extra more tokens and appends them, with every row so
        far or (new_rows_only) the new ones alone (base=)."""
        lo = self.n if new_rows_only else 0
        for l in range(LAYERS):
            for h in range(KV_HEADS):
                ix = self.ix[l][h]
                old = ix.append(self.k[l, h, self.n:self.n + extra])
                client.append(session, self.id, l, h, ix, self.k[l, h, lo:self.n + extra],
                              self.v[l, h, lo:self.n + extra], old, base=lo)
        self.n += extra

    def tokens(self, layer, head, sel):
        ix = self.ix[layer][head]
        perm, table = ix.perm, ix.table
        parts = [perm[table[c, 0]:table[c, 0] + table[c, 1]] for c in sel]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)

    def ref(self, layer, head, sel, q):
        tok = self.tokens(layer, head, sel)
        return attn_ref(q, self.k[layer, head][tok], self.v[layer, head][tok])


def open_session(client, fp16=False, **kw):
    kv = kw.pop("kv_dtype", nelssa.KV_FP16 if fp16 else nelssa.KV_BF16)
    return client.open_session(LAYERS, KV_HEADS * GROUP, KV_HEADS, DIM, kv_dtype=kv,
                               capacity_tokens=kw.pop("capacity_tokens", 1 << 14), **kw)


def random_items(rng, reqs, layer):
    """(items, q) of a step over every (request, head), random selections."""
    items = []
    for r in reqs:
        for h in range(KV_HEADS):
            nc = r.ix[layer][h].n_clusters
            want = int(rng.integers(1, nc + 1))
            sel = rng.permutation(nc)[:want].astype(np.uint32)
            items.append((r.id, h, sel))
    q = rng.standard_normal((len(items), GROUP, DIM)).astype(np.float32)
    return items, q


def check_step(reqs, layer, items, q, o, lse):
    by_id = {r.id: r for r in reqs}
    for i, (rid, h, sel) in enumerate(items):
        assert_attn(o[i], lse[i], by_id[rid].ref(layer, h, list(sel), q[i]))


# --- etcd and registered nodes (test_cluster.py, test_serve_cluster.py) ------

ETCD = shutil.which("etcd")
ETCDCTL = shutil.which("etcdctl")
TTL = 2             # --etcd-ttl of the daemons here, s
UPDATE_MS = 100     # --etcd-update-ms


def nelssactl():
    exe = os.path.join(os.path.dirname(os.environ.get("NELSSAD", "")), "..", "tools",
                       "nelssactl", "nelssactl")
    if not os.path.exists(exe):
        pytest.skip("nelssactl not built beside nelssad")
    return exe


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, cond, timeout=30.0):
    """cond() until it returns something true, polled; fails after @timeout s."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            pytest.fail("timed out waiting for " + what)
        time.sleep(0.05)


def make_certs(d):
    """A CA, a certificate for 127.0.0.1 (server and client use) signed by
    it, and a second CA nobody trusts, in directory d (openssl)."""
    def ssl(*a):
        subprocess.run(["openssl"] + list(a), check=True, capture_output=True, timeout=60)
    p = {k: os.path.join(d, k + ".pem") for k in ("ca", "ca-key", "crt", "key", "other")}
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", p["ca-key"], "-out", p["ca"])
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=other",
        "-keyout", os.path.join(d, "other-key.pem"), "-out", p["other"])
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    csr = os.path.join(d, "req.csr")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", p["key"],
        "-out", csr)
    ssl("x509", "-req", "-in", csr, "-CA", p["ca"], "-CAkey", p["ca-key"], "-CAcreateserial",
        "-days", "2", "-extfile", ext, "-out", p["crt"])
    return p


class Etcd:
    """etcd on free loopback ports; with tls (make_certs()), https only, and
    client certificates required."""

    def __init__(self, port=None, tls=None, extra=()):
        self.dir = tempfile.mkdtemp(prefix="nelssa-etcd-")
        self.port = port or free_port()
        self.peer = free_port()
        self.tls, self.extra = tls, list(extra)
        self.user = None                # USER:PASSWORD etcdctl passes, once auth is on
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)
        self.proc = None
        self.start()

    def start(self, wipe=False):
        if wipe:
            shutil.rmtree(os.path.join(self.dir, "data"), ignore_errors=True)
        peer = "http://127.0.0.1:%d" % self.peer
        self.log = open(os.path.join(self.dir, "etcd.log"), "a")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "t", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", "t=" + peer] +
            (["--cert-file", self.tls["crt"], "--key-file", self.tls["key"],
              "--trusted-ca-file", self.tls["ca"], "--client-cert-auth"] if self.tls else []) +
            self.extra,
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("etcd to serve", lambda: self.ctl("endpoint", "health", check=False)
                 .returncode == 0)

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def stop(self):
        if self.proc.poll() is None:
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def ctl(self, *args, check=True, user=None, stdin=None):
        cmd = [ETCDCTL, "--endpoints", self.url, "--command-timeout=5s"]
        if self.tls:
            cmd += ["--cacert", self.tls["ca"], "--cert", self.tls["crt"], "--key", self.tls["key"]]
        if user or self.user:
            cmd += ["--user", user or self.user]
        r = subprocess.run(cmd + list(args), capture_output=True, text=True, input=stdin,
                           env=dict(os.environ, ETCDCTL_API="3"), timeout=30)
        if check and r.returncode:
            pytest.fail("etcdctl %s: %s" % (" ".join(args), r.stderr))
        return r

    def records(self, cluster="t", user=None):
        """{node id: (record, lease)} as etcdctl reads them."""
        out = self.ctl("get", "--prefix", "/nelssa/%s/nodes/" % cluster, "-w", "json",
                       user=user).stdout
        kvs = json.loads(out).get("kvs", [])
        return {base64.b64decode(kv["key"]).decode().rsplit("/", 1)[1]:
                (json.loads(base64.b64decode(kv.get("value", "")) or b"null"), kv.get("lease"))
                for kv in kvs}


@pytest.fixture
def etcd():
    e = Etcd()
    yield e
    e.stop()


@pytest.fixture
def nodes():
    made = []

    def make(etcd_url, node_id, *extra, env=None, devices="sim:2"):
        d = Daemon(env=env, devices=devices,
                   args=["--etcd", etcd_url, "--cluster", "t", "--node-id", node_id,
                         "--etcd-ttl", str(TTL), "--etcd-update-ms", str(UPDATE_MS)] +
                   list(extra))
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()
        assert "Sanitizer" not in d.read_log(), d.read_log()[-3000:]
