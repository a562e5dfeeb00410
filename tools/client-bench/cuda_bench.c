// SPDX-License-Identifier: MIT
/*
 * nelssa-cuda-bench: GPU timings of the decode step's GPU-node kernels,
 * each beside a same-run baseline (only ratios carry across machines):
 *
 *   topk    centroid scoring + the token-budget fill for a batch of KV
 *           heads at a given context, in clusters of 1-31 tokens;
 *           baseline: a device-to-device copy of the centroid bytes (the
 *           memory floor of reading them once) and the CPU twin on one
 *           head, with the same budget, scaled to the batch;
 *   select  the shipped selection, nelssa_select()'s GPU form: centroid
 *           and far-member scores, then the two-list fill (a quarter of
 *           the budget by the far probe); baselines: the copy of the
 *           centroid and far-key bytes, and the CPU nelssa_select();
 *   est     the clusters the selection left (nelssa_cuda_unselected())
 *           and the spread-weighted estimate over them (centroid,
 *           spread and V-sum rows read);
 *           baselines: the copy of those bytes and the CPU twin;
 *   window  local-window attention (4 sinks + 64 recent) for the same
 *           batch; baseline: the CPU twin, likewise;
 *   kmeans  segmented k-means of one KV head's prefill; baseline: the
 *           CPU twin on the same keys.
 *
 * GPU times come from CUDA events around @iters repetitions after one
 * warm-up; the best repetition is reported.  Exit status 3 when there is
 * no GPU, so a script can tell "nothing to time" from a failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include <nelssa/half.h>
#include <nelssa/sparse.h>
#include <nelssa/sparse_cuda.h>

#include "tool_util.h"

#define PROG "nelssa-cuda-bench"

struct opts {
	uint32_t context, heads, batch, group, head_dim, iters, prefill;
	double budget;
	int json;
};

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static void die(const char *what, cudaError_t e)
{
	fprintf(stderr, PROG ": %s: %s\n", what, cudaGetErrorString(e));
	exit(1);
}

static void *xmalloc(size_t n)
{
	return tl_calloc(PROG, 1, n);
}

static void *dmalloc(size_t n)
{
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, n);

	if (e != cudaSuccess)
		die("cudaMalloc", e);
	return p;
}

static void *dput(const void *h, size_t n)
{
	void *p = dmalloc(n);
	cudaError_t e = cudaMemcpy(p, h, n, cudaMemcpyHostToDevice);

	if (e != cudaSuccess)
		die("cudaMemcpy", e);
	return p;
}

static void check(int ret, const char *what)
{
	if (ret) {
		fprintf(stderr, PROG ": %s failed: %s\n", what, strerror(-ret));
		exit(1);
	}
}

static float *frand_n(size_t n)
{
	float *x = xmalloc(sizeof(*x) * n);

	for (size_t i = 0; i < n; i++)
		x[i] = tl_frand(&rng_state);
	return x;
}

static uint16_t *bf16_n(size_t n)
{
	uint16_t *x = xmalloc(sizeof(*x) * n);

	for (size_t i = 0; i < n; i++)
		x[i] = nelssa_f32_to_bf16(tl_frand(&rng_state));
	return x;
}

/* Best of @iters timed repetitions of @fn on the GPU, in ms. */
struct gpu_job {
	void (*fn)(void *ctx);
	void *ctx;
};

static double gpu_best_ms(struct gpu_job job, uint32_t iters)
{
	cudaEvent_t a, b;
	double best = INFINITY;
	float ms;

	cudaEventCreate(&a);
	cudaEventCreate(&b);
	job.fn(job.ctx);	/* warm-up: first-launch and allocator costs */
	for (uint32_t i = 0; i < iters; i++) {
		cudaEventRecord(a, NULL);
		job.fn(job.ctx);
		cudaEventRecord(b, NULL);
		if (cudaEventSynchronize(b) != cudaSuccess)
			die("kernel", cudaGetLastError());
		cudaEventElapsedTime(&ms, a, b);
		best = fmin(best, ms);
	}
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return best;
}

