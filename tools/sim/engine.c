// SPDX-License-Identifier: MIT
/*
 * The simulation of one decode GPU node, step by step.
 *
 * GPU-only (vLLM-like): KV in 16-token blocks in the HBM left after the
 * weights (90 % of HBM usable), continuous batching up to max_batch, FCFS
 * admission, and when a growing request finds no free block the most
 * recently admitted request is preempted -- by recompute (its blocks freed,
 * its prefill redone when it is readmitted) or by swap (its KV moved over
 * PCIe and back).  A step takes (weights + the batch's KV) / HBM bandwidth
 * plus 2 x params x batch / FLOPs.
 *
 * NELSSA: the same node with N PNM devices behind the placement policy
 * (<nelssa/policy.h>).  Long requests keep only centroids (1/C of their KV)
 * and the 68-token window on the GPU; their attention runs on the PNM tier
 * and takes nelssa_pnm_step_time() for the whole tier, in parallel with
 * the GPU's step (split batch: a PNM request produces a token when its
 * attention is back, at the first GPU step boundary after that).  The
 * router's caps queue long requests the tier cannot take; migration moves
 * the largest long GPU request at the high watermark (its KV over the
 * network, the request paused meanwhile); the adaptive threshold follows
 * the tiers' utilisations once per time bucket.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "tool_util.h"

void sim_config_default(struct sim_config *c)
{
	memset(c, 0, sizeof(*c));
	nelssa_hw_profile_builtin("h200", &c->hw);
	/* Llama-3-8B, bf16; 16-token clusters, 4 % selected. */
	c->model = (struct nelssa_model_profile){ 32, 8, 128, 2, 16.06e9, 16.0, 0.04 };
	c->n_dev = 4;
	c->max_batch = 256;
	c->block = 16;
	c->gpu_flops = 989e12;		/* H200 dense bf16 (datasheet) */
	c->params = 8.03e9;
	c->pcie_bw = 55e9;		/* PCIe 5.0 x16, achievable */
	c->net_bw = 50e9;		/* 400 Gb/s RDMA */
	c->migrate = 1;
	c->adaptive = 1;
	c->high_water = 0.9;
	c->window_s = 1.0;
}

struct state {
	const struct sim_config *c;
	struct sim_trace *t;
	struct nelssa_router router;
	struct nelssa_threshold_ctl ctl;
	double mkv, now, extra;		/* extra: recompute/swap time charged to the next step */
	uint64_t cap_blocks, used_blocks;
	uint32_t *run, n_run, *wait, n_wait, next;
	struct sim_result *r;
	uint32_t cap_series;
	double bucket_start;
	uint64_t bucket_tokens;
	double last_t_gpu;
	double win_min[8];		/* shortest GPU step per recent second */
	uint32_t win_pos;
};

static uint32_t len_of(const struct sim_req *q)
{
	return q->input + q->generated;
}

static uint64_t blocks_for(const struct state *s, double tokens)
{
	return (uint64_t)ceil(tokens / s->c->block);
}

/* GPU blocks a request needs at @len tokens: all its KV, or centroids + window. */
static uint64_t need_blocks(const struct state *s, const struct sim_req *q, double len)
{
	if (q->on_pnm)
		return blocks_for(s, len / s->c->model.compression + s->router.window);
	return blocks_for(s, len);
}

static void series_point(struct state *s, uint32_t pnm_batch)
{
	struct sim_point *p;

	if (s->r->n_series == s->cap_series) {
		uint32_t cap = s->cap_series ? 2 * s->cap_series : 256;
		struct sim_point *n = realloc(s->r->series, sizeof(*n) * cap);

		if (!n)
			return;
		s->r->series = n;
		s->cap_series = cap;
	}
	p = &s->r->series[s->r->n_series++];
	*p = (struct sim_point){ .t = s->now,
		.tokens_per_s = s->bucket_tokens / (s->now - s->bucket_start),
		.kv_util = (double)s->used_blocks / s->cap_blocks, .batch = s->n_run,
		.queue = s->n_wait, .pnm_batch = pnm_batch,
		.t_input = s->c->nelssa ? s->router.t_input : 0.0 };
}

/* Frees a request's GPU blocks (and its PNM share). */
static void release(struct state *s, struct sim_req *q)
{
	s->used_blocks -= q->blocks;
	q->blocks = 0;
	if (q->on_pnm)
		nelssa_router_release(&s->router, len_of(q));
}

