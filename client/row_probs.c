// SPDX-License-Identifier: MIT
/*
 * The per-row softmax every normalised cluster score ends with: each query
 * row of the group gives the clusters one unit of score, so a cluster one
 * row needs ranks high however loose the other rows' logits are.  Float64,
 * so the sum over thousands of clusters loses nothing a ranking could see.
 */
#include <errno.h>
#include <math.h>

#include <nelssa/sparse.h>

#include "scores_internal.h"

int nelssa_score_shape_check(uint32_t group, uint32_t head_dim, float scale)
{
	if (!group || group > NELSSA_ATTN_MAX_GROUP || !head_dim ||
	    head_dim > NELSSA_ATTN_MAX_HEAD_DIM || !(scale > 0.0f) || !isfinite(scale))
		return -EINVAL;
	return 0;
}

int nelssa_row_probs(double *logit, uint32_t group, const uint32_t *sizes, uint32_t n_clusters,
		     float *score)
{
	for (uint32_t c = 0; c < n_clusters; c++)
		score[c] = sizes[c] ? 0.0f : -INFINITY;
	for (uint32_t r = 0; r < group; r++) {
		double *u = logit + (size_t)r * n_clusters;
		double m = -INFINITY, sum = 0.0;

		for (uint32_t c = 0; c < n_clusters; c++)
			if (sizes[c]) {
				if (!isfinite(u[c]))
					return -EINVAL;
				/* Not fmax(): a call a cluster, and u[c] is never NaN here. */
				m = u[c] > m ? u[c] : m;
			}
		if (m == -INFINITY)
			return 0;	/* every cluster empty */
		for (uint32_t c = 0; c < n_clusters; c++)
			if (sizes[c]) {
				u[c] = exp(u[c] - m);
				sum += u[c];
			}
		for (uint32_t c = 0; c < n_clusters; c++)
			if (sizes[c])
				score[c] += (float)(u[c] / sum);
	}
	return 0;
}
