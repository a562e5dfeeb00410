# SPDX-License-Identifier: MIT
"""nelssa.serve: the split-batch engine.  The model against a float64
Llama written here from the published architecture, decode against
repeated prefill, the NELSSA path at 100 % selection against dense
attention, routing against nelssa.Router, migration and preemption against
runs without them, the safetensors reader, workloads and the CLI."""

import errno
import io
import json
import os
import math
import struct
from contextlib import redirect_stdout

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nelssa  # noqa: E402
from nelssa.serve import calibrate, config, report, safetensors, workload  # noqa: E402
from nelssa.serve.__main__ import main as serve_main  # noqa: E402
from nelssa.serve.engine import Engine, EngineConfig  # noqa: E402
from nelssa.serve.kvpool import KVPool, PoolFull  # noqa: E402
from nelssa.serve.model import Model  # noqa: E402

SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, retrieval_heads=1)


@pytest.fixture(scope="module")
def model():
    return Model.random(config.ModelConfig(**SMALL).check(), seed=3)


def reqs(lens, new, seed=0, vocab=512):
    rng = np.random.default_rng(seed)
    return [workload.Request(i, rng.integers(0, vocab, n).tolist(), m)
            for i, (n, m) in enumerate(zip(lens, new))]


def run(model, requests, **kw):
    e = Engine(model, EngineConfig(**kw))
    try:
        e.run([workload.Request(r.rid, list(r.prompt), r.max_new, r.arrival)
               for r in requests])
    finally:
        e.close()
    return e


def outputs(e):
    return {s.req.rid: s.tokens[len(s.req.prompt):] for s in e.finished}


# --- the model against float64 -----------------------------------------------

def llama_ref(w, cfg, tokens):
    """float64 Llama-3 forward, last token's logits; K and V rounded to bf16."""
    f = {k: v.double() for k, v in w.items()}
    n, D, Hq, Hk = len(tokens), cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    inv = 1.0 / cfg.rope_theta ** (np.arange(0, D, 2) / D)
    rs = cfg.rope_scaling
    if rs:
        wl = 2 * np.pi / inv
        lo_w = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
        hi_w = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
        sm = (rs["original_max_position_embeddings"] / wl - rs["low_freq_factor"]) / (
            rs["high_freq_factor"] - rs["low_freq_factor"])
        inv = np.where(wl > lo_w, inv / rs["factor"],
                       np.where(wl < hi_w, inv, (1 - sm) * inv / rs["factor"] + sm * inv))
    ang = np.arange(n)[:, None] * inv[None, :]
    cos = torch.tensor(np.concatenate([np.cos(ang)] * 2, 1))[:, None, :]
    sin = torch.tensor(np.concatenate([np.sin(ang)] * 2, 1))[:, None, :]

    def rope(x):
        h = D // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    def norm(x, g):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.rms_norm_eps) * g

    def bf16(x):
        return x.float().to(torch.bfloat16).double()

    x = f["model.embed_tokens.weight"][torch.tensor(tokens)]
    for i in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % i
        h = norm(x, f[p + "input_layernorm.weight"])
        q = rope((h @ f[p + "self_attn.q_proj.weight"].T).view(n, Hq, D))
        k = bf16(rope((h @ f[p + "self_attn.k_proj.weight"].T).view(n, Hk, D)))
        v = bf16((h @ f[p + "self_attn.v_proj.weight"].T).view(n, Hk, D))
        out = torch.zeros(n, Hq, D, dtype=torch.float64)
        for qh in range(Hq):
            kh = qh // (Hq // Hk)
            s = q[:, qh] @ k[:, kh].T / math.sqrt(D)
            s = s.masked_fill(torch.ones(n, n).triu(1).bool(), -math.inf)
            out[:, qh] = torch.softmax(s, -1) @ v[:, kh]
        x = x + out.view(n, -1) @ f[p + "self_attn.o_proj.weight"].T
        h = norm(x, f[p + "post_attention_layernorm.weight"])
        g = h @ f[p + "mlp.gate_proj.weight"].T
        x = x + (g * torch.sigmoid(g) * (h @ f[p + "mlp.up_proj.weight"].T)) @ \
            f[p + "mlp.down_proj.weight"].T
    return (norm(x, f["model.norm.weight"]) @ f["lm_head.weight"].T)[-1]


@pytest.mark.parametrize("scaling", [None, dict(factor=8.0, low_freq_factor=1.0,
                                                high_freq_factor=4.0,
                                                original_max_position_embeddings=64)])
def test_model_matches_float64_llama(scaling):
    cfg = config.ModelConfig(**dict(SMALL, rope_scaling=scaling, rope_theta=10000.0)).check()
    m = Model.random(cfg, seed=5)
    toks = np.random.default_rng(1).integers(0, cfg.vocab_size, 300).tolist()
    logits, ks, vs = m.prefill(toks, chunk=128)
    ref = llama_ref(m.w, cfg, toks)
    err = (logits.double() - ref).abs().max() / ref.abs().max()
    assert err < 1e-4, err
    assert len(ks) == cfg.num_hidden_layers and ks[0].dtype == torch.bfloat16
    assert tuple(ks[0].shape) == (cfg.num_key_value_heads, 300, cfg.head_dim)


