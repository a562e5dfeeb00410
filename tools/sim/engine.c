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
 * plus 2 x params x batch / FLOPs.  A request whose KV at its end
 * (input + output) is larger than the whole pool is refused at arrival,
 * as vLLM refuses a prompt over its pool.
 *
 * NELSSA: the same node with N PNM devices behind the placement policy
 * (<nelssa/policy.h>), which also decides what to refuse: a request that
 * fits neither tier.  Long requests keep only centroids (1/C of their KV)
 * and the 68-token window on the GPU; their attention runs on the PNM tier
 * and takes nelssa_pnm_step_time() for the whole tier, in parallel with
 * the GPU's step (split batch: a PNM request produces a token when its
 * attention is back, at the first GPU step boundary after that).  The
 * router's caps queue long requests the tier cannot take (or start them
 * on the GPU when it has room); migration moves the largest long GPU
 * request at the high watermark (its KV over the network, the request
 * paused meanwhile); a preempted request is readmitted where the router
 * says -- only where it ran when migration is off -- and a move is
 * counted; the adaptive threshold follows the tiers' pressures.
 *
 * A cluster (--gpu-nodes M, --pnm-nodes K; Documentation/simulator.rst,
 * "Clusters"): M such GPU nodes, each with its own pool, batch and router,
 * the requests dealt to them round-robin in arrival order, share K NELSSA
 * nodes of N devices each.  A long request is placed on one node by the
 * client library's rule (nelssa_place_pick()) at its final length, or
 * waits when no node has room; its attention takes the step time of its
 * node's whole load -- every GPU node's requests there -- so nodes shared
 * by many GPU nodes are slower.  The GPU nodes advance in time order, the
 * earliest first, one step at a time.
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
	c->model = (struct nelssa_model_profile){ 32, 8, 128, 2, 16.06e9, 16.0, 0.04, 0 };
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

/* The NELSSA nodes of a cluster, shared by the GPU nodes' states. */
struct cluster {
	uint32_t k;
	double cap_tokens;		/* a node's max_fill of its memory, in tokens */
	double fill;			/* max_fill */
	struct cnode {
		double tokens, final;	/* of the requests placed there, now and at their ends */
		uint32_t reqs;
	} *n;
	struct nelssa_place_node *view;	/* scratch for nelssa_place_pick() */
};

struct state {
	const struct sim_config *c;
	struct cluster *cl;		/* NULL: one GPU node, its own PNM tier */
	uint32_t *ids, n_ids;		/* its requests, in arrival order */
	int done;			/* no more work */
	int stuck;			/* waits for room only other GPU nodes can make */
	int series;			/* it records the time series */
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
};

static uint32_t len_of(const struct sim_req *q)
{
	return q->input + q->generated;
}

