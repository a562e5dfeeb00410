# SPDX-License-Identifier: MIT
"""make bench, scale-out (Documentation/cluster.rst, "Benchmark"): run by
scripts/cluster-bench.sh with an etcd and nelssad of its own.

1. Placement decisions per second: nelssa.Placer.place() + release() on a
   view of 64 node records (the policy alone), and with the view read from
   etcd before each decision; the same-run baseline is a trivial call
   through the same binding (view_age_ms).
2. The cluster layer's step overhead: the serving engine on one node,
   reached through the registry (--etcd) and directly (--port), runs
   interleaved; the ratio of their median decode-step times (target < 2 %
   more through the cluster).
3. Other nodes during a failure: a client steps a session on node n1 in a
   loop while the engine serves on n0, n1 and n2; n0 is killed -9 half way;
   n1's step round trips before and after the kill (target: P99 within
   1.2x), and how long the engine took to notice.

Prints one JSON object last; the CPU model and ISA first."""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import nelssa
from nelssa.serve import config, workload
from nelssa.serve.engine import Engine, EngineConfig
from nelssa.serve.model import Model

BUILD = sys.argv[1] if len(sys.argv) > 2 else ""
ETCD_URL = sys.argv[2] if len(sys.argv) > 2 else ""
NELSSAD = os.path.join(BUILD, "daemon", "nelssad")
TMP = tempfile.mkdtemp(prefix="nelssa-cluster-bench-")


def cpu():
    model, flags = "unknown", ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line
    isa = "avx512f" if " avx512f" in flags else "avx2" if " avx2" in flags else "baseline"
    return model, isa


def etcdctl(*args, stdin=None):
    return subprocess.run(["etcdctl", "--endpoints", ETCD_URL] + list(args), input=stdin,
                          capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"),
                          check=True).stdout


def start_node(name, cluster="bench"):
    portfile = os.path.join(TMP, name + ".port")
    log = open(os.path.join(TMP, name + ".log"), "w")
    p = subprocess.Popen([NELSSAD, "--listen", "127.0.0.1:0", "--port-file", portfile,
                          "--devices", "sim:2", "--sim-opts", "mem=512M,cores=1,spin_us=0",
                          "--etcd", ETCD_URL, "--cluster", cluster, "--node-id", name,
                          "--etcd-ttl", "2", "--etcd-update-ms", "200"],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(portfile) and open(portfile).read().strip():
            return p, int(open(portfile).read())
        time.sleep(0.05)
    raise SystemExit("nelssad %s did not start" % name)


def wait_records(n, cluster="bench"):
    for _ in range(600):
        out = etcdctl("get", "--prefix", "/nelssa/%s/nodes/" % cluster, "--keys-only")
        if len([x for x in out.split() if x]) == n:
            return
        time.sleep(0.05)
    raise SystemExit("%d nodes did not register" % n)


def placement_rate():
    rec = {"schema": "nelssa.node/1", "version": "0.1.0", "data_port": 2, "devices": 4,
           "kv_bytes_total": 1 << 40, "kv_bytes_free": 1 << 40, "tokens_held": 0,
           "max_sessions": 64, "sessions": 0, "requests": 0, "steps_in_flight": 0,
           "kv_in_flight": 0, "step_us": 0, "steps": 0, "updated_ms": 0, "held": [],
           "held_more": 0}
    for i in range(64):
        r = dict(rec, id="p%02d" % i, control="10.0.0.%d:18515" % i, tokens_held=i * 1000)
        etcdctl("put", "/nelssa/place/nodes/p%02d" % i, stdin=json.dumps(r))
    out = {}
    with nelssa.Placer(ETCD_URL, cluster="place", token_bytes=1 << 17,
                       refresh_ms=1 << 30) as p:
        n = 50000
        t = time.perf_counter()
        for _ in range(n):
            p.view_age_ms
        base = (time.perf_counter() - t) / n
        t = time.perf_counter()
        for _ in range(n):
            p.release(p.place(4096), 4096)
        pol = (time.perf_counter() - t) / n
        m = 200
        t = time.perf_counter()
        for _ in range(m):
            p.refresh()
            p.release(p.place(4096), 4096)
        fresh = (time.perf_counter() - t) / m
    out.update(nodes=64, decisions_per_s=1 / pol, baseline_call_s=base,
               decision_over_baseline=pol / base, decisions_per_s_view_read_each=1 / fresh)
    return out


SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, retrieval_heads=1)


