// SPDX-License-Identifier: MIT
/*
 * The placement policy of DESIGN §3.7 (<nelssa/policy.h>).  Everything is
 * in seconds, bytes and bytes per second, per decode step of one request
 * unless a name says otherwise.  The router only counts what the PNM tier
 * holds; the caller reports finished requests with nelssa_router_release().
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/policy.h>

double nelssa_kv_bytes_per_token(const struct nelssa_model_profile *m)
{
	return 2.0 * m->layers * m->kv_heads * m->head_dim * m->elem_bytes;
}

double nelssa_pnm_kv_bytes_per_token(const struct nelssa_model_profile *m)
{
	const enum nelssa_kv_dtype t = (enum nelssa_kv_dtype)m->pnm_kv_dtype;

	uint64_t tile;

	if (!m->pnm_kv_dtype)
		return nelssa_kv_bytes_per_token(m);
	tile = nelssa_kv_bytes(t, m->head_dim, NELSSA_KV_QTILE);
	/* An unknown type: NaN, so every term it enters says so (not 0 bytes). */
	return tile ? 2.0 * m->layers * m->kv_heads * (double)tile / NELSSA_KV_QTILE : NAN;
}

double nelssa_t_comm(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
		     uint32_t n_dev)
{
	return m->layers * (hw->t_base + n_dev * hw->t_dev + (n_dev > 1 ? hw->t_host : 0.0));
}

double nelssa_t_gpu(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
		    double len)
{
	return len * nelssa_kv_bytes_per_token(m) / hw->gpu_bw;
}

double nelssa_t_pnm(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
		    double len, uint32_t n_dev)
{
	const double mkv = nelssa_kv_bytes_per_token(m);

	return len * mkv / (m->compression * hw->gpu_bw) +
	       m->select * len * nelssa_pnm_kv_bytes_per_token(m) / (n_dev * hw->pnm_bw) +
	       nelssa_t_comm(hw, m, n_dev);
}

double nelssa_crossover(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
			uint32_t n_dev)
{
	const double c = m->compression;
	const double pnm = nelssa_pnm_kv_bytes_per_token(m) / nelssa_kv_bytes_per_token(m);
	const double bracket = (c - 1.0) / (c * hw->gpu_bw) - m->select * pnm / (n_dev * hw->pnm_bw);

	if (!n_dev || !(bracket > 0.0))
		return INFINITY;
	return nelssa_t_comm(hw, m, n_dev) / (nelssa_kv_bytes_per_token(m) * bracket);
}

/*
 * GPUs from their datasheets (HBM bandwidth and capacity).  The PNM device
 * is a CXL type-2 card with four DDR5-4800 channels (153.6 GB/s peak), at
 * half of peak for sparse attention, and 256 GiB; communication per layer
 * is 10 us plus 1 us per device plus 2 us of host merging.  Those last
 * figures are placeholders for measurements (nelssactl calibrate).
 */
static const struct nelssa_hw_profile builtin[] = {
	{ "h100-nvl", 3.9e12, 94e9, 76.8e9, 256.0 * (1ull << 30), 10e-6, 1e-6, 2e-6 },
	{ "h200", 4.8e12, 141e9, 76.8e9, 256.0 * (1ull << 30), 10e-6, 1e-6, 2e-6 },
};

int nelssa_hw_profile_builtin(const char *name, struct nelssa_hw_profile *hw)
{
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
		if (!strcmp(name, builtin[i].name)) {
			*hw = builtin[i];
			return 0;
		}
	return -ENOENT;
}

