/* SPDX-License-Identifier: MIT */
/*
 * Merging partial attention states (o, lse) of disjoint token sets.
 *
 *	m = max(l1, l2), w_i = exp(l_i - m)
 *	o = (w1 o1 + w2 o2) / (w1 + w2),  l = m + log(w1 + w2)
 *
 * The merge is associative and commutative, so partial results from any
 * number of devices can be combined in any order or as a tree.  An empty
 * state is (0, -inf); +inf is also read as empty because FlashAttention-2
 * reports empty rows that way.  Two empty states merge to (0, -inf), never
 * NaN.  A NaN lse is a bug upstream and is propagated, not hidden.
 */
#ifndef NELSSA_LSE_H
#define NELSSA_LSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Merge state b into state a, row by row: @o_a and @o_b are [rows][d],
 * @lse_a and @lse_b are [rows].  @o_a/@lse_a are updated in place.
 */
void nelssa_lse_merge(float *o_a, float *lse_a, const float *o_b, const float *lse_b,
		      uint32_t rows, uint32_t d);

/*
 * Merge @n states into (@o, @lse) in one pass: state i is (@o_in[i],
 * @lse_in[i]), each [rows][d] and [rows].  n = 0 gives the empty state.
 * @o may not alias any input.
 */
void nelssa_lse_merge_n(float *o, float *lse, const float *const *o_in,
			const float *const *lse_in, size_t n, uint32_t rows, uint32_t d);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_LSE_H */
