# SPDX-License-Identifier: MIT
"""What a run reports: per request TTFT and TPOT, per run tokens/s and the
short requests' TPOT percentiles, the timeline (CSV and a PNG plot) and the
long requests' accuracy against dense attention."""

import csv
import math
import os

import numpy as np


def _pct(xs, p):
    """Nearest-rank percentile (as nelssa-sim's): an observed value."""
    if not len(xs):
        return None
    v = sorted(xs)
    return float(v[max(0, math.ceil(p / 100 * len(v)) - 1)])


def request_rows(engine):
    rows = []
    for s in sorted(engine.finished, key=lambda s: s.req.rid):
        n = len(s.t_tokens)
        tpot = (s.t_tokens[-1] - s.t_tokens[0]) / (n - 1) if n > 1 else None
        rows.append(dict(rid=s.req.rid, prompt=len(s.req.prompt), new=s.generated,
                         where=s.where, migrated=int(s.migrated), preemptions=s.preemptions,
                         arrival=s.req.arrival, ttft=s.t_first - s.req.arrival, tpot=tpot))
    for s in engine.refused:
        rows.append(dict(rid=s.req.rid, prompt=len(s.req.prompt), new=0, where="refused",
                         migrated=0, preemptions=0, arrival=s.req.arrival, ttft=None,
                         tpot=None))
    return rows


def summary(engine, long_cut):
    """One run's figures; short requests are those with prompts under long_cut."""
    rows = request_rows(engine)
    short = [r["tpot"] for r in rows if r["prompt"] < long_cut and r["tpot"] is not None]
    tokens = sum(r["new"] for r in rows)
    def stat(lists):
        e = [x for xs in lists for x in xs]
        return (float(np.median(e)), float(np.max(e))) if e else (None, None)

    errs = [stat(heads) for heads in engine.errors]
    # A random model's retrieval heads (model.py) apart from its other heads.
    nr = engine.m.retrieval_heads
    retr = [stat(heads[:nr]) for heads in engine.errors] if nr else []
    rest = [stat(heads[nr:]) for heads in engine.errors] if nr else []
    return dict(
        mode=engine.cfg.mode, requests=len(rows), refused=len(engine.refused),
        tokens=tokens, wall_s=engine.wall, tokens_per_s=tokens / engine.wall,
        steps=engine.steps,
        short_tpot_p50=_pct(short, 50), short_tpot_p95=_pct(short, 95),
        short_tpot_p99=_pct(short, 99),
        ttft_p50=_pct([r["ttft"] for r in rows if r["ttft"] is not None], 50),
        tpot_p50=_pct([r["tpot"] for r in rows if r["tpot"] is not None], 50),
        tpot_p99=_pct([r["tpot"] for r in rows if r["tpot"] is not None], 99),
        pnm_requests=sum(r["where"] == "pnm" for r in rows),
        migrations=engine.migrations, preemptions=engine.preemptions,
        nelssa_lost=engine.lost, requests_recomputed_after_loss=engine.lost_requests,
        node_losses=engine.node_losses,
        attn_rel_err_median=[e[0] for e in errs], attn_rel_err_max=[e[1] for e in errs],
        retrieval_heads_err_median=[e[0] for e in retr],
        other_heads_err_median=[e[0] for e in rest],
        threshold=engine.router.t_input if engine.router else None)


def agreement(a, b):
    """Greedy-token agreement of two runs of one workload.

    Returns (fraction of generated tokens equal position by position, over
    the requests both finished; fraction of those requests whose outputs
    are identical).
    """
    ta = {s.req.rid: s.tokens[len(s.req.prompt):] for s in a.finished}
    tb = {s.req.rid: s.tokens[len(s.req.prompt):] for s in b.finished}
    same = total = whole = 0
    common = sorted(set(ta) & set(tb))
    for rid in common:
        x, y = ta[rid], tb[rid]
        n = min(len(x), len(y))
        same += sum(1 for i in range(n) if x[i] == y[i])
        total += n
        whole += x == y
    return (same / total if total else 1.0), (whole / len(common) if common else 1.0)


def write_csv(engine, outdir, tag):
    os.makedirs(outdir, exist_ok=True)
    rows = request_rows(engine)
    with open(os.path.join(outdir, "requests-%s.csv" % tag), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["rid"])
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(outdir, "timeline-%s.csv" % tag), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["t", "batch", "pool", "pnm", "waiting", "threshold"])
        w.writeheader()
        w.writerows(engine.timeline)


def plot(engines, path):
    """Running batch and pool use over time, one line per mode; None if no matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for e in engines:
        t = [p["t"] for p in e.timeline]
        ax[0].plot(t, [p["batch"] for p in e.timeline], label=e.cfg.mode)
        ax[1].plot(t, [100 * p["pool"] for p in e.timeline], label=e.cfg.mode)
    ax[0].set_ylabel("running requests")
    ax[1].set_ylabel("KV pool use, %")
    ax[1].set_xlabel("seconds")
    ax[0].legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
