// SPDX-License-Identifier: MIT
/*
 * nelssa-accuracy: how close the GPU node's sparse attention comes to
 * dense attention on the synthetic generator (synth.c), next to a
 * Quest-style page Top-K and the oracle token Top-K at the same token
 * budget.  Every method attends the local window exactly; they differ in
 * which middle tokens they add.  See Documentation/client.rst.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/lse.h>
#include <nelssa/sparse.h>

#include "synth.h"
#include "tool_util.h"

#define D SYNTH_D
#define G SYNTH_G
#define MAX_CTX 8
#define MAX_RATIO 8

enum method { CLUSTER, CLUSTER_EST, CLUSTER_BOUND, QUEST, ORACLE, N_METHODS };
static const char *const method_name[N_METHODS] = { "cluster", "cluster+est", "cluster-bound",
						   "page-topk", "oracle" };

/* Per (context, ratio, method): summed over trials. */
struct cell {
	double *err;		/* relative L2 error per (trial, row) */
	uint32_t n_err;
	double recall, budget;
	uint32_t hits, needles;
};

struct opts {
	uint32_t ctx[MAX_CTX], n_ctx;
	double ratio[MAX_RATIO];
	uint32_t n_ratio, trials;
	double est_ratio;
	uint64_t seed;
	struct nelssa_kmeans_cfg kcfg;
	int json;
};

static void *xcalloc(size_t n, size_t sz)
{
	return tl_calloc("nelssa-accuracy", n, sz);
}

