// SPDX-License-Identifier: MIT
/*
 * The placement policy (client/policy.c): the latency model and crossover
 * against values computed by hand from DESIGN §3.7's formulas, the router's
 * caps one at a time, where a request's KV fits, the step deadline from
 * the profile, the fallback to the GPU, preempted requests, the pacing of
 * requests only the PNM tier holds, the migration choice, and the profile
 * files.
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

#include <nelssa/attention.h>
#include <nelssa/policy.h>

#include "testutil.h"

/* Round numbers: M_kv = 2 * 1 * 1 * 64 * 2 = 256 B. */
static const struct nelssa_hw_profile hw = { "test", 1e12, 80e9, 1e11, 1e9, 10e-6, 1e-6, 2e-6 };
static const struct nelssa_model_profile m = { 1, 1, 64, 2, 0.0, 16.0, 0.04, 0 };

static void close_to(double got, double want, double rel)
{
	if (!(fabs(got - want) <= rel * fabs(want)))
		fail_msg("%.9g, expected %.9g", got, want);
}

static void model_matches_hand_values(void **state)
{
	const struct nelssa_model_profile llama = { 32, 8, 128, 2, 16e9, 16.0, 0.04, 0 };

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

/*
 * 8-bit KV on the PNM tier: d 64 tokens take 2 x 1088 / 16 = 136 bytes
 * there (codes, scales, padding) against 256 on the GPU, and every PNM
 * term -- device reads, device memory -- shrinks by that ratio.
 */
static void pnm_kv_dtype_scales_pnm_terms(void **state)
{
	struct nelssa_model_profile q = m;
	struct nelssa_router r;
	const double ratio = 136.0 / 256.0;

	(void)state;
	q.pnm_kv_dtype = NELSSA_KV_INT8;
	assert_true(nelssa_pnm_kv_bytes_per_token(&q) == 136.0);
	assert_true(nelssa_kv_bytes_per_token(&q) == 256.0);	/* the GPU's own */
	assert_true(nelssa_pnm_kv_bytes_per_token(&m) == 256.0);
	q.pnm_kv_dtype = NELSSA_KV_FP8_E4M3;
	assert_true(nelssa_pnm_kv_bytes_per_token(&q) == 136.0);
	q.pnm_kv_dtype = NELSSA_KV_BF16;
	assert_true(nelssa_pnm_kv_bytes_per_token(&q) == 256.0);
	q.pnm_kv_dtype = NELSSA_KV_INT8;
	/* T_pnm(1e6, 4) = 16 + 25.6 x ratio + 16 us. */
	close_to(nelssa_t_pnm(&hw, &q, 1e6, 4), (16 + 25.6 * ratio + 16) * 1e-6, 1e-12);
	/* The crossover: 16e-6 / (256 x ((15/16)/1e12 - ratio x 0.04/4e11)). */
	close_to(nelssa_crossover(&hw, &q, 4), 16e-6 / (256 * (0.9375e-12 - ratio * 1e-13)), 1e-9);
	close_to(nelssa_t_gpu(&hw, &q, nelssa_crossover(&hw, &q, 4)),
		 nelssa_t_pnm(&hw, &q, nelssa_crossover(&hw, &q, 4), 4), 1e-9);
	/* Memory: 90 % of 4 GB holds 0.9 x 4e9 / 136 tokens now. */
	assert_int_equal(0, nelssa_router_init(&r, &hw, &q, 4));
	r.cap_step = 1e9;
	r.cap_gpu_meta = 1e18;
	r.gpu_kv = 1e9;	/* 3.9M GPU tokens; centroids of 26M fit */
	assert_int_equal(NELSSA_FITS_PNM, nelssa_router_fits(&r, 0.9 * 4e9 / 136 - 1));
	assert_int_equal(0, nelssa_router_fits(&r, 0.9 * 4e9 / 136 + 1));
	close_to(nelssa_pnm_step_time(&r, 1e6, 1), 25.6e-6 * ratio + 16e-6, 1e-12);
	/* An unknown type: NaN in every PNM term, and refused by the router. */
	q.pnm_kv_dtype = 9;
	assert_true(isnan(nelssa_pnm_kv_bytes_per_token(&q)));
	assert_true(isnan(nelssa_t_pnm(&hw, &q, 1e6, 4)));
	assert_int_equal(-EINVAL, nelssa_router_init(&r, &hw, &q, 4));
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
	assert_non_null(strstr(r.why, "step deadline"));
	r.cap_step = nelssa_pnm_step_time(&r, 2 * t, 2) * 1.001;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route_request(&r, t));
	/* GPU memory for centroids + windows: (3t x 256 / 16) + 3 x 68 x 256 bytes now. */
	r.cap_step = 1e9;
	r.cap_gpu_meta = (3 * t * 256 / 16 + 3 * 68 * 256) * 0.999;
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route_request(&r, t));
	assert_non_null(strstr(r.why, "GPU centroid"));
	nelssa_router_release(&r, t);
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route_request(&r, t));
	/* Over the step deadline with others on the tier: it waits for them. */
	r.cap_gpu_meta = 1e18;
	r.cap_step = nelssa_pnm_step_time(&r, 2 * t, 1) * 0.999;
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route_request(&r, 2 * t));
	assert_non_null(strstr(r.why, "step deadline"));
	assert_int_equal(2, r.pnm_requests);	/* not counted on the tier */
	/* ... and on an empty tier, where the GPU holds it, the GPU serves it. */
	nelssa_router_release(&r, t);
	nelssa_router_release(&r, t);
	assert_int_equal(0, r.pnm_requests);
	assert_int_equal(NELSSA_ROUTE_GPU, nelssa_route_request(&r, 2 * t));
	assert_non_null(strstr(r.why, "alone over the PNM step deadline"));
	assert_int_equal(0, r.pnm_requests);
	assert_int_equal(-EINVAL, nelssa_router_init(&r, &hw, &m, 0));
}