def test_retrieval_heads_are_sparse(model):
    """The random model's retrieval head concentrates attention (model.py)."""
    toks = np.random.default_rng(2).integers(0, 512, 400).tolist()
    toks[-1] = toks[100]
    x = model.embed(torch.tensor(toks))
    q, k, _ = model.qkv(0, x, torch.arange(400))
    D, G = model.cfg.head_dim, model.cfg.group
    p = torch.softmax(q[-1, :G] @ k[:, 0].float().T / math.sqrt(D), -1)
    other = torch.softmax(q[-1, G:] @ k[:, 1].float().T / math.sqrt(D), -1)
    assert int(p[0].argmax()) in (100, 399)
    assert float(p[0].max()) > 10 * float(other[0].max())


# --- decode, pool and preemption --------------------------------------------

def test_pool_pages_round_trip():
    pool = KVPool(8, 4, 2, 2, 3)
    k = [torch.randn(2, 10, 3).to(torch.bfloat16) for _ in range(2)]
    v = [torch.randn(2, 10, 3).to(torch.bfloat16) for _ in range(2)]
    pool.write_prompt(7, k, v)
    assert pool.used == 3
    pool.extend(7)
    pool.put(7, 1, 10, k[1][:, 0], v[1][:, 0])
    kk, vv = pool.read(7, 1)
    assert torch.equal(kk[:, :10], k[1]) and torch.equal(vv[:, 10], v[1][:, 0])
    with pytest.raises(PoolFull):
        pool.reserve(8, 6)
    assert pool.used == 3
    assert pool.release(7) == 3 and pool.used == 0


def test_decode_matches_repeated_prefill(model):
    rs = reqs([40, 75, 130], [6, 5, 7], seed=4)
    e = run(model, rs, mode="gpu", pool_tokens=1024, accuracy_every=0)
    got = outputs(e)
    for r in rs:
        toks = list(r.prompt)
        for _ in range(r.max_new):
            toks.append(int(model.prefill(toks)[0].argmax()))
        assert got[r.rid] == toks[len(r.prompt):], r.rid


def test_preemption_recomputes_to_the_same_tokens(model):
    rs = reqs([100, 120, 90, 110], [30, 30, 30, 30], seed=6)
    big = run(model, rs, mode="gpu", pool_tokens=4096, accuracy_every=0)
    # 32 blocks of 16: the four prompts take 28, their outputs would need 36.
    small = run(model, rs, mode="gpu", pool_tokens=512, accuracy_every=0)
    assert small.preemptions > 0 and big.preemptions == 0
    assert outputs(small) == outputs(big)


def test_request_larger_than_the_pool_is_refused(model):
    rs = reqs([50, 700, 60], [4, 4, 4], seed=7)
    e = run(model, rs, mode="gpu", pool_tokens=512, accuracy_every=0)
    assert [s.req.rid for s in e.refused] == [1]
    assert "larger than the pool" in e.refused[0].refused
    assert sorted(outputs(e)) == [0, 2]


# --- the NELSSA path ---------------------------------------------------------

def nelssa_kw(daemon, **kw):
    base = dict(mode="nelssa", port=daemon.port, pool_tokens=8192, threshold=300,
                capacity_tokens=16384, sink=4, recent=16, chunk=16, min_select=16,
                accuracy_every=1, timeout_ms=20000)
    base.update(kw)
    return base


@pytest.mark.parametrize("estimate,kv_layout", [("none", "packed"), ("mean", "packed"),
                                                ("spread", "packed"), ("mean", "adjacent")])
def test_full_selection_equals_dense(daemon, model, estimate, kv_layout):
    """select = 100 %: every cluster on PNM is read, so the split step is exact
    (with K and V blocks adjacent on the devices too)."""
    rs = reqs([400, 60, 520, 90], [40, 8, 36, 8], seed=8)
    dense = run(model, rs, mode="gpu", pool_tokens=8192, accuracy_every=0)
    e = run(model, rs, **nelssa_kw(daemon, select=1.0, estimate=estimate, kv_layout=kv_layout))
    assert sorted(s.req.rid for s in e.finished if s.where == "pnm") == [0, 2]
    errs = [x for layer in e.errors for head in layer for x in head]
    # Every decode step of each PNM request (its first token comes from the
    # prefill), every layer and KV head.
    assert len(errs) == ((40 - 1) + (36 - 1)) * 2 * 2
    assert max(errs) < 2e-5, max(errs)
    assert outputs(e) == outputs(dense)
    # Decode-time chunks were appended: more tokens on PNM than at prefill.
    st = [s.pnm for s in e.finished if s.req.rid == 0][0]
    assert st.n_off > 400 - 16
    with open(daemon.logpath) as f:
        sessions = [ln for ln in f if "tokens of capacity" in ln]
    assert sessions and sessions[-1].rstrip().endswith(
        "K and V blocks adjacent" if kv_layout == "adjacent" else "K and V arrays packed")