static int set_field(struct nelssa_hw_profile *hw, const char *key, const char *val)
{
	static const struct {
		const char *key;
		size_t off;
	} f[] = {
		{ "gpu_bw", offsetof(struct nelssa_hw_profile, gpu_bw) },
		{ "gpu_mem", offsetof(struct nelssa_hw_profile, gpu_mem) },
		{ "pnm_bw", offsetof(struct nelssa_hw_profile, pnm_bw) },
		{ "pnm_mem", offsetof(struct nelssa_hw_profile, pnm_mem) },
		{ "t_base", offsetof(struct nelssa_hw_profile, t_base) },
		{ "t_dev", offsetof(struct nelssa_hw_profile, t_dev) },
		{ "t_host", offsetof(struct nelssa_hw_profile, t_host) },
	};
	char *end;
	double v;

	if (!strcmp(key, "name")) {
		if (strlen(val) >= sizeof(hw->name))
			return -EINVAL;
		memcpy(hw->name, val, strlen(val) + 1);
		return 0;
	}
	if (!strcmp(key, "base"))
		return nelssa_hw_profile_builtin(val, hw);
	v = strtod(val, &end);
	if (*end || end == val || !isfinite(v) || v < 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (!strcmp(key, f[i].key)) {
			*(double *)((char *)hw + f[i].off) = v;
			return 0;
		}
	return -EINVAL;
}

int nelssa_hw_profile_load(const char *path, struct nelssa_hw_profile *hw, char *err,
			   size_t err_len)
{
	FILE *f = fopen(path, "r");
	char line[256];
	int n = 0, ret = 0;

	if (!f) {
		if (err)
			snprintf(err, err_len, "%s: cannot open", path);
		return -ENOENT;
	}
	memset(hw, 0, sizeof(*hw));
	while (!ret && fgets(line, sizeof(line), f)) {
		char key[64], val[128];

		n++;
		line[strcspn(line, "#\n")] = 0;
		if (sscanf(line, " %63[a-z_] = %127s", key, val) != 2) {
			if (strspn(line, " \t") != strlen(line))
				ret = -EINVAL;
			continue;
		}
		ret = set_field(hw, key, val);
	}
	fclose(f);
	if (!ret && !(hw->gpu_bw > 0 && hw->pnm_bw > 0 && hw->gpu_mem > 0 && hw->pnm_mem > 0))
		ret = -EINVAL, n = 0;
	if (ret && err) {
		if (n)
			snprintf(err, err_len, "%s:%d: expected 'key = value' with a known key and a "
				 "non-negative number (or base = h100-nvl|h200)", path, n);
		else
			snprintf(err, err_len, "%s: gpu_bw, gpu_mem, pnm_bw and pnm_mem must be set",
				 path);
	}
	return ret;
}

int nelssa_router_init(struct nelssa_router *r, const struct nelssa_hw_profile *hw,
		       const struct nelssa_model_profile *m, uint32_t n_dev)
{
	if (!n_dev || !(hw->gpu_bw > 0) || !(hw->pnm_bw > 0) || !(m->compression >= 1) ||
	    !(m->select > 0 && m->select <= 1) || !m->layers || !(nelssa_pnm_kv_bytes_per_token(m) > 0))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->hw = *hw;
	r->m = *m;
	r->n_dev = n_dev;
	r->t_input = nelssa_crossover(hw, m, n_dev);
	r->gpu_kv = fmax(0.0, 0.9 * hw->gpu_mem - m->weights);
	r->cap_pnm_mem = 0.9;
	/* The deadline: the GPU's step with its whole KV pool in the batch. */
	r->cap_step = (m->weights + r->gpu_kv) / hw->gpu_bw;
	r->cap_gpu_meta = 0.1 * hw->gpu_mem;
	r->cap_gpu_share = 0.025;
	r->cap_pnm_share = 0.025;
	r->net_bw = 50e9;		/* 400 Gb/s RDMA */
	r->cap_migrate_pause = 0.05;
	r->window = 4 + 64;
	return 0;
}

double nelssa_pnm_step_time(const struct nelssa_router *r, double tokens, uint32_t reqs)
{
	if (!reqs)
		return 0.0;
	return r->m.select * tokens * nelssa_pnm_kv_bytes_per_token(&r->m) /
	       (r->n_dev * r->hw.pnm_bw) + nelssa_t_comm(&r->hw, &r->m, r->n_dev);
}

/* GPU bytes @reqs PNM requests of @tokens in all keep: centroids and windows. */
static double gpu_meta(const struct nelssa_router *r, double tokens, uint32_t reqs)
{
	const double mkv = nelssa_kv_bytes_per_token(&r->m);

	return tokens * mkv / r->m.compression + (double)reqs * r->window * mkv;
}

/* Seconds of the tier's devices @tokens of sparse attention take (T_comm apart). */
static double sparse_time(const struct nelssa_router *r, double tokens)
{
	return r->m.select * tokens * nelssa_pnm_kv_bytes_per_token(&r->m) /
	       (r->n_dev * r->hw.pnm_bw);
}

/*
 * What the PNM tier holds: all its requests (tokens now, tokens at their
 * ends, count), and of them the ones only the tier can hold.
 */
struct load {
	double tokens, final;
	uint32_t requests;
	double x_tokens, x_final;
	uint32_t x_requests;
};

static struct load load_of(const struct nelssa_router *r)
{
	return (struct load){ r->pnm_tokens, r->pnm_final, r->pnm_requests, r->extra_tokens,
			      r->extra_final, r->extra_requests };
}

/*
 * The step the requests the GPU could also hold see: their own sparse
 * reads and T_comm, stretched by the share of the devices the others may
 * take (cap_pnm_share, when there are any).
 */
static double step_common(const struct nelssa_router *r, const struct load *l)
{
	const double t = sparse_time(r, l->tokens - l->x_tokens) + nelssa_t_comm(&r->hw, &r->m, r->n_dev);

	return l->x_requests ? t / (1.0 - r->cap_pnm_share) : t;
}

enum { ADM_OK, ADM_MEM, ADM_STEP, ADM_META };

/*
 * Whether a tier holding @l can take one more request of @len tokens now
 * and @final at its end (@extra: one only the tier can hold): ADM_OK, or
 * the first cap it breaks, described in @why.  Memory and centroids are
 * reserved at the final lengths, so they never overflow; the step
 * deadline is checked at the current ones, each class against its own
 * step: a request the GPU could hold against step_common(), one only the
 * tier holds against the others of its kind (they yield to the rest).
 */
static int admissible(const struct nelssa_router *r, const struct load *l, double len,
		      double final, int extra, char *why, size_t why_len)
{
	const double mem = (l->final + final) * nelssa_pnm_kv_bytes_per_token(&r->m);
	const double mem_cap = r->cap_pnm_mem * r->n_dev * r->hw.pnm_mem;
	const double meta = gpu_meta(r, l->final + final, l->requests + 1);
	struct load with = *l;
	double step;

	with.tokens += len;
	with.requests++;
	if (extra) {
		with.x_tokens += len;
		with.x_requests++;
		step = sparse_time(r, with.x_tokens) + nelssa_t_comm(&r->hw, &r->m, r->n_dev);
	} else {
		step = step_common(r, &with);
	}
	if (!(mem <= mem_cap)) {
		snprintf(why, why_len, "PNM memory cap: %.1f of %.1f GiB", mem / (1 << 30),
			 mem_cap / (1 << 30));
		return ADM_MEM;
	}
	if (!(meta <= r->cap_gpu_meta)) {
		snprintf(why, why_len, "GPU centroid memory cap: %.2f of %.2f GiB", meta / (1 << 30),
			 r->cap_gpu_meta / (1 << 30));
		return ADM_META;
	}
	if (!(step <= r->cap_step)) {
		snprintf(why, why_len, "PNM step deadline: %.2f ms over %.2f ms", 1e3 * step,
			 1e3 * r->cap_step);
		return ADM_STEP;
	}
	return ADM_OK;
}

int nelssa_router_fits(const struct nelssa_router *r, double final_len)
{
	const double mkv = nelssa_kv_bytes_per_token(&r->m);
	const struct load empty = { 0 };
	const int gpu = final_len * mkv <= r->gpu_kv;
	char why[128];
	int a;

	a = admissible(r, &empty, final_len, final_len, !gpu, why, sizeof(why));
	return (gpu ? NELSSA_FITS_GPU : 0) |
	       ((a == ADM_OK || a == ADM_STEP) && gpu_meta(r, final_len, 1) <= r->gpu_kv ?
		NELSSA_FITS_PNM : 0);
}

static enum nelssa_route admit_pnm(struct nelssa_router *r, double len, double final, int extra)
{
	r->pnm_tokens += len;
	r->pnm_final += final;
	r->pnm_requests++;
	if (extra) {
		r->extra_tokens += len;
		r->extra_final += final;
		r->extra_requests++;
	}
	return NELSSA_ROUTE_PNM;
}

enum nelssa_route nelssa_route(struct nelssa_router *r, const struct nelssa_route_query *q)
{
	const double mkv = nelssa_kv_bytes_per_token(&r->m);
	const double len = q->len, final = q->final_len > len ? q->final_len : len;
	const int fits = nelssa_router_fits(r, final), extra = !(fits & NELSSA_FITS_GPU);
	const struct load l = load_of(r);
	int want_pnm, a = ADM_OK;
	char why[128] = "";

	r->why[0] = 0;
	if (!(len >= 0) || !isfinite(final)) {
		snprintf(r->why, sizeof(r->why), "a length of %g tokens", len);
		return NELSSA_ROUTE_REFUSE;
	}
	if (!fits) {
		snprintf(r->why, sizeof(r->why),
			 "%.1f GiB of KV at %.0f tokens fits neither the GPU's %.1f GiB KV pool "
			 "nor the PNM tier's %.1f GiB", final * mkv / (1 << 30), final,
			 r->gpu_kv / (1 << 30), r->cap_pnm_mem * r->n_dev * r->hw.pnm_mem / (1 << 30));
		return NELSSA_ROUTE_REFUSE;
	}
	if (q->pinned && (q->prev == NELSSA_ROUTE_GPU || q->prev == NELSSA_ROUTE_PNM) &&
	    (fits & (q->prev == NELSSA_ROUTE_GPU ? NELSSA_FITS_GPU : NELSSA_FITS_PNM)))
		want_pnm = q->prev == NELSSA_ROUTE_PNM;
	else if (!(fits & NELSSA_FITS_PNM))
		want_pnm = 0;
	else if (extra)
		want_pnm = 1;
	else
		want_pnm = len >= r->t_input;
	if (!want_pnm)
		return NELSSA_ROUTE_GPU;
	if (q->behind) {
		snprintf(why, sizeof(why), "an older request waits for the PNM tier");
	} else {
		a = admissible(r, &l, len, final, extra, why, sizeof(why));
		if (a == ADM_OK)
			return admit_pnm(r, len, final, extra);
		if (a == ADM_STEP && !(extra ? l.x_requests : l.requests - l.x_requests)) {
			/*
			 * Over the deadline alone: waiting would not help.  Where
			 * the GPU holds it, the GPU serves it (below the
			 * crossover, or the deadline set below the GPU's own
			 * step); else nothing serves it sooner than the tier.
			 */
			if (extra || (q->pinned && q->prev == NELSSA_ROUTE_PNM))
				return admit_pnm(r, len, final, extra);
			snprintf(r->why, sizeof(r->why), "alone over the %.100s: on the GPU", why);
			return NELSSA_ROUTE_GPU;
		}
	}
	/* The tier cannot take it now: the GPU, if it holds it now, else wait. */
	if (!extra && !q->pinned && q->gpu_free >= (len + 1) * mkv) {
		snprintf(r->why, sizeof(r->why), "%.100s: on the GPU, which has room", why);
		return NELSSA_ROUTE_GPU;
	}
	snprintf(r->why, sizeof(r->why), "%.150s", why);
	return NELSSA_ROUTE_QUEUE;
}

enum nelssa_route nelssa_route_request(struct nelssa_router *r, double len)
{
	const struct nelssa_route_query q = { .len = len, .final_len = len, .prev = -1 };

	return nelssa_route(r, &q);
}

void nelssa_router_leave(struct nelssa_router *r, double len, double final_len)
{
	r->pnm_tokens = r->pnm_tokens > len ? r->pnm_tokens - len : 0.0;
	r->pnm_final = r->pnm_final > final_len ? r->pnm_final - final_len : 0.0;
	if (r->pnm_requests)
		r->pnm_requests--;
	if (!(nelssa_router_fits(r, final_len) & NELSSA_FITS_GPU) && r->extra_requests) {
		r->extra_tokens = r->extra_tokens > len ? r->extra_tokens - len : 0.0;
		r->extra_final = r->extra_final > final_len ? r->extra_final - final_len : 0.0;
		r->extra_requests--;
	}
	if (!r->pnm_requests)
		r->pnm_tokens = r->pnm_final = 0.0;	/* no rounding left over */
	if (!r->extra_requests)
		r->extra_tokens = r->extra_final = 0.0;
}

void nelssa_router_release(struct nelssa_router *r, double len)
{
	nelssa_router_leave(r, len, len);
}

void nelssa_router_grow(struct nelssa_router *r, double tokens, double final_len)
{
	r->pnm_tokens += tokens;
	if (!(nelssa_router_fits(r, final_len) & NELSSA_FITS_GPU))
		r->extra_tokens += tokens;
}

double nelssa_pnm_step_of(const struct nelssa_router *r, double final_len, double t_gpu_step)
{
	const struct load l = load_of(r);
	const double t_fixed = r->m.weights / r->hw.gpu_bw;
	double t, pace_gpu, pace_pnm;

	if (nelssa_router_fits(r, final_len) & NELSSA_FITS_GPU)
		return step_common(r, &l);
	/* Only the tier holds it: it waits for everyone's attention, and is paced. */
	t = nelssa_pnm_step_time(r, l.tokens, l.requests);
	/*
	 * Their reads may add cap_gpu_share of the step's fixed part (the
	 * weights) to each step: the step of a loaded GPU grows with its
	 * batch, which grows with the step, and a share of the whole step
	 * would come back amplified as 1 / (1 - the batch's part of it).
	 */
	pace_gpu = r->cap_gpu_share > 0 ?
		   gpu_meta(r, l.x_final, l.x_requests) / (r->hw.gpu_bw * r->cap_gpu_share) *
		   (t_fixed > 0 && t_gpu_step > t_fixed ? t_gpu_step / t_fixed : 1.0) : 0.0;
	pace_pnm = r->cap_pnm_share > 0 && l.requests > l.x_requests ?
		   sparse_time(r, l.x_final) / r->cap_pnm_share : 0.0;
	return fmax(t, fmax(pace_gpu, pace_pnm));
}

int nelssa_pick_migration_final(const struct nelssa_router *r, const double *ctx,
				const double *final_ctx, size_t n, double gpu_kv_used,
				double high_water)
{
	const struct load l = load_of(r);
	char why[128];
	int best = -1;

	if (gpu_kv_used < high_water)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const double fin = final_ctx && final_ctx[i] > ctx[i] ? final_ctx[i] : ctx[i];

		/* What crosses the network is what the cards store (quantised first). */
		const double pause = ctx[i] * nelssa_pnm_kv_bytes_per_token(&r->m) / r->net_bw;

		if (final_ctx && !(pause <= (fin - ctx[i]) * r->cap_migrate_pause * r->cap_step))
			continue;	/* too close to its end to be worth the pause */
		if (ctx[i] >= r->t_input && (best < 0 || ctx[i] > ctx[best]) &&
		    admissible(r, &l, ctx[i], fin, 0, why, sizeof(why)) == ADM_OK)
			best = (int)i;
	}
	return best;
}