static double final_of(const struct sim_req *q)
{
	return (double)q->input + q->output;
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

/*
 * Cluster: puts @q (routed to the PNM tier at @len tokens) on a node; 0,
 * or -ENOSPC when no node has room.  One GPU node alone: always 0.
 */
static int place(struct state *s, struct sim_req *q, double len)
{
	struct cluster *cl = s->cl;
	int k;

	if (!cl)
		return 0;
	for (uint32_t i = 0; i < cl->k; i++)
		cl->view[i] = (struct nelssa_place_node){
			.used_tokens = cl->n[i].final, .cap_tokens = cl->cap_tokens,
			.devices = s->c->n_dev, .eligible = 1 };
	k = nelssa_place_pick(cl->view, cl->k, final_of(q));
	if (k < 0)
		return k;
	q->pnm_node = k;
	cl->n[k].tokens += len;
	cl->n[k].final += final_of(q);
	cl->n[k].reqs++;
	/* What a node holds of its memory, at the requests' ends: never above max_fill. */
	s->r->max_node_fill = fmax(s->r->max_node_fill, cl->n[k].final / cl->cap_tokens * cl->fill);
	return 0;
}

static void unplace(struct state *s, struct sim_req *q)
{
	struct cnode *n;

	if (!s->cl || q->pnm_node < 0)
		return;
	n = &s->cl->n[q->pnm_node];
	n->tokens = fmax(0.0, n->tokens - len_of(q));
	n->final = fmax(0.0, n->final - final_of(q));
	if (!--n->reqs)
		n->tokens = n->final = 0.0;	/* no rounding left over */
	q->pnm_node = -1;
}

/* The step of @q's node: its devices stream every GPU node's requests there. */
static double node_step(const struct state *s, const struct sim_req *q)
{
	const struct cnode *n = &s->cl->n[q->pnm_node];

	return nelssa_pnm_step_time(&s->router, n->tokens, n->reqs);
}

/* Frees a request's GPU blocks (and its PNM share). */
static void release(struct state *s, struct sim_req *q)
{
	s->used_blocks -= q->blocks;
	q->blocks = 0;
	if (q->on_pnm) {
		nelssa_router_leave(&s->router, len_of(q), final_of(q));
		unplace(s, q);
	}
	q->on_pnm = 0;
}

/* Takes run[@i] off the batch and puts it at the head of the queue. */
static void requeue(struct state *s, uint32_t i)
{
	uint32_t id = s->run[i];
	struct sim_req *q = &s->t->req[id];

	release(s, q);
	q->state = SIM_WAITING;
	q->preemptions++;
	s->r->preemptions++;
	memmove(s->run + i, s->run + i + 1, sizeof(*s->run) * (s->n_run - i - 1));
	s->n_run--;
	memmove(s->wait + 1, s->wait, sizeof(*s->wait) * s->n_wait);
	s->wait[0] = id;
	s->n_wait++;
}

/*
 * Preempts a running request other than @keep to make room: the most
 * recently admitted request only the PNM tier can hold (it yields to the
 * others), else the most recently admitted GPU request; 0 if none.
 */
static int preempt(struct state *s, uint32_t keep)
{
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = s->n_run; i-- > 0;) {
			uint32_t id = s->run[i];
			struct sim_req *q = &s->t->req[id];

			if (id == keep || (pass == 0 ? !q->extra : q->on_pnm))
				continue;
			if (!q->on_pnm && s->c->swap)
				s->extra += 2.0 * len_of(q) * s->mkv / s->c->pcie_bw;	/* out, in later */
			else
				q->recompute = !q->on_pnm;
			requeue(s, i);
			return 1;
		}
	return 0;
}

/* Preempts the most recently admitted request only the PNM tier holds; 0 if none. */
static int preempt_extra(struct state *s)
{
	for (uint32_t i = s->n_run; i-- > 0;)
		if (s->t->req[s->run[i]].extra) {
			requeue(s, i);
			return 1;
		}
	return 0;
}

/*
 * Admits waiting requests in order while they fit, in two passes: first
 * the requests the GPU could hold (FCFS: the first that does not fit in
 * GPU memory stops the pass; one that finds no GPU memory, batch slot or
 * room on the PNM tier first has requests only the PNM tier holds
 * preempted to make room), then -- only if none of those waits for
 * memory, a batch slot or the PNM tier -- the requests only the PNM tier
 * holds, in order.  Those yield: they use what the others leave.
 */