def test_prefilled_kv_goes_to_pnm_a_layer_an_iteration(daemon, model, monkeypatch):
    """A long prompt's layers are clustered and offloaded in separate
    iterations, the running requests decoding in between, and it decodes
    only once all are there (its tokens still equal the dense run's)."""
    seen = []
    offload = Engine._offload_layer

    def record(self, seq, st, layer, k, v, n_keep):
        seen.append((seq.req.rid, layer, self.steps))
        return offload(self, seq, st, layer, k, v, n_keep)

    monkeypatch.setattr(Engine, "_offload_layer", record)
    rs = reqs([60, 90, 800], [30, 30, 6], seed=13)
    dense = run(model, rs, mode="gpu", pool_tokens=8192, accuracy_every=0)
    e = run(model, rs, **nelssa_kw(daemon, select=1.0, migrate=False))
    long = [x for x in seen if x[0] == 2]
    assert [x[1] for x in long] == [0, 1]
    assert long[0][2] < long[1][2], long  # a decode step between the two layers
    s = [s for s in e.finished if s.req.rid == 2][0]
    assert s.where == "pnm" and len(s.t_tokens) == 6
    assert outputs(e) == outputs(dense)


def test_appends_refresh_only_the_new_clusters(daemon, model, monkeypatch):
    """After each decode-time append the selection and estimate arrays,
    recomputed from the first new cluster on and the chunk's rows alone,
    equal a full recompute from every row (the host copy the accuracy
    check keeps)."""
    checked = []
    refresh = Engine._refresh

    def both(self, st, layer, h, k, v, first=0, base=0):
        refresh(self, st, layer, h, k, v, first, base)
        if first:
            assert base > 0 and k.shape[0] == self.cfg.chunk
            got = st.meta[layer][h]
            refresh(self, st, layer, h, st.host_k[layer][h, :st.n_off].view(torch.int16).numpy(),
                    st.host_v[layer][h, :st.n_off].view(torch.int16).numpy())
            assert len(got) == len(st.meta[layer][h]) == 5
            for g, w in zip(got, st.meta[layer][h]):
                np.testing.assert_array_equal(g, w)
            checked.append(first)

    monkeypatch.setattr(Engine, "_refresh", both)
    rs = reqs([600, 50], [40, 10], seed=12)
    run(model, rs, **nelssa_kw(daemon, select=0.04, estimate="spread", accuracy_every=1000))
    assert len(checked) >= 2 * 2 * 2  # two appends at least, every layer and KV head


@pytest.mark.parametrize("kv_layout", ["packed", "adjacent"])
def test_no_host_copy_without_the_accuracy_check(daemon, model, kv_layout):
    """Without the accuracy check the GPU node keeps no offloaded row: the
    prefill goes from the prompt's rows, each append from its chunk's
    (Client.append(base=)), and the tokens are the run's with the copy."""
    rs = reqs([600, 50, 480], [40, 10, 30], seed=13)
    kept = run(model, rs, **nelssa_kw(daemon, select=0.04, accuracy_every=1000,
                                        kv_layout=kv_layout))
    e = run(model, rs, **nelssa_kw(daemon, select=0.04, accuracy_every=0, kv_layout=kv_layout))
    pnm = [s for s in e.finished if s.where == "pnm"]
    assert len(pnm) == 2 and all(s.pnm.host_k is None for s in pnm)
    # Request 0 stored its prompt less sink and window (580 tokens), then appended.
    assert [s.pnm.n_off for s in pnm if s.req.rid == 0][0] > 600 - 4 - 16
    assert all(s.pnm.host_k is not None for s in kept.finished if s.where == "pnm")
    assert outputs(e) == outputs(kept)


def test_sparse_selection_reads_a_budget(daemon, model):
    rs = reqs([700, 50], [10, 10], seed=9)
    e = run(model, rs, **nelssa_kw(daemon, select=0.04))
    errs = [x for layer in e.errors for head in layer for x in head]
    assert errs and all(math.isfinite(x) for x in errs)
    # Sparse, so not exact; the retrieval heads beat the near-uniform ones.
    retr = [x for layer in e.errors for x in layer[0]]
    rest = [x for layer in e.errors for x in layer[1]]
    assert max(errs) > 1e-4
    assert np.median(retr) < np.median(rest)


def test_routing_follows_the_router(daemon, model):
    rs = reqs([100, 350, 299, 300, 800, 40], [4] * 6, seed=10)
    e = run(model, rs, **nelssa_kw(daemon, accuracy_every=0))
    r = nelssa.Router("h100-nvl", layers=2, kv_heads=2, head_dim=32, devices=4,
                      weights=model.weight_bytes)
    r.gpu_kv = 8192 * model.kv_bytes_per_token
    r.t_input = 300
    for s in sorted(e.finished, key=lambda s: s.req.rid):
        want = r.route(len(s.req.prompt), s.req.final_len)
        assert s.where == {nelssa.ROUTE_PNM: "pnm", nelssa.ROUTE_GPU: "gpu"}[want], s.req.rid
    assert e.migrations == 0 and e.router.pnm_requests == 0