int nelssa_pick_migration(const struct nelssa_router *r, const double *ctx, size_t n,
			  double gpu_kv_used, double high_water)
{
	return nelssa_pick_migration_final(r, ctx, NULL, n, gpu_kv_used, high_water);
}

void nelssa_threshold_init(struct nelssa_threshold_ctl *c, double base)
{
	*c = (struct nelssa_threshold_ctl){ .base = base, .period = 60.0, .gain = 0.2,
					    .deadband = 0.15, .max_step = 0.25, .hold = 120.0,
					    .x_min = -2.0, .x_max = 0.0 };
}

/* One decision over the period's means. */
static void threshold_decide(struct nelssa_threshold_ctl *c)
{
	double e = c->u_gpu - c->u_pnm, step, x;

	if (fabs(e) <= c->deadband)
		return;
	step = c->gain * e;
	step = step > c->max_step ? c->max_step : step < -c->max_step ? -c->max_step : step;
	if (c->dir != 0.0 && (step > 0) == (c->dir > 0) && c->still < c->hold)
		return;		/* a reversal waits until x held still long enough */
	x = c->x - step;
	x = x < c->x_min ? c->x_min : x > c->x_max ? c->x_max : x;
	if (x == c->x)
		return;
	c->x = x;
	c->dir = step > 0 ? -1.0 : 1.0;
	c->still = 0.0;
}