static void admit(struct state *s)
{
	int behind = 0;		/* an older request waits for the PNM tier */
	int blocked = 0;	/* a request the GPU could hold waits for memory or a slot */

	for (int pass = 0; pass < 2 && !(pass == 1 && blocked); pass++) {
		uint32_t i = 0;

		while (i < s->n_wait) {
			struct sim_req *q = &s->t->req[s->wait[i]];
			const double len = len_of(q);
			enum nelssa_route route = NELSSA_ROUTE_GPU;
			uint64_t need;

			if (q->extra != pass) {
				i++;
				continue;
			}
			if (s->n_run >= s->c->max_batch) {
				if (!pass && preempt_extra(s)) {
					i++;	/* the preempted one went in at the head */
					continue;
				}
				blocked = 1;
				break;
			}
			if (s->c->nelssa) {
				const struct nelssa_route_query rq = {
					.len = len, .final_len = final_of(q),
					.gpu_free = (double)(s->cap_blocks - s->used_blocks) *
						    s->c->block * s->mkv,
					.prev = q->tier, .pinned = q->tier >= 0 && !s->c->migrate,
					.behind = behind,
				};

				route = nelssa_route(&s->router, &rq);
			}
			if (route == NELSSA_ROUTE_QUEUE && !pass && preempt_extra(s)) {
				i++;	/* what the tier holds for others is theirs: again */
				continue;
			}
			if (route == NELSSA_ROUTE_QUEUE || route == NELSSA_ROUTE_REFUSE) {
				/* The PNM tier is full: later requests may pass, not on that tier. */
				behind = 1;
				i++;
				continue;
			}
			if (route == NELSSA_ROUTE_PNM && place(s, q, len)) {
				nelssa_router_leave(&s->router, len, final_of(q));
				if (final_of(q) <= s->cl->cap_tokens ||
				    !(nelssa_router_fits(&s->router, final_of(q)) & NELSSA_FITS_GPU)) {
					/* No NELSSA node has room: as for any other cap of the tier. */
					behind = 1;
					i++;
					continue;
				}
				/* Longer than any one node holds, and the GPU can: the GPU. */
				route = NELSSA_ROUTE_GPU;
			}
			q->on_pnm = route == NELSSA_ROUTE_PNM;
			need = need_blocks(s, q, len + 1);
			if (s->used_blocks + need > s->cap_blocks) {
				if (q->on_pnm) {
					nelssa_router_leave(&s->router, len, final_of(q));
					unplace(s, q);
				}
				q->on_pnm = 0;
				if (!pass && preempt_extra(s)) {
					i++;	/* the preempted one went in at the head */
					continue;
				}
				blocked = 1;
				break;		/* FCFS: the head waits for memory */
			}
			if (route == NELSSA_ROUTE_GPU && s->router.why[0])
				s->r->gpu_fallbacks++;	/* bound for the PNM tier, the GPU had room */
			if (q->on_pnm) {
				s->r->pnm_requests++;
				if (s->cl)
					s->r->node_admissions[q->pnm_node]++;
			}
			if (q->tier >= 0 && q->tier != (int)route)
				s->r->moved++;	/* preempted on one tier, readmitted to the other */
			q->tier = (int)route;
			if (q->tier_first < 0)
				q->tier_first = q->tier;
			s->used_blocks += need;
			q->blocks = (uint32_t)need;
			if (q->generated == 0 && q->preemptions == 0)
				q->start = s->now;
			/* Readmitted after a recompute preemption: its prefill again. */
			if (q->recompute)
				s->extra += 2.0 * s->c->params * len /
					    (s->c->prefill_flops > 0 ? s->c->prefill_flops :
					     s->c->gpu_flops);
			q->recompute = 0;
			q->pnm_ready = s->now;
			q->state = SIM_RUNNING;
			s->run[s->n_run++] = s->wait[i];
			memmove(s->wait + i, s->wait + i + 1, sizeof(*s->wait) * (s->n_wait - i - 1));
			s->n_wait--;
		}
	}
}

static void migrate(struct state *s)
{
	double *ctx, *fin;
	int best;

	if ((double)s->used_blocks / s->cap_blocks < s->c->high_water)
		return;
	ctx = calloc(2 * (size_t)s->n_run + 1, sizeof(double));
	if (!ctx)
		return;
	fin = ctx + s->n_run;
	for (uint32_t i = 0; i < s->n_run; i++) {
		const struct sim_req *q = &s->t->req[s->run[i]];

		ctx[i] = q->on_pnm ? 0.0 : len_of(q);	/* PNM requests are not candidates */
		fin[i] = q->on_pnm ? 0.0 : final_of(q);
	}
	best = nelssa_pick_migration_final(&s->router, ctx, fin, s->n_run, 1.0, 0.0);
	if (best >= 0) {
		struct sim_req *q = &s->t->req[s->run[best]];
		const struct nelssa_route_query rq = { .len = ctx[best], .final_len = fin[best],
						       .prev = NELSSA_ROUTE_GPU };
		enum nelssa_route route = nelssa_route(&s->router, &rq);

		if (route == NELSSA_ROUTE_PNM && place(s, q, ctx[best])) {
			/* No NELSSA node has room for it: it stays. */
			nelssa_router_leave(&s->router, ctx[best], fin[best]);
			route = NELSSA_ROUTE_QUEUE;
		}
		if (route == NELSSA_ROUTE_PNM) {
			uint64_t need;

			s->used_blocks -= q->blocks;
			q->on_pnm = 1;
			q->tier = NELSSA_ROUTE_PNM;
			need = need_blocks(s, q, len_of(q) + 1);
			q->blocks = (uint32_t)need;
			s->used_blocks += need;
			/* Paused while its KV crosses the network; the GPU part stays. */
			q->pnm_ready = s->now + len_of(q) * s->mkv / s->c->net_bw;
			s->r->migrations++;
			s->r->pnm_requests++;
			if (s->cl)
				s->r->node_admissions[q->pnm_node]++;
		}
	}
	free(ctx);
}

