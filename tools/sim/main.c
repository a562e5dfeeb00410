// SPDX-License-Identifier: MIT
/*
 * nelssa-sim: replay a trace on one decode GPU node, GPU-only and NELSSA,
 * and report throughput, TPOT percentiles and the time series (text or
 * JSON, CSV, SVG plots).  Documentation/simulator.rst.
 *
 * Every option either acts in the mode given or is refused: a trace has
 * its own lengths (no --out-len, --long-frac), a synthetic mix no --max or
 * --scale, --long-len needs long requests to shape, and a GPU-only run has
 * no PNM tier to set up.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn_store.h"
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
		"  --long-len N[-M]  inputs this long, or uniform in [N, M] (default 131072;\n"
		"                    also the length of --burst requests)\n"
		"  --out-len N       output tokens of synthetic requests (default 256)\n"
		"  --rps R           Poisson arrivals at R requests/s (default 10)\n"
		"  --rps-step T,R    from T s on, R requests/s (a step of load; up to 8)\n"
		"  --burst T,D,F     from T s for D s, arrivals become --long-len long with\n"
		"                    probability F (a burst of long requests)\n"
		"  --grow R          outputs R times the inputs (growing contexts, e.g. 2 for 1:2)\n"
		"  --seed S          arrival and workload seed (default 1)\n"
		"node:\n"
		"  --profile P       h200 (default), h100-nvl or a profile file (nelssactl calibrate)\n"
		"  --model FILE      the model and the GPU's compute instead of Llama-3-8B on an\n"
		"                    H200: 'key = value' lines (layers, kv_heads, head_dim,\n"
		"                    elem_bytes, weights, params, gpu_flops, prefill_flops,\n"
		"                    compression, select)\n"
		"  --threshold N     route from N tokens on instead of the crossover (the\n"
		"                    adaptive threshold starts there: --no-adaptive keeps it)\n"
		"  --pnm-bw B        override the profile's PNM bandwidth, bytes/s\n"
		"  --comm-scale X    multiply the profile's communication costs by X\n"
		"  --pnm-kv-dtype T  KV type on the PNM devices: bf16 (default), fp16, fp8,\n"
		"                    int8 (8-bit: about half the bytes a token takes there)\n"
		"  --devices N       PNM devices (default 4)\n"
		"  --max-batch N     running requests at most (default 256)\n"
		"  --mode M          gpu, nelssa or both (default both)\n"
		"  --swap            preempt by swap instead of recompute\n"
		"  --no-migrate, --no-adaptive   turn off migration / the adaptive threshold\n"
		"cluster (Documentation/simulator.rst, Clusters):\n"
		"  --gpu-nodes M     M GPU nodes, requests dealt round-robin (default 1)\n"
		"  --pnm-nodes K     K NELSSA nodes of --devices devices each, shared by the GPU\n"
		"                    nodes; long requests placed as the client library does\n"
		"                    (default 1)\n"
		"  --max-fill F      a NELSSA node's memory filled to at most F (default 0.9)\n"
		"  --size-pnm-nodes KMAX  run K = 1..KMAX NELSSA nodes for the M GPU nodes and\n"
		"                    say how many this workload needs\n"
		"output:\n"
		"  --json            one JSON object\n"
		"  --csv FILE        the time series of every run\n"
		"  --requests FILE   one CSV line per request and run (times, TPOT, tier, preemptions)\n"
		"  --svg PREFIX      plots: PREFIX-throughput.svg, -kv.svg, -batch.svg, -queue.svg\n"
		"  --quiet           no progress bar (there is one only when stderr is a terminal)\n"
		"the property (Documentation/simulator.rst):\n"
		"  --property N      N random workloads and nodes from --seed (and --trace, for\n"
		"                    the trace cases); check on each that NELSSA loses nothing\n"
		"                    GPU-only serves and keeps throughput and P99 TPOT with\n"
		"                    queueing within 5 %%; print each failing case's command;\n"
		"                    with --json one line per case\n"
		"  --first-case K    start at case K (--property 1 --first-case K: case K alone)\n");
}

/* Options given, for the checks that each acts in the mode chosen. */
enum {
	G_MAX = 1 << 0, G_SCALE = 1 << 1, G_LONG_FRAC = 1 << 2, G_LONG_LEN = 1 << 3,
	G_OUT_LEN = 1 << 4, G_BURST = 1 << 5, G_GROW = 1 << 6, G_PNM_BW = 1 << 7,
	G_COMM = 1 << 8, G_DEVICES = 1 << 9, G_NO_MIGRATE = 1 << 10, G_NO_ADAPTIVE = 1 << 11,
	G_SKIP_BAD = 1 << 12, G_OTHER = 1 << 13, G_PNM_KV = 1 << 14, G_THRESHOLD = 1 << 15,
	G_PNM_NODES = 1 << 16, G_MAX_FILL = 1 << 17,
};

struct opts {
	const char *trace, *profile, *mode, *csv, *svg, *reqs, *model;
	uint32_t max, synth, long_len, long_hi, out_len, seed, n_dev, max_batch;
	struct sim_rate_step steps[SIM_MAX_RATE_STEPS];
	uint32_t n_steps;
	double scale, long_frac, rps, pnm_bw, grow, comm, threshold;
	uint8_t pnm_kv_dtype;	/* enum npnm_kv_dtype; 0: the GPU's type */
	double burst[3];
	int swap, migrate, adaptive, json, quiet, skip_bad;
	unsigned given;
	uint32_t gpu_nodes, pnm_nodes, size_k;
	double max_fill;
	uint32_t property;	/* --property N: cases */
	uint32_t first_case;	/* --first-case K: start at case K */
};