struct topk_ctx {
	const struct opts *o;
	uint32_t heads, clusters;
	uint64_t budget;
	float *q, *cen, *score;
	uint32_t *sizes, *ids;
	int32_t *count;
	uint64_t *tokens;
	void *copy_src, *copy_dst;	/* the copy baseline's, 3 rows' worth */
	/* The shipped selection and the estimate over what it left. */
	float *far, *far_score, *m2, *vsum, *est_o, *est_lse;
	uint32_t *est_ids, *n_est;
	size_t copy_bytes;
};

static void topk_run(void *p)
{
	struct topk_ctx *c = p;

	check(nelssa_cuda_centroid_scores(c->q, c->heads, c->o->group, c->o->head_dim, 0.088f,
					  c->cen, c->sizes, c->clusters, c->score, NULL),
	      "centroid scores");
	check(nelssa_cuda_topk_fill(c->score, c->sizes, c->heads, c->clusters, c->budget, c->ids,
				    c->count, c->tokens, NULL), "top-k fill");
}

/* nelssa_select() with NELSSA_SELECT_DEFAULT, for every head at once. */
static void select_run(void *p)
{
	struct topk_ctx *c = p;
	const struct nelssa_select_cfg cfg = NELSSA_SELECT_DEFAULT;

	check(nelssa_cuda_centroid_scores(c->q, c->heads, c->o->group, c->o->head_dim, 0.088f,
					  c->cen, c->sizes, c->clusters, c->score, NULL),
	      "centroid scores");
	check(nelssa_cuda_far_probs(c->q, c->heads, c->o->group, c->o->head_dim, 0.088f, c->cen,
				    c->far, c->sizes, c->clusters, c->far_score, NULL),
	      "far-member scores");
	check(nelssa_cuda_select_hybrid2(c->far_score, c->score, cfg.far_share, c->sizes,
					 c->heads, c->clusters, c->budget, c->ids, c->count,
					 c->tokens, NULL), "two-list fill");
}

/* What the selection left, then the spread estimate over it: all on the GPU. */
static void estimate_run(void *p)
{
	struct topk_ctx *c = p;
	const struct nelssa_attn_geom g = { c->o->head_dim, c->o->group, NELSSA_KV_BF16, 0.088f, 0 };

	check(nelssa_cuda_unselected(c->ids, c->clusters, c->count, c->sizes, c->heads, c->clusters,
				     c->est_ids, c->n_est, NULL), "unselected clusters");
	check(nelssa_cuda_estimate_attn_spread(&g, c->heads, c->q, c->cen, c->m2, c->vsum,
					       c->sizes, c->clusters, c->est_ids, c->clusters,
					       c->n_est, c->est_o, c->est_lse, NULL),
	      "spread estimate");
}

/* The memory floor: one device copy of @copy_bytes. */
static void copy_run(void *p)
{
	struct topk_ctx *c = p;

	cudaMemcpyAsync(c->copy_dst, c->copy_src, c->copy_bytes, cudaMemcpyDeviceToDevice, NULL);
}

/* Min and max over the heads of what the last selection read and took. */
static void selection_span(const struct topk_ctx *c, uint64_t tok[2], int32_t sel[2])
{
	uint64_t *tokens = xmalloc(sizeof(*tokens) * c->heads);
	int32_t *count = xmalloc(sizeof(*count) * c->heads);

	if (cudaMemcpy(tokens, c->tokens, sizeof(*tokens) * c->heads,
		       cudaMemcpyDeviceToHost) != cudaSuccess ||
	    cudaMemcpy(count, c->count, sizeof(*count) * c->heads,
		       cudaMemcpyDeviceToHost) != cudaSuccess)
		die("cudaMemcpy", cudaGetLastError());
	tok[0] = UINT64_MAX;
	tok[1] = 0;
	sel[0] = INT32_MAX;
	sel[1] = 0;
	for (uint32_t h = 0; h < c->heads; h++) {
		check(count[h] < 0 ? count[h] : 0, "selection (a head)");
		tok[0] = tokens[h] < tok[0] ? tokens[h] : tok[0];
		tok[1] = tokens[h] > tok[1] ? tokens[h] : tok[1];
		sel[0] = count[h] < sel[0] ? count[h] : sel[0];
		sel[1] = count[h] > sel[1] ? count[h] : sel[1];
	}
	free(tokens);
	free(count);
}

