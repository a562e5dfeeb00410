// SPDX-License-Identifier: MIT
/*
 * Top-K over cluster scores.  A small k takes a bounded min-heap: O(n log
 * k) time and O(k) space.  A k that is a large part of n -- the budget
 * fill ranks every cluster, every KV head, every step -- takes a radix
 * sort instead: linear, where a comparison sort through a comparator
 * callback was a third of the Top-K step.  Ordering is total (score, then
 * lower id first), so results are deterministic, the same on both paths
 * and equal to a full sort's prefix.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/sparse.h>

#include "scores_internal.h"

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

/*
 * A key whose ascending unsigned order is the descending order of the
 * scores: the IEEE bit pattern with negatives' bits flipped and
 * positives' sign bit set is monotonic in the value, and its complement
 * reverses that.  -0 is first made +0, as the two compare equal and the
 * tie must go by id.
 */
static uint32_t rank_key(float score)
{
	float s = score + 0.0f;
	uint32_t u;

	memcpy(&u, &s, sizeof(u));
	u = (u & 0x80000000u) ? ~u : u | 0x80000000u;
	return ~u;
}

struct keyed {
	uint32_t key, id;
};

/*
 * Every cluster above -inf, best first, into @ids: a least-significant-
 * digit radix sort on the keys, one byte a pass.  Each pass is stable and
 * the clusters go in in id order, so equal scores stay in id order, the
 * tie rule.  Passes whose byte is the same in every key are skipped.
 */
static int rank_all(const float *score, uint32_t n_clusters, uint32_t k, uint32_t *ids)
{
	struct keyed *a = malloc(sizeof(*a) * n_clusters), *b = malloc(sizeof(*b) * n_clusters);
	uint32_t count[4][256] = { { 0 } }, n = 0;

	if (!a || !b) {
		free(a);
		free(b);
		return -ENOMEM;
	}
	for (uint32_t c = 0; c < n_clusters; c++) {
		if (score[c] == -INFINITY)
			continue;
		a[n].key = rank_key(score[c]);
		a[n].id = c;
		for (int p = 0; p < 4; p++)
			count[p][(a[n].key >> (8 * p)) & 0xff]++;
		n++;
	}
	for (int p = 0; p < 4; p++) {
		uint32_t at = 0, *cnt = count[p];
		struct keyed *t;

		if (!n || cnt[(a[0].key >> (8 * p)) & 0xff] == n)
			continue;
		for (int v = 0; v < 256; v++) {
			uint32_t m = cnt[v];

			cnt[v] = at;
			at += m;
		}
		for (uint32_t i = 0; i < n; i++)
			b[cnt[(a[i].key >> (8 * p)) & 0xff]++] = a[i];
		t = a;
		a = b;
		b = t;
	}
	if (n > k)
		n = k;
	for (uint32_t i = 0; i < n; i++)
		ids[i] = a[i].id;
	free(a);
	free(b);
	return (int)n;
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
	/* The heap's n log k passes the radix sort's four linear ones near k = n / 16. */
	if ((uint64_t)k * 16 >= n_clusters)
		return rank_all(score, n_clusters, k, ids);
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

/*
 * Take clusters in rank order @ids[0..n_rank) while the budget lasts,
 * skipping any that would overflow it or that @taken already marks, and
 * mark what is taken.  Returns how many ids were appended to @out.
 */
static uint32_t fill_from(const uint32_t *ids, uint32_t n_rank, const uint32_t *sizes,
			  uint64_t budget, uint64_t *used, unsigned char *taken, uint32_t *out)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < n_rank && *used < budget; i++) {
		uint32_t c = ids[i];

		if (taken[c] || !sizes[c] || sizes[c] > budget - *used)
			continue;
		taken[c] = 1;
		*used += sizes[c];
		out[n++] = c;
	}
	return n;
}

int nelssa_topk_fill(const float *score, const uint32_t *sizes, uint32_t n_clusters,
		     uint64_t budget, uint32_t *ids, uint64_t *tokens)
{
	const float *s[1] = { score };
	const double share[1] = { 1.0 };

	return nelssa_select_hybrid(s, share, 1, sizes, n_clusters, budget, ids, tokens);
}