/*
 * Each tier's pressure for the adaptive threshold, from what is its own:
 * its memory use -- 0 up to half full, 1 at 90 %, more beyond -- and at
 * least its longest wait of a request bound for it, over a 2 s target.
 * Both tiers at most half full and nobody waiting: no pressure either
 * way, the threshold stays put.
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
	if (s->cl) {
		/* A cluster's PNM tier is as full as its fullest node. */
		double fill = 0.0;

		for (uint32_t k = 0; k < s->cl->k; k++)
			fill = fmax(fill, s->cl->n[k].tokens * s->mkv /
				    (s->c->n_dev * s->c->hw.pnm_mem));
		*p_pnm = fmax(over_knee(fill), wait_pnm / PRESSURE_WAIT_S);
		return;
	}
	*p_pnm = fmax(over_knee(s->router.pnm_tokens * s->mkv / (s->c->n_dev * s->c->hw.pnm_mem)),
		      wait_pnm / PRESSURE_WAIT_S);
}

static int cmp_double(const void *a, const void *b)
{
	return tl_cmp_double(a, b);
}

/* The nearest-rank @p-quantile of @n sorted values: the smallest with at least p n at or below. */
static double rank(const double *v, size_t n, double p)
{
	size_t k = (size_t)ceil(p * (double)n);

	return v[k ? k - 1 : 0];
}

/* P50/P95/P99 of @v (sorted in place), nearest rank; 0 when empty. */
static struct sim_pct percentiles(double *v, size_t n)
{
	if (!n)
		return (struct sim_pct){ 0, 0, 0 };
	qsort(v, n, sizeof(*v), cmp_double);
	return (struct sim_pct){ rank(v, n, 0.50), rank(v, n, 0.95), rank(v, n, 0.99) };
}

/* A request arrives: queued, or refused when it fits no tier it could run on. */
static void arrive(struct state *s, uint32_t id)
{
	struct sim_req *q = &s->t->req[id];
	const char *why = NULL;
	char buf[200];

	if (s->c->nelssa && s->cl && final_of(q) > s->cl->cap_tokens &&
	    !(nelssa_router_fits(&s->router, final_of(q)) & NELSSA_FITS_GPU)) {
		snprintf(buf, sizeof(buf), "%.0f tokens fit neither the GPU's pool nor one NELSSA "
			 "node (%.0f tokens)", final_of(q), s->cl->cap_tokens);
		why = buf;
	} else if (s->c->nelssa) {
		if (!nelssa_router_fits(&s->router, final_of(q))) {
			/* nelssa_route() says why in the router's words. */
			const struct nelssa_route_query rq = { .len = q->input,
							       .final_len = final_of(q), .prev = -1 };

			nelssa_route(&s->router, &rq);
			why = s->router.why;
		}
	} else if (blocks_for(s, final_of(q)) > s->cap_blocks) {
		snprintf(buf, sizeof(buf), "%.1f GiB of KV at %.0f tokens is over the GPU's %.1f GiB "
			 "KV pool", final_of(q) * s->mkv / (1 << 30), final_of(q),
			 (double)s->cap_blocks * s->c->block * s->mkv / (1 << 30));
		why = buf;
	}
	if (why) {
		q->state = SIM_REFUSED;
		if (!s->r->refused++)
			snprintf(s->r->refuse_why, sizeof(s->r->refuse_why), "%s", why);
		return;
	}
	q->state = SIM_WAITING;
	q->extra = s->c->nelssa && !(nelssa_router_fits(&s->router, final_of(q)) & NELSSA_FITS_GPU);
	s->wait[s->n_wait++] = id;
}

/* Blocks the simulator counts at most: 2^40 blocks of 16 tokens (> 10^16 bytes of KV). */
#define SIM_MAX_BLOCKS (1ull << 40)

/* What turn() says of a GPU node. */
enum { TURN_DONE, TURN_MOVED, TURN_STUCK };

/*
 * One turn of a GPU node: arrivals, admission, migration, and one step or
 * a jump in time to its next event.  TURN_STUCK: requests wait for room
 * on the cluster's NELSSA nodes that only other GPU nodes can free, and
 * nothing else will happen here.  A negative errno on an internal error.
 */