struct window_ctx {
	struct nelssa_attn_geom g;
	uint32_t items;
	float *q, *o, *lse;
	uint16_t *k, *v;
	uint32_t *n;
};

static void window_run(void *p)
{
	struct window_ctx *c = p;
	const struct nelssa_window win = NELSSA_WINDOW_DEFAULT;

	check(nelssa_cuda_window_attn(&c->g, c->items, c->q, c->k, c->v, 68 + 4096, c->n, &win,
				      c->o, c->lse, NULL), "window");
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--context N] [--heads N] [--batch N] [--group N] [--head-dim N]\n"
		"                         [--budget F] [--prefill N] [--iters N] [--json]\n"
		"  --context N   tokens of context per request, in clusters of 1-31\n"
		"                tokens, 16 on average (default 131072)\n"
		"  --heads N     KV heads per layer (default 8)\n"
		"  --batch N     requests in the decode batch (default 16)\n"
		"  --group N     query heads per KV head (default 4)\n"
		"  --head-dim N  head dimension (default 128)\n"
		"  --budget F    tokens each selection reads, as a fraction of the\n"
		"                context (default 0.04).  --ratio is a deprecated\n"
		"                alias: it is the same token budget, no longer a\n"
		"                ratio of clusters\n"
		"  --prefill N   tokens clustered by the k-means timing (default 32768)\n"
		"  --iters N     timed repetitions; the best is reported (default 10)\n"
		"  --json        one JSON object instead of text\n"
		"Exit status: 0 ok, 1 failure, 2 usage, 3 no CUDA device.\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "context", required_argument, NULL, 'c' }, { "heads", required_argument, NULL, 'H' },
		{ "batch", required_argument, NULL, 'b' }, { "group", required_argument, NULL, 'g' },
		{ "head-dim", required_argument, NULL, 'd' },
		{ "budget", required_argument, NULL, 'B' },
		{ "ratio", required_argument, NULL, 'r' },
		{ "prefill", required_argument, NULL, 'p' }, { "iters", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { 131072, 8, 16, 4, 128, 10, 32768, 0.04, 0 };
	struct topk_ctx tc = { 0 };
	struct window_ctx wc = { 0 };
	struct nelssa_cluster_index ix;
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	double topk_ms, copy_ms, cpu_topk_ms, win_ms, cpu_win_ms, km_ms, cpu_km_ms, t0;
	double sel_ms, sel_copy_ms, cpu_sel_ms, est_ms, est_copy_ms, cpu_est_ms;
	struct cudaDeviceProp prop;
	float *cpu_score, cpu_o[64 * 128], cpu_l[64];
	uint64_t topk_tok[2], sel_tok[2], cpu_tokens, cpu_sel_tokens;
	int32_t topk_sel[2], sel_sel[2];
	uint32_t *cpu_ids, max_size = 0;
	uint16_t *keys;
	void *dkeys;
	char *end;
	int c, bad = 0, dev;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'c': bad |= tl_parse_u32(PROG, optarg, 256, 1u << 24, &o.context, "--context"); break;
		case 'H': bad |= tl_parse_u32(PROG, optarg, 1, 256, &o.heads, "--heads"); break;
		case 'b': bad |= tl_parse_u32(PROG, optarg, 1, 256, &o.batch, "--batch"); break;
		case 'g': bad |= tl_parse_u32(PROG, optarg, 1, 64, &o.group, "--group"); break;
		case 'd': bad |= tl_parse_u32(PROG, optarg, 1, 128, &o.head_dim, "--head-dim"); break;
		case 'p': bad |= tl_parse_u32(PROG, optarg, 16, 1u << 22, &o.prefill, "--prefill"); break;
		case 'i': bad |= tl_parse_u32(PROG, optarg, 1, 1000, &o.iters, "--iters"); break;
		case 'r':
			fprintf(stderr, PROG ": --ratio is deprecated: it now sets the token "
				"budget, as --budget does\n");
			/* fall through */
		case 'B':
			errno = 0;
			o.budget = strtod(optarg, &end);
			if (errno || *end || !(o.budget > 0.0 && o.budget <= 1.0)) {
				fprintf(stderr, PROG ": --budget %s: need a number in (0, 1]\n",
					optarg);
				bad = 1;
			}
			break;
		case 'j': o.json = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (bad || optind < argc) {
		if (optind < argc)
			fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (nelssa_cuda_device_count() < 1) {
		fprintf(stderr, PROG ": no CUDA device: nothing to time\n");
		return 3;
	}
	cudaGetDevice(&dev);
	cudaGetDeviceProperties(&prop, dev);

	/* Top-K step: every KV head of the batch, 16 tokens a cluster on average. */
	tc.o = &o;
	tc.heads = o.heads * o.batch;
	tc.clusters = o.context / 16;
	tc.budget = (uint64_t)llround(o.budget * o.context);
	{
		const size_t rows = (size_t)tc.heads * tc.clusters * o.head_dim;
		const size_t row_bytes = sizeof(float) * rows;
		float *q = frand_n((size_t)tc.heads * o.group * o.head_dim);
		float *cen = frand_n(rows), *far = frand_n(rows), *m2 = frand_n(rows);
		float *vsum = frand_n(rows);
		uint32_t *sizes = xmalloc(sizeof(*sizes) * tc.heads * tc.clusters);
		uint32_t *left = xmalloc(sizeof(*left) * tc.clusters), n_left = 0;
		const struct nelssa_select_cfg scfg = NELSSA_SELECT_DEFAULT;
		const struct nelssa_attn_geom g = { o.head_dim, o.group, NELSSA_KV_BF16, 0.088f, 0 };

		/* Spreads are mean squares: non-negative, smaller than the centroids. */
		for (size_t i = 0; i < rows; i++)
			m2[i] = 0.05f * m2[i] * m2[i];
		for (uint32_t h = 0; h < tc.heads; h++) {
			uint32_t m = tl_vary_sizes(&rng_state, sizes + (size_t)h * tc.clusters, tc.clusters,
						o.context);

			max_size = m > max_size ? m : max_size;
		}
		tc.q = dput(q, sizeof(float) * tc.heads * o.group * o.head_dim);
		tc.cen = dput(cen, row_bytes);
		tc.far = dput(far, row_bytes);
		tc.m2 = dput(m2, row_bytes);
		tc.vsum = dput(vsum, row_bytes);
		tc.sizes = dput(sizes, sizeof(uint32_t) * tc.heads * tc.clusters);
		tc.score = dmalloc(sizeof(float) * tc.heads * tc.clusters);
		tc.far_score = dmalloc(sizeof(float) * tc.heads * tc.clusters);
		tc.ids = dmalloc(sizeof(uint32_t) * tc.heads * tc.clusters);
		tc.count = dmalloc(sizeof(int32_t) * tc.heads);
		tc.tokens = dmalloc(sizeof(uint64_t) * tc.heads);
		tc.est_o = dmalloc(sizeof(float) * tc.heads * o.group * o.head_dim);
		tc.est_lse = dmalloc(sizeof(float) * tc.heads * o.group);
		tc.copy_src = dmalloc(3 * row_bytes);
		tc.copy_dst = dmalloc(3 * row_bytes);
		if (cudaMemset(tc.copy_src, 0, 3 * row_bytes) != cudaSuccess)
			die("cudaMemset", cudaGetLastError());

		topk_ms = gpu_best_ms((struct gpu_job){ topk_run, &tc }, o.iters);
		/* What the last repetition selected: every repetition selects the same. */
		selection_span(&tc, topk_tok, topk_sel);
		tc.copy_bytes = row_bytes;
		copy_ms = gpu_best_ms((struct gpu_job){ copy_run, &tc }, o.iters);

		sel_ms = gpu_best_ms((struct gpu_job){ select_run, &tc }, o.iters);
		selection_span(&tc, sel_tok, sel_sel);
		tc.copy_bytes = 2 * row_bytes;
		sel_copy_ms = gpu_best_ms((struct gpu_job){ copy_run, &tc }, o.iters);

		tc.est_ids = dmalloc(sizeof(uint32_t) * tc.heads * tc.clusters);
		tc.n_est = dmalloc(sizeof(uint32_t) * tc.heads);
		est_ms = gpu_best_ms((struct gpu_job){ estimate_run, &tc }, o.iters);
		tc.copy_bytes = 3 * row_bytes;
		est_copy_ms = gpu_best_ms((struct gpu_job){ copy_run, &tc }, o.iters);

		/* The CPU twins on head 0, scaled to the batch. */
		cpu_score = xmalloc(sizeof(float) * tc.clusters);
		cpu_ids = xmalloc(sizeof(uint32_t) * tc.clusters);
		t0 = tl_now();
		check(nelssa_centroid_scores(q, o.group, o.head_dim, 0.088f, cen, sizes, tc.clusters,
					     cpu_score), "CPU scores");
		bad = nelssa_topk_fill(cpu_score, sizes, tc.clusters, tc.budget, cpu_ids,
				       &cpu_tokens);
		check(bad < 0 ? bad : 0, "CPU top-k fill");
		cpu_topk_ms = (tl_now() - t0) * 1e3 * tc.heads;
		t0 = tl_now();
		bad = nelssa_select(&scfg, q, o.group, o.head_dim, 0.088f, cen, far, sizes,
				    tc.clusters, tc.budget, cpu_ids, &cpu_sel_tokens);
		check(bad < 0 ? bad : 0, "CPU nelssa_select()");
		cpu_sel_ms = (tl_now() - t0) * 1e3 * tc.heads;
		t0 = tl_now();
		n_left = (uint32_t)nelssa_unselected(cpu_ids, (uint32_t)bad, sizes, tc.clusters, left);
		check(nelssa_estimate_attn_spread(&g, q, cen, m2, vsum, sizes, left, n_left, cpu_o,
						  cpu_l), "CPU spread estimate");
		cpu_est_ms = (tl_now() - t0) * 1e3 * tc.heads;
		free(q);
		free(cen);
		free(far);
		free(m2);
		free(vsum);
		free(sizes);
		free(left);
		free(cpu_score);
		free(cpu_ids);
	}

	/* Local window for the same items; rows for 4 sinks + 4096 recent. */
	wc.g = (struct nelssa_attn_geom){ o.head_dim, o.group, NELSSA_KV_BF16, 0.088f, 0 };
	wc.items = tc.heads;
	{
		const size_t rows = (size_t)wc.items * (68 + 4096) * o.head_dim;
		float *q = frand_n((size_t)wc.items * o.group * o.head_dim);
		uint16_t *k = bf16_n(rows), *v = bf16_n(rows);
		uint32_t *n = xmalloc(sizeof(*n) * wc.items);
		const struct nelssa_window win = NELSSA_WINDOW_DEFAULT;

		for (uint32_t i = 0; i < wc.items; i++)
			n[i] = 68 + 4096;
		wc.q = dput(q, sizeof(float) * wc.items * o.group * o.head_dim);
		wc.k = dput(k, 2 * rows);
		wc.v = dput(v, 2 * rows);
		wc.n = dput(n, sizeof(uint32_t) * wc.items);
		wc.o = dmalloc(sizeof(float) * wc.items * o.group * o.head_dim);
		wc.lse = dmalloc(sizeof(float) * wc.items * o.group);
		win_ms = gpu_best_ms((struct gpu_job){ window_run, &wc }, o.iters);
		t0 = tl_now();
		check(nelssa_window_attn(&wc.g, q, k, v, n[0], &win, cpu_o, cpu_l), "CPU window");
		cpu_win_ms = (tl_now() - t0) * 1e3 * wc.items;
		free(q);
		free(k);
		free(v);
		free(n);
	}

	/* k-means of one KV head's prefill (synchronous API: wall time). */
	keys = bf16_n((size_t)o.prefill * o.head_dim);
	dkeys = dput(keys, 2 * (size_t)o.prefill * o.head_dim);
	check(nelssa_cuda_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, dkeys, o.prefill, o.head_dim,
				       NULL), "GPU k-means");	/* warm-up */
	nelssa_kmeans_free(&ix);
	t0 = tl_now();
	check(nelssa_cuda_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, dkeys, o.prefill, o.head_dim,
				       NULL), "GPU k-means");
	km_ms = (tl_now() - t0) * 1e3;
	nelssa_kmeans_free(&ix);
	t0 = tl_now();
	check(nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, keys, o.prefill, o.head_dim),
	      "CPU k-means");
	cpu_km_ms = (tl_now() - t0) * 1e3;
	nelssa_kmeans_free(&ix);
	free(keys);

	{
		const double row_gb = (double)sizeof(float) * tc.heads * tc.clusters * o.head_dim / 1e9;
		const double eff = row_gb / (topk_ms / 1e3), copy = 2 * row_gb / (copy_ms / 1e3);
		const double sel_eff = 2 * row_gb / (sel_ms / 1e3);
		const double sel_copy = 4 * row_gb / (sel_copy_ms / 1e3);
		const double est_eff = 3 * row_gb / (est_ms / 1e3);
		const double est_copy = 6 * row_gb / (est_copy_ms / 1e3);

		if (o.json) {
			printf("{\"device\":\"%s\",\"context\":%u,\"heads\":%u,\"batch\":%u,"
			       "\"group\":%u,\"head_dim\":%u,\"iters\":%u,"
			       "\"topk\":{\"kv_heads\":%u,\"clusters_per_head\":%u,"
			       "\"max_cluster_tokens\":%u,\"budget\":%g,\"budget_tokens\":%llu,"
			       "\"tokens_read_min\":%llu,\"tokens_read_max\":%llu,"
			       "\"selected_min\":%d,\"selected_max\":%d,\"cpu_tokens_read\":%llu,"
			       "\"gpu_ms\":%.4f,\"cpu_ms\":%.3f,\"speedup\":%.2f,"
			       "\"centroid_read_gbps\":%.2f,\"copy_gbps\":%.2f,\"ratio\":%.3f},"
			       "\"select\":{\"far_share\":%g,\"tokens_read_min\":%llu,"
			       "\"tokens_read_max\":%llu,\"selected_min\":%d,\"selected_max\":%d,"
			       "\"cpu_tokens_read\":%llu,\"gpu_ms\":%.4f,\"cpu_ms\":%.3f,"
			       "\"speedup\":%.2f,\"read_gbps\":%.2f,\"copy_gbps\":%.2f,"
			       "\"ratio\":%.3f},"
			       "\"estimate\":{\"gpu_ms\":%.4f,\"cpu_ms\":%.3f,\"speedup\":%.2f,"
			       "\"read_gbps\":%.2f,\"copy_gbps\":%.2f,\"ratio\":%.3f},"
			       "\"window\":{\"items\":%u,\"gpu_ms\":%.4f,\"cpu_ms\":%.3f,"
			       "\"speedup\":%.2f},"
			       "\"kmeans\":{\"tokens\":%u,\"gpu_ms_per_1k\":%.3f,"
			       "\"cpu_ms_per_1k\":%.3f,\"speedup\":%.2f}}\n",
			       prop.name, o.context, o.heads, o.batch, o.group, o.head_dim, o.iters,
			       tc.heads, tc.clusters, max_size, o.budget,
			       (unsigned long long)tc.budget, (unsigned long long)topk_tok[0],
			       (unsigned long long)topk_tok[1], topk_sel[0], topk_sel[1],
			       (unsigned long long)cpu_tokens, topk_ms, cpu_topk_ms,
			       cpu_topk_ms / topk_ms, eff, copy, eff / copy,
			       NELSSA_SELECT_DEFAULT.far_share, (unsigned long long)sel_tok[0],
			       (unsigned long long)sel_tok[1], sel_sel[0], sel_sel[1],
			       (unsigned long long)cpu_sel_tokens, sel_ms, cpu_sel_ms,
			       cpu_sel_ms / sel_ms, sel_eff, sel_copy, sel_eff / sel_copy,
			       est_ms, cpu_est_ms, cpu_est_ms / est_ms, est_eff, est_copy,
			       est_eff / est_copy, wc.items, win_ms,
			       cpu_win_ms, cpu_win_ms / win_ms, o.prefill,
			       km_ms * 1024 / o.prefill, cpu_km_ms * 1024 / o.prefill,
			       cpu_km_ms / km_ms);
		} else {
			printf("device %s\n", prop.name);
			printf("top-k step: %u KV heads x %u clusters of 1-%u tokens: GPU %.4f ms, "
			       "CPU twin %.3f ms (x%.1f)\n", tc.heads, tc.clusters, max_size,
			       topk_ms, cpu_topk_ms, cpu_topk_ms / topk_ms);
			printf("  budget %llu tokens (%g of the context): %llu-%llu tokens read, "
			       "%d-%d clusters a head (CPU twin, head 0: %llu tokens)\n",
			       (unsigned long long)tc.budget, o.budget,
			       (unsigned long long)topk_tok[0], (unsigned long long)topk_tok[1],
			       topk_sel[0], topk_sel[1], (unsigned long long)cpu_tokens);
			printf("  centroid read %.1f GB/s vs device copy %.1f GB/s: ratio %.3f\n", eff,
			       copy, eff / copy);
			printf("shipped selection (far probe %g of the budget, then centroids): GPU %.4f "
			       "ms, CPU twin %.3f ms (x%.1f)\n", NELSSA_SELECT_DEFAULT.far_share,
			       sel_ms, cpu_sel_ms, cpu_sel_ms / sel_ms);
			printf("  %llu-%llu tokens read, %d-%d clusters a head (CPU twin, head 0: "
			       "%llu tokens)\n", (unsigned long long)sel_tok[0],
			       (unsigned long long)sel_tok[1], sel_sel[0], sel_sel[1],
			       (unsigned long long)cpu_sel_tokens);
			printf("  centroid + far-key read %.1f GB/s vs device copy %.1f GB/s: ratio "
			       "%.3f\n", sel_eff, sel_copy, sel_eff / sel_copy);
			printf("clusters left + spread estimate over them: GPU %.4f ms, CPU twin %.3f ms "
			       "(x%.1f)\n", est_ms, cpu_est_ms, cpu_est_ms / est_ms);
			printf("  centroid + spread + V-sum read %.1f GB/s vs device copy %.1f GB/s: "
			       "ratio %.3f\n", est_eff, est_copy, est_eff / est_copy);
			printf("window: %u items, 4 + 64 tokens: GPU %.4f ms, CPU twin %.3f ms (x%.1f)\n",
			       wc.items, win_ms, cpu_win_ms, cpu_win_ms / win_ms);
			printf("k-means: %u tokens: GPU %.3f ms per 1K tokens, CPU twin %.3f (x%.1f)\n",
			       o.prefill, km_ms * 1024 / o.prefill, cpu_km_ms * 1024 / o.prefill,
			       cpu_km_ms / km_ms);
		}
	}
	cudaFree(tc.q);
	cudaFree(tc.cen);
	cudaFree(tc.sizes);
	cudaFree(tc.score);
	cudaFree(tc.ids);
	cudaFree(tc.count);
	cudaFree(tc.tokens);
	cudaFree(tc.copy_src);
	cudaFree(tc.copy_dst);
	cudaFree(tc.far);
	cudaFree(tc.far_score);
	cudaFree(tc.m2);
	cudaFree(tc.vsum);
	cudaFree(tc.est_ids);
	cudaFree(tc.n_est);
	cudaFree(tc.est_o);
	cudaFree(tc.est_lse);
	cudaFree(wc.q);
	cudaFree(wc.k);
	cudaFree(wc.v);
	cudaFree(wc.n);
	cudaFree(wc.o);
	cudaFree(wc.lse);
	cudaFree(dkeys);
	return 0;
}