/*
 * Where a request can run, from its KV at its end: the GPU's pool, the
 * PNM tier's memory cap (and its centroids within the GPU's cap), both,
 * or neither -- refused at once, with the reason.
 */
static void route_where_the_kv_fits(void **state)
{
	struct nelssa_router r;
	const double pool = 1e9 / 256;	/* tokens of 256 B in a 1 GB GPU pool */
	const double pnm = 0.9 * 4e9 / 256;	/* tokens in 90 % of four 1 GB devices */
	struct nelssa_route_query q = { .prev = -1 };

	(void)state;
	assert_int_equal(0, nelssa_router_init(&r, &hw, &m, 4));
	r.gpu_kv = 1e9;
	r.cap_gpu_meta = 1e18;
	r.cap_step = 1e9;
	assert_int_equal(NELSSA_FITS_GPU | NELSSA_FITS_PNM, nelssa_router_fits(&r, pool));
	assert_int_equal(NELSSA_FITS_PNM, nelssa_router_fits(&r, pool + 1));
	r.gpu_kv = 1e12;
	assert_int_equal(NELSSA_FITS_GPU, nelssa_router_fits(&r, pnm + 1));
	r.gpu_kv = 1e9;
	assert_int_equal(0, nelssa_router_fits(&r, pnm + 1));
	/* Neither: refused, whatever its current length, and nothing counted. */
	q.len = 1000;
	q.final_len = pnm + 1;
	assert_int_equal(NELSSA_ROUTE_REFUSE, nelssa_route(&r, &q));
	assert_non_null(strstr(r.why, "fits neither"));
	assert_int_equal(0, r.pnm_requests);
	/* Short but over the GPU pool at its end: the PNM tier, below the threshold too. */
	q.len = 100;
	q.final_len = pool + 1;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	close_to(r.pnm_final, pool + 1, 1e-12);
	close_to(r.pnm_tokens, 100, 1e-12);
	/* Long but over the PNM tier's memory at its end: the GPU. */
	r.gpu_kv = 1e12;
	q.len = r.t_input * 2;
	q.final_len = pnm + 1;
	assert_int_equal(NELSSA_ROUTE_GPU, nelssa_route(&r, &q));
	/* Memory is reserved at the final length: the tier holds pnm - (pool + 1) more. */
	q.final_len = pnm - (pool + 1);
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	q.final_len = q.len;
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route(&r, &q));
	assert_non_null(strstr(r.why, "PNM memory"));
	nelssa_router_leave(&r, 100, pool + 1);
	nelssa_router_leave(&r, r.t_input * 2, pnm - (pool + 1));
	assert_int_equal(0, r.pnm_requests);
	assert_true(r.pnm_tokens == 0 && r.pnm_final == 0);
}