static int turn(struct state *s, char *err, size_t err_len)
{
	const struct sim_config *c = s->c;
	struct sim_trace *t = s->t;
	struct sim_result *r = s->r;
	double t_gpu, t0, t_pnm = 0.0, t_pnm_x = 0.0, bytes, x_bytes = 0.0, due = INFINITY;
	uint32_t n_pnm = 0, n_in = 0;

	while (s->next < s->n_ids && t->req[s->ids[s->next]].arrival <= s->now)
		arrive(s, s->ids[s->next++]);
	admit(s);
	if (c->nelssa && c->migrate)
		migrate(s);
	if (!s->n_run) {
		/*
		 * In a cluster, requests waiting here wait for room other GPU
		 * nodes may make before this node's next arrival: it waits for
		 * them (the scheduler wakes it at that arrival if no one moves).
		 */
		if (s->cl && s->n_wait)
			return TURN_STUCK;
		/* Done, or waiting requests that can never run (lost). */
		if (s->next >= s->n_ids)
			return TURN_DONE;
		s->now = fmax(s->now, t->req[s->ids[s->next]].arrival);
		return TURN_MOVED;
	}
	/*
	 * The step's batch: the GPU requests, and the PNM requests whose
	 * attention is back by the time the step without them ends (t0) --
	 * a PNM request still waiting for its attention rejoins a later
	 * batch, as in the client's split batch, and costs this step
	 * nothing.  Only PNM requests, none of them due: the GPU idles
	 * until the first is, or a request arrives.
	 */
	bytes = c->model.weights;
	for (uint32_t i = 0; i < s->n_run; i++) {
		const struct sim_req *q = &t->req[s->run[i]];

		if (q->on_pnm) {
			n_pnm++;
		} else {
			bytes += len_of(q) * s->mkv;
			n_in++;
		}
	}
	t0 = bytes / c->hw.gpu_bw + 2.0 * c->params * n_in / c->gpu_flops + s->extra;
	if (n_pnm) {
		/* Each class's step, at the load this step starts with. */
		t_pnm = nelssa_pnm_step_of(&s->router, 0.0, t0);
		t_pnm_x = nelssa_pnm_step_of(&s->router, INFINITY, t0);
	}
	for (uint32_t i = 0; i < s->n_run; i++) {
		struct sim_req *q = &t->req[s->run[i]];
		const double meta = (len_of(q) / c->model.compression + s->router.window) * s->mkv;

		/* The same expression as the jump below: no rounding gap between them. */
		q->in_step = !q->on_pnm || q->pnm_ready - t0 <= s->now;
		if (q->on_pnm && q->in_step)
			n_in++;
		else if (q->on_pnm)
			due = fmin(due, q->pnm_ready);
		/*
		 * A PNM request reads its centroids and window in the step
		 * of its token -- but one paced to a token every t_pnm_x
		 * does it layer by layer through that time, so each step
		 * carries its share t0 / t_pnm_x of that read.
		 */
		if (q->on_pnm && q->extra)
			x_bytes += meta * fmin(1.0, t0 / t_pnm_x);
		else if (q->on_pnm && q->in_step)
			bytes += meta;
	}
	if (!n_in) {
		double at = due - t0;

		if (s->next < s->n_ids && t->req[s->ids[s->next]].arrival < at)
			at = t->req[s->ids[s->next]].arrival;
		if (!(at > s->now)) {
			snprintf(err, err_len, "internal error: no progress at %.6f s", s->now);
			return -EFAULT;
		}
		s->now = at;
		return TURN_MOVED;
	}
	bytes += x_bytes;
	t_gpu = bytes / c->hw.gpu_bw + 2.0 * c->params * n_in / c->gpu_flops + s->extra;
	s->extra = 0.0;
	s->now += t_gpu;
	for (uint32_t i = 0; i < s->n_run;) {
		uint32_t id = s->run[i];
		struct sim_req *q = &t->req[id];
		uint64_t need;

		if (q->on_pnm) {
			double tq = q->extra ? t_pnm_x : t_pnm;

			if (!q->in_step) {
				i++;
				continue;
			}
			/* In a cluster, its node's load -- every GPU node's there -- sets it too. */
			if (s->cl)
				tq = fmax(tq, node_step(s, q));
			q->pnm_ready = s->now + tq;
			nelssa_router_grow(&s->router, 1.0, final_of(q));
			if (s->cl)
				s->cl->n[q->pnm_node].tokens += 1.0;
		}
		if (!q->generated)
			q->first = s->now;
		q->generated++;
		r->tokens++;
		s->bucket_tokens++;
		if (q->generated >= q->output) {
			q->finish = s->now;
			release(s, q);
			q->state = SIM_DONE;
			r->done++;
			memmove(s->run + i, s->run + i + 1, sizeof(*s->run) * (s->n_run - i - 1));
			s->n_run--;
			continue;
		}
		need = need_blocks(s, q, len_of(q) + 1);
		while (need > q->blocks && s->used_blocks + (need - q->blocks) > s->cap_blocks)
			if (!preempt(s, id))
				break;
		/* run[] may have shifted under a preemption: find this request again. */
		for (i = 0; i < s->n_run && s->run[i] != id; i++)
			;
		if (need > q->blocks && s->used_blocks + (need - q->blocks) > s->cap_blocks) {
			/* Nothing else to evict: this request waits itself. */
			if (!q->on_pnm && s->c->swap)
				s->extra += 2.0 * len_of(q) * s->mkv / s->c->pcie_bw;
			else
				q->recompute = !q->on_pnm;
			requeue(s, i);
			continue;
		}
		if (need > q->blocks) {
			s->used_blocks += need - q->blocks;
			q->blocks = (uint32_t)need;
		}
		i++;
	}
	if ((double)s->used_blocks / s->cap_blocks > r->max_kv_util)
		r->max_kv_util = (double)s->used_blocks / s->cap_blocks;
	if (s->now - s->bucket_start >= c->window_s) {
		if (c->nelssa && c->adaptive) {
			double p_gpu, p_pnm;

			pressures(s, &p_gpu, &p_pnm);
			s->router.t_input = nelssa_threshold_update(&s->ctl, p_gpu, p_pnm,
								    s->now - s->bucket_start);
		}
		if (s->series)
			series_point(s, n_pnm);
		s->bucket_start = s->now;
		s->bucket_tokens = 0;
	}
	return TURN_MOVED;
}

