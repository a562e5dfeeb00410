// SPDX-License-Identifier: MIT
/*
 * The placement policy (client/policy.c): the latency model and crossover
 * against values computed by hand from DESIGN §3.7's formulas, the router's
 * caps one at a time, the migration choice, and the profile files.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <unistd.h>

#include <nelssa/policy.h>

#include "testutil.h"

/* Round numbers: M_kv = 2 * 1 * 1 * 64 * 2 = 256 B. */
static const struct nelssa_hw_profile hw = { "test", 1e12, 80e9, 1e11, 1e9, 10e-6, 1e-6, 2e-6 };
static const struct nelssa_model_profile m = { 1, 1, 64, 2, 0.0, 16.0, 0.04 };

static void close_to(double got, double want, double rel)
{
	if (!(fabs(got - want) <= rel * fabs(want)))
		fail_msg("%.9g, expected %.9g", got, want);
}

static void model_matches_hand_values(void **state)
{
	const struct nelssa_model_profile llama = { 32, 8, 128, 2, 16e9, 16.0, 0.04 };

	(void)state;
	assert_true(nelssa_kv_bytes_per_token(&llama) == 131072.0);
	assert_true(nelssa_kv_bytes_per_token(&m) == 256.0);
	/* T_comm(4) = 10 + 4 x 1 + 2 us; T_comm(1) has no host merge. */
	close_to(nelssa_t_comm(&hw, &m, 4), 16e-6, 1e-12);
	close_to(nelssa_t_comm(&hw, &m, 1), 11e-6, 1e-12);
	close_to(nelssa_t_comm(&hw, &llama, 1), 32 * 11e-6, 1e-12);
	/* T_gpu(1e6) = 1e6 x 256 / 1e12 = 256 us. */
	close_to(nelssa_t_gpu(&hw, &m, 1e6), 256e-6, 1e-12);
	/* T_pnm(1e6, 4) = 256e6/16e12 + 0.04 x 256e6 / 4e11 + 16e-6 = 16 + 25.6 + 16 us. */
	close_to(nelssa_t_pnm(&hw, &m, 1e6, 4), 57.6e-6, 1e-12);
}

static void crossover_matches_hand_values(void **state)
{
	struct nelssa_hw_profile slow = hw;
	double l4, l1;

	(void)state;
	/* 16e-6 / (256 x ((15/16)/1e12 - 0.04/4e11)) = 16e-6 / 2.144e-10. */
	l4 = nelssa_crossover(&hw, &m, 4);
	close_to(l4, 16e-6 / 2.144e-10, 1e-9);
	/* 11e-6 / (256 x (9.375e-13 - 4e-13)). */
	l1 = nelssa_crossover(&hw, &m, 1);
	close_to(l1, 11e-6 / (256 * 5.375e-13), 1e-9);
	/* It is where both tiers take the same time. */
	close_to(nelssa_t_gpu(&hw, &m, l4), nelssa_t_pnm(&hw, &m, l4, 4), 1e-9);
	close_to(nelssa_t_gpu(&hw, &m, l1), nelssa_t_pnm(&hw, &m, l1, 1), 1e-9);
	/* A PNM tier whose per-token cost is not below the GPU's never wins. */
	slow.pnm_bw = 1e9;
	assert_true(isinf(nelssa_crossover(&slow, &m, 4)));
	assert_true(isinf(nelssa_crossover(&hw, &m, 0)));
}

static void router_caps_one_at_a_time(void **state)
{
	struct nelssa_router r;
	const double t = nelssa_crossover(&hw, &m, 4);

	(void)state;
	assert_int_equal(0, nelssa_router_init(&r, &hw, &m, 4));
	close_to(r.t_input, t, 1e-12);
	assert_int_equal(NELSSA_ROUTE_GPU, nelssa_route_request(&r, t - 1));
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route_request(&r, t));
	assert_int_equal(1, r.pnm_requests);
	close_to(r.pnm_tokens, t, 1e-12);
	/* Memory: 90 % of 4 GB holds 14.06M tokens of 256 B. */
	r.cap_step = 1e9;
	r.cap_gpu_meta = 1e18;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route_request(&r, 0.9 * 4e9 / 256 - t - 10));
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route_request(&r, t));
	assert_non_null(strstr(r.why, "PNM memory"));
	nelssa_router_release(&r, 0.9 * 4e9 / 256 - t - 10);
	assert_int_equal(1, r.pnm_requests);
	/* Step budget: the tier's step time with the newcomer over the cap. */
	r.cap_step = nelssa_pnm_step_time(&r, 2 * t, 2) * 0.999;
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route_request(&r, t));
	assert_non_null(strstr(r.why, "step budget"));
	r.cap_step = nelssa_pnm_step_time(&r, 2 * t, 2) * 1.001;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route_request(&r, t));
	/* GPU memory for centroids + windows: (3t x 256 / 16) + 3 x 68 x 256 bytes now. */
	r.cap_step = 1e9;
	r.cap_gpu_meta = (3 * t * 256 / 16 + 3 * 68 * 256) * 0.999;
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route_request(&r, t));
	assert_non_null(strstr(r.why, "GPU centroid"));
	nelssa_router_release(&r, t);
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route_request(&r, t));
	/* Over a cap even on an empty tier: waiting would be forever, the GPU serves it. */
	r.cap_gpu_meta = 1e18;
	r.cap_step = nelssa_pnm_step_time(&r, 2 * t, 1) * 0.999;
	assert_int_equal(NELSSA_ROUTE_GPU, nelssa_route_request(&r, 2 * t));
	assert_non_null(strstr(r.why, "alone over the PNM step budget"));
	assert_int_equal(2, r.pnm_requests);	/* not counted on the tier */
	assert_int_equal(-EINVAL, nelssa_router_init(&r, &hw, &m, 0));
}

