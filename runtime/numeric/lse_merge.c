// SPDX-License-Identifier: MIT
/*
 * LSE merge of partial attention states; see <nelssa/lse.h> and
 * Documentation/numeric-conventions.rst.
 *
 * Weights are normalised (w_i / sum w) before they multiply the outputs, so
 * no intermediate can overflow whatever the magnitudes of the LSEs.
 */
#include <math.h>

#include <nelssa/lse.h>

/* -inf and +inf (FlashAttention-2's empty row) both mean "no tokens". */
static int lse_empty(float l)
{
	return isinf(l);
}

void nelssa_lse_merge_n(float *o, float *lse, const float *const *o_in,
			const float *const *lse_in, size_t n, uint32_t rows, uint32_t d)
{
	for (uint32_t r = 0; r < rows; r++) {
		float *out = o + (size_t)r * d;
		float m = -INFINITY;
		float wsum = 0.0f;
		int nan = 0;

		for (size_t s = 0; s < n; s++) {
			float l = lse_in[s][r];

			if (isnan(l))
				nan = 1;
			else if (!lse_empty(l) && l > m)
				m = l;
		}
		for (uint32_t i = 0; i < d; i++)
			out[i] = 0.0f;
		if (nan) {
			for (uint32_t i = 0; i < d; i++)
				out[i] = NAN;
			lse[r] = NAN;
			continue;
		}
		if (m == -INFINITY) {
			lse[r] = -INFINITY;
			continue;
		}
		for (size_t s = 0; s < n; s++) {
			float l = lse_in[s][r];

			if (!lse_empty(l))
				wsum += expf(l - m);
		}
		for (size_t s = 0; s < n; s++) {
			float l = lse_in[s][r];
			const float *in = o_in[s] + (size_t)r * d;
			float w;

			if (lse_empty(l))
				continue;
			w = expf(l - m) / wsum;
			for (uint32_t i = 0; i < d; i++)
				out[i] += w * in[i];
		}
		lse[r] = m + logf(wsum);
	}
}

void nelssa_lse_merge(float *o_a, float *lse_a, const float *o_b, const float *lse_b,
		      uint32_t rows, uint32_t d)
{
	for (uint32_t r = 0; r < rows; r++) {
		float *a = o_a + (size_t)r * d;
		const float *b = o_b + (size_t)r * d;
		float la = lse_a[r], lb = lse_b[r];
		float m, wa, wb, ws;

		if (isnan(la) || isnan(lb)) {
			for (uint32_t i = 0; i < d; i++)
				a[i] = NAN;
			lse_a[r] = NAN;
			continue;
		}
		if (lse_empty(lb)) {
			if (lse_empty(la)) {
				for (uint32_t i = 0; i < d; i++)
					a[i] = 0.0f;
				lse_a[r] = -INFINITY;
			}
			continue;
		}
		if (lse_empty(la)) {
			for (uint32_t i = 0; i < d; i++)
				a[i] = b[i];
			lse_a[r] = lb;
			continue;
		}
		m = fmaxf(la, lb);
		wa = expf(la - m);
		wb = expf(lb - m);
		ws = wa + wb;
		wa /= ws;
		wb /= ws;
		for (uint32_t i = 0; i < d; i++)
			a[i] = wa * a[i] + wb * b[i];
		lse_a[r] = m + logf(ws);
	}
}
