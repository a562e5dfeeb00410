// SPDX-License-Identifier: MIT
/*
 * Segmented k-means over the keys of one KV head (RetroInfer's scheme, see
 * Documentation/client.rst).  Mean-centring removes the direction all
 * pre-softmax keys share, which would otherwise dominate inner products;
 * segments bound the cost (each is O(len * K * d) per iteration) and keep
 * clusters local in token order; spherical updates make the assignment an
 * angular one, matching how the centroids are later scored against
 * queries.  The stored centroid is the plain mean key of the members, the
 * vector a query's q.c should approximate.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/sparse.h>

#include "kmeans_internal.h"

static int cfg_ok(const struct nelssa_kmeans_cfg *cfg)
{
	return cfg->segment && cfg->cluster_tokens && cfg->iters;
}

int nelssa_km_check(const struct nelssa_kmeans_cfg *cfg, enum nelssa_kv_dtype dtype,
		    uint32_t head_dim)
{
	if (!cfg_ok(cfg) || !head_dim || head_dim > NELSSA_ATTN_MAX_HEAD_DIM ||
	    (dtype != NELSSA_KV_BF16 && dtype != NELSSA_KV_FP16))
		return -EINVAL;
	return 0;
}

uint32_t nelssa_km_centroids(const struct nelssa_kmeans_cfg *cfg, uint32_t len)
{
	uint32_t k = (uint32_t)nearbyint((double)len / cfg->cluster_tokens);

	if (k < 1)
		k = 1;
	return k > len ? len : k;
}

uint32_t nelssa_km_segments(const struct nelssa_kmeans_cfg *cfg, uint32_t n_tokens)
{
	uint32_t n_seg = (uint32_t)nearbyint((double)n_tokens / cfg->segment);

	return n_seg < 1 ? 1 : n_seg;
}

static void normalise(float *c, uint32_t d)
{
	double n = 0.0;

	for (uint32_t i = 0; i < d; i++)
		n += (double)c[i] * c[i];
	if (n > 0.0)
		for (uint32_t i = 0; i < d; i++)
			c[i] = (float)(c[i] / sqrt(n));
}

int nelssa_km_reserve(struct nelssa_cluster_index *ix, uint32_t tokens, uint32_t clusters)
{
	if (tokens > ix->cap_tokens) {
		uint32_t cap = tokens > 2 * ix->cap_tokens ? tokens : 2 * ix->cap_tokens;
		uint32_t *p = realloc(ix->perm, sizeof(*p) * cap);

		if (!p)
			return -ENOMEM;
		ix->perm = p;
		ix->cap_tokens = cap;
	}
	if (clusters > ix->cap_clusters) {
		uint32_t cap = clusters > 2 * ix->cap_clusters ? clusters : 2 * ix->cap_clusters;
		struct nelssa_cluster *t = realloc(ix->table, sizeof(*t) * cap);
		float *c;

		if (!t)
			return -ENOMEM;
		ix->table = t;
		c = realloc(ix->centroids, sizeof(*c) * cap * ix->head_dim);
		if (!c)
			return -ENOMEM;
		ix->centroids = c;
		ix->cap_clusters = cap;
	}
	return 0;
}

uint32_t nelssa_km_outlier_cap(const struct nelssa_kmeans_cfg *cfg, uint32_t len)
{
	return (uint32_t)((uint64_t)len * cfg->outlier_per_mille / 1000);
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

void nelssa_km_residual_ratio(const uint32_t *asg, float *r, uint32_t len, uint32_t k)
{
	uint32_t *start = calloc((size_t)k + 1, sizeof(*start)), *fill;
	float *by, *med;

	fill = malloc(sizeof(*fill) * (k ? k : 1));
	by = malloc(sizeof(*by) * (len ? len : 1));
	med = malloc(sizeof(*med) * (k ? k : 1));
	if (!start || !fill || !by || !med) {
		/* No room for the statistics: no token looks unusual. */
		for (uint32_t t = 0; t < len; t++)
			r[t] = 1.0f;
		goto out;
	}
	/* Counting sort of the residuals by cluster, then each cluster's median. */
	for (uint32_t t = 0; t < len; t++)
		start[asg[t] + 1]++;
	for (uint32_t j = 0; j < k; j++)
		start[j + 1] += start[j];
	memcpy(fill, start, sizeof(*fill) * k);
	for (uint32_t t = 0; t < len; t++)
		by[fill[asg[t]]++] = r[t];
	for (uint32_t j = 0; j < k; j++) {
		uint32_t n = start[j + 1] - start[j];

		med[j] = 0.0f;
		if (!n)
			continue;
		qsort(by + start[j], n, sizeof(*by), cmp_float);
		med[j] = n % 2 ? by[start[j] + n / 2] :
				 0.5f * (by[start[j] + n / 2 - 1] + by[start[j] + n / 2]);
	}
	for (uint32_t t = 0; t < len; t++)
		r[t] = med[asg[t]] > 0.0f ? r[t] / med[asg[t]] : 1.0f;
