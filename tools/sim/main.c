// SPDX-License-Identifier: MIT
/*
 * nelssa-sim: replay a trace on one decode GPU node, GPU-only and NELSSA,
 * and report throughput, TPOT percentiles and the time series (text or
 * JSON, CSV, SVG plots).  Documentation/simulator.rst.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "tool_util.h"

#define PROG "nelssa-sim"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " (--trace FILE | --synthetic N) [options]\n"
		"workload:\n"
		"  --trace FILE      Mooncake JSONL trace (input_length, output_length)\n"
		"  --max N           first N requests of the trace (default all)\n"
		"  --scale S         multiply input lengths by S (reported; default 1)\n"
		"  --skip-bad        skip (and count) trace lines that are not request records\n"
		"                    instead of stopping at the first\n"
		"  --synthetic N     N synthetic requests instead: 1K-8K inputs, and\n"
		"  --long-frac F     this fraction (default 0.1) of\n"
		"  --long-len N[-M]  inputs this long, or uniform in [N, M] (default 131072)\n"
		"  --out-len N       output tokens of synthetic requests (default 256)\n"
		"  --rps R           Poisson arrivals at R requests/s (default 10)\n"
		"  --rps-step T,R    from T s on, R requests/s (a step of load; up to 8)\n"
		"  --burst T,D,F     from T s for D s, arrivals become --long-len long with\n"
		"                    probability F (a burst of long requests)\n"
		"  --grow R          outputs R times the inputs (growing contexts, e.g. 2 for 1:2)\n"
		"  --seed S          arrival and workload seed (default 1)\n"
		"node:\n"
		"  --profile P       h200 (default), h100-nvl or a profile file (nelssactl calibrate)\n"
		"  --pnm-bw B        override the profile's PNM bandwidth, bytes/s\n"
		"  --comm-scale X    multiply the profile's communication costs by X\n"
		"  --devices N       PNM devices (default 4)\n"
		"  --max-batch N     running requests at most (default 256)\n"
		"  --mode M          gpu, nelssa or both (default both)\n"
		"  --swap            preempt by swap instead of recompute\n"
		"  --no-migrate, --no-adaptive   turn off migration / the adaptive threshold\n"
		"output:\n"
		"  --json            one JSON object\n"
		"  --csv FILE        the time series of every run\n"
		"  --requests FILE   one CSV line per request and run (times, TPOT, tier, preemptions)\n"
		"  --svg PREFIX      plots: PREFIX-throughput.svg, -kv.svg, -batch.svg, -queue.svg\n"
		"  --quiet           no progress bar\n");
}

static void print_run(const char *name, const struct sim_result *r, uint64_t want, int json,
		      int first)
{
	if (json) {
		printf("%s\"%s\":{\"throughput\":%.2f,\"tpot_p50_ms\":%.3f,\"tpot_p95_ms\":%.3f,"
		       "\"tpot_p99_ms\":%.3f,\"done\":%u,\"lost\":%u,\"tokens\":%llu,"
		       "\"tokens_expected\":%llu,\"preemptions\":%llu,\"migrations\":%llu,"
		       "\"max_kv_util\":%.4f,\"makespan_s\":%.2f}",
		       first ? "" : ",", name, r->tput, 1e3 * r->tpot_p50, 1e3 * r->tpot_p95,
		       1e3 * r->tpot_p99, r->done, r->lost, (unsigned long long)r->tokens,
		       (unsigned long long)want, (unsigned long long)r->preemptions,
		       (unsigned long long)r->migrations, r->max_kv_util, r->makespan);
		return;
	}
	printf("%-8s %10.1f %9.2f %9.2f %9.2f %6u %6u %8llu %8llu %7.3f\n", name, r->tput,
	       1e3 * r->tpot_p50, 1e3 * r->tpot_p95, 1e3 * r->tpot_p99, r->done, r->lost,
	       (unsigned long long)r->preemptions, (unsigned long long)r->migrations,
	       r->max_kv_util);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "trace", required_argument, NULL, 't' }, { "max", required_argument, NULL, 'm' },
		{ "scale", required_argument, NULL, 'S' }, { "synthetic", required_argument, NULL, 'n' },
		{ "long-frac", required_argument, NULL, 'f' }, { "long-len", required_argument, NULL, 'L' },
		{ "out-len", required_argument, NULL, 'o' }, { "rps", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 's' }, { "profile", required_argument, NULL, 'p' },
		{ "pnm-bw", required_argument, NULL, 'B' }, { "devices", required_argument, NULL, 'd' },
		{ "max-batch", required_argument, NULL, 'b' }, { "mode", required_argument, NULL, 'M' },
		{ "swap", no_argument, NULL, 'w' }, { "no-migrate", no_argument, NULL, 'g' },
		{ "no-adaptive", no_argument, NULL, 'a' }, { "json", no_argument, NULL, 'j' },
		{ "csv", required_argument, NULL, 'c' }, { "svg", required_argument, NULL, 'v' },
		{ "requests", required_argument, NULL, 'R' }, { "burst", required_argument, NULL, 'u' },
		{ "rps-step", required_argument, NULL, 'T' },
		{ "grow", required_argument, NULL, 'G' }, { "comm-scale", required_argument, NULL, 'C' },
		{ "skip-bad", no_argument, NULL, 'k' },
		{ "quiet", no_argument, NULL, 'q' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *trace = NULL, *profile = "h200", *mode = "both", *csv = NULL, *svg = NULL;
	const char *reqs = NULL;
	FILE *rf = NULL;
	uint32_t max = 0, synth = 0, long_len = 131072, long_hi = 0, out_len = 256, seed = 1, n_dev = 4;
	struct sim_rate_step steps[SIM_MAX_RATE_STEPS];
	uint32_t n_steps = 0;
	uint32_t max_batch = 256;
	double scale = 1.0, long_frac = 0.1, rps = 10.0, pnm_bw = 0.0, grow = 0.0, comm = 1.0;
	double burst[3] = { 0, 0, 0 };
	int swap = 0, migrate = 1, adaptive = 1, json = 0, quiet = 0, skip_bad = 0, c, bad = 0;
	struct sim_config cfg;
	struct sim_trace tr;
	struct sim_result res[2];
	const char *names[2];
	int runs = 0;
	uint64_t want = 0;
	char err[512], *end;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 't': trace = optarg; break;
		case 'p': profile = optarg; break;
		case 'M': mode = optarg; break;
		case 'c': csv = optarg; break;
		case 'v': svg = optarg; break;
		case 'R': reqs = optarg; break;
		case 'u':
			if (sscanf(optarg, "%lf,%lf,%lf", &burst[0], &burst[1], &burst[2]) != 3 ||
			    burst[0] < 0 || !(burst[1] > 0) || !(burst[2] >= 0 && burst[2] <= 1)) {
				fprintf(stderr, PROG ": --burst %s: need T,D,F (s, s, 0..1)\n", optarg);
				bad = 1;
			}
			break;
		case 'G': {
			double v = strtod(optarg, &end);

			if (*end || !(v > 0 && v <= 100)) {
				fprintf(stderr, PROG ": --grow %s: need (0, 100]\n", optarg);
				bad = 1;
			}
			grow = v;
			break;
		}
		case 'w': swap = 1; break;
		case 'g': migrate = 0; break;
		case 'a': adaptive = 0; break;
		case 'k': skip_bad = 1; break;
		case 'j': json = 1; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		case 'm': bad |= tl_parse_u32(PROG, optarg, 1, 1u << 24, &max, "--max"); break;
		case 'n': bad |= tl_parse_u32(PROG, optarg, 1, 1u << 24, &synth, "--synthetic"); break;
		case 'L': {
			char first[32];
			const char *dash = strchr(optarg, '-');

			if (dash && (size_t)(dash - optarg) < sizeof(first)) {
				memcpy(first, optarg, (size_t)(dash - optarg));
				first[dash - optarg] = 0;
				bad |= tl_parse_u32(PROG, first, 16, SIM_MAX_TOKENS, &long_len, "--long-len");
				bad |= tl_parse_u32(PROG, dash + 1, 16, SIM_MAX_TOKENS, &long_hi,
						    "--long-len");
				if (!bad && long_hi < long_len) {
					fprintf(stderr, PROG ": --long-len %s: need N <= M\n", optarg);
					bad = 1;
				}
			} else {
				bad |= tl_parse_u32(PROG, optarg, 16, SIM_MAX_TOKENS, &long_len,
						    "--long-len");
				long_hi = 0;
			}
			break;
		}
		case 'T': {
			double at, r;
			char extra;

			if (sscanf(optarg, "%lf,%lf%c", &at, &r, &extra) != 2 || !(at > 0) || !(r > 0) ||
			    !isfinite(at) || !isfinite(r) || n_steps == SIM_MAX_RATE_STEPS ||
			    (n_steps && !(at > steps[n_steps - 1].at))) {
				fprintf(stderr, PROG ": --rps-step %s: need T,R (s > the last step's, "
					"req/s > 0), at most %d steps\n", optarg, SIM_MAX_RATE_STEPS);
				bad = 1;
				break;
			}
			steps[n_steps++] = (struct sim_rate_step){ at, r };
			break;
		}
		case 'o': bad |= tl_parse_u32(PROG, optarg, 1, 1u << 20, &out_len, "--out-len"); break;
		case 's': bad |= tl_parse_u32(PROG, optarg, 0, UINT32_MAX, &seed, "--seed"); break;
		case 'd': bad |= tl_parse_u32(PROG, optarg, 1, 64, &n_dev, "--devices"); break;
		case 'b': bad |= tl_parse_u32(PROG, optarg, 1, 65536, &max_batch, "--max-batch"); break;
		case 'S': case 'f': case 'r': case 'B': case 'C': {
			double v = strtod(optarg, &end);

			if (*end || !*optarg || !isfinite(v) || (c == 'f' ? !(v >= 0 && v <= 1) : !(v > 0))) {
				fprintf(stderr, PROG ": bad value '%s'\n", optarg);
				bad = 1;
			}
			*(c == 'S' ? &scale : c == 'f' ? &long_frac : c == 'r' ? &rps :
			  c == 'C' ? &comm : &pnm_bw) = v;
			break;
		}
		default: usage(stderr); return 2;
		}
	}
	if (skip_bad && !trace) {
		fprintf(stderr, PROG ": --skip-bad acts on a trace only\n");
		bad = 1;
	}
	if (bad || optind < argc || (!trace == !synth) ||
	    (strcmp(mode, "gpu") && strcmp(mode, "nelssa") && strcmp(mode, "both"))) {
		if (!trace == !synth)
			fprintf(stderr, PROG ": give one of --trace and --synthetic\n");
		usage(stderr);
		return 2;
	}
	sim_config_default(&cfg);
	if (nelssa_hw_profile_builtin(profile, &cfg.hw) &&
	    nelssa_hw_profile_load(profile, &cfg.hw, err, sizeof(err))) {
		fprintf(stderr, PROG ": %s\n", err);
		return 2;
	}
	if (pnm_bw > 0)
		cfg.hw.pnm_bw = pnm_bw;
	cfg.hw.t_base *= comm;
	cfg.hw.t_dev *= comm;
	cfg.hw.t_host *= comm;
	cfg.n_dev = n_dev;
	cfg.max_batch = max_batch;
	cfg.swap = swap;
	cfg.migrate = migrate;
	cfg.adaptive = adaptive;
	if (trace) {
		if (sim_trace_load(trace, scale, max, skip_bad, &tr, err, sizeof(err))) {
			fprintf(stderr, PROG ": %s\n", err);
			return 1;
		}
		if (tr.skipped)
			fprintf(stderr, PROG ": %s: skipped %llu bad line%s (the first: %s)\n", trace,
				(unsigned long long)tr.skipped, tr.skipped == 1 ? "" : "s",
				tr.first_skip);
	} else if (sim_trace_synthetic(synth, long_frac, long_len, long_hi ? long_hi : long_len,
				       out_len, seed, &tr)) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	sim_retime(&tr, rps, steps, n_steps, seed);
	if (burst[1] > 0)
		sim_burst(&tr, burst[0], burst[1], burst[2], long_len, long_hi ? long_hi : long_len,
			  seed);
	if (grow > 0 && sim_grow(&tr, grow)) {
		fprintf(stderr, PROG ": --grow %g: an output would pass %u tokens\n", grow,
			SIM_MAX_TOKENS);
		return 1;
	}
	for (uint32_t i = 0; i < tr.n; i++)
		want += tr.req[i].output;
	if (reqs) {
		rf = fopen(reqs, "w");
		if (!rf) {
			fprintf(stderr, PROG ": cannot write %s\n", reqs);
			return 1;
		}
		fprintf(rf, "run,id,arrival,input,output,start,finish,tpot,pnm,preemptions\n");
	}
	for (int m = 0; m < 2; m++) {
		if ((m == 0 && !strcmp(mode, "nelssa")) || (m == 1 && !strcmp(mode, "gpu")))
			continue;
		cfg.nelssa = m;
		names[runs] = m ? "nelssa" : "gpu-only";
		if (!quiet && !json)
			fprintf(stderr, "%s: %u requests at %.1f req/s...\n", names[runs], tr.n, rps);
		if (sim_run(&cfg, &tr, &res[runs], !quiet && !json)) {
			fprintf(stderr, PROG ": the node cannot run this configuration (no KV room)\n");
			return 1;
		}
		for (uint32_t i = 0; rf && i < tr.n; i++) {
			const struct sim_req *q = &tr.req[i];

			fprintf(rf, "%s,%u,%.4f,%u,%u,%.4f,%.4f,%.6f,%d,%u\n", names[runs], i, q->arrival,
				q->input, q->output, q->start, q->finish,
				q->state == SIM_DONE ? (q->finish - q->start) / q->output : -1.0,
				q->on_pnm, q->preemptions);
		}
		runs++;
	}
	if (json) {
		const double tin = nelssa_crossover(&cfg.hw, &cfg.model, n_dev);

		printf("{\"requests\":%u,\"rps\":%.3f,\"scale\":%.3f,\"devices\":%u,\"profile\":\"%s\","
		       "\"pnm_bw\":%.4g,\"skipped_lines\":%llu,", tr.n, rps, scale, n_dev, cfg.hw.name,
		       cfg.hw.pnm_bw, (unsigned long long)tr.skipped);
		if (isinf(tin))
			printf("\"t_input\":null,\"runs\":{");	/* the PNM tier never wins */
		else
			printf("\"t_input\":%.1f,\"runs\":{", tin);
		for (int k = 0; k < runs; k++)
			print_run(names[k], &res[k], want, 1, k == 0);
		printf("}");
		if (runs == 2)
			printf(",\"throughput_ratio\":%.4f,\"p99_tpot_ratio\":%.4f",
			       res[1].tput / res[0].tput,
			       res[1].tpot_p99 > 0 ? res[0].tpot_p99 / res[1].tpot_p99 : 0.0);
		printf("}\n");
	} else {
		printf("%u requests at %.1f req/s (input scale %.2f), %s, %u PNM devices, "
		       "T_input %.0f tokens\n", tr.n, rps, scale, cfg.hw.name, n_dev,
		       nelssa_crossover(&cfg.hw, &cfg.model, n_dev));
		printf("%-8s %10s %9s %9s %9s %6s %6s %8s %8s %7s\n", "run", "tokens/s",
		       "TPOT p50", "p95", "p99 ms", "done", "lost", "preempt", "migrate", "max KV");
		for (int k = 0; k < runs; k++)
			print_run(names[k], &res[k], want, 0, 0);
		if (runs == 2)
			printf("NELSSA / GPU-only: throughput x%.2f, P99 TPOT x%.2f lower\n",
			       res[1].tput / res[0].tput,
			       res[1].tpot_p99 > 0 ? res[0].tpot_p99 / res[1].tpot_p99 : 0.0);
	}
	if (csv) {
		FILE *f = fopen(csv, "w");

		if (!f) {
			fprintf(stderr, PROG ": cannot write %s\n", csv);
			return 1;
		}
		fprintf(f, "run,t,tokens_per_s,kv_util,batch,queue,pnm_batch,t_input\n");
		for (int k = 0; k < runs; k++)
			for (uint32_t i = 0; i < res[k].n_series; i++) {
				const struct sim_point *p = &res[k].series[i];

				fprintf(f, "%s,%.3f,%.2f,%.4f,%.0f,%.0f,%.0f,%.0f\n", names[k], p->t,
					p->tokens_per_s, p->kv_util, p->batch, p->queue, p->pnm_batch,
					p->t_input);
			}
		fclose(f);
	}
	if (svg) {
		static const char *const what[4][3] = {
			{ "throughput", "decode throughput", "tokens/s" },
			{ "kv", "GPU KV memory in use", "fraction" },
			{ "batch", "running batch", "requests" },
			{ "queue", "waiting requests", "requests" },
		};
		const struct sim_result *rp[2] = { &res[0], &res[1] };

		for (int k = 0; k < 4; k++) {
			char path[1024];

			snprintf(path, sizeof(path), "%s-%s.svg", svg, what[k][0]);
			if (sim_plot_svg(path, what[k][1], what[k][2], rp, names, runs, k)) {
				fprintf(stderr, PROG ": cannot write %s\n", path);
				return 1;
			}
		}
	}
	if (rf && fclose(rf)) {
		fprintf(stderr, PROG ": cannot write %s\n", reqs);
		return 1;
	}
	for (int k = 0; k < runs; k++)
		sim_result_free(&res[k]);
	sim_trace_free(&tr);
	return 0;
}