/*
 * The step deadline is the GPU's step with its whole pool read, from the
 * profile alone: identical requests get identical answers whatever ran
 * before, and the tier takes floor((D - T_comm) / c) of them at once
 * (c: one request's sparse read), not one.
 */
static void deadline_from_the_tier_not_from_history(void **state)
{
	const struct nelssa_model_profile llama = { 32, 8, 128, 2, 16.06e9, 16.0, 0.04, 0 };
	struct nelssa_hw_profile h200;
	struct nelssa_router r;
	double d, c, comm, len = 131072;
	uint32_t k = 0, want;

	(void)state;
	assert_int_equal(0, nelssa_hw_profile_builtin("h200", &h200));
	assert_int_equal(0, nelssa_router_init(&r, &h200, &llama, 4));
	/* 0.9 x 141e9 - 16.06e9 = 110.84e9 of KV; (16.06e9 + 110.84e9) / 4.8e12 = 26.4375 ms. */
	close_to(r.gpu_kv, 110.84e9, 1e-12);
	d = 126.9e9 / 4.8e12;
	close_to(r.cap_step, d, 1e-12);
	/* c = 0.04 x 131072 x 131072 B / (4 x 76.8e9 B/s); T_comm(4) = 32 x 16 us. */
	c = 0.04 * len * 131072.0 / (4 * 76.8e9);
	comm = 32 * 16e-6;
	want = (uint32_t)floor((d - comm) / c);
	assert_int_equal(11, want);	/* 2.237 ms each, 0.512 ms of communication */
	while (nelssa_route_request(&r, len) == NELSSA_ROUTE_PNM)
		k++;
	assert_int_equal(want, k);
	close_to(nelssa_pnm_step_time(&r, r.pnm_tokens, r.pnm_requests), comm + want * c, 1e-9);
	/* One leaves: the next identical request gets its place, the one after waits. */
	nelssa_router_release(&r, len);
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route_request(&r, len));
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route_request(&r, len));
}

/*
 * A request the tier cannot take now starts on the GPU when it has room
 * for it, else waits; one behind an older request waiting for the tier
 * does not pass it there.
 */
static void full_tier_falls_back_to_a_gpu_with_room(void **state)
{
	struct nelssa_router r;
	const double t = nelssa_crossover(&hw, &m, 4);
	struct nelssa_route_query q = { .len = t, .final_len = t, .prev = -1 };

	(void)state;
	assert_int_equal(0, nelssa_router_init(&r, &hw, &m, 4));
	r.gpu_kv = 1e12;
	r.cap_gpu_meta = 1e18;
	r.cap_step = nelssa_pnm_step_time(&r, t, 1) * 1.0001;	/* room for one */
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route(&r, &q));
	q.gpu_free = (t + 1) * 256 - 1;
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route(&r, &q));
	q.gpu_free = (t + 1) * 256;
	assert_int_equal(NELSSA_ROUTE_GPU, nelssa_route(&r, &q));
	assert_non_null(strstr(r.why, "the GPU, which has room"));
	/* Room on the tier again, but an older request waits for it. */
	nelssa_router_release(&r, t);
	q.behind = 1;
	q.gpu_free = 0;
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route(&r, &q));
	assert_non_null(strstr(r.why, "older request"));
	q.behind = 0;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	assert_int_equal(1, r.pnm_requests);
}

