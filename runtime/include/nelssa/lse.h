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

/**
 * nelssa_lse_merge() - merge state b into state a, row by row.
 * @o_a: outputs of state a, fp32 [@rows][@d]; updated in place.
 * @lse_a: LSEs of state a, fp32 [@rows]; updated in place.
 * @o_b: outputs of state b, fp32 [@rows][@d].
 * @lse_b: LSEs of state b, fp32 [@rows].
 * @rows: number of rows.
 * @d: elements per output row.
 *
 * Empty rows (lse -inf or +inf) contribute nothing; two empty rows give
 * (0, -inf).  A NaN lse in either state makes the row's output and lse
 * NaN.
 */
void nelssa_lse_merge(float *o_a, float *lse_a, const float *o_b, const float *lse_b,
		      uint32_t rows, uint32_t d);

/**
 * nelssa_lse_merge_n() - merge n states into one in a single pass.
 * @o: receives the merged outputs, fp32 [@rows][@d]; may not alias any
 *	input.
 * @lse: receives the merged LSEs, fp32 [@rows].
 * @o_in: @n pointers; state i's outputs are @o_in[i], fp32 [@rows][@d].
 * @lse_in: @n pointers; state i's LSEs are @lse_in[i], fp32 [@rows].
 * @n: number of states; 0 gives the empty state (0, -inf).
 * @rows: number of rows.
 * @d: elements per output row.
 *
 * Empty rows (lse -inf or +inf) contribute nothing; a row empty in every
 * state gives (0, -inf).  A NaN lse in any state makes the row's output
 * and lse NaN.
 */
void nelssa_lse_merge_n(float *o, float *lse, const float *const *o_in,
			const float *const *lse_in, size_t n, uint32_t rows, uint32_t d);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_LSE_H */