def reqs(n, seed, lo=600, hi=900, new=40):
    rng = np.random.default_rng(seed)
    return [workload.Request(i, rng.integers(0, 512, int(rng.integers(lo, hi))).tolist(), new)
            for i in range(n)]


def engine_cfg(**kw):
    base = dict(mode="nelssa", pool_tokens=8192, threshold=100, capacity_tokens=65536, sink=4,
                recent=16, chunk=16, min_select=16, select=0.25, accuracy_every=0,
                timeout_ms=20000, max_batch=16, prefill_elsewhere=True)
    base.update(kw)
    return EngineConfig(**base)


def decode_steps(e):
    # Steps with the whole batch decoding (after the prefills).
    full = max(len(e.finished), 1)
    times = [s[0] for s in e.step_log if s[3] == full]
    return times or [s[0] for s in e.step_log]


def overhead(model, port):
    direct, cluster, pairs = [], [], []
    rs = reqs(8, seed=5, lo=3000, hi=4000, new=150)
    for rep in range(6):
        order = [("direct", dict(port=port)), ("cluster", dict(etcd=ETCD_URL, cluster="solo"))]
        if rep % 2:
            order.reverse()
        med = {}
        for name, kw in order:
            e = Engine(model, engine_cfg(**kw))
            try:
                e.run([workload.Request(r.rid, list(r.prompt), r.max_new) for r in rs])
            finally:
                e.close()
            if {x.where for x in e.finished} != {"pnm"}:
                raise SystemExit("overhead: a request of the %s run was not on NELSSA" % name)
            (direct if name == "direct" else cluster).extend(decode_steps(e))
            med[name] = statistics.median(decode_steps(e))
        pairs.append(med["cluster"] / med["direct"])
    md, mc = statistics.median(direct), statistics.median(cluster)
    # What the cluster layer itself does on a step, timed alone: grouping
    # the batch's requests by node and the call wrapper, for 8 requests.
    layer = layer_cost(model, port)
    return dict(layer_us_per_step=layer * 1e6, layer_over_step=layer / md,
                steps_each=len(direct), direct_step_ms=md * 1e3, cluster_step_ms=mc * 1e3,
                cluster_over_direct=mc / md, pair_ratios=pairs,
                pair_ratio_median=statistics.median(pairs))


def layer_cost(model, port):
    from nelssa.serve.nodes import Node, Slot
    e = Engine(model, engine_cfg(etcd=ETCD_URL, cluster="solo"))
    rs = reqs(8, seed=5, lo=300, hi=400, new=2)
    try:
        e.run([workload.Request(r.rid, list(r.prompt), r.max_new) for r in rs])
        seqs = list(enumerate(e.finished))
        node = Node("x", "h", 1)
        slot = Slot(node, 1)
        for _, s in seqs:
            e.nodes.of[s.req.rid] = slot
        n = 20000

        class Bare:
            def step_send(self, session, *a):
                return None
        node.client = bare = Bare()
        t = time.perf_counter()
        for _ in range(n):
            for _ in range(e.L):
                bare.step_send(1, 0)
        base = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(n):
            for _ in range(e.L):
                for slot_, group in e._by_session(seqs):
                    slot_.call("step_send", 0)
        return max(0.0, time.perf_counter() - t - base) / n
    finally:
        e.close()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(np.ceil(p / 100 * len(v))) - 1))]


def probe(port, stop_file, out_file):
    """A process of its own (no GIL shared with the engine): steps a
    session on one node until @stop_file exists, then writes its samples."""
    c = nelssa.Client("127.0.0.1", port, timeout_ms=20000)
    s = c.open_session(2, 8, 2, 64, capacity_tokens=8192)
    rng = np.random.default_rng(1)
    n = 4096
    k = (rng.integers(0, 1 << 15, (n, 64)) & 0x3fff).astype(np.int16)
    v = (rng.integers(0, 1 << 15, (n, 64)) & 0x3fff).astype(np.int16)
    ix = nelssa.ClusterIndex(k)
    c.alloc_request(s, 1, n, ix.n_clusters)
    for layer in range(2):
        for h in range(2):
            c.offload(s, 1, layer, h, ix, k, v)
    sel = np.arange(min(64, ix.n_clusters), dtype=np.uint32)
    q = rng.standard_normal((2, 4, 64)).astype(np.float32)
    samples = []
    open(out_file + ".ready", "w").close()
    while not os.path.exists(stop_file):
        t = time.perf_counter()
        c.step(s, 0, [(1, 0, sel), (1, 1, sel)], q)
        samples.append((time.monotonic(), time.perf_counter() - t))
    c.close()
    with open(out_file, "w") as f:
        json.dump(samples, f)