/*
 * A preempted request: pinned (no migration), it goes back where it ran
 * whatever its length; free to move, it is routed afresh.
 */
static void preempted_requests_are_routed_explicitly(void **state)
{
	struct nelssa_router r;
	const double t = nelssa_crossover(&hw, &m, 4);
	struct nelssa_route_query q = { .len = 2 * t, .final_len = 2 * t, .prev = NELSSA_ROUTE_GPU,
					.pinned = 1 };

	(void)state;
	assert_int_equal(0, nelssa_router_init(&r, &hw, &m, 4));
	r.gpu_kv = 1e12;
	r.cap_gpu_meta = 1e18;
	r.cap_step = 1e9;
	assert_int_equal(NELSSA_ROUTE_GPU, nelssa_route(&r, &q));
	assert_int_equal(0, r.pnm_requests);
	q.pinned = 0;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	/* Pinned to the PNM tier: below the threshold, and with the tier full, never the GPU. */
	q.prev = NELSSA_ROUTE_PNM;
	q.pinned = 1;
	q.len = q.final_len = t / 2;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	r.cap_step = nelssa_pnm_step_time(&r, r.pnm_tokens, r.pnm_requests);
	q.gpu_free = 1e18;
	assert_int_equal(NELSSA_ROUTE_QUEUE, nelssa_route(&r, &q));
}

/*
 * Requests only the PNM tier holds are paced: their centroids and windows
 * take at most cap_gpu_share of the GPU, (L / C + window) M_kv / (BW_gpu
 * share), and beside requests the GPU could hold their sparse reads at most
 * cap_pnm_share of the devices, S L M_kv / (N BW_pnm share); the others'
 * step is stretched by 1 / (1 - cap_pnm_share) meanwhile, no more.
 */
