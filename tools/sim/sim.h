/* SPDX-License-Identifier: MIT */
/*
 * nelssa-sim: a trace-driven simulator of one decode GPU node, GPU-only
 * (vLLM-like paged KV, continuous batching, preemption) or NELSSA (the
 * placement policy with N PNM devices).  Documentation/simulator.rst.
 */
#ifndef NELSSA_SIM_H
#define NELSSA_SIM_H

#include <stddef.h>
#include <stdint.h>

#include <nelssa/policy.h>

struct sim_req {
	double arrival;			/* s */
	uint32_t input, output;		/* tokens */
	/* state */
	uint32_t generated;
	int state;			/* enum sim_state */
	int on_pnm;
	int tier;			/* where it ran last: -1, NELSSA_ROUTE_GPU or _PNM */
	uint32_t blocks;		/* GPU KV blocks held */
	double start, first, finish, pnm_ready;
	uint32_t preemptions;
	int recompute;			/* its prefill is redone on readmission */
	int in_step;			/* in the batch of the step being run */
	int extra;			/* only the PNM tier can hold it (NELSSA) */
	int tier_first;			/* where it was first admitted, -1 before */
	int pnm_node;			/* in a cluster, the NELSSA node it is placed on; -1 */
};

/* NEW: not arrived yet; WAITING; RUNNING; DONE; REFUSED at arrival (fits no tier). */
enum sim_state { SIM_NEW, SIM_WAITING, SIM_RUNNING, SIM_DONE, SIM_REFUSED };

struct sim_trace {
	struct sim_req *req;
	uint32_t n;
	uint64_t skipped;		/* bad trace lines skipped (--skip-bad) */
	char first_skip[200];		/* where the first was, and why */
};

/* The longest input or output a request may have, tokens. */
#define SIM_MAX_TOKENS (1u << 24)

/* The random streams of one seed (sim_seed_stream()). */
enum { SIM_STREAM_LENGTHS, SIM_STREAM_ARRIVALS, SIM_STREAM_BURST, SIM_STREAM_PROPERTY };

/* A nonzero xorshift state for stream @stream of @seed (splitmix64). */
uint64_t sim_seed_stream(uint64_t seed, uint64_t stream);

/*
 * Reads a Mooncake JSONL trace: input/output lengths, in file order, the
 * first @max records (0: all), inputs times @scale.  Blank lines are not
 * records; any other line that is not a JSON object with integer lengths
 * in [1, SIM_MAX_TOKENS] is an error -- or, with @skip_bad, skipped and
 * counted in t->skipped.  0, or a negative errno with a message in @err.
 */
int sim_trace_load(const char *path, double scale, uint32_t max, int skip_bad,
		   struct sim_trace *t, char *err, size_t err_len);
/*
 * A synthetic mix: @n requests, @long_frac of them long -- uniform in
 * [@long_lo, @long_hi] tokens -- the rest 1K-8K.
 */
int sim_trace_synthetic(uint32_t n, double long_frac, uint32_t long_lo, uint32_t long_hi,
			uint32_t out_len, uint64_t seed, struct sim_trace *t);

/* A change of the arrival rate: from @at seconds on, @rps requests/s. */
struct sim_rate_step {
	double at, rps;
};

#define SIM_MAX_RATE_STEPS 8

/* Poisson arrivals at @rps, then at each of the @n @steps' rates (in time order), from @seed. */
void sim_retime(struct sim_trace *t, double rps, const struct sim_rate_step *steps, uint32_t n,
		uint64_t seed);
/*
 * A burst of long requests: arrivals in [@from, @from + @len) seconds get
 * an input uniform in [@long_lo, @long_hi] tokens with probability @frac
 * (after re-timing).
 */
void sim_burst(struct sim_trace *t, double from, double len, double frac, uint32_t long_lo,
	       uint32_t long_hi, uint64_t seed);
/*
 * Growing contexts: every request's output becomes @ratio times its input;
 * -ERANGE (and nothing changed) when one would pass SIM_MAX_TOKENS.
 */
int sim_grow(struct sim_trace *t, double ratio);
void sim_trace_free(struct sim_trace *t);