/* A GPU node's state: its pool and router, and its requests (every @m-th from @first). */
static int state_init(struct state *s, const struct sim_config *c, struct sim_trace *t,
		      struct sim_result *r, uint32_t first, uint32_t m, char *err, size_t err_len)
{
	const double usable = 0.9 * c->hw.gpu_mem - c->model.weights;

	s->c = c;
	s->t = t;
	s->r = r;
	s->mkv = nelssa_kv_bytes_per_token(&c->model);
	if (!(usable > 0)) {
		snprintf(err, err_len, "no GPU memory for KV (%.3g GB usable after the weights)",
			 usable / 1e9);
		return -EINVAL;
	}
	if (!(usable / (c->block * s->mkv) <= (double)SIM_MAX_BLOCKS)) {
		snprintf(err, err_len, "a KV pool of %.3g bytes is more than the simulator counts "
			 "(%llu blocks of %u tokens)", usable, SIM_MAX_BLOCKS, c->block);
		return -ERANGE;
	}
	s->cap_blocks = (uint64_t)(usable / (c->block * s->mkv));
	if (!s->cap_blocks) {
		snprintf(err, err_len, "a KV pool of %.3g bytes holds no block", usable);
		return -EINVAL;
	}
	if (nelssa_router_init(&s->router, &c->hw, &c->model, c->n_dev ? c->n_dev : 1)) {
		snprintf(err, err_len, "the policy refuses this node (bandwidths must be > 0)");
		return -EINVAL;
	}
	/* The pool a request must fit is the simulator's, to the block. */
	s->router.gpu_kv = (double)s->cap_blocks * c->block * s->mkv;
	s->router.net_bw = c->net_bw;
	if (c->threshold > 0)
		s->router.t_input = c->threshold;
	nelssa_threshold_init(&s->ctl, s->router.t_input);
	s->run = calloc(t->n, sizeof(uint32_t));
	s->wait = calloc(t->n, sizeof(uint32_t));
	s->ids = calloc(t->n, sizeof(uint32_t));
	if (!s->run || !s->wait || !s->ids) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = first; i < t->n; i += m)
		s->ids[s->n_ids++] = i;
	return 0;
}

static void state_fini(struct state *s)
{
	free(s->run);
	free(s->wait);
	free(s->ids);
}

/*
 * The cluster's NELSSA nodes (more than one GPU or NELSSA node): memory for
 * KV on each, max_fill of its devices', in tokens as the cards store them.
 */
