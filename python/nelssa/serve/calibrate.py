# SPDX-License-Identifier: MIT
"""nelssa-sim's step-time model fitted to the engine's measured steps.

nelssa-sim (Documentation/simulator.rst) times a decode step as

    t_gpu = (weights + KV of the GPU requests + centroids and windows of
             the PNM requests) / gpu_bw + 2 params n / gpu_flops

and a PNM request's attention as the PNM tier's step,
``layers x t_base + S x tokens x M_kv / (devices x pnm_bw)``.  This module
fits those terms to the steps an engine run logged (``Engine.step_log``:
duration, GPU requests, their KV tokens, PNM requests, their KV tokens)
by least squares -- the GPU terms on GPU-only steps, the PNM terms on the
rest -- with the weights the model's own bytes: the step model has two
free GPU terms, not three, and a fitted ``weights`` swung from 93 bytes
to 18 MB between runs of one machine (a near-zero one made the policy's
pacing, which scales with step / (weights / gpu_bw), stall nelssa-sim) --
and the prefill's rate (charged to a recompute) to its prefill
chunks (``Engine.prefill_log``), and writes them as the files nelssa-sim reads: a hardware profile
(``--profile``), a model file (``--model``) and the workload as a
Mooncake trace (``--trace``).  Documentation/serve.rst has the comparison
and what it found.
"""

import json
import os

import numpy as np


def _lstsq(rows, y, what):
    a = np.asarray(rows, dtype=np.float64)
    coef, _, rank, _ = np.linalg.lstsq(a, np.asarray(y, dtype=np.float64), rcond=None)
    if rank < a.shape[1]:
        # Steps that do not vary (one batch size, one context) cannot
        # separate the terms: any split would be arbitrary.
        raise ValueError("calibration: the %s steps do not vary enough to fit %d terms "
                         "(rank %d): use a workload of mixed lengths" % (what, a.shape[1], rank))
    return coef