struct sim_config {
	struct nelssa_hw_profile hw;
	struct nelssa_model_profile model;
	int nelssa;			/* 0: GPU-only */
	uint32_t n_dev;
	uint32_t max_batch;
	uint32_t block;			/* tokens per KV block (16) */
	int swap;			/* preempt by swap instead of recompute */
	double gpu_flops;		/* FLOP/s for the compute term */
	double prefill_flops;		/* FLOP/s of a recompute's prefill; 0: gpu_flops */
	double params;			/* model parameters */
	double pcie_bw;			/* swap bandwidth, bytes/s */
	double net_bw;			/* migration transfer bandwidth, bytes/s */
	int migrate, adaptive;
	double high_water;		/* GPU KV fraction that triggers migration */
	double threshold;		/* routing threshold, tokens; 0: the crossover */
	double window_s;		/* time-series bucket */
	/* A cluster (Documentation/simulator.rst, "Clusters"); 0 or 1 each: one node. */
	uint32_t gpu_nodes;		/* M GPU nodes, requests dealt round-robin */
	uint32_t pnm_nodes;		/* K NELSSA nodes of n_dev devices each */
	double max_fill;		/* a NELSSA node filled to at most this share (0: 0.9) */
};

struct sim_point {
	double t, tokens_per_s, kv_util, batch, queue, pnm_batch, t_input;
};

/* P50, P95 and P99 of one metric over the requests done, seconds. */
struct sim_pct {
	double p50, p95, p99;
};

/* What became of one request in one run. */
struct sim_outcome {
	double start, first, finish;	/* first admission, first token, last token (s) */
	uint32_t preemptions;
	uint8_t state;			/* SIM_DONE, SIM_REFUSED, or lost (anything else) */
	uint8_t tier;			/* where it ran last: NELSSA_ROUTE_GPU or _PNM */
	uint8_t tier_first;		/* where it was first admitted */
};

/*
 * One run.  TPOT is (finish - start) / output: the time per token once
 * admitted; TPOT with queueing is (finish - arrival) / output, the wait
 * for admission included; TTFT is first - arrival.  tpot_p50/95/99 are
 * tpot.p50/95/99 (kept for the callers that read them).
 */
struct sim_result {
	uint64_t tokens, preemptions, migrations;
	uint64_t moved;			/* preempted requests readmitted to the other tier */
	uint64_t gpu_fallbacks;		/* bound for PNM, started on the GPU: the tier was full */
	uint64_t pnm_requests;		/* admissions to the PNM tier (migrations included) */
	uint32_t done, lost, refused;
	double makespan, tput, tpot_p50, tpot_p95, tpot_p99, max_kv_util;
	struct sim_pct tpot, tpot_q, ttft;
	char refuse_why[200];		/* the first refusal's reason */
	struct sim_outcome *req;	/* one per request of the trace */
	uint32_t n_req;
	struct sim_point *series;
	uint32_t n_series;
	/* A cluster: the fullest a NELSSA node got (final tokens over its memory), admissions per node. */
	double max_node_fill;
	uint64_t *node_admissions;	/* pnm_nodes entries, or NULL */
	uint32_t n_nodes;
};

/*
 * NELSSA against GPU-only on the requests GPU-only serves (the common
 * set): how many of them NELSSA does not serve, and for the rest each
 * run's throughput (their tokens over the time the last of them
 * finishes) and P99 TPOT with queueing; requests only NELSSA serves are
 * counted apart.  The ratios are NELSSA / GPU-only for throughput and
 * GPU-only / NELSSA for P99, so that above 1 is better for NELSSA.
 */
struct sim_cmp {
	uint32_t common, lost_more, extra;
	double tput_gpu, tput_nelssa, p99q_gpu, p99q_nelssa;
	double tput_ratio, p99q_ratio;
};

void sim_compare(const struct sim_trace *t, const struct sim_result *gpu,
		 const struct sim_result *nelssa, struct sim_cmp *c);

void sim_config_default(struct sim_config *c);
/*
 * Runs the trace; 0, or -EINVAL / -ERANGE when the configuration cannot
 * run (no KV room, or a node larger than the simulator counts), with the
 * reason in @err.
 */
int sim_run(const struct sim_config *c, struct sim_trace *t, struct sim_result *r,
	    int progress, char *err, size_t err_len);
void sim_result_free(struct sim_result *r);

/* Writes a line chart of one series per result (SVG). */
int sim_plot_svg(const char *path, const char *title, const char *ylabel,
		 const struct sim_result *const *res, const char *const *names, int n,
		 int field);

#endif /* NELSSA_SIM_H */
