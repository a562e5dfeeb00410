// SPDX-License-Identifier: MIT
/*
 * Centroid scoring for Top-K (RetroInfer's rule): each query row of the
 * GQA group takes a softmax over the centroids, and the group's rows are
 * summed, so the selection is per KV head and shared by its query heads.
 * The softmax (rather than raw q.c) keeps one query row with large logits
 * from drowning out the others.  The per-row softmax is shared with the
 * bound and probe scores (row_probs.c).
 */
#include <errno.h>
#include <stdlib.h>

#include <nelssa/sparse.h>

#include "scores_internal.h"

void nelssa_centroid_logits(const float *q, uint32_t group, uint32_t head_dim, float scale,
			    const float *centroids, const uint32_t *sizes, uint32_t n_clusters,
			    double *logit, float *dots)
{
	nelssa_group_dots(q, group, head_dim, centroids, n_clusters, dots);
	for (uint32_t r = 0; r < group; r++)
		for (uint32_t c = 0; c < n_clusters; c++)
			if (sizes[c])
				logit[(size_t)r * n_clusters + c] =
					(double)scale * dots[(size_t)r * n_clusters + c];
}

int nelssa_centroid_scores(const float *q, uint32_t group, uint32_t head_dim, float scale,
			   const float *centroids, const uint32_t *sizes, uint32_t n_clusters,
			   float *score)
{
	double *logit;
	float *dots;
	int ret = nelssa_score_shape_check(group, head_dim, scale);

	if (ret || !n_clusters)
		return ret;
	logit = malloc(sizeof(*logit) * group * n_clusters);
	dots = malloc(sizeof(*dots) * group * n_clusters);
	if (logit && dots) {
		nelssa_centroid_logits(q, group, head_dim, scale, centroids, sizes, n_clusters,
				       logit, dots);
		ret = nelssa_row_probs(logit, group, sizes, n_clusters, score);
	} else {
		ret = -ENOMEM;
	}
	free(logit);
	free(dots);
	return ret;
}
