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

/*
 * The per-key loops beside k-means' GEMM (the scans of each key's scores,
 * the float64 update sums) built for AVX-512 and AVX2 as well as the
 * baseline ISA, chosen at load time (GCC's target_clones, an ifunc), so a
 * distribution build gets the wide vectors the CPU has.  A test defines
 * NELSSA_KM_NO_CLONES to build one ISA's copy of a loop and check it.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && \
	!defined(NELSSA_KM_NO_CLONES)
#define NELSSA_KM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NELSSA_KM_CLONES
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
 * Channels whose spread over a segment exceeds NELSSA_KM_MASSIVE times the
 * median channel's (massive activations) are scaled down to that for the
 * assignment: otherwise two or three channels that queries barely read
 * decide every cluster.
 */
#define NELSSA_KM_MASSIVE 4.0

/* @weight[d] from the per-channel variances @var[d] of a centred segment. */
void nelssa_km_channel_weights(const double *var, uint32_t d, float *weight);

/*
 * @r[len] holds each token's distance from its cluster's mean (@asg the
 * assignment to @k clusters); replaces it by the distance over its
 * cluster's median distance (1 where that median is 0 or memory is short).
 */
void nelssa_km_residual_ratio(const uint32_t *asg, float *r, uint32_t len, uint32_t k);

/*
 * After the final assignment: tokens whose cosine with their centroid
 * (@cos[len]) is below cfg->outlier_cos, or whose residual ratio (@rho,
 * from nelssa_km_residual_ratio()) is above cfg->outlier_ratio, at most
 * the cap of them and the largest ratios first, leave their cluster for
 * one of their own, numbered k, k + 1, ... in token order in @asg.
 * Returns how many.
 */
uint32_t nelssa_km_split_outliers(const struct nelssa_kmeans_cfg *cfg, uint32_t *asg,
				  const float *cos, const float *rho, uint32_t len, uint32_t k);

/* Grow @ix to hold @tokens tokens and @clusters clusters; 0 or -ENOMEM. */
int nelssa_km_reserve(struct nelssa_cluster_index *ix, uint32_t tokens, uint32_t clusters);

/*
 * Append a segment's result to @ix (room reserved): @asg[len] the final
 * assignment of tokens @base.., @cnt[k] the member counts (overwritten:
 * emit uses it as its cursors) and @acc[k][d]
 * the float64 sums of the members' raw keys (not the centred, damped ones
 * the assignment used).  Empty clusters are dropped, members keep token
 * order, centroids are the plain means.
 */
void nelssa_km_emit(struct nelssa_cluster_index *ix, const uint32_t *asg, uint32_t *cnt,
		    const double *acc, uint32_t k, uint32_t base, uint32_t len, uint32_t tok_at,
		    uint32_t cl_at, uint32_t *added_clusters);

/*
 * The assignment step: @asg[t] receives the centroid of @c[k][d] with the
 * largest inner product with key t of @x[len][d] as nelssa_dot_f32() sums
 * it (ties to the lower index; -inf and centroid 0 when none compares
 * greater), @sim[t] that product.  @xn[len] are the keys' norms, or NULL
 * to have them computed; @sim may be NULL, and then a key whose sgemm
 * window holds one centroid costs no strict product at all.
 * nelssa_km_assign_ref() computes every product in that order -- the
 * definition; nelssa_km_assign() gets the same answer from an sgemm and
 * recomputes only the near-ties (see kmeans_assign.c), its scores for
 * NELSSA_KM_ROWS keys at a time in @scratch[NELSSA_KM_ROWS * k].  Both
 * return how many strict-order products they computed.
 */
#define NELSSA_KM_ROWS 256u	/* a block's scores (512 KiB at k = 512) stay in L2 */
typedef uint64_t nelssa_km_assign_fn(const float *x, const float *xn, uint32_t len,
				     const float *c, uint32_t k, uint32_t d, uint32_t *asg,
				     float *sim, float *scratch);
nelssa_km_assign_fn nelssa_km_assign_ref;
nelssa_km_assign_fn nelssa_km_assign;

/* nelssa_kmeans_build() and _append() with a given assignment step. */
int nelssa_km_build(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
		    enum nelssa_kv_dtype dtype, const void *k, uint32_t n_tokens, uint32_t head_dim,
		    nelssa_km_assign_fn *assign);
int nelssa_km_append(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
		     enum nelssa_kv_dtype dtype, const void *k, uint32_t n_new,
		     nelssa_km_assign_fn *assign);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_KMEANS_INTERNAL_H */