static void migration_picks_the_largest_admissible(void **state)
{
	struct nelssa_router r;
	double ctx[5];

	(void)state;
	assert_int_equal(0, nelssa_router_init(&r, &hw, &m, 4));
	r.cap_step = 1e9;
	r.cap_gpu_meta = 1e18;
	ctx[0] = r.t_input * 0.5;
	ctx[1] = r.t_input * 1.5;
	ctx[2] = r.t_input * 3.0;
	ctx[3] = r.t_input * 3.0;	/* a tie: the lower index wins */
	ctx[4] = r.t_input * 0.99;
	assert_int_equal(-1, nelssa_pick_migration(&r, ctx, 5, 0.80, 0.9));
	assert_int_equal(2, nelssa_pick_migration(&r, ctx, 5, 0.95, 0.9));
	/* When the largest no longer fits, the next largest that does. */
	r.cap_pnm_mem = (r.t_input * 2.0 * 256) / (4 * 1e9);
	assert_int_equal(1, nelssa_pick_migration(&r, ctx, 5, 0.95, 0.9));
	r.cap_pnm_mem = 1e-9;
	assert_int_equal(-1, nelssa_pick_migration(&r, ctx, 5, 0.95, 0.9));
}

static void profiles_builtin_and_files(void **state)
{
	struct nelssa_hw_profile p;
	char path[] = "/tmp/nelssa-profile-XXXXXX", err[256];
	int fd;
	FILE *f;

	(void)state;
	assert_int_equal(0, nelssa_hw_profile_builtin("h200", &p));
	assert_true(p.gpu_bw == 4.8e12 && p.gpu_mem == 141e9);
	assert_int_equal(0, nelssa_hw_profile_builtin("h100-nvl", &p));
	assert_true(p.gpu_bw == 3.9e12 && p.gpu_mem == 94e9);
	assert_int_equal(-ENOENT, nelssa_hw_profile_builtin("a100", &p));
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fprintf(f, "# measured on node 7\nbase = h200\nname = node7\npnm_bw = 5.5e10  # calibrate\n"
		   "t_base = 12e-6\n");
	fclose(f);
	assert_int_equal(0, nelssa_hw_profile_load(path, &p, err, sizeof(err)));
	assert_string_equal("node7", p.name);
	assert_true(p.gpu_bw == 4.8e12 && p.pnm_bw == 5.5e10 && p.t_base == 12e-6);
	f = fopen(path, "w");
	fprintf(f, "base = h200\npnm_bw = fast\n");
	fclose(f);
	assert_int_equal(-EINVAL, nelssa_hw_profile_load(path, &p, err, sizeof(err)));
	assert_non_null(strstr(err, ":2:"));
	f = fopen(path, "w");
	fprintf(f, "gpu_bw = 1e12\n");
	fclose(f);
	assert_int_equal(-EINVAL, nelssa_hw_profile_load(path, &p, err, sizeof(err)));
	assert_non_null(strstr(err, "must be set"));
	unlink(path);
	assert_int_equal(-ENOENT, nelssa_hw_profile_load(path, &p, err, sizeof(err)));
}

/*
 * A toy plant for the threshold: long contexts exponential with mean
 * @base, so a threshold T sends f = exp(-T / base) of the load to the PNM
 * tier; the tiers' pressures are a f and b (1 - f) times the load, seen
 * @delay seconds late (a request routed now shows its weight later), with
 * uniform noise of +-@noise on every sample.  Balance: f = b / (a + b).
 */
struct plant {
	double a, b, load, noise;
	int delay;
};

#define PLANT_MAX_DELAY 64

static void plant_sample(const struct plant *p, double t, double base, struct tu_rng *rng,
			 double *ug, double *up)
{
	double f = exp(-t / base);

	*up = fmax(0.0, p->a * p->load * f + p->noise * (2.0 * tu_uniform(rng) - 1.0));
	*ug = fmax(0.0, p->b * p->load * (1.0 - f) + p->noise * (2.0 * tu_uniform(rng) - 1.0));
}

/* x where the plant's tiers balance. */
static double plant_balance(const struct plant *p)
{
	return log2(log((p->a + p->b) / p->b));
}

/*
 * Runs @steps one-second updates: x must move in one direction only,
 * never past the balance (no overshoot, no oscillation), and end with the
 * tiers within the deadband of balance, all but still for the last 600
 * updates: noise may push a mean that sits at the deadband's edge over it
 * once more, which moves x by one small step the same way.
 * Returns the final x.
 */
