# SPDX-License-Identifier: MIT
"""nelssa-serve: one workload through the engine in GPU-only and NELSSA mode.

    python3 -m nelssa.serve --port PORT [options]

Runs the same requests in each mode of --modes (default both) against
nelssad at --host:--port, then prints the modes side by side (tokens/s,
short requests' TPOT percentiles, TTFT, migrations, preemptions), the long
requests' attention error against dense attention per layer, the greedy
token agreement of the NELSSA run with the GPU-only (dense) run, and where
the CSV files and the plot are.  --json prints the same as one JSON object.
Documentation/serve.rst has every option.
"""

import argparse
import json
import os
import platform
import sys
import time

import torch

from . import calibrate, config, report, workload
from .engine import Engine, EngineConfig
from .model import Model


def parse(argv):
    p = argparse.ArgumentParser(prog="python3 -m nelssa.serve", description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--host", default="127.0.0.1", help="nelssad's control address")
    a("--port", type=int, default=0, help="nelssad's control port (NELSSA mode needs it, "
      "or --etcd)")
    a("--etcd", help="a cluster's etcd registry (URL[,URL...]): place long requests on "
      "the nodes it lists instead of --host:--port (Documentation/cluster.rst)")
    a("--cluster", default="default", help="the cluster's name in the registry")
    a("--modes", default="gpu,nelssa", help="modes to run, in order: gpu, nelssa or both")
    a("--model", default="tiny", help="model preset: tiny or llama3-8b")
    a("--layers", type=int, help="layers (fewer than the preset's)")
    a("--config", help="a Hugging Face config.json instead of a preset")
    a("--weights", help="a safetensors file with Llama names (default: random weights)")
    a("--seed", type=int, default=0, help="seed of the random weights and the workload")
    a("--workload", default="mixed", help="'mixed' or a Mooncake trace (.jsonl)")
    a("--requests", type=int, default=24, help="requests taken from a trace")
    a("--skip", type=int, default=0, help="trace lines skipped before the first request")
    a("--short", type=int, default=24, help="mixed: short requests")
    a("--long", type=int, default=4, help="mixed: long requests")
    a("--long-len", default="3072,6144", help="mixed: long prompt lengths, MIN,MAX")
    a("--scale", type=float, default=16.0, help="trace: divide lengths by this")
    a("--rate", type=float, default=0.0, help="Poisson arrivals, requests/s (0: all at once)")
    a("--pool-tokens", type=int, default=16384, help="GPU KV pool, tokens")
    a("--max-batch", type=int, default=32, help="running requests at most")
    a("--threshold", type=float, help="routing threshold, tokens (default: the router's "
      "crossover for --profile)")
    a("--profile", default="h100-nvl", help="hardware profile: a built-in name or a file from "
      "nelssactl calibrate --output")
    a("--capacity-tokens", type=int, default=131072,
      help="NELSSA session capacity: tokens of all long requests at once")
    a("--kv-layout", choices=("packed", "adjacent"), default="packed",
      help="how the PNM devices hold each request's K and V: packed arrays, or each "
           "16-token block's K and V side by side (devices with kv_stride)")
    a("--devices", type=int, default=4, help="PNM devices the router assumes")
    a("--adaptive", action="store_true", help="load-adaptive threshold")
    a("--adapt-period", type=float, default=10.0, help="its decision period, seconds")
    a("--select", type=float, default=0.04, help="sparse budget, fraction of a head's tokens")
    a("--estimate", choices=("mean", "spread", "none"), default="mean",
      help="what stands in for the unselected clusters: the centroid (default), the "
      "centroid weighted by its members' key spread, or nothing")
    a("--no-estimate", dest="estimate", action="store_const", const="none",
      help="the same as --estimate none")
    a("--no-migrate", action="store_true", help="no background migration")
    a("--accuracy-every", type=int, default=4, help="check PNM attention every N steps")
    a("--prefill-elsewhere", action="store_true",
      help="prefill not on the clock (as nelssa-sim models a decode node)")
    a("--sim-out", metavar="DIR", help="fit nelssa-sim's step model to this run's steps and "
      "write its profile, model and workload files to DIR (needs both modes)")
    a("--trace-out", metavar="FILE", help="write the workload as a Mooncake trace "
      "(as nelssa-sim's decode node sees it)")
    a("--out", default="serve-out", help="directory for CSV files and the plot")
    a("--json", action="store_true", help="print one JSON object")
    a("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in args.modes:
        if m not in ("gpu", "nelssa"):
            p.error("--modes: unknown mode %r (gpu, nelssa)" % m)
    if args.sim_out and sorted(args.modes) != ["gpu", "nelssa"]:
        p.error("--sim-out fits both modes' steps: give --modes gpu,nelssa")
    if "nelssa" in args.modes and not args.port and not args.etcd:
        p.error("NELSSA mode needs --port (nelssad's control port) or --etcd (a cluster)")
    try:
        lo, hi = (int(x) for x in args.long_len.split(","))
    except ValueError:
        p.error("--long-len wants MIN,MAX")
    args.long_len = (lo, hi)
    return args


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def build(args):
    if args.config:
        cfg = config.ModelConfig.from_json(args.config)
    else:
        cfg = config.preset(args.model, args.layers)
    if args.weights:
        model = Model.load(cfg, args.weights)
    else:
        model = Model.random(cfg, args.seed)
    if args.workload == "mixed":
        reqs = workload.mixed(vocab=cfg.vocab_size, short=args.short, long=args.long,
                              long_len=args.long_len, rate=args.rate, seed=args.seed)
    else:
        reqs = workload.from_trace(args.workload, n=args.requests, vocab=cfg.vocab_size,
                                   scale=args.scale, rate=args.rate, seed=args.seed,
                                   skip=args.skip)
    return model, reqs


def ecfg(args, mode):
    return EngineConfig(mode=mode, pool_tokens=args.pool_tokens, max_batch=args.max_batch,
                        threshold=args.threshold, profile=args.profile, devices=args.devices,
                        adaptive=args.adaptive, adapt_period=args.adapt_period,
                        select=args.select,
                        estimate=args.estimate, migrate=not args.no_migrate,
                        accuracy_every=args.accuracy_every, host=args.host, port=args.port,
                        etcd=args.etcd, cluster=args.cluster,
                        capacity_tokens=args.capacity_tokens, kv_layout=args.kv_layout,
                        prefill_elsewhere=args.prefill_elsewhere)


def fmt(x, unit="", scale=1.0, digits=1):
    return "-" if x is None else "%.*f%s" % (digits, x * scale, unit)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        return serve(args)
    except (ValueError, OSError, RuntimeError) as e:
        # Bad configs, weight files, traces, an unreachable nelssad: one
        # clear line, no traceback.
        print("nelssa.serve: error: %s" % e, file=sys.stderr)
        return 1


def serve(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    model, reqs = build(args)
    say = (lambda *a: None) if args.json else print
    long_cut = args.threshold
    engines, sums = [], []
    for mode in args.modes:
        e = Engine(model, ecfg(args, mode), log=lambda m: say("  " + m))
        if long_cut is None and e.router is not None:
            long_cut = e.router.t_input
        say("== %s mode: %d requests ==" % (mode, len(reqs)))
        t = time.time()
        try:
            e.run([workload.Request(r.rid, list(r.prompt), r.max_new, r.arrival) for r in reqs])
        finally:
            e.close()
        say("   done in %.1f s" % (time.time() - t))
        for loss in e.node_losses:
            say("   node %s lost at %.2f s (%s): requests %s prefilled again"
                % (loss["node"], loss["t"], loss["why"], loss["requests"]))
        engines.append(e)
    cut = long_cut if long_cut is not None else float("inf")
    for e in engines:
        sums.append(report.summary(e, cut))
        report.write_csv(e, args.out, e.cfg.mode)
    out = dict(cpu=cpu_model(), torch_threads=torch.get_num_threads(),
               model=dict(layers=model.cfg.num_hidden_layers, q_heads=model.cfg.num_attention_heads,
                          kv_heads=model.cfg.num_key_value_heads, head_dim=model.cfg.head_dim,
                          weights=args.weights or "random seed %d" % args.seed),
               long_cut=cut, runs=sums)
    if len(engines) == 2 and {e.cfg.mode for e in engines} == {"gpu", "nelssa"}:
        tok, whole = report.agreement(engines[0], engines[1])
        out["token_agreement"], out["identical_outputs"] = tok, whole
    if args.trace_out:
        calibrate.write_trace(args.trace_out, reqs)
    if args.sim_out:
        by = {e.cfg.mode: e for e in engines}
        terms = calibrate.fit(by["gpu"], by["nelssa"], devices=args.devices, select=args.select)
        calibrate.write_sim_files(args.sim_out, terms, model, reqs,
                                  pool_tokens=args.pool_tokens, devices=args.devices,
                                  select=args.select)
        out["sim_fit"] = terms
        say("nelssa-sim files (node.profile, model.conf, workload.jsonl) in %s" % args.sim_out)
    png = report.plot(engines, os.path.join(args.out, "timeline.png"))
    out["plot"] = png
    if args.json:
        print(json.dumps(out))
        return 0
    print("CPU: %s, torch threads %d" % (out["cpu"], out["torch_threads"]))
    print("%-28s" % "" + "".join("%16s" % s["mode"] for s in sums))
    rows = [("tokens/s", lambda s: fmt(s["tokens_per_s"])),
            ("short TPOT p50 (ms)", lambda s: fmt(s["short_tpot_p50"], "", 1e3)),
            ("short TPOT p95 (ms)", lambda s: fmt(s["short_tpot_p95"], "", 1e3)),
            ("short TPOT p99 (ms)", lambda s: fmt(s["short_tpot_p99"], "", 1e3)),
            ("TTFT p50 (s)", lambda s: fmt(s["ttft_p50"], "", 1, 2)),
            ("requests on NELSSA", lambda s: str(s["pnm_requests"])),
            ("migrations", lambda s: str(s["migrations"])),
            ("preemptions", lambda s: str(s["preemptions"])),
            ("refused", lambda s: str(s["refused"]))]
    for name, f in rows:
        print("%-28s" % name + "".join("%16s" % f(s) for s in sums))
    for s in sums:
        if s["mode"] == "nelssa" and any(x is not None for x in s["attn_rel_err_median"]):
            print("NELSSA attention vs dense, relative error per layer (median / max): " +
                  ", ".join("%s / %s" % (fmt(a, "%", 100, 2), fmt(b, "%", 100, 2))
                            for a, b in zip(s["attn_rel_err_median"], s["attn_rel_err_max"])))
            if s["retrieval_heads_err_median"]:
                print("  median per layer, retrieval heads: %s; other (near-uniform) heads: %s"
                      % (", ".join(fmt(a, "%", 100, 2) for a in s["retrieval_heads_err_median"]),
                         ", ".join(fmt(a, "%", 100, 2) for a in s["other_heads_err_median"])))
    if "token_agreement" in out:
        print("greedy tokens equal to the dense run: %.1f %% (identical outputs: %.0f %% of "
              "requests)" % (100 * out["token_agreement"], 100 * out["identical_outputs"]))
    print("long requests: prompt >= %s tokens; CSV in %s/; plot: %s"
          % (fmt(cut, "", 1, 0), args.out, png or "none (python3-matplotlib not installed)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