out:
	free(start);
	free(fill);
	free(by);
	free(med);
}

uint32_t nelssa_km_split_outliers(const struct nelssa_kmeans_cfg *cfg, uint32_t *asg,
				  const float *cos, const float *rho, uint32_t len, uint32_t k)
{
	const uint32_t cap = nelssa_km_outlier_cap(cfg, len);
	const float ratio = cfg->outlier_ratio > 0.0f ? cfg->outlier_ratio : INFINITY;
	float cut = -INFINITY;	/* candidates need rho above it */
	uint32_t m = 0;
	float *by;

	if (!cap)
		return 0;
	/*
	 * A key is a candidate when it points away from its centroid (cosine
	 * below outlier_cos) or lies unusually far from its cluster's mean
	 * (residual over outlier_ratio times the cluster's median residual).
	 * Candidates rank by that residual ratio, the most unusual first.
	 */
#define CAND(t) ((cos[t] < cfg->outlier_cos || rho[t] > ratio) && rho[t] > cut)
	for (uint32_t t = 0; t < len; t++)
		m += CAND(t);
	/*
	 * More candidates than room: the cut is the smallest ratio present
	 * that leaves at most cap above it -- the (m - cap)-th smallest -- so
	 * the choice depends on the values only (ties at the cut all stay or
	 * all go).  Without memory for the sort, no key splits.
	 */
	if (m > cap) {
		by = malloc(sizeof(*by) * m);
		if (!by)
			return 0;
		m = 0;
		for (uint32_t t = 0; t < len; t++)
			if (CAND(t))
				by[m++] = rho[t];
		qsort(by, m, sizeof(*by), cmp_float);
		cut = by[m - 1 - cap];
		free(by);
	}
	m = 0;
	for (uint32_t t = 0; t < len; t++)
		if (CAND(t))
			asg[t] = k + m++;
#undef CAND
	return m;
}

void nelssa_km_emit(struct nelssa_cluster_index *ix, const uint32_t *asg, uint32_t *cnt,
		    const double *acc, uint32_t k, uint32_t base, uint32_t len, uint32_t tok_at,
		    uint32_t cl_at, uint32_t *added_clusters)
{
	const uint32_t d = ix->head_dim;

	*added_clusters = 0;
	for (uint32_t j = 0; j < k; j++) {
		struct nelssa_cluster *e;
		float *cen;

		if (!cnt[j])
			continue;
		e = &ix->table[cl_at + *added_clusters];
		cen = ix->centroids + (size_t)(cl_at + *added_clusters) * d;
		e->first = tok_at;
		e->count = cnt[j];
		for (uint32_t i = 0; i < d; i++)
			cen[i] = (float)(acc[(size_t)j * d + i] / cnt[j]);
		cnt[j] = tok_at;	/* from here on: where its next member goes */
		tok_at += e->count;
		(*added_clusters)++;
	}
	/* Members in token order: one counting-sort pass, not one per cluster. */
	for (uint32_t t = 0; t < len; t++)
		ix->perm[cnt[asg[t]]++] = base + t;
}

void nelssa_km_channel_weights(const double *var, uint32_t d, float *weight)
{
	double sd[NELSSA_ATTN_MAX_HEAD_DIM], sorted[NELSSA_ATTN_MAX_HEAD_DIM], cap;

	for (uint32_t i = 0; i < d; i++)
		sd[i] = sorted[i] = sqrt(var[i] > 0.0 ? var[i] : 0.0);
	/* Insertion sort: d <= 256. */
	for (uint32_t i = 1; i < d; i++)
		for (uint32_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
			double t = sorted[j];

			sorted[j] = sorted[j - 1];
			sorted[j - 1] = t;
		}
	cap = NELSSA_KM_MASSIVE * (d % 2 ? sorted[d / 2] : 0.5 * (sorted[d / 2 - 1] + sorted[d / 2]));
	for (uint32_t i = 0; i < d; i++)
		weight[i] = cap > 0.0 && sd[i] > cap ? (float)(cap / sd[i]) : 1.0f;
}