static double settles_monotonically(struct nelssa_threshold_ctl *c, const struct plant *p,
				    struct tu_rng *rng, int steps)
{
	double hist[PLANT_MAX_DELAY] = { 0 }, x0 = c->x, bal = plant_balance(p);
	double ug, up, last = c->x, dir = 0.0, held = c->x;

	for (int k = 0; k < PLANT_MAX_DELAY; k++)
		hist[k] = c->base * exp2(c->x);
	for (int k = 0; k < steps; k++) {
		double dx, t;

		/* What the tiers show now is what the threshold was @delay s ago. */
		plant_sample(p, hist[k % PLANT_MAX_DELAY], c->base, rng, &ug, &up);
		t = nelssa_threshold_update(c, ug, up, 1.0);
		hist[(k + p->delay) % PLANT_MAX_DELAY] = t;
		dx = c->x - last;
		last = c->x;
		if (dx != 0.0 && dir != 0.0 && (dx > 0) != (dir > 0))
			fail_msg("x reversed at update %d (%.4f after moving %s)", k, c->x,
				 dir > 0 ? "up" : "down");
		if (dx != 0.0)
			dir = dx;
		if (k == steps - 600)
			held = c->x;
	}
	assert_true(fabs(c->x - held) <= c->gain * (c->deadband + 0.05));
	/* Between where it started and the balance (or the bound it hit). */
	bal = fmin(fmax(bal, c->x_min), c->x_max);
	assert_true(c->x >= fmin(x0, bal) - 1e-12 && c->x <= fmax(x0, bal) + 1e-12);
	plant_sample(&(struct plant){ p->a, p->b, p->load, 0.0, 0 }, c->base * exp2(c->x), c->base,
		     rng, &ug, &up);
	if (bal > c->x_min && bal < c->x_max)
		assert_true(fabs(ug - up) <= c->deadband + 0.02);
	return c->x;
}

static void threshold_follows_load_steps_without_oscillating(void **state)
{
	struct nelssa_threshold_ctl c;
	struct plant p = { 1.0, 1.0, 1.0, 0.1, 30 };
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, "threshold", 0);
	nelssa_threshold_init(&c, 1000.0);
	/* Balanced tiers: the threshold comes down toward x = log2(ln 2). */
	assert_true(settles_monotonically(&c, &p, &rng, 3600) < -0.1);
	/* The GPU tier three times busier: further down, toward log2(ln 4/3). */
	p.b = 3.0;
	assert_true(settles_monotonically(&c, &p, &rng, 3600) < -1.0);
	/* The PNM tier three times slower instead: up, to the model's value, no further. */
	p.a = 3.0;
	p.b = 1.0;
	assert_true(settles_monotonically(&c, &p, &rng, 3600) == c.x_max);
	/* An overloaded PNM tier pins T at its ceiling, no further. */
	for (int k = 0; k < 600; k++)
		nelssa_threshold_update(&c, 0.1, 5.0, 1.0);
	assert_true(c.x == c.x_max);
	/* An overloaded GPU tier: down to the floor, no further. */
	for (int k = 0; k < 6000; k++)
		nelssa_threshold_update(&c, 5.0, 0.1, 1.0);
	assert_true(c.x == c.x_min);
	/* Bad samples change nothing. */
	assert_true(nelssa_threshold_update(&c, NAN, 1.0, 1.0) == c.base * exp2(c.x_min));
	assert_true(nelssa_threshold_update(&c, 1.0, INFINITY, 1.0) == c.base * exp2(c.x_min));
	assert_true(nelssa_threshold_update(&c, 1.0, 1.0, 0.0) == c.base * exp2(c.x_min));
	assert_true(c.x == c.x_min);
}

/*
 * Noise alone, at balance: the threshold never moves.  Samples of +-0.2
 * differ by 0.16 (one standard deviation); over a period's 60 the mean's
 * deviation is 0.021, and the deadband is seven of those.
 */
static void threshold_ignores_noise_at_balance(void **state)
{
	struct nelssa_threshold_ctl c;
	struct plant p = { 1.0, 1.0, 1.0, 0.2, 30 };
	struct tu_rng rng;
	double x;

	(void)state;
	tu_rng_for(&rng, "noise", 0);
	nelssa_threshold_init(&c, 1000.0);
	c.x = plant_balance(&p);
	x = c.x;
	for (int k = 0; k < 4 * 3600; k++) {
		double ug, up;

		plant_sample(&p, c.base * exp2(c.x), c.base, &rng, &ug, &up);
		nelssa_threshold_update(&c, ug, up, 1.0);
	}
	assert_true(c.x == x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(model_matches_hand_values),
		cmocka_unit_test(crossover_matches_hand_values),
		cmocka_unit_test(router_caps_one_at_a_time),
		cmocka_unit_test(migration_picks_the_largest_admissible),
		cmocka_unit_test(profiles_builtin_and_files),
		cmocka_unit_test(threshold_follows_load_steps_without_oscillating),
		cmocka_unit_test(threshold_ignores_noise_at_balance),
	};

	tu_init("policy");
	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