int nelssa_select_hybrid(const float *const *score, const double *share, uint32_t n_lists,
			 const uint32_t *sizes, uint32_t n_clusters, uint64_t budget,
			 uint32_t *ids, uint64_t *tokens)
{
	uint32_t *rank = NULL, n_rank[NELSSA_SELECT_MAX_LISTS], n = 0;
	unsigned char *taken = NULL;
	uint64_t used = 0;
	double acc = 0.0;
	int ret = 0;

	if (tokens)
		*tokens = 0;
	if (!n_lists || n_lists > NELSSA_SELECT_MAX_LISTS)
		return -EINVAL;
	for (uint32_t l = 0; l < n_lists; l++)
		if (!(share[l] >= 0.0 && share[l] <= 1.0))
			return -EINVAL;
	if (!n_clusters)
		return 0;
	rank = malloc(sizeof(*rank) * n_clusters * n_lists);
	taken = calloc(n_clusters, 1);
	if (!rank || !taken) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t l = 0; l < n_lists; l++) {
		int r = nelssa_topk(score[l], n_clusters, n_clusters, rank + (size_t)l * n_clusters);

		if (r < 0) {
			ret = r;
			goto out;
		}
		n_rank[l] = (uint32_t)r;
	}
	/*
	 * List l fills the budget up to the running sum of the shares; then
	 * every list in turn tops up what the others left (a share can fall
	 * short when its clusters do not fit), so the budget is filled
	 * whatever the shares.
	 */
	for (uint32_t l = 0; l < n_lists; l++) {
		uint64_t upto;

		acc += share[l];
		upto = acc >= 1.0 ? budget : (uint64_t)(acc * (double)budget);
		n += fill_from(rank + (size_t)l * n_clusters, n_rank[l], sizes, upto, &used, taken,
			       ids + n);
	}
	for (uint32_t l = 0; l < n_lists; l++)
		n += fill_from(rank + (size_t)l * n_clusters, n_rank[l], sizes, budget, &used,
			       taken, ids + n);
	if (tokens)
		*tokens = used;
	ret = (int)n;
out:
	free(rank);
	free(taken);
	return ret;
}

int nelssa_select(const struct nelssa_select_cfg *cfg, const float *q, uint32_t group,
		  uint32_t head_dim, float scale, const float *centroids, const float *far,
		  const uint32_t *sizes, uint32_t n_clusters, uint64_t budget, uint32_t *ids,
		  uint64_t *tokens)
{
	const int probe = cfg->far_share > 0.0;
	const size_t n = (size_t)group * n_clusters;
	double *logit = NULL;
	float *score = NULL, *dots = NULL;
	int ret;

	if (tokens)
		*tokens = 0;
	if (!(cfg->far_share >= 0.0 && cfg->far_share <= 1.0) || (probe && !far))
		return -EINVAL;
	ret = nelssa_score_shape_check(group, head_dim, scale);
	if (ret || !n_clusters)
		return ret;
	logit = malloc(sizeof(*logit) * n * (probe ? 2 : 1));
	score = malloc(sizeof(*score) * n_clusters * (probe ? 2 : 1));
	dots = malloc(sizeof(*dots) * n);
	if (!logit || !score || !dots) {
		ret = -ENOMEM;
		goto out;
	}
	/* The centroid products once: the probe's logits start from them. */
	nelssa_centroid_logits(q, group, head_dim, scale, centroids, sizes, n_clusters, logit,
			       dots);
	if (probe) {
		memcpy(logit + n, logit, sizeof(*logit) * n);
		nelssa_far_logits(q, group, head_dim, scale, far, sizes, n_clusters, logit + n,
				  dots);
		ret = nelssa_row_probs(logit + n, group, sizes, n_clusters, score + n_clusters);
	}
	if (!ret)
		ret = nelssa_row_probs(logit, group, sizes, n_clusters, score);
	if (!ret) {
		/* The probe's share first, so what it finds is in before the
		 * centroids take the rest; the tie rule is nelssa_topk()'s. */
		const float *lists[2] = { score + n_clusters, score };
		const double share[2] = { cfg->far_share, 1.0 - cfg->far_share };

		ret = probe ? nelssa_select_hybrid(lists, share, 2, sizes, n_clusters, budget, ids,
						   tokens)
			    : nelssa_topk_fill(score, sizes, n_clusters, budget, ids, tokens);
	}
out:
	free(logit);
	free(score);
	free(dots);
	return ret;
}
