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

#include <nelssa/policy.h>

double nelssa_kv_bytes_per_token(const struct nelssa_model_profile *m)
{
	return 2.0 * m->layers * m->kv_heads * m->head_dim * m->elem_bytes;
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
	       m->select * len * mkv / (n_dev * hw->pnm_bw) + nelssa_t_comm(hw, m, n_dev);
}

double nelssa_crossover(const struct nelssa_hw_profile *hw, const struct nelssa_model_profile *m,
			uint32_t n_dev)
{
	const double c = m->compression;
	const double bracket = (c - 1.0) / (c * hw->gpu_bw) - m->select / (n_dev * hw->pnm_bw);

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
	    !(m->select > 0 && m->select <= 1) || !m->layers)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->hw = *hw;
	r->m = *m;
	r->n_dev = n_dev;
	r->t_input = nelssa_crossover(hw, m, n_dev);
	r->cap_pnm_mem = 0.9;
	r->cap_step = 0.05;		/* 20 tokens/s for a long request, at least */
	r->cap_gpu_meta = 0.1 * hw->gpu_mem;
	r->window = 4 + 64;
	return 0;
}

double nelssa_pnm_step_time(const struct nelssa_router *r, double tokens, uint32_t reqs)
{
	if (!reqs)
		return 0.0;
	return r->m.select * tokens * nelssa_kv_bytes_per_token(&r->m) / (r->n_dev * r->hw.pnm_bw) +
	       nelssa_t_comm(&r->hw, &r->m, r->n_dev);
}

/* GPU bytes @reqs PNM requests of @tokens in all keep: centroids and windows. */
static double gpu_meta(const struct nelssa_router *r, double tokens, uint32_t reqs)
{
	const double mkv = nelssa_kv_bytes_per_token(&r->m);

	return tokens * mkv / r->m.compression + (double)reqs * r->window * mkv;
}

/*
 * 0 when a tier holding @held tokens in @reqs requests can take @len more
 * tokens (one more request); else -1 and the cap in @why.
 */
static int admissible(const struct nelssa_router *r, double held, uint32_t reqs, double len,
		      char *why, size_t why_len)
{
	const double mkv = nelssa_kv_bytes_per_token(&r->m);
	const double tokens = held + len;

	if (tokens * mkv > r->cap_pnm_mem * r->n_dev * r->hw.pnm_mem) {
		snprintf(why, why_len, "PNM memory cap: %.1f of %.1f GiB", tokens * mkv / (1 << 30),
			 r->cap_pnm_mem * r->n_dev * r->hw.pnm_mem / (1 << 30));
		return -1;
	}
	if (nelssa_pnm_step_time(r, tokens, reqs + 1) > r->cap_step) {
		snprintf(why, why_len, "PNM step budget: %.2f ms over %.2f ms",
			 1e3 * nelssa_pnm_step_time(r, tokens, reqs + 1), 1e3 * r->cap_step);
		return -1;
	}
	if (gpu_meta(r, tokens, reqs + 1) > r->cap_gpu_meta) {
		snprintf(why, why_len, "GPU centroid memory cap: %.2f of %.2f GiB",
			 gpu_meta(r, tokens, reqs + 1) / (1 << 30), r->cap_gpu_meta / (1 << 30));
		return -1;
	}
	return 0;
}

enum nelssa_route nelssa_route_request(struct nelssa_router *r, double len)
{
	char why[96];

	r->why[0] = 0;
	if (!(len >= r->t_input))
		return NELSSA_ROUTE_GPU;
	if (admissible(r, r->pnm_tokens, r->pnm_requests, len, r->why, sizeof(r->why))) {
		/*
		 * Waiting only helps if the tier could take it once others
		 * leave.  One that breaks a cap on an empty tier would wait
		 * forever: the GPU serves it.
		 */
		if (!admissible(r, 0.0, 0, len, why, sizeof(why)))
			return NELSSA_ROUTE_QUEUE;
		snprintf(r->why, sizeof(r->why), "alone over the %.96s: on the GPU", why);
		return NELSSA_ROUTE_GPU;
	}
	r->pnm_tokens += len;
	r->pnm_requests++;
	return NELSSA_ROUTE_PNM;
}

void nelssa_router_release(struct nelssa_router *r, double len)
{
	r->pnm_tokens = r->pnm_tokens > len ? r->pnm_tokens - len : 0.0;
	if (r->pnm_requests)
		r->pnm_requests--;
}

int nelssa_pick_migration(const struct nelssa_router *r, const double *ctx, size_t n,
			  double gpu_kv_used, double high_water)
{
	char why[128];
	int best = -1;

	if (gpu_kv_used < high_water)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (ctx[i] >= r->t_input && (best < 0 || ctx[i] > ctx[best]) &&
		    !admissible(r, r->pnm_tokens, r->pnm_requests, ctx[i], why, sizeof(why)))
			best = (int)i;
	return best;
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