def test_too_long_for_the_pool_goes_to_pnm(daemon, model):
    rs = reqs([900, 30], [4, 4], seed=11)
    e = run(model, rs, **nelssa_kw(daemon, pool_tokens=512, threshold=1e9, accuracy_every=0))
    assert {s.req.rid: s.where for s in e.finished} == {0: "pnm", 1: "gpu"}


def router_counts_match(eng):
    """The router's PNM tokens are the admitted requests' tokens: kv_len when
    decoding there, the prompt while in prefill, the count at the start of a
    migration while it moves."""
    want = sum(s.kv_len for s in eng.running if s.where == "pnm")
    want += sum(len(s.tokens) for s in eng.prefilling if s.where == "pnm")
    want += sum(s.moving["n"] for s in eng.running if s.moving is not None)
    n = sum(1 for s in eng.running if s.where == "pnm" or s.moving is not None)
    n += sum(1 for s in eng.prefilling if s.where == "pnm")
    assert (eng.router.pnm_tokens, eng.router.pnm_requests) == (want, n)


def test_requests_only_nelssa_holds_are_paced(daemon, model):
    """A request over the pool is paced as the policy says
    (Router.pnm_step_of): it joins no step that would end before its due
    time; a NELSSA request the GPU could hold takes a token at every step."""
    rs = reqs([900, 400, 40], [12, 12, 40], seed=19)
    e = run(model, rs, **nelssa_kw(daemon, pool_tokens=512, threshold=300, accuracy_every=0))
    by = {s.req.rid: s for s in e.finished}
    assert by[0].where == "pnm" and by[1].where == "pnm"
    extra, held = by[0], by[1]
    assert len(extra.dues) == extra.req.max_new - 1 and not held.dues
    # After each pacing decision it joined only a step that would end at or
    # after its due time (the last step's time the estimate).
    assert len(extra.joins) == len(extra.dues) - 1
    assert all(now >= due - est and est > 0 for now, due, est in extra.joins)
    assert [j[1] for j in extra.joins] == extra.dues[:-1]
    # Each due is set after the step it joined, a period on: later than
    # that join.  (Not always later than the due before: a step shorter
    # than the estimate it was joined by ends before that due.)
    assert all(due > join[0] for due, join in zip(extra.dues[1:], extra.joins))


def test_migration_keeps_outputs(daemon, model):
    """Requests grow past the threshold while the pool fills: the router
    moves the largest to NELSSA; with 100 % selection its tokens do not change."""
    rs = reqs([280, 290, 270, 285], [48] * 4, seed=12)
    dense = run(model, rs, mode="gpu", pool_tokens=8192, accuracy_every=0)
    e = Engine(model, EngineConfig(**nelssa_kw(daemon, select=1.0, pool_tokens=1440,
                                                threshold=300, high_water=0.85)))
    try:
        e.run(rs, progress=router_counts_match)
    finally:
        e.close()
    assert e.migrations >= 1 and e.preemptions == 0
    assert any(s.migrated for s in e.finished)
    assert outputs(e) == outputs(dense)
    errs = [x for layer in e.errors for head in layer for x in head]
    assert errs and max(errs) < 2e-5


# --- files, workloads, the CLI ----------------------------------------------

def test_safetensors_round_trip(tmp_path, model):
    path = tmp_path / "m.safetensors"
    w = {k: v.to(torch.bfloat16) if v.dim() == 2 else v for k, v in model.w.items()}
    safetensors.save(str(path), w, {"format": "pt"})
    back = safetensors.load(str(path))
    assert set(back) == set(w)
    for k in w:
        assert back[k].dtype == w[k].dtype and torch.equal(back[k], w[k])
    m2 = Model.load(model.cfg, str(path))
    toks = list(range(50))
    ref = Model(model.cfg, w).prefill(toks)[0]
    assert torch.equal(m2.prefill(toks)[0], ref)