double nelssa_threshold_update(struct nelssa_threshold_ctl *c, double u_gpu, double u_pnm,
			       double dt)
{
	if (!(u_gpu >= 0) || !(u_pnm >= 0) || !(dt > 0) || !isfinite(u_gpu) || !isfinite(u_pnm) ||
	    !isfinite(dt))
		return c->base * exp2(c->x);	/* a bad sample changes nothing */
	c->acc += dt;
	c->sum_gpu += u_gpu * dt;
	c->sum_pnm += u_pnm * dt;
	c->still += dt;
	if (c->acc >= c->period) {
		c->u_gpu = c->sum_gpu / c->acc;
		c->u_pnm = c->sum_pnm / c->acc;
		c->acc = c->sum_gpu = c->sum_pnm = 0.0;
		threshold_decide(c);
	}
	return c->base * exp2(c->x);
}

int nelssa_place_pick(const struct nelssa_place_node *nodes, uint32_t n, double tokens)
{
	int best = -1;
	double best_score = 0.0;

	for (uint32_t i = 0; i < n; i++) {
		const struct nelssa_place_node *x = &nodes[i], *b;
		const double after = x->used_tokens + tokens;
		double score;

		if (!x->eligible || !x->devices || !(after <= x->cap_tokens))
			continue;
		score = after / x->devices;
		if (best < 0 || score < best_score) {
			best = (int)i;
			best_score = score;
			continue;
		}
		b = &nodes[best];
		if (score == best_score &&
		    (x->steps_in_flight < b->steps_in_flight ||
		     (x->steps_in_flight == b->steps_in_flight && x->id && b->id &&
		      strcmp(x->id, b->id) < 0))) {
			best = (int)i;
			best_score = score;
		}
	}
	return best < 0 ? -ENOSPC : best;
}
