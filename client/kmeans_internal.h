/* SPDX-License-Identifier: MIT */
/*
 * Pieces of the segmented k-means shared by the CPU version (kmeans.c) and
 * its CUDA twin (cuda/kmeans.cu), so both split segments, size them and lay
 * out the resulting index identically and only the arithmetic differs.
 */
#ifndef NELSSA_KMEANS_INTERNAL_H
#define NELSSA_KMEANS_INTERNAL_H

#include <nelssa/sparse.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when the configuration and shape are usable, else -EINVAL. */
int nelssa_km_check(const struct nelssa_kmeans_cfg *cfg, enum nelssa_kv_dtype dtype,
		    uint32_t head_dim);

/* Centroids for a segment of @len tokens: round(len / cluster_tokens) in [1, len]. */
uint32_t nelssa_km_centroids(const struct nelssa_kmeans_cfg *cfg, uint32_t len);

/* Segments of a prefill of @n_tokens: max(1, round(n_tokens / segment)). */
uint32_t nelssa_km_segments(const struct nelssa_kmeans_cfg *cfg, uint32_t n_tokens);

/* Most outliers a segment of @len tokens may split off. */
uint32_t nelssa_km_outlier_cap(const struct nelssa_kmeans_cfg *cfg, uint32_t len);

/*
 * After the final assignment: tokens whose cosine with their centroid
 * (@cos[len]) is below cfg->outlier_cos, at most the cap of them and the
 * lowest cosines first, leave their cluster for one of their own, numbered
 * k, k + 1, ... in token order in @asg.  Returns how many.
 */
uint32_t nelssa_km_split_outliers(const struct nelssa_kmeans_cfg *cfg, uint32_t *asg,
				  const float *cos, uint32_t len, uint32_t k);

/* Grow @ix to hold @tokens tokens and @clusters clusters; 0 or -ENOMEM. */
int nelssa_km_reserve(struct nelssa_cluster_index *ix, uint32_t tokens, uint32_t clusters);

/*
 * Append a segment's result to @ix (room reserved): @asg[len] the final
 * assignment of tokens @base.., @cnt[k] the member counts and @acc[k][d]
 * the float64 sums of the centred members.  Empty clusters are dropped,
 * members keep token order, centroids are the plain (uncentred) means.
 */
void nelssa_km_emit(struct nelssa_cluster_index *ix, const uint32_t *asg, const uint32_t *cnt,
		    const double *acc, uint32_t k, uint32_t base, uint32_t len, uint32_t tok_at,
		    uint32_t cl_at, uint32_t *added_clusters);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_KMEANS_INTERNAL_H */