/*
 * @acc[k][d] = each cluster's float64 sum of its members' rows in token
 * order, @cnt[k] their counts; the rows are @x's, or with @x NULL the keys
 * @src of type @dtype as given (widened a row at a time: exact, and no
 * copy of the segment kept for it).  Cloned for the wider vector ISAs:
 * widening and adding d floats a key is, beside the GEMM, most of a round.
 */
NELSSA_KM_CLONES
static void accumulate(double *acc, uint32_t *cnt, const float *x, const void *src,
		       enum nelssa_kv_dtype dtype, const uint32_t *asg, uint32_t len, uint32_t k,
		       uint32_t d)
{
	float row[NELSSA_ATTN_MAX_HEAD_DIM];

	memset(acc, 0, sizeof(*acc) * k * d);
	memset(cnt, 0, sizeof(*cnt) * k);
	for (uint32_t t = 0; t < len; t++) {
		double *a = acc + (size_t)asg[t] * d;
		const float *r = x + (size_t)t * d;

		if (!x) {
			nelssa_kv_widen(row, (const uint16_t *)src + (size_t)t * d, d, dtype);
			r = row;
		}
		cnt[asg[t]]++;
		for (uint32_t i = 0; i < d; i++)
			a[i] += r[i];
	}
}

/*
 * One segment's working memory, sized for a prefill's longest segment and
 * kept across its segments, so that each is not allocated and faulted in
 * anew (a 128K-token prefill has 16).
 */
struct km_ws {
	float *x, *c, *cos, *rho, *xn, *scratch;
	double *acc;
	uint32_t *asg, *cnt;
};

static void ws_free(struct km_ws *w)
{
	free(w->x);
	free(w->c);
	free(w->cos);
	free(w->rho);
	free(w->xn);
	free(w->scratch);
	free(w->acc);
	free(w->asg);
	free(w->cnt);
	memset(w, 0, sizeof(*w));
}

/* Room for segments of up to @len keys of @d elements; 0 or -ENOMEM. */
static int ws_alloc(struct km_ws *w, const struct nelssa_kmeans_cfg *cfg, uint32_t len, uint32_t d)
{
	const size_t n = len ? len : 1, k = nelssa_km_centroids(cfg, (uint32_t)n);
	const size_t kmax = k + nelssa_km_outlier_cap(cfg, (uint32_t)n);

	w->x = malloc(sizeof(*w->x) * n * d);
	w->c = malloc(sizeof(*w->c) * k * d);
	w->cos = malloc(sizeof(*w->cos) * n);
	w->rho = malloc(sizeof(*w->rho) * n);
	w->xn = malloc(sizeof(*w->xn) * n);
	w->scratch = malloc(sizeof(*w->scratch) * NELSSA_KM_ROWS * k);
	w->acc = malloc(sizeof(*w->acc) * kmax * d);
	w->asg = malloc(sizeof(*w->asg) * n);
	w->cnt = malloc(sizeof(*w->cnt) * kmax);
	if (w->x && w->c && w->cos && w->rho && w->xn && w->scratch && w->acc &&
	    w->asg && w->cnt)
		return 0;
	ws_free(w);
	return -ENOMEM;
}

/*
 * Cluster the @len prepared keys in @w->x (tokens @base..@base+len-1:
 * centred and channel-weighted; @raw the same keys as given, of type
 * @dtype) and append the non-empty clusters to @ix, their centroids the
 * float64 means of the raw keys, past its current counts, which the
 * caller advances only once everything succeeded.  *@added_clusters
 * receives how many were appended.
 */
