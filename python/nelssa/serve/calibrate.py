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
rest -- and the prefill's rate (charged to a recompute) to its prefill
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


def fit(gpu_engine, nelssa_engine=None, *, devices=4, select=0.04, compression=16.0):
    """The fitted terms, a dict; nelssa_engine may be None (GPU terms only)."""
    m = gpu_engine.m
    mkv = float(m.kv_bytes_per_token)
    steps = [s for s in gpu_engine.step_log if s[3] == 0]
    if len(steps) < 8:
        raise ValueError("calibration: %d GPU-only steps, at least 8 needed" % len(steps))
    a, b, c = _lstsq([(1.0, s[1], s[2]) for s in steps], [s[0] for s in steps], "GPU-only")
    # A term the data cannot tell from zero would give an infinite rate: it
    # is floored, and fit.json says which.
    clamped = [n for n, v in (("fixed_s", a), ("per_request_s", b), ("per_kv_token_s", c))
               if v <= 0]
    a, b, c = max(a, 1e-7), max(b, 1e-9), max(c, 1e-12)
    params = m.weight_bytes / 2.0
    out = dict(gpu_bw=mkv / c, weights=a * mkv / c, params=params,
               gpu_flops=2.0 * params / b, gpu_steps=len(steps),
               fixed_s=a, per_request_s=b, per_kv_token_s=c, clamped=clamped)
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
    t0, slope = _lstsq(rows, res, "NELSSA")
    out["clamped"] += [n for n, v in (("t_base", t0), ("pnm_bw", slope)) if v <= 0]
    layers = m.cfg.num_hidden_layers
    out.update(t_base=max(t0, 1e-7) / layers,
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