/* Preempts the most recently admitted GPU request other than @keep; 0 if none. */
static int preempt(struct state *s, uint32_t keep)
{
	for (uint32_t i = s->n_run; i-- > 0;) {
		uint32_t id = s->run[i];
		struct sim_req *q = &s->t->req[id];

		if (id == keep || q->on_pnm)
			continue;
		if (s->c->swap)
			s->extra += 2.0 * len_of(q) * s->mkv / s->c->pcie_bw;	/* out now, in later */
		else
			q->recompute = 1;
		release(s, q);
		q->state = SIM_WAITING;
		q->preemptions++;
		s->r->preemptions++;
		memmove(s->run + i, s->run + i + 1, sizeof(*s->run) * (s->n_run - i - 1));
		s->n_run--;
		memmove(s->wait + 1, s->wait, sizeof(*s->wait) * s->n_wait);
		s->wait[0] = id;
		s->n_wait++;
		return 1;
	}
	return 0;
}

/* Admits waiting requests in order while they fit. */
static void admit(struct state *s)
{
	uint32_t i = 0;

	while (i < s->n_wait && s->n_run < s->c->max_batch) {
		struct sim_req *q = &s->t->req[s->wait[i]];
		const double len = len_of(q);
		enum nelssa_route route = NELSSA_ROUTE_GPU;
		uint64_t need;

		if (s->c->nelssa)
			route = nelssa_route_request(&s->router, len);
		if (route == NELSSA_ROUTE_QUEUE) {
			i++;		/* the PNM tier is full: later requests may pass */
			continue;
		}
		q->on_pnm = route == NELSSA_ROUTE_PNM;
		need = need_blocks(s, q, len + 1);
		if (s->used_blocks + need > s->cap_blocks) {
			if (q->on_pnm)
				nelssa_router_release(&s->router, len);
			q->on_pnm = 0;
			break;		/* FCFS: the head waits for memory */
		}
		s->used_blocks += need;
		q->blocks = (uint32_t)need;
		if (q->start == 0.0 && q->generated == 0)
			q->start = s->now;
		/* Readmitted after a recompute preemption: its prefill again. */
		if (q->recompute)
			s->extra += 2.0 * s->c->params * len / s->c->gpu_flops;
		q->recompute = 0;
		q->pnm_ready = s->now;
		q->state = SIM_RUNNING;
		s->run[s->n_run++] = s->wait[i];
		memmove(s->wait + i, s->wait + i + 1, sizeof(*s->wait) * (s->n_wait - i - 1));
		s->n_wait--;
	}
}

static void migrate(struct state *s)
{
	double *ctx;
	int best;

	if ((double)s->used_blocks / s->cap_blocks < s->c->high_water)
		return;
	ctx = calloc(s->n_run + 1, sizeof(double));
	if (!ctx)
		return;
	for (uint32_t i = 0; i < s->n_run; i++) {
		const struct sim_req *q = &s->t->req[s->run[i]];

		ctx[i] = q->on_pnm ? 0.0 : len_of(q);	/* PNM requests are not candidates */
	}
	best = nelssa_pick_migration(&s->router, ctx, s->n_run, 1.0, 0.0);
	if (best >= 0 && nelssa_route_request(&s->router, ctx[best]) == NELSSA_ROUTE_PNM) {
		struct sim_req *q = &s->t->req[s->run[best]];
		uint64_t need;

		s->used_blocks -= q->blocks;
		q->on_pnm = 1;
		need = need_blocks(s, q, len_of(q) + 1);
		q->blocks = (uint32_t)need;
		s->used_blocks += need;
		/* Paused while its KV crosses the network; the GPU part stays. */
		q->pnm_ready = s->now + len_of(q) * s->mkv / s->c->net_bw;
		s->r->migrations++;
	}
	free(ctx);
}

/*
 * Each tier's pressure for the adaptive threshold, from what is its own:
 * its memory use -- 0 up to half full, 1 at 90 %, more beyond -- and at
 * least its longest wait of a request bound for it, over a 2 s target.
 * The PNM tier's step time is left out on purpose: its budget follows the
 * GPU's step, so it measures how fast the GPU is, not how busy the PNM tier
 * is, and feeding it back made the threshold chase the GPU's own swings.
 * When the step budget is what limits the PNM tier, the router queues its
 * requests and their wait says so.  Both tiers at most half full and
 * nobody waiting: no pressure either way, the threshold stays put.
 */
#define PRESSURE_FROM 0.5
#define PRESSURE_FULL 0.9
#define PRESSURE_WAIT_S 2.0

static double over_knee(double u)
{
	return u > PRESSURE_FROM ? (u - PRESSURE_FROM) / (PRESSURE_FULL - PRESSURE_FROM) : 0.0;
}