def failure(model, nodes):
    """A probe process steps n1 while the engine serves on all three; n0 dies."""
    stop, res = os.path.join(TMP, "stop"), os.path.join(TMP, "probe.json")
    pr = subprocess.Popen([sys.executable, __file__, "--probe", str(nodes["n1"][1]), stop, res])
    for _ in range(600):
        if os.path.exists(res + ".ready") or pr.poll() is not None:
            break
        time.sleep(0.05)
    e = Engine(model, engine_cfg(etcd=ETCD_URL, cluster="bench", max_batch=12))
    rs = reqs(12, seed=6, new=60)
    killed = {}

    def at(eng):
        if eng.steps == 30 and "t" not in killed:
            killed["t"] = time.monotonic()
            nodes["n0"][0].send_signal(signal.SIGKILL)
    try:
        e.run([workload.Request(r.rid, list(r.prompt), r.max_new) for r in rs], progress=at)
    finally:
        e.close()
        open(stop, "w").close()
        pr.wait()
    with open(res) as f:
        samples = json.load(f)
    t_kill = killed["t"]
    before = [d for t, d in samples if t < t_kill]
    after = [d for t, d in samples if t >= t_kill]
    loss = e.node_losses[0] if e.node_losses else None
    return dict(probe_steps_before=len(before), probe_steps_after=len(after),
                probe_p50_ms_before=pct(before, 50) * 1e3, probe_p99_ms_before=pct(before, 99) * 1e3,
                probe_p50_ms_after=pct(after, 50) * 1e3, probe_p99_ms_after=pct(after, 99) * 1e3,
                probe_p99_after_over_before=pct(after, 99) / pct(before, 99),
                detected_after_s=loss["mono"] - t_kill if loss else None,
                requests_prefilled_again=len(loss["requests"]) if loss else 0,
                finished=len(e.finished), requests=len(rs))


def main():
    model_name, isa = cpu()
    print("== cluster bench on %s (%s), torch threads %d ==" % (model_name, isa,
          __import__("torch").get_num_threads()), file=sys.stderr)
    out = dict(cpu=model_name, isa=isa)
    out["placement"] = placement_rate()
    print("placement: %(decisions_per_s).0f decisions/s over %(nodes)d nodes "
          "(%(decision_over_baseline).1fx a trivial binding call); "
          "%(decisions_per_s_view_read_each).0f/s reading etcd each time" % out["placement"],
          file=sys.stderr)
    model = Model.random(config.ModelConfig(**SMALL).check(), seed=3)
    nodes = {"solo": start_node("solo", cluster="solo")}
    try:
        # The same node reached directly and through the registry.
        wait_records(1, "solo")
        out["overhead"] = overhead(model, nodes["solo"][1])
        print("the cluster layer's own code: %(layer_us_per_step).1f us a step, %(layer_over_step).4f "
              "of the median step" % out["overhead"], file=sys.stderr)
        print("step through the cluster layer / direct: %(cluster_over_direct).4f "
              "(median %(cluster_step_ms).2f vs %(direct_step_ms).2f ms, %(steps_each)d steps "
              "each); median of run pairs %(pair_ratio_median).3f:" % out["overhead"],
              " ".join("%.3f" % r for r in out["overhead"]["pair_ratios"]), file=sys.stderr)
        for name in ("n0", "n1", "n2"):
            nodes[name] = start_node(name)
        wait_records(3)
        out["failure"] = failure(model, nodes)
        print("n1's step P99 after n0's kill / before: %(probe_p99_after_over_before).3f "
              "(%(probe_p99_ms_before).2f -> %(probe_p99_ms_after).2f ms); loss noticed "
              "%(detected_after_s).3f s after kill -9" % out["failure"], file=sys.stderr)
    finally:
        for p, _ in nodes.values():
            p.kill()
            p.wait()
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        probe(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        main()