static int cluster_init(struct cluster *cl, const struct sim_config *c, char *err,
			size_t err_len)
{
	const double fill = c->max_fill > 0 ? c->max_fill : 0.9;

	cl->k = c->pnm_nodes ? c->pnm_nodes : 1;
	cl->fill = fill;
	cl->cap_tokens = fill * (c->n_dev ? c->n_dev : 1) * c->hw.pnm_mem /
			 nelssa_pnm_kv_bytes_per_token(&c->model);
	cl->n = calloc(cl->k, sizeof(*cl->n));
	cl->view = calloc(cl->k, sizeof(*cl->view));
	if (!cl->n || !cl->view) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

int sim_run(const struct sim_config *c, struct sim_trace *t, struct sim_result *r, int progress,
	    char *err, size_t err_len)
{
	const uint32_t m = c->gpu_nodes ? c->gpu_nodes : 1;
	const int clustered = m > 1 || c->pnm_nodes > 1;
	struct cluster cl = { 0 };
	struct state *st;
	uint32_t reported = 0;
	int ret = 0;
	double *v;

	memset(r, 0, sizeof(*r));
	if (!t->n || !c->block || !c->max_batch) {
		snprintf(err, err_len, "no requests, or no block size or batch");
		return -EINVAL;
	}
	st = calloc(m, sizeof(*st));
	r->req = calloc(t->n, sizeof(*r->req));
	if (clustered && c->nelssa) {
		r->n_nodes = c->pnm_nodes ? c->pnm_nodes : 1;
		r->node_admissions = calloc(r->n_nodes, sizeof(*r->node_admissions));
	}
	if (!st || !r->req || (r->n_nodes && !r->node_admissions) ||
	    (clustered && c->nelssa && cluster_init(&cl, c, err, err_len))) {
		free(st);
		free(r->req);
		free(r->node_admissions);
		free(cl.n);
		free(cl.view);
		r->req = NULL;
		r->node_admissions = NULL;
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t g = 0; g < m && !ret; g++) {
		ret = state_init(&st[g], c, t, r, g, m, err, err_len);
		st[g].cl = cl.n ? &cl : NULL;
		/*
		 * A GPU node's PNM requests spread over the cluster: its router's
		 * memory cap is the K nodes' (placement keeps each node's own).
		 */
		if (cl.n)
			st[g].router.cap_pnm_mem = cl.fill * cl.k;
		st[g].series = g == 0;	/* the first GPU node's time series */
	}
	r->n_req = t->n;
	for (uint32_t i = 0; i < t->n; i++) {
		struct sim_req *q = &t->req[i];

		q->generated = 0;
		q->state = SIM_NEW;
		q->on_pnm = 0;
		q->tier = q->tier_first = -1;
		q->pnm_node = -1;
		q->blocks = 0;
		q->start = q->first = q->finish = q->pnm_ready = 0.0;
		q->preemptions = 0;
		q->recompute = 0;
		q->extra = 0;
	}
	/* The GPU nodes in time order: the earliest takes its turn. */
	while (!ret) {
		struct state *s = NULL;

		for (uint32_t g = 0; g < m; g++)
			if (!st[g].done && !st[g].stuck && (!s || st[g].now < s->now))
				s = &st[g];
		if (!s) {
			/*
			 * Every node done or stuck: the stuck one whose next request
			 * arrives first goes on from that arrival; none left, the
			 * waiting are lost.
			 */
			for (uint32_t g = 0; g < m; g++)
				if (st[g].stuck && st[g].next < st[g].n_ids &&
				    (!s || t->req[st[g].ids[st[g].next]].arrival <
					   t->req[s->ids[s->next]].arrival))
					s = &st[g];
			if (!s)
				break;
			s->stuck = 0;
			s->now = fmax(s->now, t->req[s->ids[s->next]].arrival);
			continue;
		}
		ret = turn(s, err, err_len);
		if (ret == TURN_DONE) {
			s->done = 1;
		} else if (ret == TURN_STUCK) {
			s->stuck = 1;
		} else if (ret == TURN_MOVED) {
			/*
			 * Room may have been made: the stuck try again from now --
			 * or from their next arrival, if that came first.
			 */
			for (uint32_t g = 0; g < m; g++)
				if (st[g].stuck) {
					double at = s->now;

					if (st[g].next < st[g].n_ids)
						at = fmin(at, t->req[st[g].ids[st[g].next]].arrival);
					st[g].stuck = 0;
					st[g].now = fmax(st[g].now, at);
				}
		}
		if (ret > 0)
			ret = 0;
		if (progress && r->done * 20 / t->n > reported) {
			reported = r->done * 20 / t->n;
			fprintf(stderr, "\r  [%-20.*s] %3u%%", reported, "####################",
				reported * 5);
		}
	}
	if (progress)
		fprintf(stderr, "\r%40s\r", "");
	for (uint32_t g = 0; g < m; g++) {
		r->makespan = fmax(r->makespan, st[g].now);
		state_fini(&st[g]);
	}
	free(st);
	free(cl.n);
	free(cl.view);
	if (ret) {
		free(r->req);
		free(r->node_admissions);
		free(r->series);
		r->req = NULL;
		r->node_admissions = NULL;
		r->series = NULL;
		return ret;
	}
	r->lost = t->n - r->done - r->refused;
	r->tput = r->makespan > 0 ? r->tokens / r->makespan : 0.0;
	for (uint32_t i = 0; i < t->n; i++) {
		const struct sim_req *q = &t->req[i];

		r->req[i] = (struct sim_outcome){ .start = q->start, .first = q->first,
			.finish = q->finish, .preemptions = q->preemptions, .state = (uint8_t)q->state,
			.tier = q->tier == NELSSA_ROUTE_PNM ? NELSSA_ROUTE_PNM : NELSSA_ROUTE_GPU,
			.tier_first = q->tier_first == NELSSA_ROUTE_PNM ? NELSSA_ROUTE_PNM
								       : NELSSA_ROUTE_GPU };
	}
	v = calloc(r->done + 1, sizeof(double));
	if (v) {
		uint32_t n = 0;

		for (uint32_t i = 0; i < t->n; i++)
			if (t->req[i].state == SIM_DONE)
				v[n++] = (t->req[i].finish - t->req[i].start) / t->req[i].output;
		r->tpot = percentiles(v, n);
		n = 0;
		for (uint32_t i = 0; i < t->n; i++)
			if (t->req[i].state == SIM_DONE)
				v[n++] = (t->req[i].finish - t->req[i].arrival) / t->req[i].output;
		r->tpot_q = percentiles(v, n);
		n = 0;
		for (uint32_t i = 0; i < t->n; i++)
			if (t->req[i].state == SIM_DONE)
				v[n++] = t->req[i].first - t->req[i].arrival;
		r->ttft = percentiles(v, n);
		free(v);
	}
	r->tpot_p50 = r->tpot.p50;
	r->tpot_p95 = r->tpot.p95;
	r->tpot_p99 = r->tpot.p99;
	return 0;
}

void sim_compare(const struct sim_trace *t, const struct sim_result *gpu,
		 const struct sim_result *nelssa, struct sim_cmp *c)
{
	double *vg = calloc(t->n + 1, sizeof(double)), *vn = calloc(t->n + 1, sizeof(double));
	double end_g = 0.0, end_n = 0.0, tokens = 0.0;
	uint32_t n = 0;

	memset(c, 0, sizeof(*c));
	for (uint32_t i = 0; i < t->n; i++) {
		const struct sim_outcome *g = &gpu->req[i], *s = &nelssa->req[i];
		const struct sim_req *q = &t->req[i];

		if (g->state != SIM_DONE) {
			c->extra += s->state == SIM_DONE;
			continue;
		}
		c->common++;
		tokens += q->output;
		end_g = fmax(end_g, g->finish);
		if (vg)
			vg[n] = (g->finish - q->arrival) / q->output;
		if (s->state != SIM_DONE) {
			c->lost_more++;
			if (vn)
				vn[n] = INFINITY;	/* served never: the worst TPOT there is */
		} else {
			end_n = fmax(end_n, s->finish);
			if (vn)
				vn[n] = (s->finish - q->arrival) / q->output;
		}
		n++;
	}
	c->tput_gpu = end_g > 0 ? tokens / end_g : 0.0;
	c->tput_nelssa = c->lost_more ? 0.0 : end_n > 0 ? tokens / end_n : 0.0;
	if (vg && vn) {
		c->p99q_gpu = percentiles(vg, n).p99;
		c->p99q_nelssa = percentiles(vn, n).p99;
	} else {
		c->p99q_gpu = c->p99q_nelssa = NAN;
	}
	c->tput_ratio = c->tput_gpu > 0 ? c->tput_nelssa / c->tput_gpu : NAN;
	c->p99q_ratio = c->p99q_nelssa > 0 ? c->p99q_gpu / c->p99q_nelssa : NAN;
	free(vg);
	free(vn);
}

void sim_result_free(struct sim_result *r)
{
	free(r->series);
	free(r->req);
	free(r->node_admissions);
	memset(r, 0, sizeof(*r));
}