static void pressures(const struct state *s, double *p_gpu, double *p_pnm)
{
	double wait_gpu = 0.0, wait_pnm = 0.0;

	for (uint32_t i = 0; i < s->n_wait; i++) {
		const struct sim_req *q = &s->t->req[s->wait[i]];
		double w = s->now - q->arrival;

		if (len_of(q) >= s->router.t_input)
			wait_pnm = fmax(wait_pnm, w);
		else
			wait_gpu = fmax(wait_gpu, w);
	}
	*p_gpu = fmax(over_knee((double)s->used_blocks / s->cap_blocks), wait_gpu / PRESSURE_WAIT_S);
	*p_pnm = fmax(over_knee(s->router.pnm_tokens * s->mkv / (s->c->n_dev * s->c->hw.pnm_mem)),
		      wait_pnm / PRESSURE_WAIT_S);
}

static int cmp_double(const void *a, const void *b)
{
	return tl_cmp_double(a, b);
}

/* Blocks the simulator counts at most: 2^40 blocks of 16 tokens (> 10^16 bytes of KV). */
#define SIM_MAX_BLOCKS (1ull << 40)

int sim_run(const struct sim_config *c, struct sim_trace *t, struct sim_result *r, int progress,
	    char *err, size_t err_len)
{
	struct state s = { .c = c, .t = t, .r = r };
	const double usable = 0.9 * c->hw.gpu_mem - c->model.weights;
	uint32_t reported = 0;
	double *tpot;
	uint64_t want = 0, got = 0;

	memset(r, 0, sizeof(*r));
	s.mkv = nelssa_kv_bytes_per_token(&c->model);
	if (!(usable > 0) || !c->block || !c->max_batch || !t->n) {
		snprintf(err, err_len, "no GPU memory for KV (%.3g GB usable after the weights)",
			 usable / 1e9);
		return -EINVAL;
	}
	if (!(usable / (c->block * s.mkv) <= (double)SIM_MAX_BLOCKS)) {
		snprintf(err, err_len, "a KV pool of %.3g bytes is more than the simulator counts "
			 "(%llu blocks of %u tokens)", usable, SIM_MAX_BLOCKS, c->block);
		return -ERANGE;
	}
	s.cap_blocks = (uint64_t)(usable / (c->block * s.mkv));
	if (!s.cap_blocks) {
		snprintf(err, err_len, "a KV pool of %.3g bytes holds no block", usable);
		return -EINVAL;
	}
	if (nelssa_router_init(&s.router, &c->hw, &c->model, c->n_dev ? c->n_dev : 1)) {
		snprintf(err, err_len, "the policy refuses this node (bandwidths must be > 0)");
		return -EINVAL;
	}
	nelssa_threshold_init(&s.ctl, s.router.t_input);
	s.run = calloc(t->n, sizeof(uint32_t));
	s.wait = calloc(t->n, sizeof(uint32_t));
	if (!s.run || !s.wait) {
		free(s.run);
		free(s.wait);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < t->n; i++) {
		struct sim_req *q = &t->req[i];

		q->generated = 0;
		q->state = SIM_WAITING;
		q->on_pnm = 0;
		q->blocks = 0;
		q->start = q->finish = q->pnm_ready = 0.0;
		q->preemptions = 0;
		q->recompute = 0;
		want += q->output;
		/* A request whose KV cannot fit even alone is never admitted. */
		if (blocks_for(&s, q->input + q->output) > s.cap_blocks && !c->nelssa)
			r->lost++;
	}
	while (r->done + r->lost < t->n) {
		double t_gpu, t_pnm = 0.0, bytes, pnm_tokens = 0.0;
		uint32_t n_pnm = 0;

		while (s.next < t->n && t->req[s.next].arrival <= s.now) {
			if (c->nelssa || blocks_for(&s, t->req[s.next].input + t->req[s.next].output) <=
					 s.cap_blocks)
				s.wait[s.n_wait++] = s.next;
			s.next++;
		}
		/*
		 * The PNM tier's attention must be back within the GPU's step, or
		 * its requests skip a step per token: the budget follows the
		 * last GPU step, with a margin for the step changing.
		 */
		if (s.last_t_gpu > 0) {
			double lo = s.last_t_gpu;

			for (int w = 0; w < 8; w++)
				if (s.win_min[w] > 0 && s.win_min[w] < lo)
					lo = s.win_min[w];
			s.router.cap_step = 0.9 * lo;
		}
		admit(&s);
		if (c->nelssa && c->migrate)
			migrate(&s);
		if (!s.n_run) {
			if (s.next >= t->n)
				break;	/* waiting requests that can never run */
			s.now = t->req[s.next].arrival > s.now ? t->req[s.next].arrival : s.now;
			continue;
		}
		bytes = c->model.weights;
		for (uint32_t i = 0; i < s.n_run; i++) {
			const struct sim_req *q = &t->req[s.run[i]];

			if (q->on_pnm) {
				bytes += (len_of(q) / c->model.compression + s.router.window) * s.mkv;
				pnm_tokens += len_of(q);
				n_pnm++;
			} else {
				bytes += len_of(q) * s.mkv;
			}
		}
		t_gpu = bytes / c->hw.gpu_bw + 2.0 * c->params * s.n_run / c->gpu_flops + s.extra;
		s.extra = 0.0;
		if (n_pnm)
			t_pnm = nelssa_pnm_step_time(&s.router, pnm_tokens, n_pnm);
		s.last_t_gpu = t_gpu;
		if (s.win_min[s.win_pos] == 0 || t_gpu < s.win_min[s.win_pos])
			s.win_min[s.win_pos] = t_gpu;
		s.now += t_gpu;
		for (uint32_t i = 0; i < s.n_run;) {
			uint32_t id = s.run[i];
			struct sim_req *q = &t->req[id];
			uint64_t need;

			if (q->on_pnm) {
				if (q->pnm_ready > s.now) {
					i++;
					continue;
				}
				q->pnm_ready = s.now + t_pnm;
				s.router.pnm_tokens += 1.0;
			}
			q->generated++;
			got++;
			s.bucket_tokens++;
			if (q->generated >= q->output) {
				q->finish = s.now;
				q->state = SIM_DONE;
				release(&s, q);
				r->done++;
				memmove(s.run + i, s.run + i + 1, sizeof(*s.run) * (s.n_run - i - 1));
				s.n_run--;
				continue;
			}
			need = need_blocks(&s, q, len_of(q) + 1);
			while (need > q->blocks && s.used_blocks + (need - q->blocks) > s.cap_blocks)
				if (!preempt(&s, id))
					break;
			if (need > q->blocks && s.used_blocks + (need - q->blocks) > s.cap_blocks) {
				/* Nothing else to evict: this request waits itself. */
				if (!q->on_pnm && s.c->swap)
					s.extra += 2.0 * len_of(q) * s.mkv / s.c->pcie_bw;
				else
					q->recompute = !q->on_pnm;
				release(&s, q);
				q->on_pnm = 0;
				q->state = SIM_WAITING;
				q->preemptions++;
				r->preemptions++;
				memmove(s.run + i, s.run + i + 1, sizeof(*s.run) * (s.n_run - i - 1));
				s.n_run--;
				memmove(s.wait + 1, s.wait, sizeof(*s.wait) * s.n_wait);
				s.wait[0] = id;
				s.n_wait++;
				continue;
			}
			if (need > q->blocks) {
				s.used_blocks += need - q->blocks;
				q->blocks = (uint32_t)need;
			}
			/* run[] may have shifted under a preemption: find this request again. */
			for (i = 0; i < s.n_run && s.run[i] != id; i++)
				;
			i++;
		}
		if ((double)s.used_blocks / s.cap_blocks > r->max_kv_util)
			r->max_kv_util = (double)s.used_blocks / s.cap_blocks;
		if (s.now - s.bucket_start >= c->window_s) {
			if (c->nelssa && c->adaptive) {
				double p_gpu, p_pnm;

				pressures(&s, &p_gpu, &p_pnm);
				s.router.t_input = nelssa_threshold_update(&s.ctl, p_gpu, p_pnm,
									   s.now - s.bucket_start);
			}
			series_point(&s, n_pnm);
			s.win_pos = (s.win_pos + 1) % 8;
			s.win_min[s.win_pos] = 0.0;
			s.bucket_start = s.now;
			s.bucket_tokens = 0;
		}
		if (progress && r->done * 20 / t->n > reported) {
			reported = r->done * 20 / t->n;
			fprintf(stderr, "\r  [%-20.*s] %3u%%", reported, "####################",
				reported * 5);
		}
	}
	if (progress)
		fprintf(stderr, "\r%40s\r", "");
	r->lost = t->n - r->done;
	r->tokens = got;
	r->makespan = s.now;
	r->tput = s.now > 0 ? got / s.now : 0.0;
	tpot = calloc(r->done + 1, sizeof(double));
	if (tpot) {
		uint32_t n = 0;

		for (uint32_t i = 0; i < t->n; i++)
			if (t->req[i].state == SIM_DONE)
				tpot[n++] = (t->req[i].finish - t->req[i].start) / t->req[i].output;
		qsort(tpot, n, sizeof(double), cmp_double);
		if (n) {
			r->tpot_p50 = tpot[(size_t)(0.50 * (n - 1))];
			r->tpot_p95 = tpot[(size_t)(0.95 * (n - 1))];
			r->tpot_p99 = tpot[(size_t)(0.99 * (n - 1))];
		}
		free(tpot);
	}
	(void)want;
	free(s.run);
	free(s.wait);
	return 0;
}

void sim_result_free(struct sim_result *r)
{
	free(r->series);
	memset(r, 0, sizeof(*r));
}