def _nnls(rows, y, what, keep=()):
    """Least squares with every coefficient >= 0 (few columns: each set of
    free columns is tried, the best feasible one kept), the columns in
    keep always among the free ones.  The columns at zero are returned
    as a list of indices."""
    a = np.asarray(rows, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    best = None
    _lstsq(a, y, what)      # refuses steps too uniform to separate the terms
    for mask in range(1, 1 << a.shape[1]):
        cols = [i for i in range(a.shape[1]) if mask >> i & 1]
        if any(i not in cols for i in keep):
            continue
        coef = np.linalg.lstsq(a[:, cols], y, rcond=None)[0]
        if np.any(coef <= 0):
            continue
        full = np.zeros(a.shape[1])
        full[cols] = coef
        err = float(np.sum((a @ full - y) ** 2))
        if best is None or err < best[0]:
            best = (err, full, [i for i in range(a.shape[1]) if i not in cols])
    if best is None:
        return np.zeros(a.shape[1]), list(range(a.shape[1]))
    return best[1], best[2]


def fit(gpu_engine, nelssa_engine=None, *, devices=4, select=0.04, compression=16.0):
    """The fitted terms, a dict; nelssa_engine may be None (GPU terms only).

    The terms are fitted by non-negative least squares: a term the steps
    put at zero is fitted there (the others refitted without it) and
    fit.json's ``clamped`` names it: the per-request term (gpu_flops then
    2 params / 1e-12 s, no cost), the PNM tier's fixed term or its per-token
    one (pnm_bw then 1e15 B/s).  The GPU's per-KV-token term is never put
    at zero: no bandwidth would follow, and the weights' read time, which
    the policy's pacing divides by, would be zero.  Raises ValueError for
    steps that cannot give the model: too few, too uniform, or none of
    positive duration."""
    m = gpu_engine.m
    mkv = float(m.kv_bytes_per_token)
    weights = float(m.weight_bytes)
    # A step of no duration is a clock's artefact, not a measurement.
    steps = [s for s in gpu_engine.step_log if s[3] == 0 and s[0] > 0]
    if len(steps) < 8:
        raise ValueError("calibration: %d GPU-only steps, at least 8 needed" % len(steps))
    # t = (weights + M_kv KV) / gpu_bw + b n: c = M_kv / gpu_bw per KV token.
    # The KV term stays in the fit: without it no bandwidth follows, and
    # with positive durations it alone always fits.
    (b, c), zero = _nnls([(s[1], weights / mkv + s[2]) for s in steps],
                         [s[0] for s in steps], "GPU-only", keep=(1,))
    if c <= 0:
        raise ValueError("calibration: the GPU-only steps give no positive per-KV-token term: "
                         "no GPU bandwidth follows (steps too noisy or too few; use more "
                         "requests)")
    a = c * weights / mkv
    params = m.weight_bytes / 2.0
    out = dict(gpu_bw=mkv / c, weights=weights, params=params,
               gpu_flops=2.0 * params / max(b, 1e-12), gpu_steps=len(steps),
               fixed_s=a, per_request_s=b, per_kv_token_s=c,
               clamped=["per_request_s"] if 0 in zero else [])
    # A recompute's prefill: nelssa-sim charges 2 params tokens / prefill_flops.
    pre = gpu_engine.prefill_log + (nelssa_engine.prefill_log if nelssa_engine else [])
    if pre:
        out["prefill_flops"] = 2.0 * params * sum(p[0] for p in pre) / sum(p[2] for p in pre)
    pred = [a + b * s[1] + c * s[2] for s in steps]
    out["gpu_fit_rel_err"] = float(np.median([abs(p - s[0]) / s[0] for p, s in zip(pred, steps)]))
    if nelssa_engine is None:
        return out
    window = nelssa_engine.router.window if nelssa_engine.router else 0
    rows, res = [], []
    for dt, n_gpu, kv_gpu, n_pnm, kv_pnm, _ in nelssa_engine.step_log:
        if not n_pnm:
            continue
        meta = kv_pnm / compression + window * n_pnm
        res.append(dt - (a + b * (n_gpu + n_pnm) + c * (kv_gpu + meta)))
        rows.append((1.0, kv_pnm))
    if len(rows) < 8:
        raise ValueError("calibration: %d steps with PNM requests, at least 8 needed"
                         % len(rows))
    (t0, slope), zero = _nnls(rows, res, "NELSSA")
    out["clamped"] += [("t_base", "pnm_bw")[i] for i in zero]
    layers = m.cfg.num_hidden_layers
    out.update(t_base=t0 / layers,
               pnm_bw=select * mkv / (devices * slope) if slope > 0 else 1e15,
               pnm_steps=len(rows))
    return out


def write_trace(path, requests):
    """The workload as a Mooncake trace, as nelssa-sim's decode node sees it:
    a request brings its input's KV and decodes output tokens; the engine's
    first token comes from the prefill, so it decodes max_new - 1."""
    with open(path, "w") as f:
        for r in requests:
            f.write(json.dumps(dict(timestamp=0, input_length=len(r.prompt) + 1,
                                    output_length=max(1, r.max_new - 1))) + "\n")


def write_sim_files(outdir, terms, model, requests, *, pool_tokens, devices, select,
                    compression=16.0):
    """node.profile, model.conf and workload.jsonl for nelssa-sim in outdir
    (and fit.json, the fitted terms)."""
    os.makedirs(outdir, exist_ok=True)
    mkv = float(model.kv_bytes_per_token)
    # nelssa-sim's pool is 0.9 gpu_mem - weights, in whole 16-token blocks:
    # make it the engine's (half a block more, so rounding cannot lose one).
    gpu_mem = ((pool_tokens + 8) * mkv + terms["weights"]) / 0.9
    with open(os.path.join(outdir, "node.profile"), "w") as f:
        f.write("# fitted to nelssa.serve's steps on this machine (calibrate.py)\n"
                "base = h100-nvl\nname = serve-fit\n")
        f.write("gpu_bw = %.17g\ngpu_mem = %.17g\n" % (terms["gpu_bw"], gpu_mem))
        if "pnm_bw" in terms:
            f.write("pnm_bw = %.17g\nt_base = %.17g\nt_dev = 1e-12\nt_host = 1e-12\n"
                    % (terms["pnm_bw"], terms["t_base"]))
        f.write("pnm_mem = 1e12\n")
    with open(os.path.join(outdir, "fit.json"), "w") as f:
        json.dump(terms, f, indent=1)
    c = model.cfg
    with open(os.path.join(outdir, "model.conf"), "w") as f:
        f.write("layers = %d\nkv_heads = %d\nhead_dim = %d\nelem_bytes = 2\n"
                "weights = %.17g\nparams = %.17g\ngpu_flops = %.17g\ncompression = %g\n"
                "select = %g\n" % (c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
                                   terms["weights"], terms["params"], terms["gpu_flops"],
                                   compression, select))
        if "prefill_flops" in terms:
            f.write("prefill_flops = %.17g\n" % terms["prefill_flops"])
    write_trace(os.path.join(outdir, "workload.jsonl"), requests)