def _raw(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


@pytest.mark.parametrize("blob,words", [
    (b"\x01\x02", "not a safetensors file"),
    (struct.pack("<Q", 1 << 40), "runs past the file"),
    (struct.pack("<Q", 3) + b"{x}", "not JSON"),
    (_raw({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8),
     "needs dtype"),
    (_raw({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8),
     "do not hold"),
    (_raw({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
     "overlap"),
])
def test_safetensors_refuses_bad_files(tmp_path, blob, words):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(blob)
    with pytest.raises(ValueError, match=words):
        safetensors.load(str(p))


def test_weights_must_match_the_config(tmp_path, model):
    w = dict(model.w)
    w["model.norm.weight"] = torch.ones(3)
    with pytest.raises(ValueError, match="model.norm.weight"):
        Model(model.cfg, w)
    del w["lm_head.weight"]
    with pytest.raises(ValueError, match="lack"):
        Model(model.cfg, w)


def test_trace_workload(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(dict(timestamp=0, input_length=n, output_length=o)) + "\n"
                         for n, o in [(1600, 320), (32, 5000), (400000, 16)]))
    rs = workload.from_trace(str(p), n=3, vocab=100, scale=16, rate=2.0, seed=1,
                             max_len=4096, out_max=64)
    assert [len(r.prompt) for r in rs] == [100, 16, 4096]
    assert [r.max_new for r in rs] == [20, 64, 4]
    assert all(0 <= t < 100 for r in rs for t in r.prompt)
    assert 0 < rs[0].arrival < rs[1].arrival < rs[2].arrival
    with pytest.raises(ValueError, match="3 requests asked for, 2 lines"):
        workload.from_trace(str(p), n=3, vocab=100, skip=1)
    p.write_text('{"input_length": "x"}\n')
    with pytest.raises(ValueError, match=":1: not a Mooncake trace line"):
        workload.from_trace(str(p), n=1, vocab=100)


def test_mixed_workload_has_its_long_requests():
    rs = workload.mixed(vocab=100, short=10, long=3, short_len=(10, 20), long_len=(500, 600))
    assert len(rs) == 13 and sum(len(r.prompt) >= 500 for r in rs) == 3
    assert rs == workload.mixed(vocab=100, short=10, long=3, short_len=(10, 20),
                                long_len=(500, 600))


SHARED_TRACE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data",
                            "mooncake", "conversation_trace.jsonl")


@pytest.mark.skipif(not os.path.exists(SHARED_TRACE), reason="shared/data/mooncake not beside "
                    "the repository")
def test_real_trace_runs_in_both_modes(daemon, model):
    """Requests of the real Mooncake trace (lines the defaults never used),
    scaled down: both modes serve them all, and at 100 % selection alike."""
    rs = workload.from_trace(SHARED_TRACE, n=8, vocab=512, scale=32, skip=5000, seed=2,
                             max_len=1200, out_max=12)
    assert max(len(r.prompt) for r in rs) >= 300
    dense = run(model, rs, mode="gpu", pool_tokens=8192, accuracy_every=0)
    e = run(model, rs, **nelssa_kw(daemon, select=1.0))
    assert len(e.finished) == len(dense.finished) == 8
    assert any(s.where == "pnm" for s in e.finished)
    assert outputs(e) == outputs(dense)


def test_cli_json(daemon, tmp_path):
    f = io.StringIO()
    with redirect_stdout(f):
        rc = serve_main(["--port", str(daemon.port), "--json", "--layers", "2",
                         "--short", "4", "--long", "1", "--long-len", "700,700",
                         "--threshold", "600", "--pool-tokens", "4096",
                         "--capacity-tokens", "16384", "--select", "1.0",
                         "--trace-out", str(tmp_path / "w.jsonl"), "--out", str(tmp_path)])
    assert rc == 0
    out = json.loads(f.getvalue())
    trace = [json.loads(x) for x in (tmp_path / "w.jsonl").read_text().splitlines()]
    assert len(trace) == 5 and max(t["input_length"] for t in trace) == 701
    modes = {r["mode"]: r for r in out["runs"]}
    assert set(modes) == {"gpu", "nelssa"}
    assert modes["nelssa"]["pnm_requests"] == 1 and modes["gpu"]["pnm_requests"] == 0
    assert out["token_agreement"] == 1.0
    assert (tmp_path / "requests-nelssa.csv").exists()
    assert (tmp_path / "timeline-gpu.csv").exists()


def test_cli_refuses_bad_options(capsys):
    with pytest.raises(SystemExit):
        serve_main(["--modes", "gpu,cpu"])
    assert "unknown mode" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        serve_main(["--modes", "nelssa"])
    assert "needs --port" in capsys.readouterr().err


def test_report_agreement_counts_positions(model):
    rs = reqs([30, 40], [5, 5], seed=13)
    a = run(model, rs, mode="gpu", pool_tokens=1024, accuracy_every=0)
    b = run(model, rs, mode="gpu", pool_tokens=1024, accuracy_every=0)
    assert report.agreement(a, b) == (1.0, 1.0)
    b.finished[0].tokens[-1] += 1
    tok, whole = report.agreement(a, b)
    assert tok == pytest.approx(9 / 10) and whole == 0.5


def test_plot_writes_a_png(tmp_path, model):
    e = run(model, reqs([30, 40], [4, 4], seed=14), mode="gpu", pool_tokens=1024,
            accuracy_every=0)
    path = report.plot([e], str(tmp_path / "t.png"))
    try:
        import matplotlib
    except ImportError:
        assert path is None
        return
    assert matplotlib.get_backend().lower() == "agg"
    assert path and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


# --- a daemon that dies or stops, bad configs --------------------------------

@pytest.mark.parametrize("how", ["kill", "stop"])
def test_lost_daemon_falls_back_to_the_gpu(make_daemon, model, how):
    """nelssad killed (SIGKILL) or stopped (SIGSTOP) at step 6: the engine
    recomputes its NELSSA requests on the GPU and finishes every request."""
    d = make_daemon()
    rs = reqs([400, 60, 520, 90], [30, 20, 24, 20], seed=15)
    dense = run(model, rs, mode="gpu", pool_tokens=8192, accuracy_every=0)
    e = Engine(model, EngineConfig(**nelssa_kw(d, select=1.0, timeout_ms=1500)))

    def at_step(eng):
        if eng.steps == 6:
            if how == "kill":
                d.kill()
            else:
                d.pause()

    try:
        e.run([workload.Request(r.rid, list(r.prompt), r.max_new) for r in rs],
              progress=at_step)
    finally:
        e.close()
    assert e.lost is not None, "the loss was not noticed"
    if how == "stop":
        assert "errno %d" % errno.ETIMEDOUT in e.lost, e.lost
    assert e.lost_requests == 2 and e.client is None
    assert outputs(e) == outputs(dense)
    assert {s.where for s in e.finished} == {"gpu"}


def test_lost_daemon_as_a_nelssa_request_finishes(make_daemon, model):
    """nelssad killed right after the step that ended a NELSSA request: that
    request is finished as it is (not recomputed to one token too many)."""
    import signal
    d = make_daemon()
    rs = reqs([400, 60, 520], [10, 30, 40], seed=17)
    dense = run(model, rs, mode="gpu", pool_tokens=8192, accuracy_every=0)
    e = Engine(model, EngineConfig(**nelssa_kw(d, select=1.0, timeout_ms=1500)))

    def at_end(eng):
        if any(s.done and s.where == "pnm" for s in eng.running):
            d.kill(signal.SIGKILL)

    try:
        e.run(rs, progress=at_end)
    finally:
        e.close()
    assert e.lost is not None
    got = outputs(e)
    assert all(len(got[r.rid]) == r.max_new for r in rs)
    assert got == outputs(dense)


@pytest.mark.parametrize("who", ["router", "daemon"])
def test_session_capacity_makes_requests_wait(daemon, model, who):
    """Two NELSSA requests whose ends do not fit nelssad's session together:
    the second waits for the first instead of failing the run (or, as the
    policy says, starting on a GPU that could hold it: this pool cannot)."""
    rs = reqs([400, 420, 50], [20, 20, 20], seed=18)
    peak = []
    e = Engine(model, EngineConfig(**nelssa_kw(daemon, capacity_tokens=500, pool_tokens=384,
                                                accuracy_every=0)))
    if who == "daemon":
        # The router's cap lifted: nelssad's ENOSPC is what stops the second
        # (its arenas round capacities up, so it is made to say it here).
        e.router.cap_pnm_mem = 0.9
        real = e.client

        class Full:
            def __getattr__(self, name):
                return getattr(real, name)

            def alloc_request(self, session, rid, *a):
                if any(x.where == "pnm" and x.req.rid != rid
                       for x in e.running + e.prefilling):
                    raise nelssa.Error(errno.ENOSPC, "session capacity exhausted")
                return real.alloc_request(session, rid, *a)

        e.client = Full()
    try:
        e.run(rs, progress=lambda eng: peak.append(
            sum(s.where == "pnm" for s in eng.running + eng.prefilling)))
    finally:
        if who == "daemon":
            e.client = real
        e.close()
    assert {s.req.rid: s.where for s in e.finished} == {0: "pnm", 1: "pnm", 2: "gpu"}
    assert max(peak) == 1


def test_unreachable_daemon_is_a_clear_error(capsys):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    rc = serve_main(["--port", str(port), "--modes", "nelssa", "--layers", "1", "--short", "1",
                     "--long", "1", "--long-len", "100,100"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("nelssa.serve: error: ") and "Traceback" not in err


@pytest.mark.parametrize("text,words", [
    ("[1, 2]", "a JSON object"),
    ("{", "Expecting"),
    ('{"hidden_size": "big"}', "hidden_size must be a positive integer"),
    ('{"num_attention_heads": 6, "num_key_value_heads": 4}', "must be a multiple"),
    ('{"rope_theta": -1}', "rope_theta must be a number > 0"),
    ('{"rope_scaling": {"factor": 8}}', "rope_scaling must be null"),
    ('{"retrieval_heads": 9}', "retrieval_heads must be in"),
])
def test_bad_model_configs(tmp_path, capsys, text, words):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(ValueError, match=words):
        config.ModelConfig.from_json(str(p))
    assert serve_main(["--modes", "gpu", "--config", str(p)]) == 1
    assert words.split()[0] in capsys.readouterr().err


def test_bad_weight_files_and_engine_configs(tmp_path, capsys):
    p = tmp_path / "w.safetensors"
    p.write_bytes(b"\x00" * 4)
    assert serve_main(["--modes", "gpu", "--weights", str(p)]) == 1
    assert "not a safetensors file" in capsys.readouterr().err
    assert serve_main(["--modes", "gpu", "--weights", str(tmp_path / "none")]) == 1
    assert "No such file" in capsys.readouterr().err
    with pytest.raises(ValueError, match="mode"):
        EngineConfig(mode="cpu").check()
    with pytest.raises(ValueError, match="select"):
        EngineConfig(mode="gpu", select=0).check()
    with pytest.raises(ValueError, match="port"):
        EngineConfig(mode="nelssa").check()
    with pytest.raises(ValueError, match="pool_tokens"):
        EngineConfig(mode="gpu", pool_tokens=4).check()
    with pytest.raises(ValueError, match="estimate must be one of mean, spread, none"):
        EngineConfig(mode="gpu", estimate=True).check()
    with pytest.raises(SystemExit):
        serve_main(["--modes", "gpu", "--estimate", "median"])
    assert "invalid choice: 'median'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="kv_layout must be one of adjacent, packed"):
        EngineConfig(mode="gpu", kv_layout="interleaved").check()
    with pytest.raises(SystemExit):
        serve_main(["--modes", "gpu", "--kv-layout", "interleaved"])
    assert "invalid choice: 'interleaved'" in capsys.readouterr().err


def test_pool_never_exceeds_its_budget(daemon, model):
    """Under pressure (preemption, migration, windows charged) the pool's
    blocks in use never pass its size, and every block comes back."""
    rs = reqs([280, 290, 270, 285, 600, 50], [48, 48, 48, 48, 20, 30], seed=16)
    seen = []
    e = Engine(model, EngineConfig(**nelssa_kw(daemon, pool_tokens=1440, threshold=300,
                                                high_water=0.85, accuracy_every=0)))
    try:
        e.run(rs, progress=lambda eng: seen.append(
            (eng.pool.used, sum(len(t) for t in eng.pool.tables.values()) +
             sum(len(t) for t in eng.pool.reserved.values()))))
    finally:
        e.close()
    assert seen and all(used <= e.pool.blocks for used, _ in seen)
    # The blocks in use are exactly those the requests hold.
    assert all(used == held for used, held in seen)
    assert e.pool.used == 0 and len(e.pool.free) == e.pool.blocks
    assert len(set(e.pool.free)) == e.pool.blocks


def test_adaptive_threshold_lowers_under_gpu_pressure(daemon, model):
    e = Engine(model, EngineConfig(**nelssa_kw(daemon, adaptive=True, threshold=4000)))
    try:
        e.waiting = []
        e.pool.reserve("filler", e.pool.blocks)      # a full pool: GPU pressure 1
        before = e.router.t_input
        e._adapt(e.ctl.period)
        # Imbalance 1 (the pool full, the PNM tier idle): x -= min(gain, max_step).
        step = min(e.ctl.gain, e.ctl.max_step)
        assert e.router.t_input == pytest.approx(before * 2 ** -step)
    finally:
        e.close()


# --- the simulator's step model ----------------------------------------------

class _Logged:
    """What calibrate.fit() reads of an engine: its model, steps, prefill."""

    def __init__(self, model, steps, prefill=(), window=0):
        self.m, self.step_log, self.prefill_log = model, list(steps), list(prefill)
        self.router = type("R", (), {"window": window})() if window else None


def test_calibration_recovers_known_terms(model):
    """Steps made from known terms (and 1 % noise) give those terms back;
    the weights are the model's bytes, read at the fitted bandwidth."""
    rng = np.random.default_rng(20)
    b, c = 4e-4, 2e-6
    a = c * model.weight_bytes / model.kv_bytes_per_token
    gpu = [tuple(x) for x in ([(a + b * n + c * kv) * (1 + 0.01 * rng.standard_normal()),
                                n, kv, 0, 0] for n, kv in
                               zip(rng.integers(1, 30, 200), rng.integers(100, 9000, 200)))]
    L, mkv, S, N = model.cfg.num_hidden_layers, model.kv_bytes_per_token, 0.04, 4
    t_base, pnm_bw, win = 2e-4, 5e7, 84
    pnm = []
    for n_gpu, kv_gpu, n_pnm, kv_pnm in zip(rng.integers(0, 20, 200), rng.integers(0, 5000, 200),
                                            rng.integers(1, 6, 200),
                                            rng.integers(1000, 40000, 200)):
        t = a + b * (n_gpu + n_pnm) + c * (kv_gpu + kv_pnm / 16 + win * n_pnm)
        t += L * t_base + S * kv_pnm * mkv / (N * pnm_bw)
        pnm.append((t, n_gpu, kv_gpu, n_pnm, kv_pnm, 0.0))
    prefill = [(512, 0, 0.5), (512, 512, 0.7)]
    terms = calibrate.fit(_Logged(model, gpu, prefill), _Logged(model, pnm, window=win),
                          devices=N, select=S)
    assert terms["gpu_bw"] == pytest.approx(mkv / c, rel=0.05)
    assert terms["weights"] == model.weight_bytes
    assert terms["fixed_s"] == pytest.approx(a, rel=0.05)
    assert terms["gpu_flops"] == pytest.approx(2 * terms["params"] / b, rel=0.05)
    assert terms["t_base"] == pytest.approx(t_base, rel=0.15)
    assert terms["pnm_bw"] == pytest.approx(pnm_bw, rel=0.05)
    assert terms["prefill_flops"] == pytest.approx(2 * terms["params"] * 1024 / 1.2)
    assert terms["clamped"] == []
    with pytest.raises(ValueError, match="GPU-only steps"):
        calibrate.fit(_Logged(model, gpu[:5]))
    # One batch and one context throughout: the two terms cannot be told apart.
    flat = [(a + b * 8 + c * 4000, 8, 4000, 0, 0)] * 16
    with pytest.raises(ValueError, match="do not vary enough"):
        calibrate.fit(_Logged(model, flat))
    # Steps that do not grow with the batch: the per-request term is fitted
    # at zero (non-negative least squares), the bandwidth still right.
    shrink = [(a + c * kv - 1e-4 * n, n, kv, 0, 0) for n, kv in
              zip(rng.integers(1, 30, 50), rng.integers(100, 9000, 50))]
    terms = calibrate.fit(_Logged(model, shrink))
    assert terms["clamped"] == ["per_request_s"] and terms["per_request_s"] == 0
    assert terms["gpu_flops"] > 1e15 and terms["weights"] == model.weight_bytes
    # Steps of no duration (a broken clock) are left out, not fitted.
    half = [(0.0, *g[1:]) if i % 2 else g for i, g in enumerate(gpu)]
    assert calibrate.fit(_Logged(model, half))["gpu_steps"] == len(gpu) // 2
    with pytest.raises(ValueError, match="GPU-only steps, at least 8"):
        calibrate.fit(_Logged(model, [(0.0, *g[1:]) for g in gpu]))
    # A PNM tier with no fixed cost: t_base is fitted at zero and said so.
    flat_pnm = [(t - L * t_base, *rest) for t, *rest in pnm]
    terms = calibrate.fit(_Logged(model, gpu), _Logged(model, flat_pnm, window=win),
                          devices=N, select=S)
    assert terms["t_base"] < 1e-5 and terms["pnm_bw"] == pytest.approx(pnm_bw, rel=0.05)
    assert terms["clamped"] in ([], ["t_base"])
    # A PNM tier whose steps get faster with more tokens: its per-token term
    # at zero, its bandwidth "infinite", and said so.
    per_tok = S * mkv / (N * pnm_bw)
    odd = [(t - 2 * per_tok * kv, n_gpu, kv_gpu, n_pnm, kv, w)
           for t, n_gpu, kv_gpu, n_pnm, kv, w in pnm]
    terms = calibrate.fit(_Logged(model, gpu), _Logged(model, odd, window=win), devices=N,
                          select=S)
    assert "pnm_bw" in terms["clamped"] and terms["pnm_bw"] == 1e15


def test_sim_out_files_feed_nelssa_sim(daemon, tmp_path):
    """--sim-out writes a profile, a model and a trace nelssa-sim runs."""
    import subprocess
    f = io.StringIO()
    with redirect_stdout(f):
        rc = serve_main(["--port", str(daemon.port), "--json", "--layers", "2",
                         "--short", "6", "--long", "2", "--long-len", "700,900",
                         "--threshold", "600", "--pool-tokens", "4096",
                         "--capacity-tokens", "16384", "--prefill-elsewhere",
                         "--accuracy-every", "0", "--sim-out", str(tmp_path / "sim"),
                         "--out", str(tmp_path)])
    assert rc == 0
    fit = json.loads(f.getvalue())["sim_fit"]
    assert fit["gpu_bw"] > 0 and fit["pnm_bw"] > 0 and fit["prefill_flops"] > 0
    lines = (tmp_path / "sim" / "workload.jsonl").read_text().splitlines()
    assert len(lines) == 8 and all("input_length" in json.loads(x) for x in lines)
    sim = os.path.join(os.path.dirname(os.environ["NELSSAD"]), "..", "tools", "sim",
                       "nelssa-sim")
    if not os.path.exists(sim):
        pytest.skip("nelssa-sim not built beside nelssad")
    p = subprocess.run([sim, "--trace", str(tmp_path / "sim" / "workload.jsonl"),
                        "--profile", str(tmp_path / "sim" / "node.profile"),
                        "--model", str(tmp_path / "sim" / "model.conf"), "--threshold", "600",
                        "--rps", "1e9", "--no-migrate", "--no-adaptive", "--quiet", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["runs"]["nelssa"]["done"] == 8


def test_llama3_8b_preset_shape():
    """The preset is Llama-3-8B's per-layer shape with its RoPE scaling;
    layers selectable.  (Its weights are 16 GB: not built here.)"""
    from nelssa.serve.model import inv_freq
    c = config.preset("llama3-8b", layers=2)
    assert (c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.num_attention_heads,
            c.num_key_value_heads, c.head_dim, c.vocab_size) == (2, 4096, 14336, 32, 8, 128,
                                                                 128256)
    f = inv_freq(c).numpy()
    base = 1.0 / 500000.0 ** (np.arange(0, 128, 2) / 128)
    # High frequencies unchanged, the lowest divided by the factor (8).
    assert f[0] == pytest.approx(base[0]) and f[-1] == pytest.approx(base[-1] / 8)
    with pytest.raises(ValueError, match="unknown model preset"):
        config.preset("llama4")