static double median(double *x, uint32_t n)
{
	qsort(x, n, sizeof(*x), tl_cmp_double);
	return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* One method's final state: window merged with attention over @sel of @table. */
static void finish(const struct nelssa_attn_geom *g, const float *q, const void *k, const void *v,
		   uint32_t n, const struct nelssa_cluster *table, uint32_t n_tab,
		   const uint32_t *sel, uint32_t n_sel, const float *win_o, const float *win_l,
		   const float *est_o, const float *est_l, float *o)
{
	float po[G * D], pl[G], lse[G];
	const float *so[2] = { po, est_o }, *sl[2] = { pl, est_l };

	if (nelssa_attn_clusters(g, q, k, v, n, table, n_tab, sel, n_sel, po, pl)) {
		fprintf(stderr, "nelssa-accuracy: internal error in attention\n");
		exit(1);
	}
	nelssa_final_merge(o, lse, win_o, win_l, so, sl, est_o ? 2 : 1, G, D);
}

static void score_method(struct cell *c, const float *o, const float *dense, const double *mass,
			 const uint32_t *tok, uint32_t n_tok, uint32_t off, double win_mass,
			 const struct synth *s)
{
	double m = win_mass;

	for (uint32_t r = 0; r < G; r++) {
		double e = 0.0, nn = 0.0;

		for (uint32_t i = 0; i < D; i++) {
			double dv = (double)o[r * D + i] - dense[r * D + i];

			e += dv * dv;
			nn += (double)dense[r * D + i] * dense[r * D + i];
		}
		c->err[c->n_err++] = sqrt(e / nn);
	}
	for (uint32_t i = 0; i < n_tok; i++)
		m += mass[tok[i] + off];
	c->recall += m / G;
	c->budget += n_tok;
	for (uint32_t j = 0; j < SYNTH_NEEDLES; j++) {
		c->needles++;
		for (uint32_t i = 0; i < n_tok; i++)
			if (tok[i] + off == s->needle[j]) {
				c->hits++;
				break;
			}
	}
}

static void run_context(const struct opts *op, uint32_t ci, struct cell *cells)
{
	const uint32_t n = op->ctx[ci];
	const struct nelssa_window win = NELSSA_WINDOW_DEFAULT;
	const struct nelssa_kmeans_cfg kcfg = op->kcfg;
	const struct nelssa_attn_geom g = { D, G, NELSSA_KV_BF16, 1.0f / sqrtf((float)D) };
	const uint32_t off = win.sink, mid = n - win.sink - win.recent;
	const size_t row = D * sizeof(uint16_t);

	for (uint32_t tr = 0; tr < op->trials; tr++) {
		struct synth s;
		struct nelssa_cluster_index ix;
		float dense[G * D], dl[G], wo[G * D], wl[G], eo[G * D], el[G], o[G * D];
		double *mass = xcalloc(n, sizeof(double)), win_mass = 0.0;
		uint16_t *ck, *cv;
		float *score, *vsum, *lo, *hi, *bscore;
		uint32_t *rank, *sizes, *tok = xcalloc(mid, sizeof(uint32_t)), *sel;
		struct nelssa_cluster *pages, *single;
		uint32_t n_pages = (mid + 15) / 16;
		int n_rank;

		if (synth_make(&s, n, op->seed + 1000003ull * ci + tr) ||
		    nelssa_attn_dense(&g, s.q, s.k, s.v, n, dense, dl) ||
		    nelssa_token_mass(&g, s.q, s.k, n, mass) ||
		    nelssa_window_attn(&g, s.q, s.k, s.v, n, &win, wo, wl)) {
			fprintf(stderr, "nelssa-accuracy: setup failed\n");
			exit(1);
		}
		for (uint32_t t = 0; t < n; t++)
			if (t < win.sink || t + win.recent >= n)
				win_mass += mass[t];
		if (!op->json)
			fprintf(stderr, "  context %u, trial %u: clustering %u tokens...\n", n, tr + 1,
				mid);
		if (nelssa_kmeans_build(&ix, &kcfg, NELSSA_KV_BF16, (const char *)s.k + off * row,
					mid, D)) {
			fprintf(stderr, "nelssa-accuracy: k-means failed\n");
			exit(1);
		}
		ck = xcalloc(mid, row);
		cv = xcalloc(mid, row);
		nelssa_kv_reorder(&ix, row, (const char *)s.k + off * row, ck);
		nelssa_kv_reorder(&ix, row, (const char *)s.v + off * row, cv);
		sizes = xcalloc(ix.n_clusters, sizeof(uint32_t));
		for (uint32_t c = 0; c < ix.n_clusters; c++)
			sizes[c] = ix.table[c].count;
		score = xcalloc(ix.n_clusters, sizeof(float));
		rank = xcalloc(ix.n_clusters, sizeof(uint32_t));
		vsum = xcalloc((size_t)ix.n_clusters * D, sizeof(float));
		nelssa_cluster_value_sums(&ix, NELSSA_KV_BF16, (const char *)s.v + off * row, vsum);
		lo = xcalloc((size_t)ix.n_clusters * D, sizeof(float));
		hi = xcalloc((size_t)ix.n_clusters * D, sizeof(float));
		bscore = xcalloc(ix.n_clusters, sizeof(float));
		nelssa_cluster_bounds(&ix, NELSSA_KV_BF16, (const char *)s.k + off * row, lo, hi);
		nelssa_bound_scores(s.q, G, D, lo, hi, sizes, ix.n_clusters, bscore);
		if (nelssa_centroid_scores(s.q, G, D, g.scale, ix.centroids, sizes, ix.n_clusters,
					   score) ||
		    (n_rank = nelssa_topk(score, ix.n_clusters, ix.n_clusters, rank)) < 0) {
			fprintf(stderr, "nelssa-accuracy: Top-K failed\n");
			exit(1);
		}
		pages = xcalloc(n_pages, sizeof(*pages));
		for (uint32_t p = 0; p < n_pages; p++)
			pages[p] = (struct nelssa_cluster){ p * 16, p * 16 + 16 <= mid ? 16 : mid - p * 16 };
		single = xcalloc(mid, sizeof(*single));
		for (uint32_t t = 0; t < mid; t++)
			single[t] = (struct nelssa_cluster){ t, 1 };
		sel = xcalloc(mid, sizeof(uint32_t));
		for (uint32_t ri = 0; ri < op->n_ratio; ri++) {
			struct cell *cl = &cells[(ci * MAX_RATIO + ri) * N_METHODS];
			uint32_t k = nelssa_topk_ratio_count(ix.n_clusters, op->ratio[ri]), nt = 0, budget;
			uint32_t est = nelssa_topk_ratio_count(ix.n_clusters, op->est_ratio);
			int ns;

			if (k > (uint32_t)n_rank)
				k = (uint32_t)n_rank;
			if (est > (uint32_t)n_rank - k)
				est = (uint32_t)n_rank - k;
			for (uint32_t i = 0; i < k; i++)
				for (uint32_t j = 0; j < ix.table[rank[i]].count; j++)
					tok[nt++] = ix.perm[ix.table[rank[i]].first + j];
			finish(&g, s.q, ck, cv, mid, ix.table, ix.n_clusters, rank, k, wo, wl, NULL,
			       NULL, o);
			score_method(&cl[CLUSTER], o, dense, mass, tok, nt, off, win_mass, &s);
			budget = nt;
			nelssa_estimate_attn(&g, s.q, ix.centroids, vsum, sizes, rank + k, est, eo, el);
			finish(&g, s.q, ck, cv, mid, ix.table, ix.n_clusters, rank, k, wo, wl, eo, el,
			       o);
			score_method(&cl[CLUSTER_EST], o, dense, mass, tok, nt, off, win_mass, &s);
			/* Bound-scored clusters, within the same token budget. */
			ns = nelssa_topk_budget(bscore, sizes, ix.n_clusters, budget, sel);
			if (ns < 0) {
				fprintf(stderr, "nelssa-accuracy: bound Top-K failed\n");
				exit(1);
			}
			finish(&g, s.q, ck, cv, mid, ix.table, ix.n_clusters, sel, (uint32_t)ns, wo, wl,
			       NULL, NULL, o);
			nt = 0;
			for (int i = 0; i < ns; i++)
				for (uint32_t j = 0; j < ix.table[sel[i]].count; j++)
					tok[nt++] = ix.perm[ix.table[sel[i]].first + j];
			score_method(&cl[CLUSTER_BOUND], o, dense, mass, tok, nt, off, win_mass, &s);
			/* Same token budget for the baselines. */
			ns = nelssa_quest_pages(&g, s.q, (const char *)s.k + off * row, mid, 16,
						budget / 16, sel);
			finish(&g, s.q, (const char *)s.k + off * row, (const char *)s.v + off * row,
			       mid, pages, n_pages, sel, (uint32_t)ns, wo, wl, NULL, NULL, o);
			nt = 0;
			for (int i = 0; i < ns; i++)
				for (uint32_t j = 0; j < pages[sel[i]].count; j++)
					tok[nt++] = pages[sel[i]].first + j;
			score_method(&cl[QUEST], o, dense, mass, tok, nt, off, win_mass, &s);
			ns = nelssa_oracle_tokens(&g, s.q, (const char *)s.k + off * row, mid, budget,
						  sel);
			finish(&g, s.q, (const char *)s.k + off * row, (const char *)s.v + off * row,
			       mid, single, mid, sel, (uint32_t)ns, wo, wl, NULL, NULL, o);
			score_method(&cl[ORACLE], o, dense, mass, sel, (uint32_t)ns, off, win_mass, &s);
		}
		nelssa_kmeans_free(&ix);
		synth_free(&s);
		free(mass);
		free(ck);
		free(cv);
		free(score);
		free(rank);
		free(vsum);
		free(lo);
		free(hi);
		free(bscore);
		free(sizes);
		free(tok);
		free(sel);
		free(pages);
		free(single);
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nelssa-accuracy [--contexts N,N..] [--ratios P,P..] [--trials N]\n"
		"                       [--estimate R] [--seed S] [--outlier-cos C]\n"
		"                       [--outliers N] [--json]\n"
		"  --contexts   context lengths in tokens (default 32768,131072)\n"
		"  --ratios     selection ratios in percent of clusters (default 1,2,4,8)\n"
		"  --trials     generated decode steps per context (default 4)\n"
		"  --estimate   estimation-zone ratio for cluster+est (default 0.2)\n"
		"  --seed       generator seed (default 1)\n"
		"  --outlier-cos  k-means: keys below this cosine with their centroid\n"
		"               become clusters of their own (default 0.5)\n"
		"  --outliers   k-means: at most this many such keys per 1000 (default 16)\n"
		"  --json       one JSON object instead of the table\n"
		"Every method attends 4 sink + 64 recent tokens exactly; page-topk and oracle\n"
		"get the token budget the cluster method selected.  Errors are relative L2 of\n"
		"the output against dense attention (median over query rows and trials).\n");
}

static int parse_list(const char *arg, double *out, uint32_t max, uint32_t *n, double lo,
		      double hi, const char *what)
{
	char *dup = strdup(arg), *save = NULL, *tokp, *end;

	*n = 0;
	for (tokp = strtok_r(dup, ",", &save); tokp; tokp = strtok_r(NULL, ",", &save)) {
		double v = strtod(tokp, &end);

		if (*end || !(v >= lo && v <= hi) || *n == max) {
			fprintf(stderr, "nelssa-accuracy: %s %s: need up to %u values in [%g, %g]\n",
				what, arg, max, lo, hi);
			free(dup);
			return -1;
		}
		out[(*n)++] = v;
	}
	free(dup);
	if (!*n) {
		fprintf(stderr, "nelssa-accuracy: %s: empty list\n", what);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "contexts", required_argument, NULL, 'c' }, { "ratios", required_argument, NULL, 'r' },
		{ "trials", required_argument, NULL, 't' }, { "estimate", required_argument, NULL, 'e' },
		{ "seed", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' },
		{ "outlier-cos", required_argument, NULL, 'o' },
		{ "outliers", required_argument, NULL, 'O' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	struct opts op = { .ctx = { 32768, 131072 }, .n_ctx = 2, .ratio = { 0.01, 0.02, 0.04, 0.08 },
			   .n_ratio = 4, .trials = 4, .est_ratio = 0.2, .seed = 1,
			   .kcfg = NELSSA_KMEANS_DEFAULT };
	double tmp[MAX_CTX], v;
	struct cell *cells;
	char *end;
	int c, fail = 0;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (parse_list(optarg, tmp, MAX_CTX, &op.n_ctx, 1024, 1 << 20, "--contexts"))
				return 2;
			for (uint32_t i = 0; i < op.n_ctx; i++)
				op.ctx[i] = (uint32_t)tmp[i];
			break;
		case 'r':
			if (parse_list(optarg, op.ratio, MAX_RATIO, &op.n_ratio, 0.01, 100, "--ratios"))
				return 2;
			for (uint32_t i = 0; i < op.n_ratio; i++)
				op.ratio[i] /= 100.0;
			break;
		case 't':
			v = strtod(optarg, &end);
			if (*end || !(v >= 1 && v <= 100) || v != floor(v)) {
				fprintf(stderr, "nelssa-accuracy: --trials %s: need 1..100\n", optarg);
				return 2;
			}
			op.trials = (uint32_t)v;
			break;
		case 'e':
			op.est_ratio = strtod(optarg, &end);
			if (*end || !(op.est_ratio >= 0 && op.est_ratio <= 1)) {
				fprintf(stderr, "nelssa-accuracy: --estimate %s: need [0, 1]\n", optarg);
				return 2;
			}
			break;
		case 's':
			op.seed = strtoull(optarg, &end, 0);
			if (*end || !*optarg) {
				fprintf(stderr, "nelssa-accuracy: --seed %s: need an integer\n", optarg);
				return 2;
			}
			break;
		case 'o':
			v = strtod(optarg, &end);
			if (*end || !*optarg || !(v >= -1 && v <= 1)) {
				fprintf(stderr, "nelssa-accuracy: --outlier-cos %s: need [-1, 1]\n",
					optarg);
				return 2;
			}
			op.kcfg.outlier_cos = (float)v;
			break;
		case 'O':
			v = strtod(optarg, &end);
			if (*end || !*optarg || !(v >= 0 && v <= 1000) || v != floor(v)) {
				fprintf(stderr, "nelssa-accuracy: --outliers %s: need 0..1000\n", optarg);
				return 2;
			}
			op.kcfg.outlier_per_mille = (uint32_t)v;
			break;
		case 'j': op.json = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "nelssa-accuracy: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	cells = xcalloc((size_t)MAX_CTX * MAX_RATIO * N_METHODS, sizeof(*cells));
	for (size_t i = 0; i < (size_t)MAX_CTX * MAX_RATIO * N_METHODS; i++)
		cells[i].err = xcalloc((size_t)op.trials * G, sizeof(double));
	for (uint32_t ci = 0; ci < op.n_ctx; ci++)
		run_context(&op, ci, cells);
	if (op.json)
		printf("{\"seed\":%llu,\"trials\":%u,\"rows\":[", (unsigned long long)op.seed,
		       op.trials);
	else
		printf("%-8s %5s %-12s %8s %8s %9s %8s %7s\n", "context", "ratio", "method", "budget",
		       "recall", "med.err", "/oracle", "needles");
	for (uint32_t ci = 0; ci < op.n_ctx; ci++)
		for (uint32_t ri = 0; ri < op.n_ratio; ri++) {
			struct cell *cl = &cells[(ci * MAX_RATIO + ri) * N_METHODS];
			double med[N_METHODS];

			for (int m = 0; m < N_METHODS; m++)
				med[m] = median(cl[m].err, cl[m].n_err);
			for (int m = 0; m < N_METHODS; m++) {
				double rec = cl[m].recall / op.trials, bud = cl[m].budget / op.trials;
				double hit = (double)cl[m].hits / cl[m].needles;
				double rel = med[ORACLE] > 0 ? med[m] / med[ORACLE] : INFINITY;

				if (op.json)
					printf("%s{\"context\":%u,\"ratio\":%g,\"method\":\"%s\","
					       "\"budget\":%.0f,\"recall\":%.6f,\"median_err\":%.6g,"
					       "\"err_over_oracle\":%.4g,\"needle_hit_rate\":%.4f}",
					       ci + ri + m ? "," : "", op.ctx[ci], op.ratio[ri] * 100,
					       method_name[m], bud, rec, med[m], rel, hit);
				else
					printf("%-8u %4g%% %-12s %8.0f %8.4f %8.3f%% %8.2f %6.0f%%\n",
					       op.ctx[ci], op.ratio[ri] * 100, method_name[m], bud, rec,
					       100 * med[m], rel, 100 * hit);
			}
			/* Issue 6's targets at 4 % + window. */
			if (fabs(op.ratio[ri] - 0.04) < 1e-9 &&
			    ((double)cl[CLUSTER].hits < cl[CLUSTER].needles || med[CLUSTER] >= 0.02 ||
			     med[CLUSTER] > med[QUEST]))
				fail = 1;
		}
	if (op.json)
		printf("],\"targets_met\":%s}\n", fail ? "false" : "true");
	else
		printf("targets at 4%% (needles 100%%, median error < 2%%, cluster <= page-topk): %s\n",
		       fail ? "NOT MET" : "met");
	for (size_t i = 0; i < (size_t)MAX_CTX * MAX_RATIO * N_METHODS; i++)
		free(cells[i].err);
	free(cells);
	return 0;
}
