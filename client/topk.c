// SPDX-License-Identifier: MIT
/*
 * Top-K over cluster scores with a bounded min-heap: O(n log k) time and
 * O(k) space, which matters at 1M tokens (65K clusters, k in the
 * thousands) where a full sort per KV head per step would dominate.
 * Ordering is total (score, then lower id first), so results are
 * deterministic and equal to a full sort's prefix.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <nelssa/sparse.h>

struct entry {
	float score;
	uint32_t id;
};

/* a ranks before b: higher score, or the same score and a lower id. */
static int before(const struct entry *a, const struct entry *b)
{
	return a->score > b->score || (a->score == b->score && a->id < b->id);
}

/* Min-heap on rank: the root is the worst of the entries kept. */
static void sift_down(struct entry *h, uint32_t n, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, w = i;
		struct entry t;

		if (l < n && before(&h[w], &h[l]))
			w = l;
		if (r < n && before(&h[w], &h[r]))
			w = r;
		if (w == i)
			return;
		t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

static int by_rank(const void *a, const void *b)
{
	return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

int nelssa_topk(const float *score, uint32_t n_clusters, uint32_t k, uint32_t *ids)
{
	struct entry *h;
	uint32_t n = 0;

	for (uint32_t c = 0; c < n_clusters; c++)
		if (isnan(score[c]))
			return -EINVAL;
	if (k > n_clusters)
		k = n_clusters;
	if (!k)
		return 0;
	h = malloc(sizeof(*h) * k);
	if (!h)
		return -ENOMEM;
	for (uint32_t c = 0; c < n_clusters; c++) {
		struct entry e = { score[c], c };

		if (e.score == -INFINITY)
			continue;
		if (n < k) {
			h[n++] = e;
			if (n == k)
				for (uint32_t i = k / 2; i-- > 0;)
					sift_down(h, k, i);
		} else if (before(&e, &h[0])) {
			h[0] = e;
			sift_down(h, k, 0);
		}
	}
	qsort(h, n, sizeof(*h), by_rank);
	for (uint32_t i = 0; i < n; i++)
		ids[i] = h[i].id;
	free(h);
	return (int)n;
}

uint32_t nelssa_topk_ratio_count(uint32_t n_clusters, double ratio)
{
	double want;

	if (!(ratio >= 0.0 && ratio <= 1.0) || !n_clusters)
		return 0;
	want = nearbyint(ratio * n_clusters);
	if (ratio > 0.0 && want < 1.0)
		want = 1.0;
	return (uint32_t)want;
}

int nelssa_topk_budget(const float *score, const uint32_t *sizes, uint32_t n_clusters,
		       uint64_t budget, uint32_t *ids)
{
	int n = nelssa_topk(score, n_clusters, n_clusters, ids);
	uint64_t used = 0;
	int i;

	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		if (sizes[ids[i]] > budget - used)
			break;
		used += sizes[ids[i]];
	}
	return i;
}