static void requests_only_the_tier_holds_are_paced(void **state)
{
	struct nelssa_router r;
	struct nelssa_route_query q = { .len = 1000, .final_len = 5e6, .prev = -1 };
	const double pace_gpu = (5e6 / 16 + 68) * 256 / (1e12 * 0.025);
	const double pace_pnm = 0.04 * 5e6 * 256 / (4 * 1e11 * 0.025);
	double common;

	(void)state;
	assert_int_equal(0, nelssa_router_init(&r, &hw, &m, 4));
	r.gpu_kv = 1e9;		/* 3.9M tokens: 5M is over it */
	r.cap_gpu_meta = 1e18;
	r.cap_step = 1e9;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	/* Alone on the tier: the GPU's share decides. */
	close_to(nelssa_pnm_step_of(&r, 5e6, 0), fmax(pace_gpu, nelssa_pnm_step_time(&r, 1000, 1)),
		 1e-12);
	/* With a request the GPU could hold: the devices' share too. */
	q.final_len = 1e6;
	q.len = 2 * r.t_input;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	close_to(nelssa_pnm_step_of(&r, 5e6, 0), fmax(pace_gpu, pace_pnm), 1e-12);
	common = nelssa_pnm_step_time(&r, 2 * r.t_input, 1) / (1 - 0.025);
	close_to(nelssa_pnm_step_of(&r, 1e6, 0), common, 1e-12);
	nelssa_router_leave(&r, 1000, 5e6);
	close_to(nelssa_pnm_step_of(&r, 1e6, 0), nelssa_pnm_step_time(&r, 2 * r.t_input, 1), 1e-12);
	assert_int_equal(1, r.pnm_requests);
	assert_int_equal(0, r.extra_requests);
	/* A loaded GPU: the share is of its fixed part, 1 ms of weights in a 3 ms step. */
	r.m.weights = 1e9;
	q.len = 1000;
	q.final_len = 5e6;
	assert_int_equal(NELSSA_ROUTE_PNM, nelssa_route(&r, &q));
	close_to(nelssa_pnm_step_of(&r, 5e6, 3e-3), fmax(3 * pace_gpu, pace_pnm), 1e-12);
	close_to(nelssa_pnm_step_of(&r, 5e6, 0.5e-3), fmax(pace_gpu, pace_pnm), 1e-12);
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

/* Placement across nodes: known answers for each rule of nelssa_place_pick(). */
static void place_pick_known_answers(void **state)
{
	struct nelssa_place_node v[4] = {
		{ .used_tokens = 1000, .cap_tokens = 10000, .devices = 1, .eligible = 1, .id = "a" },
		{ .used_tokens = 3000, .cap_tokens = 10000, .devices = 4, .eligible = 1, .id = "b" },
		{ .used_tokens = 0, .cap_tokens = 10000, .devices = 2, .eligible = 0, .id = "c" },
		{ .used_tokens = 9000, .cap_tokens = 10000, .devices = 8, .eligible = 1, .id = "d" },
	};

	(void)state;
	/* Per device after: a 2000, b 1000, d 1250 (c not eligible). */
	assert_int_equal(nelssa_place_pick(v, 4, 1000), 1);
	/* d lacks room for 2000; a 3000, b 1250. */
	assert_int_equal(nelssa_place_pick(v, 4, 2000), 1);
	/* Nobody has room. */
	assert_int_equal(nelssa_place_pick(v, 4, 9500), -ENOSPC);
	assert_int_equal(nelssa_place_pick(v, 0, 1), -ENOSPC);
	/* Exactly the cap fits. */
	v[1].used_tokens = 10000;
	v[3].used_tokens = 0;
	assert_int_equal(nelssa_place_pick(v, 4, 10000), 3);
	/* Ties: fewer steps in flight, then the id, then the index. */
	v[0] = (struct nelssa_place_node){ 0, 100, 1, 2, 1, "z" };
	v[1] = (struct nelssa_place_node){ 0, 100, 1, 1, 1, "y" };
	v[2] = (struct nelssa_place_node){ 0, 100, 1, 1, 1, "x" };
	assert_int_equal(nelssa_place_pick(v, 3, 10), 2);
	v[2].steps_in_flight = 3;
	assert_int_equal(nelssa_place_pick(v, 3, 10), 1);
	v[0].id = v[1].id = NULL;
	v[1].steps_in_flight = 2;
	assert_int_equal(nelssa_place_pick(v, 2, 10), 0);
	/* No devices, or a NaN cap: never placed on. */
	v[0].devices = 0;
	v[1].cap_tokens = NAN;
	assert_int_equal(nelssa_place_pick(v, 2, 10), -ENOSPC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(model_matches_hand_values),
		cmocka_unit_test(crossover_matches_hand_values),
		cmocka_unit_test(pnm_kv_dtype_scales_pnm_terms),
		cmocka_unit_test(router_caps_one_at_a_time),
		cmocka_unit_test(route_where_the_kv_fits),
		cmocka_unit_test(deadline_from_the_tier_not_from_history),
		cmocka_unit_test(full_tier_falls_back_to_a_gpu_with_room),
		cmocka_unit_test(preempted_requests_are_routed_explicitly),
		cmocka_unit_test(requests_only_the_tier_holds_are_paced),
		cmocka_unit_test(migration_picks_the_largest_admissible),
		cmocka_unit_test(profiles_builtin_and_files),
		cmocka_unit_test(threshold_follows_load_steps_without_oscillating),
		cmocka_unit_test(threshold_ignores_noise_at_balance),
		cmocka_unit_test(place_pick_known_answers),
	};

	tu_init("policy");
	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
