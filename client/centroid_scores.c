// SPDX-License-Identifier: MIT
/*
 * Centroid scoring for Top-K (RetroInfer's rule): each query row of the
 * GQA group takes a softmax over the centroids, and the group's rows are
 * summed, so the selection is per KV head and shared by its query heads.
 * The softmax (rather than raw q.c) keeps one query row with large logits
 * from drowning out the others.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <nelssa/sparse.h>

int nelssa_centroid_scores(const float *q, uint32_t group, uint32_t head_dim, float scale,
			   const float *centroids, const uint32_t *sizes, uint32_t n_clusters,
			   float *score)
{
	float *logit;
	int ret = 0;

	if (!group || group > NELSSA_ATTN_MAX_GROUP || !head_dim ||
	    head_dim > NELSSA_ATTN_MAX_HEAD_DIM || !(scale > 0.0f) || !isfinite(scale))
		return -EINVAL;
	if (!n_clusters)
		return 0;
	logit = malloc(sizeof(*logit) * n_clusters);
	if (!logit)
		return -ENOMEM;
	for (uint32_t c = 0; c < n_clusters; c++)
		score[c] = sizes[c] ? 0.0f : -INFINITY;
	for (uint32_t g = 0; g < group && !ret; g++) {
		const float *qg = q + (size_t)g * head_dim;
		float m = -INFINITY, sum = 0.0f;

		for (uint32_t c = 0; c < n_clusters; c++) {
			if (!sizes[c])
				continue;
			logit[c] = scale * nelssa_dot_f32(qg, centroids + (size_t)c * head_dim, head_dim);
			if (!isfinite(logit[c])) {
				ret = -EINVAL;
				break;
			}
			m = fmaxf(m, logit[c]);
		}
		if (ret || m == -INFINITY)
			continue;	/* error, or every cluster empty */
		for (uint32_t c = 0; c < n_clusters; c++)
			if (sizes[c]) {
				logit[c] = expf(logit[c] - m);
				sum += logit[c];
			}
		for (uint32_t c = 0; c < n_clusters; c++)
			if (sizes[c])
				score[c] += logit[c] / sum;
	}
	free(logit);
	return ret;
}
