// SPDX-License-Identifier: MIT
/*
 * nelssa-client-bench: CPU timings of the GPU node's sparse-attention
 * steps (client/), each with a same-run baseline so the ratio, not the
 * absolute number, is what carries across machines.
 *
 *   kmeans  segmented k-means of one KV head: ms per 1K tokens, against
 *           the sgemm of the same shapes (every segment's keys against its
 *           centroids, once an iteration: the arithmetic any k-means of
 *           this size pays), both on one BLAS thread;
 *   topk    one decode step at a given context: the shipped selection
 *           (nelssa_select(), far members then centroids filling a token
 *           budget) for every KV head, against a plain dot-product pass
 *           over the same centroids (the strict-order products one pair
 *           at a time), against the same products as OpenBLAS sgemm calls
 *           (the arithmetic floor of any selection that scores every
 *           centroid and far member, in BLAS's own summation order), and
 *           against one read of the bytes it scores (read_ratio: how
 *           close the selection is to memory speed).
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

#include <cblas.h>

#include <nelssa/half.h>
#include <nelssa/sparse.h>

#include "tool_util.h"

struct opts {
	uint32_t context, heads, group, head_dim, iters;
	double budget;
	int json;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* Exits with a message when out of memory. */
static void *xalloc(size_t n)
{
	return tl_calloc("nelssa-client-bench", 1, n);
}

/* Plain pass: every query row against every centroid, results summed. */
static float dot_pass(const float *q, uint32_t rows, const float *c, uint32_t n, uint32_t d)
{
	float acc = 0.0f;

	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t j = 0; j < n; j++)
			acc += nelssa_dot_f32(q + (size_t)r * d, c + (size_t)j * d, d);
	return acc;
}

/*
 * The same-shape GEMMs of a k-means: each segment's keys against its
 * centroids, once an iteration -- the arithmetic the assignment step
 * cannot avoid; all else k-means does shows as its excess over this.
 * The bench clusters whole segments (KM_TOKENS a multiple of the default
 * segment, which cluster_tokens divides), so each is cfg->segment keys
 * against segment / cluster_tokens centroids.
 */
#define KM_TOKENS 16384u

static void sgemm_pass(const struct nelssa_kmeans_cfg *cfg, const float *kf, uint32_t d, float *g)
{
	const uint32_t len = cfg->segment, k = cfg->segment / cfg->cluster_tokens;

	for (uint32_t a = 0; a < KM_TOKENS; a += len)
		for (uint32_t it = 0; it < cfg->iters; it++)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)len, (int)k, (int)d,
				    1.0f, kf + (size_t)a * d, (int)d, kf + (size_t)a * d, (int)d, 0.0f,
				    g, (int)k);
}

struct kmeans_result {
	uint32_t tokens;
	double ms_per_k, sgemm_ms_per_k, sgemm_gflops;
};

static int bench_kmeans(const struct opts *o, struct kmeans_result *r)
{
	const struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	const uint32_t n = KM_TOKENS, d = o->head_dim, k = cfg.segment / cfg.cluster_tokens;
	const double flops = 2.0 * n * k * d * cfg.iters;
	uint16_t *keys = xalloc(sizeof(*keys) * n * d);
	float *kf = xalloc(sizeof(*kf) * n * d);
	float *g = xalloc(sizeof(*g) * cfg.segment * k);
	double t0, best = INFINITY, base = INFINITY;
	struct nelssa_cluster_index ix;
	int ret = 0;

	for (size_t i = 0; i < (size_t)n * d; i++) {
		kf[i] = tl_frand(&rng_state);
		keys[i] = nelssa_f32_to_bf16(kf[i]);
	}
	for (uint32_t it = 0; it < o->iters && !ret; it++) {
		t0 = tl_now();
		ret = nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, keys, n, d);
		best = fmin(best, tl_now() - t0);
		if (!ret)
			nelssa_kmeans_free(&ix);
		t0 = tl_now();
		sgemm_pass(&cfg, kf, d, g);
		base = fmin(base, tl_now() - t0);
	}
	*r = (struct kmeans_result){ n, best * 1e3 / (n / 1024.0), base * 1e3 / (n / 1024.0),
				     flops / base * 1e-9 };
	free(keys);
	free(kf);
	free(g);
	return ret;
}

