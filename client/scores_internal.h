/* SPDX-License-Identifier: MIT */
/*
 * What every per-row-normalised cluster score shares: the shape check and
 * the softmax over the clusters per query row, summed over the GQA group.
 * Centroid scores, bound scores and the far-member probe differ only in
 * the logit they give a (row, cluster) pair.  Not installed.
 */
#ifndef NELSSA_SCORES_INTERNAL_H
#define NELSSA_SCORES_INTERNAL_H

#include <stdint.h>

/* 0, or -EINVAL for a group, head_dim or scale no score accepts. */
int nelssa_score_shape_check(uint32_t group, uint32_t head_dim, float scale);

/*
 * score[c] = sum over rows r of softmax_c(logit[r][c]) over the non-empty
 * clusters (sizes[c] != 0), in float64; empty clusters score -inf and
 * their logits are never read.  @logit is the caller's scratch: it is
 * overwritten.  Return: 0, or -EINVAL when a logit of a non-empty cluster
 * is not finite.
 */
int nelssa_row_probs(double *logit, uint32_t group, const uint32_t *sizes, uint32_t n_clusters,
		     float *score);

/*
 * out[r][c] = nelssa_dot_f32(q_r, row_c, d) for every query row r < @group
 * and row c < @n of @rows[n][d], bit for bit, at memory speed
 * (group_dots.c).  @out is fp32 [group][n].
 */
void nelssa_group_dots(const float *q, uint32_t group, uint32_t d, const float *rows,
		       uint32_t n, float *out);

/*
 * logit[r][c] = scale * q_r . centroid_c (fp32 products) for non-empty c.
 * @dots is the caller's scratch, fp32 [group][n_clusters].
 */
void nelssa_centroid_logits(const float *q, uint32_t group, uint32_t head_dim, float scale,
			    const float *centroids, const uint32_t *sizes, uint32_t n_clusters,
			    double *logit, float *dots);

/*
 * Raise each centroid logit to the far member's where that is larger:
 * the probe's logit, max(q . centroid, q . far) * scale.  @dots as above.
 */
void nelssa_far_logits(const float *q, uint32_t group, uint32_t head_dim, float scale,
		       const float *far, const uint32_t *sizes, uint32_t n_clusters,
		       double *logit, float *dots);

#endif /* NELSSA_SCORES_INTERNAL_H */