static int cluster_segment(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
			   struct km_ws *w, const void *raw, enum nelssa_kv_dtype dtype, uint32_t base,
			   uint32_t len, uint32_t tok_at, uint32_t cl_at, uint32_t *added_clusters,
			   nelssa_km_assign_fn *assign)
{
	const uint32_t d = ix->head_dim;
	const uint32_t k = nelssa_km_centroids(cfg, len), kmax = k + nelssa_km_outlier_cap(cfg, len);
	const float *x = w->x;
	float *c = w->c, *cos = w->cos, *rho = w->rho, *xn = w->xn, *scratch = w->scratch;
	uint32_t *asg = w->asg, *cnt = w->cnt, m = 0;
	double *acc = w->acc;
	int ret;

	ret = nelssa_km_reserve(ix, tok_at + len, cl_at + kmax);
	if (ret)
		return ret;
	/* Deterministic strided initialisation: token i*len/k + len/(2k). */
	for (uint32_t j = 0; j < k; j++) {
		uint32_t t = (uint32_t)(((uint64_t)2 * j * len + len) / (2 * (uint64_t)k));

		memcpy(c + (size_t)j * d, x + (size_t)t * d, sizeof(*c) * d);
		normalise(c + (size_t)j * d, d);
	}
	for (uint32_t t = 0; t < len; t++)
		xn[t] = sqrtf(nelssa_dot_f32(x + (size_t)t * d, x + (size_t)t * d, d));
	for (uint32_t it = 0; it < cfg->iters; it++) {
		const int last = it + 1 == cfg->iters;

		/* Only the last round's cosines are used (for the outliers). */
		assign(x, xn, len, c, k, d, asg, last ? cos : NULL, scratch);
		for (uint32_t t = 0; t < len && last; t++)
			cos[t] = xn[t] > 0.0f ? cos[t] / xn[t] : 1.0f;
		accumulate(acc, cnt, x, NULL, dtype, asg, len, k, d);
		if (last)
			break;		/* the last round only assigns */
		for (uint32_t j = 0; j < k; j++) {
			if (!cnt[j])
				continue;	/* empty: keep the centroid */
			for (uint32_t i = 0; i < d; i++)
				c[(size_t)j * d + i] = (float)acc[(size_t)j * d + i];
			normalise(c + (size_t)j * d, d);
		}
	}
	/*
	 * Outliers: each key's distance from its cluster's mean, over the
	 * cluster's median distance; then the split, and the final sums.
	 */
	for (uint32_t t = 0; t < len; t++) {
		const double *mu = acc + (size_t)asg[t] * d;
		double r = 0.0;

		for (uint32_t i = 0; i < d; i++) {
			double e = x[(size_t)t * d + i] - mu[i] / cnt[asg[t]];

			r += e * e;
		}
		rho[t] = (float)sqrt(r);
	}
	nelssa_km_residual_ratio(asg, rho, len, k);
	m = nelssa_km_split_outliers(cfg, asg, cos, rho, len, k);
	/* Centroids from the raw keys: exact means, whatever the preparation. */
	accumulate(acc, cnt, NULL, raw, dtype, asg, len, k + m, d);
	nelssa_km_emit(ix, asg, cnt, acc, k + m, base, len, tok_at, cl_at, added_clusters);
	return 0;
}

/*
 * Cluster tokens [from, from + len) of @k as one segment: centred on the
 * segment's own mean (a key mean that drifts along the context would
 * otherwise leave a position-dependent offset in every key that decides
 * the assignment), with massive channels damped for the assignment only.
 */
static int run_segment(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
		       enum nelssa_kv_dtype dtype, const void *k, uint32_t from, uint32_t len,
		       uint32_t base, uint32_t tok_at, uint32_t cl_at, uint32_t *added,
		       nelssa_km_assign_fn *assign, struct km_ws *w)
{
	const uint32_t d = ix->head_dim;
	const uint16_t *raw = (const uint16_t *)k + (size_t)from * d;
	float *x = w->x;
	float mean[NELSSA_ATTN_MAX_HEAD_DIM], weight[NELSSA_ATTN_MAX_HEAD_DIM];
	double sum[NELSSA_ATTN_MAX_HEAD_DIM] = { 0 }, var[NELSSA_ATTN_MAX_HEAD_DIM] = { 0 };

	nelssa_kv_widen(x, raw, (size_t)len * d, dtype);
	for (size_t t = 0; t < len; t++)
		for (uint32_t i = 0; i < d; i++)
			sum[i] += x[t * d + i];
	for (uint32_t i = 0; i < d; i++)
		mean[i] = (float)(sum[i] / len);
	for (size_t t = 0; t < len; t++)
		for (uint32_t i = 0; i < d; i++) {
			x[t * d + i] -= mean[i];
			var[i] += (double)x[t * d + i] * x[t * d + i];
		}
	for (uint32_t i = 0; i < d; i++)
		var[i] /= len;
	nelssa_km_channel_weights(var, d, weight);
	for (size_t t = 0; t < len; t++)
		for (uint32_t i = 0; i < d; i++)
			x[t * d + i] *= weight[i];
	return cluster_segment(ix, cfg, w, raw, dtype, base, len, tok_at, cl_at, added, assign);
}