/* What one Top-K step selected: per KV head, the extremes over heads. */
struct topk_sel {
	uint64_t budget, tokens_min, tokens_max;
	uint32_t clusters, max_size, sel_min, sel_max;
};

struct topk_times {
	double step_ms, dot_ms, sgemm_ms, read_ms;
};

/* The selection's products in BLAS: every query row against every centroid and far member. */
static void sgemm_products(const struct opts *o, const float *q, const float *cen,
			   const float *far, uint32_t n, float *out)
{
	const uint32_t d = o->head_dim;
	const float *const rows[2] = { cen, far };

	for (uint32_t h = 0; h < o->heads; h++)
		for (int k = 0; k < 2; k++)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)o->group, (int)n,
				    (int)d, 1.0f, q, (int)d, rows[k] + (size_t)h * n * d, (int)d, 0.0f,
				    out, (int)n);
}

static int bench_topk(const struct opts *o, struct topk_times *tm, struct topk_sel *sel)
{
	const struct nelssa_select_cfg cfg = NELSSA_SELECT_DEFAULT;
	uint32_t n = o->context / 16, d = o->head_dim;
	float *cen = xalloc(sizeof(*cen) * o->heads * n * d);
	float *far = xalloc(sizeof(*far) * o->heads * n * d);
	float *q = xalloc(sizeof(*q) * o->group * d);
	uint32_t *sizes = xalloc(sizeof(*sizes) * n), *ids = xalloc(sizeof(*ids) * n);
	float *prod = xalloc(sizeof(*prod) * o->group * n);
	const uint64_t bytes = sizeof(float) * (uint64_t)o->heads * n * d;
	double best = INFINITY, base = INFINITY, gemm = INFINITY, rd, t0;
	float sink = 0.0f;
	uint64_t tokens;
	int ret = 0;

	for (size_t i = 0; i < (size_t)o->heads * n * d; i++) {
		cen[i] = tl_frand(&rng_state);
		far[i] = tl_frand(&rng_state);
	}
	for (uint32_t i = 0; i < o->group * d; i++)
		q[i] = tl_frand(&rng_state);
	*sel = (struct topk_sel){ (uint64_t)llround(o->budget * o->context), UINT64_MAX, 0, n,
				  tl_vary_sizes(&rng_state, sizes, n, o->context), UINT32_MAX, 0 };
	for (uint32_t it = 0; it < o->iters && ret >= 0; it++) {
		t0 = tl_now();
		for (uint32_t h = 0; h < o->heads && ret >= 0; h++) {
			ret = nelssa_select(&cfg, q, o->group, d, 1.0f / sqrtf((float)d),
					    cen + (size_t)h * n * d, far + (size_t)h * n * d, sizes,
					    n, sel->budget, ids, &tokens);
			if (ret < 0)
				break;
			sel->tokens_min = tokens < sel->tokens_min ? tokens : sel->tokens_min;
			sel->tokens_max = tokens > sel->tokens_max ? tokens : sel->tokens_max;
			sel->sel_min = (uint32_t)ret < sel->sel_min ? (uint32_t)ret : sel->sel_min;
			sel->sel_max = (uint32_t)ret > sel->sel_max ? (uint32_t)ret : sel->sel_max;
		}
		best = fmin(best, tl_now() - t0);
		t0 = tl_now();
		for (uint32_t h = 0; h < o->heads; h++)
			sink += dot_pass(q, o->group, cen + (size_t)h * n * d, n, d);
		base = fmin(base, tl_now() - t0);
		t0 = tl_now();
		sgemm_products(o, q, cen, far, n, prod);
		gemm = fmin(gemm, tl_now() - t0);
		sink += prod[0];
	}
	/* The memory floor: one read of every byte the selection scores. */
	rd = bytes / tl_stream_read(cen, bytes) * 1e-9 + bytes / tl_stream_read(far, bytes) * 1e-9;
	*tm = (struct topk_times){ best * 1e3, base * 1e3 + 0.0f * sink, gemm * 1e3, rd * 1e3 };
	free(prod);
	free(cen);
	free(far);
	free(q);
	free(sizes);
	free(ids);
	return ret < 0 ? ret : 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nelssa-client-bench [--context N] [--heads N] [--group N] [--head-dim N]\n"
		"                           [--budget F] [--iters N] [--json]\n"
		"  --context N   tokens of context for the Top-K step, in clusters of\n"
		"                1-31 tokens, 16 on average (default 131072)\n"
		"  --heads N     KV heads per layer (default 8)\n"
		"  --group N     query heads per KV head (default 4)\n"
		"  --head-dim N  head dimension (default 128)\n"
		"  --budget F    tokens each selection reads, as a fraction of the\n"
		"                context (default 0.04).  --ratio is a deprecated\n"
		"                alias: it is the same token budget, no longer a\n"
		"                ratio of clusters\n"
		"  --iters N     repetitions; the best is reported (default 3)\n"
		"  --json        one JSON object instead of text\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "context", required_argument, NULL, 'c' }, { "heads", required_argument, NULL, 'H' },
		{ "group", required_argument, NULL, 'g' }, { "head-dim", required_argument, NULL, 'd' },
		{ "budget", required_argument, NULL, 'b' },
		{ "ratio", required_argument, NULL, 'r' }, { "iters", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { 131072, 8, 4, 128, 3, 0.04, 0 };
	struct kmeans_result km;
	struct topk_times tk;
	char cpu[128];
	struct topk_sel sel;
	char *end;
	int c, bad = 0;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'c': bad |= tl_parse_u32("nelssa-client-bench", optarg, 16, 1u << 24, &o.context, "--context"); break;
		case 'H': bad |= tl_parse_u32("nelssa-client-bench", optarg, 1, 256, &o.heads, "--heads"); break;
		case 'g': bad |= tl_parse_u32("nelssa-client-bench", optarg, 1, NELSSA_ATTN_MAX_GROUP, &o.group, "--group"); break;
		case 'd': bad |= tl_parse_u32("nelssa-client-bench", optarg, 1, NELSSA_ATTN_MAX_HEAD_DIM, &o.head_dim,
					   "--head-dim"); break;
		case 'i': bad |= tl_parse_u32("nelssa-client-bench", optarg, 1, 1000, &o.iters, "--iters"); break;
		case 'r':
			fprintf(stderr, "nelssa-client-bench: --ratio is deprecated: it now "
				"sets the token budget, as --budget does\n");
			/* fall through */
		case 'b':
			o.budget = strtod(optarg, &end);
			if (*end || !(o.budget > 0.0 && o.budget <= 1.0)) {
				fprintf(stderr, "nelssa-client-bench: --budget %s: need (0, 1]\n",
					optarg);
				bad = 1;
			}
			break;
		case 'j': o.json = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (bad || optind != argc) {
		if (optind != argc)
			fprintf(stderr, "nelssa-client-bench: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	/* Per-core figures: the library's sgemm and the baseline's on one thread. */
	openblas_set_num_threads(1);
	tl_cpu_model(cpu, sizeof(cpu));
	if (!o.json) {
		printf("CPU: %s, ISA %s; BLAS: OpenBLAS on 1 thread\n", cpu, tl_cpu_isa());
		fprintf(stderr, "k-means on %u tokens, d=%u ...\n", KM_TOKENS, o.head_dim);
	}
	if (bench_kmeans(&o, &km)) {
		fprintf(stderr, "nelssa-client-bench: k-means failed\n");
		return 1;
	}
	if (!o.json)
		fprintf(stderr, "selection at %u tokens, %u KV heads ...\n", o.context, o.heads);
	if (bench_topk(&o, &tk, &sel)) {
		fprintf(stderr, "nelssa-client-bench: Top-K failed\n");
		return 1;
	}
	if (o.json) {
		printf("{\"cpu\":\"%s\",\"isa\":\"%s\",\"blas_threads\":1,"
		       "\"kmeans\":{\"tokens\":%u,\"head_dim\":%u,\"ms_per_1k_tokens_per_head\":%.4f,"
		       "\"sgemm_ms_per_1k\":%.4f,\"sgemm_gflops\":%.2f,\"ratio\":%.3f,"
		       "\"efficiency\":%.3f},\"topk\":{\"context\":%u,\"kv_heads\":%u,\"group\":%u,"
		       "\"head_dim\":%u,\"clusters_per_head\":%u,\"max_cluster_tokens\":%u,"
		       "\"budget\":%g,\"budget_tokens\":%llu,\"tokens_read_min\":%llu,"
		       "\"tokens_read_max\":%llu,\"selected_min\":%u,\"selected_max\":%u,"
		       "\"step_ms\":%.4f,\"dot_pass_ms\":%.4f,\"ratio\":%.3f,\"sgemm_pass_ms\":%.4f,"
		       "\"sgemm_ratio\":%.4g,\"read_pass_ms\":%.6g,\"read_ratio\":%.4g}}\n",
		       cpu, tl_cpu_isa(), km.tokens, o.head_dim, km.ms_per_k, km.sgemm_ms_per_k,
		       km.sgemm_gflops, km.ms_per_k / km.sgemm_ms_per_k,
		       km.sgemm_ms_per_k / km.ms_per_k, o.context, o.heads, o.group, o.head_dim,
		       sel.clusters, sel.max_size, o.budget, (unsigned long long)sel.budget,
		       (unsigned long long)sel.tokens_min, (unsigned long long)sel.tokens_max,
		       sel.sel_min, sel.sel_max, tk.step_ms, tk.dot_ms, tk.step_ms / tk.dot_ms,
		       tk.sgemm_ms, tk.sgemm_ms / tk.step_ms, tk.read_ms, tk.read_ms / tk.step_ms);
		return 0;
	}
	printf("k-means      %8.3f ms per 1K tokens per KV head (10 iterations)\n", km.ms_per_k);
	printf("  baseline   %8.3f ms per 1K tokens: the same-shape sgemm, %.1f GFLOP/s\n",
	       km.sgemm_ms_per_k, km.sgemm_gflops);
	printf("  efficiency %8.2f (sgemm time over k-means time)\n",
	       km.sgemm_ms_per_k / km.ms_per_k);
	printf("Top-K step   %8.3f ms at %u tokens: %u KV heads x %u clusters of 1-%u tokens\n",
	       tk.step_ms, o.context, o.heads, sel.clusters, sel.max_size);
	printf("  baseline   %8.3f ms: plain q.centroid pass, same data (ratio %.2f)\n", tk.dot_ms,
	       tk.step_ms / tk.dot_ms);
	printf("  sgemm      %8.3f ms: its centroid and far-member products as sgemm (%.3f of the step)\n",
	       tk.sgemm_ms, tk.sgemm_ms / tk.step_ms);
	printf("  memory     %8.3f ms: one read of the centroids and far members (%.3f of the step)\n",
	       tk.read_ms, tk.read_ms / tk.step_ms);
	printf("  selection  budget %llu tokens (%g of the context): %llu-%llu tokens read, "
	       "%u-%u clusters a head\n", (unsigned long long)sel.budget, o.budget,
	       (unsigned long long)sel.tokens_min, (unsigned long long)sel.tokens_max,
	       sel.sel_min, sel.sel_max);
	return 0;
}