/* A real option value in [@lo, @hi] (finite); -1 with a message otherwise. */
static int parse_real(const char *s, double lo, double hi, int lo_open, double *out,
		      const char *what)
{
	char *end;
	double v = strtod(s, &end);

	if (!*s || *end || !isfinite(v) || v > hi || (lo_open ? !(v > lo) : !(v >= lo))) {
		fprintf(stderr, PROG ": %s %s: need a number in %c%g, %g]\n", what, s,
			lo_open ? '(' : '[', lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

/* "N" or "N-M", 16 <= N <= M <= SIM_MAX_TOKENS. */
static int parse_long_len(const char *s, uint32_t *lo, uint32_t *hi)
{
	const char *dash = strchr(s, '-');
	char first[32];
	int bad = 0;

	*hi = 0;
	if (!dash)
		return tl_parse_u32(PROG, s, 16, SIM_MAX_TOKENS, lo, "--long-len");
	if ((size_t)(dash - s) >= sizeof(first)) {
		fprintf(stderr, PROG ": --long-len %s: need N or N-M\n", s);
		return -1;
	}
	memcpy(first, s, (size_t)(dash - s));
	first[dash - s] = 0;
	bad |= tl_parse_u32(PROG, first, 16, SIM_MAX_TOKENS, lo, "--long-len");
	bad |= tl_parse_u32(PROG, dash + 1, 16, SIM_MAX_TOKENS, hi, "--long-len");
	if (!bad && *hi < *lo) {
		fprintf(stderr, PROG ": --long-len %s: need N <= M\n", s);
		bad = -1;
	}
	return bad ? -1 : 0;
}

static void opts_default(struct opts *o)
{
	*o = (struct opts){ .profile = "h200", .mode = "both", .long_len = 131072, .out_len = 256,
			    .seed = 1, .n_dev = 4, .max_batch = 256, .scale = 1.0, .long_frac = 0.1,
			    .rps = 10.0, .comm = 1.0, .migrate = 1, .adaptive = 1, .gpu_nodes = 1,
			    .pnm_nodes = 1, .max_fill = 0.9 };
}

/* Refuses an option given that does not act; 1 when it was. */
static int refuse(const struct opts *o, unsigned opt, const char *name, const char *why)
{
	if (!(o->given & opt))
		return 0;
	fprintf(stderr, PROG ": %s %s\n", name, why);
	return 1;
}

/* 0, 1 after --help, 2 on a usage error (said on stderr). */
static int parse(int argc, char **argv, struct opts *o)
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
		{ "skip-bad", no_argument, NULL, 'k' }, { "property", required_argument, NULL, 'P' },
		{ "first-case", required_argument, NULL, 'K' },
		{ "pnm-kv-dtype", required_argument, NULL, 'D' },
		{ "model", required_argument, NULL, 'O' },
		{ "threshold", required_argument, NULL, 'H' },
		{ "gpu-nodes", required_argument, NULL, 'N' },
		{ "pnm-nodes", required_argument, NULL, 'Q' },
		{ "max-fill", required_argument, NULL, 'F' },
		{ "size-pnm-nodes", required_argument, NULL, 'Z' },
		{ "quiet", no_argument, NULL, 'q' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, bad = 0;

	opts_default(o);
	optind = 0;		/* glibc: start over (parse() also runs the property's cases) */
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (!strchr("PKstjqh", c))
			o->given |= G_OTHER;	/* the property's cases make their own */
		switch (c) {
		case 'P':
			bad |= tl_parse_u32(PROG, optarg, 1, 1u << 20, &o->property, "--property");
			break;
		case 'K':
			bad |= tl_parse_u32(PROG, optarg, 0, 1u << 30, &o->first_case, "--first-case");
			break;
		case 't': o->trace = optarg; break;
		case 'p': o->profile = optarg; break;
		case 'O': o->model = optarg; break;
		case 'H':
			o->given |= G_THRESHOLD;
			bad |= parse_real(optarg, 0, 1e12, 1, &o->threshold, "--threshold");
			break;
		case 'M': o->mode = optarg; break;
		case 'c': o->csv = optarg; break;
		case 'v': o->svg = optarg; break;
		case 'R': o->reqs = optarg; break;
		case 'u': {
			double *b = o->burst;
			char extra;

			o->given |= G_BURST;
			if (sscanf(optarg, "%lf,%lf,%lf%c", &b[0], &b[1], &b[2], &extra) != 3 ||
			    !isfinite(b[0]) || !isfinite(b[1]) || b[0] < 0 || !(b[1] > 0) ||
			    !(b[2] > 0 && b[2] <= 1)) {
				fprintf(stderr, PROG ": --burst %s: need T,D,F (T >= 0 s, D > 0 s, "
					"0 < F <= 1)\n", optarg);
				bad = 1;
			}
			break;
		}
		case 'G':
			o->given |= G_GROW;
			bad |= parse_real(optarg, 0, 100, 1, &o->grow, "--grow");
			break;
		case 'w': o->swap = 1; break;
		case 'g': o->migrate = 0; o->given |= G_NO_MIGRATE; break;
		case 'a': o->adaptive = 0; o->given |= G_NO_ADAPTIVE; break;
		case 'k': o->skip_bad = 1; o->given |= G_SKIP_BAD; break;
		case 'j': o->json = 1; break;
		case 'q': o->quiet = 1; break;
		case 'h': usage(stdout); return 1;
		case 'm':
			o->given |= G_MAX;
			bad |= tl_parse_u32(PROG, optarg, 1, 1u << 24, &o->max, "--max");
			break;
		case 'n': bad |= tl_parse_u32(PROG, optarg, 1, 1u << 24, &o->synth, "--synthetic"); break;
		case 'L':
			o->given |= G_LONG_LEN;
			bad |= parse_long_len(optarg, &o->long_len, &o->long_hi);
			break;
		case 'T': {
			double at, r;
			char extra;

			if (sscanf(optarg, "%lf,%lf%c", &at, &r, &extra) != 2 || !(at > 0) ||
			    !(r > 0) || !isfinite(at) || !(r <= 1e9) ||
			    o->n_steps == SIM_MAX_RATE_STEPS ||
			    (o->n_steps && !(at > o->steps[o->n_steps - 1].at))) {
				fprintf(stderr, PROG ": --rps-step %s: need T,R (s > the last step's, "
					"0 < req/s <= 1e9), at most %d steps\n", optarg,
					SIM_MAX_RATE_STEPS);
				bad = 1;
				break;
			}
			o->steps[o->n_steps++] = (struct sim_rate_step){ at, r };
			break;
		}
		case 'o':
			o->given |= G_OUT_LEN;
			bad |= tl_parse_u32(PROG, optarg, 1, 1u << 20, &o->out_len, "--out-len");
			break;
		case 's': bad |= tl_parse_u32(PROG, optarg, 0, UINT32_MAX, &o->seed, "--seed"); break;
		case 'd':
			o->given |= G_DEVICES;
			bad |= tl_parse_u32(PROG, optarg, 1, 64, &o->n_dev, "--devices");
			break;
		case 'b':
			bad |= tl_parse_u32(PROG, optarg, 1, 65536, &o->max_batch, "--max-batch");
			break;
		case 'S':
			o->given |= G_SCALE;
			bad |= parse_real(optarg, 0, 1e4, 1, &o->scale, "--scale");
			break;
		case 'f':
			o->given |= G_LONG_FRAC;
			bad |= parse_real(optarg, 0, 1, 0, &o->long_frac, "--long-frac");
			break;
		case 'r': bad |= parse_real(optarg, 0, 1e9, 1, &o->rps, "--rps"); break;
		case 'B':
			o->given |= G_PNM_BW;
			bad |= parse_real(optarg, 0, 1e15, 1, &o->pnm_bw, "--pnm-bw");
			break;
		case 'C':
			o->given |= G_COMM;
			bad |= parse_real(optarg, 0, 1e3, 1, &o->comm, "--comm-scale");
			break;
		case 'N':
			bad |= tl_parse_u32(PROG, optarg, 1, 1024, &o->gpu_nodes, "--gpu-nodes");
			break;
		case 'Q':
			o->given |= G_PNM_NODES;
			bad |= tl_parse_u32(PROG, optarg, 1, 4096, &o->pnm_nodes, "--pnm-nodes");
			break;
		case 'F':
			o->given |= G_MAX_FILL;
			bad |= parse_real(optarg, 0, 1, 1, &o->max_fill, "--max-fill");
			break;
		case 'Z':
			bad |= tl_parse_u32(PROG, optarg, 1, 4096, &o->size_k, "--size-pnm-nodes");
			break;
		case 'D':
			o->given |= G_PNM_KV;
			o->pnm_kv_dtype = tl_kv_dtype_parse(optarg);
			if (!o->pnm_kv_dtype) {
				fprintf(stderr, PROG ": --pnm-kv-dtype %s: need bf16, fp16, fp8 or "
					"int8\n", optarg);
				bad = 1;
			}
			break;
		default: fprintf(stderr, "Try '" PROG " --help'.\n"); return 2;
		}
	}
	if (bad || optind < argc) {
		if (optind < argc)
			fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		fprintf(stderr, "Try '" PROG " --help'.\n");
		return 2;
	}
	if (o->first_case && !o->property) {
		fprintf(stderr, PROG ": --first-case acts only with --property\n");
		return 2;
	}
	if (o->property) {
		if (o->given & G_OTHER) {
			fprintf(stderr, PROG ": --property takes only --first-case, --seed, --trace, "
				"--json and --quiet: its cases make the rest\n");
			return 2;
		}
		return 0;
	}
	if (!o->trace == !o->synth) {
		fprintf(stderr, PROG ": give one of --trace and --synthetic\n");
		fprintf(stderr, "Try '" PROG " --help'.\n");
		return 2;
	}
	if (strcmp(o->mode, "gpu") && strcmp(o->mode, "nelssa") && strcmp(o->mode, "both")) {
		fprintf(stderr, PROG ": --mode %s: need gpu, nelssa or both\n", o->mode);
		return 2;
	}
	/* Every option acts in the mode chosen, or is refused. */
	if (o->trace) {
		bad |= refuse(o, G_LONG_FRAC, "--long-frac", "shapes a synthetic mix; a trace has "
			      "its own lengths");
		bad |= refuse(o, G_OUT_LEN, "--out-len", "shapes a synthetic mix; a trace has its "
			      "own lengths");
		if (!(o->given & G_BURST))
			bad |= refuse(o, G_LONG_LEN, "--long-len", "acts on a trace only with --burst");
	} else {
		bad |= refuse(o, G_MAX, "--max", "cuts a trace; give --synthetic N instead");
		bad |= refuse(o, G_SCALE, "--scale", "scales a trace's lengths; use --long-len");
		bad |= refuse(o, G_SKIP_BAD, "--skip-bad", "acts on a trace only");
		if (!(o->given & G_BURST) && !(o->long_frac > 0))
			bad |= refuse(o, G_LONG_LEN, "--long-len", "acts only with --long-frac > 0 or "
				      "--burst");
		if (o->given & G_GROW)
			bad |= refuse(o, G_OUT_LEN, "--out-len", "does not act with --grow (outputs "
				      "are R times the inputs)");
	}
	if (!strcmp(o->mode, "gpu")) {
		static const char nopnm[] = "does not act with --mode gpu (no PNM tier)";

		bad |= refuse(o, G_DEVICES, "--devices", nopnm);
		bad |= refuse(o, G_PNM_BW, "--pnm-bw", nopnm);
		bad |= refuse(o, G_COMM, "--comm-scale", nopnm);
		bad |= refuse(o, G_PNM_KV, "--pnm-kv-dtype", nopnm);
		bad |= refuse(o, G_NO_MIGRATE, "--no-migrate", nopnm);
		bad |= refuse(o, G_NO_ADAPTIVE, "--no-adaptive", nopnm);
		bad |= refuse(o, G_THRESHOLD, "--threshold", nopnm);
		bad |= refuse(o, G_PNM_NODES, "--pnm-nodes", nopnm);
		bad |= refuse(o, G_MAX_FILL, "--max-fill", nopnm);
		if (o->size_k) {
			fprintf(stderr, PROG ": --size-pnm-nodes %s\n", nopnm);
			bad = 1;
		}
	}
	if (o->size_k && (o->given & G_PNM_NODES)) {
		fprintf(stderr, PROG ": --size-pnm-nodes runs its own --pnm-nodes\n");
		bad = 1;
	}
	if (o->gpu_nodes == 1 && o->pnm_nodes == 1 && !o->size_k)
		bad |= refuse(o, G_MAX_FILL, "--max-fill", "acts only in a cluster (--gpu-nodes or "
			      "--pnm-nodes above 1)");
	return bad ? 2 : 0;
}

/* One 'key = value' of a model file into @cfg; -1 for an unknown key or a bad value. */
static int model_field(struct sim_config *cfg, const char *key, const char *val)
{
	static const char *const whole[] = { "layers", "kv_heads", "head_dim", "elem_bytes" };
	uint32_t *const u[] = { &cfg->model.layers, &cfg->model.kv_heads, &cfg->model.head_dim,
				&cfg->model.elem_bytes };
	static const char *const real[] = { "weights", "params", "gpu_flops", "prefill_flops",
					    "compression", "select" };
	double *const d[] = { &cfg->model.weights, &cfg->params, &cfg->gpu_flops,
			      &cfg->prefill_flops, &cfg->model.compression, &cfg->model.select };
	char *end;
	double v = strtod(val, &end);

	if (*end || !isfinite(v) || !(v > 0))
		return -1;
	for (size_t i = 0; i < sizeof(whole) / sizeof(whole[0]); i++)
		if (!strcmp(key, whole[i])) {
			if (v != floor(v) || v > 65536)
				return -1;
			*u[i] = (uint32_t)v;
			return 0;
		}
	for (size_t i = 0; i < sizeof(real) / sizeof(real[0]); i++)
		if (!strcmp(key, real[i])) {
			*d[i] = v;
			return 0;
		}
	return -1;
}

/*
 * --model FILE: the model and the GPU's compute, 'key = value' lines
 * ('#' comments) over the Llama-3-8B defaults; 0, or -1 with FILE:LINE
 * and the reason on stderr.
 */
static int load_model(const char *path, struct sim_config *cfg)
{
	FILE *f = fopen(path, "r");
	char line[256];
	int lineno = 0, ret = 0;

	if (!f) {
		fprintf(stderr, PROG ": --model %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (!ret && fgets(line, sizeof(line), f)) {
		char key[64], val[128], *hash;
		int n, end = -1;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fprintf(stderr, PROG ": %s:%d: line longer than %zu characters\n", path,
				lineno, sizeof(line) - 2);
			ret = -1;
			break;
		}
		hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		if (strspn(line, " \t\r\n") == strlen(line))
			continue;
		/* One key, one value, nothing after them. */
		n = sscanf(line, " %63[a-z_] = %127s %n", key, val, &end);
		if (n != 2 || end < 0 || line[end] || model_field(cfg, key, val)) {
			fprintf(stderr, PROG ": %s:%d: expected 'key = value' with a key of layers, "
				"kv_heads, head_dim, elem_bytes, weights, params, gpu_flops, "
				"prefill_flops, compression, select and a value > 0 (whole for the "
				"first four)\n",
				path, lineno);
			ret = -1;
		}
	}
	if (!ret && ferror(f)) {
		/* A directory opens on glibc and fails here (EISDIR). */
		fprintf(stderr, PROG ": --model %s: %s\n", path, strerror(errno));
		ret = -1;
	}
	fclose(f);
	if (!ret && !(cfg->model.select <= 1 && cfg->model.compression > 1)) {
		fprintf(stderr, PROG ": %s: select must be in (0, 1] and compression > 1\n", path);
		ret = -1;
	}
	return ret;
}

/*
 * The node and the workload the options describe.  0, 1 (a bad file or
 * workload, said on stderr) or 2 (a bad profile).
 */
static int build(const struct opts *o, struct sim_config *cfg, struct sim_trace *tr)
{
	const uint32_t hi = o->long_hi ? o->long_hi : o->long_len;
	char err[512];
	int ret;

	sim_config_default(cfg);
	if (nelssa_hw_profile_builtin(o->profile, &cfg->hw) &&
	    nelssa_hw_profile_load(o->profile, &cfg->hw, err, sizeof(err))) {
		fprintf(stderr, PROG ": %s\n", err);
		return 2;
	}
	if (o->model && load_model(o->model, cfg))
		return 2;
	cfg->threshold = o->threshold;
	if (o->pnm_bw > 0)
		cfg->hw.pnm_bw = o->pnm_bw;
	cfg->model.pnm_kv_dtype = o->pnm_kv_dtype;
	cfg->hw.t_base *= o->comm;
	cfg->hw.t_dev *= o->comm;
	cfg->hw.t_host *= o->comm;
	cfg->n_dev = o->n_dev;
	cfg->max_batch = o->max_batch;
	cfg->swap = o->swap;
	cfg->migrate = o->migrate;
	cfg->adaptive = o->adaptive;
	cfg->gpu_nodes = o->gpu_nodes;
	cfg->pnm_nodes = o->pnm_nodes;
	cfg->max_fill = o->max_fill;
	if (o->trace) {
		ret = sim_trace_load(o->trace, o->scale, o->max, o->skip_bad, tr, err, sizeof(err));
		if (ret) {
			fprintf(stderr, PROG ": %s\n", err);
			return 1;
		}
	} else if (sim_trace_synthetic(o->synth, o->long_frac, o->long_len, hi, o->out_len,
				       o->seed, tr)) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	sim_retime(tr, o->rps, o->steps, o->n_steps, o->seed);
	if (o->given & G_BURST)
		sim_burst(tr, o->burst[0], o->burst[1], o->burst[2], o->long_len, hi, o->seed);
	if (o->grow > 0 && sim_grow(tr, o->grow)) {
		fprintf(stderr, PROG ": --grow %g: an output would pass %u tokens\n", o->grow,
			SIM_MAX_TOKENS);
		sim_trace_free(tr);
		return 1;
	}
	return 0;
}

/*
 * A JSON number with @prec decimals (-@prec: significant digits), or null
 * when it is not finite (JSON has no inf or nan).
 */
static void jnum(const char *key, int prec, double v, int comma)
{
	printf("%s\"%s\":", comma ? "," : "", key);
	if (!isfinite(v))
		printf("null");
	else if (prec < 0)
		printf("%.*g", -prec, v);	/* significant digits */
	else
		printf("%.*f", prec, v);
}

/* a / b, NAN when it is not a number (then null in JSON). */
static double ratio(double a, double b)
{
	return b > 0 && isfinite(a) && isfinite(b) ? a / b : NAN;
}

/* A JSON string (control characters, quotes and backslashes escaped). */
static void jstr(const char *key, const char *v, int comma)
{
	printf("%s\"%s\":\"", comma ? "," : "", key);
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\')
			printf("\\u%04x", (unsigned char)*p);
		else
			putchar(*p);
	putchar('"');
}

static void jpct(const char *key, const struct sim_pct *p)
{
	char k[64];

	snprintf(k, sizeof(k), "%s_p50_ms", key);
	jnum(k, 3, 1e3 * p->p50, 1);
	snprintf(k, sizeof(k), "%s_p95_ms", key);
	jnum(k, 3, 1e3 * p->p95, 1);
	snprintf(k, sizeof(k), "%s_p99_ms", key);
	jnum(k, 3, 1e3 * p->p99, 1);
}

static void print_run(const char *name, const struct sim_result *r, uint64_t want, int json,
		      int first)
{
	if (json) {
		printf("%s\"%s\":{", first ? "" : ",", name);
		jnum("throughput", 2, r->tput, 0);
		jpct("tpot", &r->tpot);
		jpct("tpot_q", &r->tpot_q);
		jpct("ttft", &r->ttft);
		printf(",\"done\":%u,\"refused\":%u,\"lost\":%u,\"tokens\":%llu,"
		       "\"tokens_expected\":%llu,\"preemptions\":%llu,\"migrations\":%llu,"
		       "\"moved\":%llu,\"gpu_fallbacks\":%llu,\"pnm_requests\":%llu", r->done,
		       r->refused, r->lost, (unsigned long long)r->tokens, (unsigned long long)want,
		       (unsigned long long)r->preemptions, (unsigned long long)r->migrations,
		       (unsigned long long)r->moved, (unsigned long long)r->gpu_fallbacks,
		       (unsigned long long)r->pnm_requests);
		jnum("max_kv_util", 4, r->max_kv_util, 1);
		jnum("makespan_s", 2, r->makespan, 1);
		if (r->refused)
			jstr("refused_why", r->refuse_why, 1);
		if (r->n_nodes) {
			jnum("max_node_fill", 4, r->max_node_fill, 1);
			printf(",\"node_admissions\":[");
			for (uint32_t k = 0; k < r->n_nodes; k++)
				printf("%s%llu", k ? "," : "",
				       (unsigned long long)r->node_admissions[k]);
			printf("]");
		}
		printf("}");
		return;
	}
	printf("%-8s %9.1f %8.2f %8.2f %8.2f %8.1f %6u %6u %6u %7llu %7llu %6.3f\n", name, r->tput,
	       1e3 * r->tpot.p50, 1e3 * r->tpot.p99, 1e3 * r->tpot_q.p99, 1e3 * r->ttft.p99, r->done,
	       r->refused, r->lost, (unsigned long long)r->preemptions,
	       (unsigned long long)(r->migrations + r->moved), r->max_kv_util);
}

/* The property: nothing lost that GPU-only serves, throughput and P99 within 5 %. */
#define PROPERTY_TOL 0.95

static int property_holds(const struct sim_cmp *c)
{
	return !c->lost_more && (!c->common || (c->tput_ratio >= PROPERTY_TOL &&
						c->p99q_ratio >= PROPERTY_TOL));
}

static int write_outputs(const struct opts *o, struct sim_result *res, const char *const *names,
			 int runs)
{
	if (o->csv) {
		FILE *f = fopen(o->csv, "w");

		if (!f) {
			fprintf(stderr, PROG ": cannot write %s\n", o->csv);
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
		if (fclose(f)) {
			fprintf(stderr, PROG ": cannot write %s\n", o->csv);
			return 1;
		}
	}
	if (o->svg) {
		static const char *const what[4][3] = {
			{ "throughput", "decode throughput", "tokens/s" },
			{ "kv", "GPU KV memory in use", "fraction" },
			{ "batch", "running batch", "requests" },
			{ "queue", "waiting requests", "requests" },
		};
		const struct sim_result *rp[2] = { &res[0], &res[1] };

		for (int k = 0; k < 4; k++) {
			char path[1024];

			snprintf(path, sizeof(path), "%s-%s.svg", o->svg, what[k][0]);
			if (sim_plot_svg(path, what[k][1], what[k][2], rp, names, runs, k)) {
				fprintf(stderr, PROG ": cannot write %s\n", path);
				return 1;
			}
		}
	}
	return 0;
}

/*
 * The property, for real: random workloads and nodes from wide
 * distributions, each run GPU-only and NELSSA through the same parse()
 * and build() as a command line, so that a failing case's command
 * reproduces it exactly.
 */
struct case_args {
	char *argv[64];
	int argc;
	char store[4096];
	size_t used;
};

static void __attribute__((format(printf, 2, 3))) arg(struct case_args *a, const char *fmt, ...)
{
	va_list ap;
	int len;

	if (a->argc == 63)
		return;
	va_start(ap, fmt);
	len = vsnprintf(a->store + a->used, sizeof(a->store) - a->used, fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= sizeof(a->store) - a->used)
		return;
	a->argv[a->argc++] = a->store + a->used;
	a->argv[a->argc] = NULL;
	a->used += (size_t)len + 1;
}

static double unif(uint64_t *s, double lo, double hi)
{
	return lo + (hi - lo) * ((tl_next(s) >> 11) * 0x1.0p-53);
}

static double log_unif(uint64_t *s, double lo, double hi)
{
	return exp(unif(s, log(lo), log(hi)));
}

static int chance(uint64_t *s, double p)
{
	return unif(s, 0, 1) < p;
}

/*
 * Case @k of the property's seed @seed: a synthetic mix (rate 2-40 req/s,
 * long fraction 0-45 %, long lengths 16K-1M fixed or in a range, outputs
 * 16-1024 or growing 0.2-2x, bursts) or a replay of @trace (rate 2-40
 * req/s, inputs scaled 1-8x in some, bursts of 64K-1M requests) on a node
 * with 1/2/4/8 devices, PNM bandwidth 0.4-2.5x, communication 0.25-4x,
 * sometimes a small batch, swap, no migration, no adaptive threshold or
 * the H100 NVL.  Sizes keep a case to a fraction of a second of CPU
 * (growing contexts, whose outputs are as long as their inputs, have
 * long requests of 16K-128K).
 */
static void make_case(uint64_t seed, uint32_t k, const char *trace, struct case_args *a)
{
	uint64_t s = sim_seed_stream(seed ^ ((uint64_t)k << 32), SIM_STREAM_PROPERTY);
	static const uint32_t devs[] = { 1, 2, 4, 8 };
	const double rps = log_unif(&s, 2, 40);
	const uint32_t lo = (uint32_t)log_unif(&s, 16384, 1048576);

	*a = (struct case_args){ .argc = 0 };
	arg(a, PROG);
	if (trace && chance(&s, 0.35)) {
		arg(a, "--trace");
		arg(a, "%s", trace);
		arg(a, "--max");
		arg(a, "%u", (uint32_t)unif(&s, 200, 800));
		if (chance(&s, 0.3)) {
			arg(a, "--scale");
			arg(a, "%.3g", log_unif(&s, 1, 8));
		}
		if (chance(&s, 0.4)) {
			arg(a, "--burst");
			arg(a, "%.0f,%.0f,%.2f", unif(&s, 0, 20), unif(&s, 5, 40), unif(&s, 0.05, 0.6));
			arg(a, "--long-len");
			arg(a, "%u", lo);
		}
	} else {
		const double f = chance(&s, 0.1) ? 0.0 : unif(&s, 0.01, 0.45);
		const int grow = chance(&s, 0.12);
		/* Growing contexts make outputs as long as inputs: keep those small. */
		const uint32_t l = grow ? (uint32_t)log_unif(&s, 16384, 131072) : lo;

		arg(a, "--synthetic");
		arg(a, "%u", (uint32_t)unif(&s, 100, grow ? 250 : 500));
		arg(a, "--long-frac");
		arg(a, "%.3f", f);
		if (f > 0 || chance(&s, 0.2)) {
			arg(a, "--long-len");
			if (chance(&s, 0.5))
				arg(a, "%u", l);
			else
				arg(a, "%u-%u", l, (uint32_t)fmin(grow ? 131072 : 1048576,
								 l * unif(&s, 1, 4)));
			if (!(f > 0)) {
				arg(a, "--burst");
				arg(a, "%.0f,%.0f,%.2f", unif(&s, 0, 20), unif(&s, 5, 40),
				    unif(&s, 0.05, 0.6));
			}
		}
		if (grow) {
			arg(a, "--grow");
			arg(a, "%.2f", unif(&s, 0.2, 2));
		} else {
			arg(a, "--out-len");
			arg(a, "%u", (uint32_t)log_unif(&s, 16, 1024));
		}
	}
	arg(a, "--rps");
	arg(a, "%.3g", rps);
	arg(a, "--seed");
	arg(a, "%u", (uint32_t)(tl_next(&s) >> 32));
	arg(a, "--devices");
	arg(a, "%u", devs[tl_next(&s) % 4]);
	arg(a, "--pnm-bw");
	arg(a, "%.4g", 76.8e9 * log_unif(&s, 0.4, 2.5));
	arg(a, "--comm-scale");
	arg(a, "%.3g", log_unif(&s, 0.25, 4));
	if (chance(&s, 0.25)) {
		arg(a, "--pnm-kv-dtype");
		arg(a, chance(&s, 0.5) ? "int8" : "fp8");
	}
	if (chance(&s, 0.15)) {
		arg(a, "--max-batch");
		arg(a, "%u", (uint32_t)log_unif(&s, 16, 256));
	}
	if (chance(&s, 0.15))
		arg(a, "--swap");
	if (chance(&s, 0.15))
		arg(a, "--no-migrate");
	if (chance(&s, 0.2))
		arg(a, "--no-adaptive");
	if (chance(&s, 0.2)) {
		arg(a, "--profile");
		arg(a, "h100-nvl");
	}
}

/* The case's command, for a shell: words with odd characters single-quoted. */
static void print_command(FILE *f, const struct case_args *a)
{
	for (int i = 0; i < a->argc; i++) {
		const char *w = a->argv[i];

		fputs(i ? " " : "", f);
		if (w[strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
			     "-_.,/=+:")]) {
			fputc('\'', f);
			for (; *w; w++)
				fputs(*w == '\'' ? "'\\''" : (char[2]){ *w, 0 }, f);
			fputc('\'', f);
		} else {
			fputs(w, f);
		}
	}
}

static int property(const struct opts *po)
{
	uint32_t pass = 0, fail = 0, errors = 0, with_extra = 0, with_pnm = 0;
	double worst_t = INFINITY, worst_p = INFINITY;
	uint32_t worst_t_case = 0, worst_p_case = 0;

	for (uint32_t k = po->first_case; k < po->first_case + po->property; k++) {
		struct case_args a;
		struct opts o;
		struct sim_config cfg;
		struct sim_trace tr;
		struct sim_result res[2];
		struct sim_cmp cmp;
		const clock_t c0 = clock();
		char err[256];
		int ok;

		make_case(po->seed, k, po->trace, &a);
		if (parse(a.argc, a.argv, &o) || build(&o, &cfg, &tr)) {
			fprintf(stderr, PROG ": property case %u is not a valid command: ", k);
			print_command(stderr, &a);
			fputc('\n', stderr);
			errors++;
			continue;
		}
		cfg.nelssa = 0;
		if (sim_run(&cfg, &tr, &res[0], 0, err, sizeof(err))) {
			fprintf(stderr, PROG ": property case %u: %s\n", k, err);
			sim_trace_free(&tr);
			errors++;
			continue;
		}
		cfg.nelssa = 1;
		if (sim_run(&cfg, &tr, &res[1], 0, err, sizeof(err))) {
			fprintf(stderr, PROG ": property case %u: %s\n", k, err);
			sim_result_free(&res[0]);
			sim_trace_free(&tr);
			errors++;
			continue;
		}
		sim_compare(&tr, &res[0], &res[1], &cmp);
		ok = property_holds(&cmp) && res[1].lost == 0;
		pass += ok;
		fail += !ok;
		with_extra += cmp.extra > 0;
		with_pnm += res[1].pnm_requests > 0;
		if (cmp.common && cmp.tput_ratio < worst_t) {
			worst_t = cmp.tput_ratio;
			worst_t_case = k;
		}
		if (cmp.common && cmp.p99q_ratio < worst_p) {
			worst_p = cmp.p99q_ratio;
			worst_p_case = k;
		}
		if (po->json) {
			printf("{\"case\":%u,\"holds\":%s,\"common\":%u,\"lost_more\":%u,\"extra\":%u,"
			       "\"refused\":%u,\"pnm_requests\":%llu", k, ok ? "true" : "false",
			       cmp.common, cmp.lost_more, cmp.extra, res[1].refused,
			       (unsigned long long)res[1].pnm_requests);
			jnum("throughput_ratio", 4, cmp.tput_ratio, 1);
			jnum("p99_tpot_q_ratio", 4, cmp.p99q_ratio, 1);
			jnum("p99_tpot_q_gpu_ms", 3, 1e3 * cmp.p99q_gpu, 1);
			jnum("p99_tpot_q_nelssa_ms", 3, 1e3 * cmp.p99q_nelssa, 1);
			jnum("cpu_s", 3, (double)(clock() - c0) / CLOCKS_PER_SEC, 1);
			{
				char *cmd = NULL;
				size_t len = 0;
				FILE *m = open_memstream(&cmd, &len);

				if (m) {
					print_command(m, &a);
					fclose(m);
					jstr("command", cmd ? cmd : "", 1);
					free(cmd);
				}
			}
			printf("}\n");
		}
		if (!ok) {
			fprintf(po->json ? stderr : stdout, "FAIL case %u: throughput x%.3f, P99 TPOT "
				"with queueing x%.3f, %u of %u lost by NELSSA, %u lost in all; "
				"reproduce:\n  ", k, cmp.tput_ratio, cmp.p99q_ratio, cmp.lost_more,
				cmp.common, res[1].lost);
			print_command(po->json ? stderr : stdout, &a);
			fputs("\n", po->json ? stderr : stdout);
		}
		sim_result_free(&res[0]);
		sim_result_free(&res[1]);
		sim_trace_free(&tr);
	}
	fprintf(po->json ? stderr : stdout,
		"property, seed %u, cases from %u: %u cases, %u hold, %u fail, %u not run; %u used the PNM tier, "
		"%u had requests only NELSSA serves; worst throughput x%.3f (case %u), worst P99 "
		"TPOT with queueing x%.3f (case %u)\n", po->seed, po->first_case, po->property, pass, fail, errors,
		with_pnm, with_extra, worst_t, worst_t_case, worst_p, worst_p_case);
	return fail || errors ? 1 : 0;
}

/*
 * --size-pnm-nodes KMAX: GPU-only on the M GPU nodes, then NELSSA with
 * K = 1..KMAX NELSSA nodes; the answer is the smallest K that loses no more
 * requests than the best K, and comes within 5 % of the best throughput
 * and of the best P99 TPOT with queueing (Documentation/simulator.rst).
 */
#define SIZE_TOLERANCE 0.05

static int size_nodes(const struct opts *o, struct sim_config *cfg, struct sim_trace *tr,
		      int progress)
{
	const uint32_t kmax = o->size_k;
	struct sim_result gpu, *res = calloc(kmax, sizeof(*res));
	double best_tput = 0.0, best_p99 = INFINITY;
	uint32_t min_lost = UINT32_MAX, pick = 0;
	char err[256];

	if (!res) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	cfg->nelssa = 0;
	if (sim_run(cfg, tr, &gpu, progress, err, sizeof(err))) {
		fprintf(stderr, PROG ": the node cannot run this configuration: %s\n", err);
		free(res);
		return 1;
	}
	cfg->nelssa = 1;
	for (uint32_t k = 1; k <= kmax; k++) {
		cfg->pnm_nodes = k;
		if (progress)
			fprintf(stderr, "%u NELSSA nodes...\n", k);
		if (sim_run(cfg, tr, &res[k - 1], progress, err, sizeof(err))) {
			fprintf(stderr, PROG ": %u NELSSA nodes: %s\n", k, err);
			for (uint32_t j = 0; j + 1 < k; j++)
				sim_result_free(&res[j]);
			sim_result_free(&gpu);
			free(res);
			return 1;
		}
	}
	for (uint32_t k = 0; k < kmax; k++) {
		best_tput = fmax(best_tput, res[k].tput);
		best_p99 = fmin(best_p99, res[k].tpot_q.p99);
		if (res[k].lost + res[k].refused < min_lost)
			min_lost = res[k].lost + res[k].refused;
	}
	for (uint32_t k = 0; k < kmax && !pick; k++)
		if (res[k].lost + res[k].refused == min_lost &&
		    res[k].tput >= (1.0 - SIZE_TOLERANCE) * best_tput &&
		    res[k].tpot_q.p99 <= (1.0 + SIZE_TOLERANCE) * best_p99)
			pick = k + 1;
	if (o->json) {
		printf("{\"requests\":%u,\"rps\":%.3f,\"gpu_nodes\":%u,\"devices_per_node\":%u",
		       tr->n, o->rps, o->gpu_nodes, o->n_dev);
		jnum("gpu_only_throughput", 2, gpu.tput, 1);
		jnum("gpu_only_p99_tpot_q_ms", 3, 1e3 * gpu.tpot_q.p99, 1);
		printf(",\"gpu_only_lost\":%u,\"sweep\":[", gpu.lost + gpu.refused);
		for (uint32_t k = 0; k < kmax; k++) {
			printf("%s{\"pnm_nodes\":%u", k ? "," : "", k + 1);
			jnum("throughput", 2, res[k].tput, 1);
			jnum("p99_tpot_q_ms", 3, 1e3 * res[k].tpot_q.p99, 1);
			jnum("throughput_ratio", 4, ratio(res[k].tput, gpu.tput), 1);
			printf(",\"lost\":%u,\"pnm_requests\":%llu}", res[k].lost + res[k].refused,
			       (unsigned long long)res[k].pnm_requests);
		}
		printf("],\"pnm_nodes_needed\":%u", pick);
		jnum("pnm_nodes_per_gpu_node", 3, (double)pick / o->gpu_nodes, 1);
		printf("}\n");
	} else {
		printf("%u requests at %.1f req/s on %u GPU nodes; NELSSA nodes of %u devices\n",
		       tr->n, o->rps, o->gpu_nodes, o->n_dev);
		printf("%-10s %9s %12s %7s %6s %8s\n", "NELSSA", "tokens/s", "P99 TPOT+q", "x GPU",
		       "lost", "on PNM");
		printf("%-10s %9.1f %10.2f ms %7s %6u %8s\n", "GPU-only", gpu.tput,
		       1e3 * gpu.tpot_q.p99, "", gpu.lost + gpu.refused, "");
		for (uint32_t k = 0; k < kmax; k++)
			printf("%-10u %9.1f %10.2f ms %7.2f %6u %8llu\n", k + 1, res[k].tput,
			       1e3 * res[k].tpot_q.p99, ratio(res[k].tput, gpu.tput),
			       res[k].lost + res[k].refused,
			       (unsigned long long)res[k].pnm_requests);
		printf("needed: %u NELSSA node%s for %u GPU node%s (%.2f per GPU node): the fewest "
		       "within %.0f %% of the best throughput and P99, losing no more\n", pick,
		       pick == 1 ? "" : "s", o->gpu_nodes, o->gpu_nodes == 1 ? "" : "s",
		       (double)pick / o->gpu_nodes, 100 * SIZE_TOLERANCE);
	}
	for (uint32_t k = 0; k < kmax; k++)
		sim_result_free(&res[k]);
	sim_result_free(&gpu);
	free(res);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	FILE *rf = NULL;
	struct sim_config cfg;
	struct sim_trace tr;
	struct sim_result res[2];
	const char *names[2];
	int runs = 0, ret, progress;
	uint64_t want = 0;
	struct sim_cmp cmp;
	double deadline;

	ret = parse(argc, argv, &o);
	if (ret)
		return ret == 1 ? 0 : 2;
	if (o.property)
		return property(&o);
	ret = build(&o, &cfg, &tr);
	if (ret)
		return ret;
	if (tr.skipped)
		fprintf(stderr, PROG ": %s: skipped %llu bad line%s (the first: %s)\n", o.trace,
			(unsigned long long)tr.skipped, tr.skipped == 1 ? "" : "s", tr.first_skip);
	progress = !o.quiet && isatty(STDERR_FILENO);
	if (o.size_k) {
		ret = size_nodes(&o, &cfg, &tr, progress);
		sim_trace_free(&tr);
		return ret;
	}
	{
		struct nelssa_router r;

		/* The PNM tier's step deadline this node gets (as sim_run() sets it up). */
		deadline = nelssa_router_init(&r, &cfg.hw, &cfg.model, o.n_dev) ? NAN : r.cap_step;
	}
	for (uint32_t i = 0; i < tr.n; i++)
		want += tr.req[i].output;
	if (o.reqs) {
		rf = fopen(o.reqs, "w");
		if (!rf) {
			fprintf(stderr, PROG ": cannot write %s\n", o.reqs);
			return 1;
		}
		fprintf(rf, "run,id,arrival,input,output,start,first,finish,tpot,tpot_q,ttft,pnm,"
			"preemptions,state,pnm_first\n");
	}
	for (int m = 0; m < 2; m++) {
		char err[256];

		if ((m == 0 && !strcmp(o.mode, "nelssa")) || (m == 1 && !strcmp(o.mode, "gpu")))
			continue;
		cfg.nelssa = m;
		names[runs] = m ? "nelssa" : "gpu-only";
		if (progress)
			fprintf(stderr, "%s: %u requests at %.1f req/s...\n", names[runs], tr.n, o.rps);
		if (sim_run(&cfg, &tr, &res[runs], progress, err, sizeof(err))) {
			fprintf(stderr, PROG ": the node cannot run this configuration: %s\n", err);
			if (rf)
				fclose(rf);
			for (int k = 0; k < runs; k++)
				sim_result_free(&res[k]);
			sim_trace_free(&tr);
			return 1;
		}
		for (uint32_t i = 0; rf && i < tr.n; i++) {
			const struct sim_req *q = &tr.req[i];
			const struct sim_outcome *e = &res[runs].req[i];
			const int done = e->state == SIM_DONE;

			fprintf(rf, "%s,%u,%.6f,%u,%u,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%d,%u,%s,%d\n",
				names[runs], i, q->arrival, q->input, q->output, e->start, e->first,
				e->finish, done ? (e->finish - e->start) / q->output : -1.0,
				done ? (e->finish - q->arrival) / q->output : -1.0,
				done ? e->first - q->arrival : -1.0, e->tier == NELSSA_ROUTE_PNM,
				e->preemptions, done ? "done" : e->state == SIM_REFUSED ? "refused" : "lost",
				e->tier_first == NELSSA_ROUTE_PNM);
		}
		runs++;
	}
	if (runs == 2)
		sim_compare(&tr, &res[0], &res[1], &cmp);
	/* An option that could not act on this workload says so. */
	if (runs && !strcmp(names[runs - 1], "nelssa") && !res[runs - 1].pnm_requests &&
	    (o.given & (G_DEVICES | G_PNM_BW | G_COMM)))
		fprintf(stderr, PROG ": note: the PNM tier served no request (T_input %.0f), so "
			"--devices, --pnm-bw and --comm-scale changed nothing here\n",
			o.threshold > 0 ? o.threshold :
			nelssa_crossover(&cfg.hw, &cfg.model, o.n_dev));
	if (o.json) {
		const double tin = o.threshold > 0 ? o.threshold :
				   nelssa_crossover(&cfg.hw, &cfg.model, o.n_dev);

		printf("{\"requests\":%u,\"rps\":%.3f,\"scale\":%.3f,\"devices\":%u", tr.n, o.rps,
		       o.scale, o.n_dev);
		printf(",\"gpu_nodes\":%u,\"pnm_nodes\":%u", o.gpu_nodes, o.pnm_nodes);
		jstr("profile", cfg.hw.name, 1);
		jnum("pnm_bw", -4, cfg.hw.pnm_bw, 1);
		jstr("pnm_kv_dtype", cfg.model.pnm_kv_dtype ?
		     tl_kv_dtype_name(cfg.model.pnm_kv_dtype) : "bf16", 1);
		jnum("pnm_kv_bytes_per_token", 0, nelssa_pnm_kv_bytes_per_token(&cfg.model), 1);
		jnum("t_input", 1, tin, 1);	/* null: the PNM tier never wins */
		jnum("pnm_step_deadline_ms", 3, 1e3 * deadline, 1);
		printf(",\"skipped_lines\":%llu,\"runs\":{", (unsigned long long)tr.skipped);
		for (int k = 0; k < runs; k++)
			print_run(names[k], &res[k], want, 1, k == 0);
		printf("}");
		if (runs == 2) {
			jnum("throughput_ratio", 4, ratio(res[1].tput, res[0].tput), 1);
			jnum("p99_tpot_ratio", 4, ratio(res[0].tpot.p99, res[1].tpot.p99), 1);
			jnum("p99_tpot_q_ratio", 4, ratio(res[0].tpot_q.p99, res[1].tpot_q.p99), 1);
			printf(",\"property\":{\"common\":%u,\"lost_more\":%u,\"extra\":%u",
			       cmp.common, cmp.lost_more, cmp.extra);
			jnum("throughput_ratio", 4, cmp.tput_ratio, 1);
			jnum("p99_tpot_q_ratio", 4, cmp.p99q_ratio, 1);
			printf(",\"holds\":%s}", property_holds(&cmp) ? "true" : "false");
		}
		printf("}\n");
	} else {
		printf("%u requests at %.1f req/s (input scale %.2f), %s, %u PNM devices, "
		       "T_input %.0f tokens, PNM step deadline %.2f ms\n", tr.n, o.rps, o.scale,
		       cfg.hw.name, o.n_dev, o.threshold > 0 ? o.threshold :
		       nelssa_crossover(&cfg.hw, &cfg.model, o.n_dev), 1e3 * deadline);
		if (o.gpu_nodes > 1 || o.pnm_nodes > 1)
			printf("cluster: %u GPU node%s, %u NELSSA node%s of %u devices each\n",
			       o.gpu_nodes, o.gpu_nodes == 1 ? "" : "s", o.pnm_nodes,
			       o.pnm_nodes == 1 ? "" : "s", o.n_dev);
		printf("%-8s %9s %8s %8s %8s %8s %6s %6s %6s %7s %7s %6s\n", "", "tokens/s",
		       "TPOT p50", "p99", "+queue", "TTFT", "done", "refuse", "lost", "preempt",
		       "migrate", "max KV");
		printf("%-8s %9s %8s %8s %8s %8s\n", "run", "", "ms", "ms", "p99 ms", "p99 ms");
		for (int k = 0; k < runs; k++)
			print_run(names[k], &res[k], want, 0, 0);
		for (int k = 0; k < runs; k++)
			if (res[k].refused)
				printf("%s refused %u: %s\n", names[k], res[k].refused, res[k].refuse_why);
		if (runs == 2) {
			printf("NELSSA / GPU-only: throughput x%.2f, P99 TPOT x%.2f lower, with queueing "
			       "x%.2f lower\n", ratio(res[1].tput, res[0].tput),
			       ratio(res[0].tpot.p99, res[1].tpot.p99),
			       ratio(res[0].tpot_q.p99, res[1].tpot_q.p99));
			printf("property on the %u requests GPU-only serves: throughput x%.2f, P99 TPOT "
			       "with queueing x%.2f lower, %u lost by NELSSA (%u more served): %s\n",
			       cmp.common, cmp.tput_ratio, cmp.p99q_ratio, cmp.lost_more, cmp.extra,
			       property_holds(&cmp) ? "holds" : "VIOLATED");
		}
	}
	ret = write_outputs(&o, res, names, runs);
	if (rf && fclose(rf)) {
		fprintf(stderr, PROG ": cannot write %s\n", o.reqs);
		ret = 1;
	}
	for (int k = 0; k < runs; k++)
		sim_result_free(&res[k]);
	sim_trace_free(&tr);
	return ret;
}