int nelssa_km_build(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
		    enum nelssa_kv_dtype dtype, const void *k, uint32_t n_tokens, uint32_t head_dim,
		    nelssa_km_assign_fn *assign)
{
	struct km_ws w = { 0 };
	uint32_t n_seg, cl = 0;
	float *row;
	double *sum;
	int ret = 0;

	if (nelssa_km_check(cfg, dtype, head_dim))
		return -EINVAL;
	memset(ix, 0, sizeof(*ix));
	ix->head_dim = head_dim;
	ix->key_mean = calloc(head_dim, sizeof(*ix->key_mean));
	sum = calloc(head_dim, sizeof(*sum));
	row = malloc(sizeof(*row) * head_dim);
	if (!ix->key_mean || !sum || !row) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t t = 0; t < n_tokens; t++) {
		nelssa_kv_widen(row, (const uint16_t *)k + (size_t)t * head_dim, head_dim, dtype);
		for (uint32_t i = 0; i < head_dim; i++)
			sum[i] += row[i];
	}
	for (uint32_t i = 0; i < head_dim && n_tokens; i++)
		ix->key_mean[i] = (float)(sum[i] / n_tokens);
	n_seg = nelssa_km_segments(cfg, n_tokens);
	/* The longest segment: ceil(n_tokens / n_seg) keys. */
	if (n_tokens)
		ret = ws_alloc(&w, cfg, (uint32_t)(((uint64_t)n_tokens + n_seg - 1) / n_seg),
			       head_dim);
	for (uint32_t s = 0; s < n_seg && n_tokens && !ret; s++) {
		uint32_t a = (uint32_t)((uint64_t)n_tokens * s / n_seg);
		uint32_t b = (uint32_t)((uint64_t)n_tokens * (s + 1) / n_seg), added = 0;

		ret = run_segment(ix, cfg, dtype, k, a, b - a, a, a, cl, &added, assign, &w);
		cl += added;
	}
	ws_free(&w);
	ix->n_tokens = n_tokens;
	ix->n_clusters = cl;
out:
	free(sum);
	free(row);
	if (ret)
		nelssa_kmeans_free(ix);
	return ret;
}

int nelssa_kmeans_build(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
			enum nelssa_kv_dtype dtype, const void *k, uint32_t n_tokens,
			uint32_t head_dim)
{
	return nelssa_km_build(ix, cfg, dtype, k, n_tokens, head_dim, nelssa_km_assign);
}

int nelssa_km_append(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
		     enum nelssa_kv_dtype dtype, const void *k, uint32_t n_new,
		     nelssa_km_assign_fn *assign)
{
	struct km_ws w = { 0 };
	uint32_t added = 0;
	int ret;

	if (!cfg_ok(cfg) || !ix->key_mean || (dtype != NELSSA_KV_BF16 && dtype != NELSSA_KV_FP16) ||
	    n_new > UINT32_MAX - ix->n_tokens)
		return -EINVAL;
	if (!n_new)
		return 0;
	ret = ws_alloc(&w, cfg, n_new, ix->head_dim);
	if (ret)
		return ret;
	ret = run_segment(ix, cfg, dtype, k, 0, n_new, ix->n_tokens, ix->n_tokens,
			  ix->n_clusters, &added, assign, &w);
	ws_free(&w);
	if (ret)
		return ret;
	ix->n_tokens += n_new;
	ix->n_clusters += added;
	return 0;
}

int nelssa_kmeans_append(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
			 enum nelssa_kv_dtype dtype, const void *k, uint32_t n_new)
{
	return nelssa_km_append(ix, cfg, dtype, k, n_new, nelssa_km_assign);
}

void nelssa_kmeans_free(struct nelssa_cluster_index *ix)
{
	free(ix->perm);
	free(ix->table);
	free(ix->centroids);
	free(ix->key_mean);
	memset(ix, 0, sizeof(*ix));
}

void nelssa_kv_reorder(const struct nelssa_cluster_index *ix, size_t row_bytes, const void *src,
		       void *dst)
{
	for (uint32_t i = 0; i < ix->n_tokens; i++)
		memcpy((char *)dst + i * row_bytes, (const char *)src + ix->perm[i] * row_bytes,
		       row_bytes);
}
