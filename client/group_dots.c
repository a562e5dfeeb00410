// SPDX-License-Identifier: MIT
/*
 * The products of a GQA group's query rows with many centroid (or far
 * key) rows, each equal bit for bit to nelssa_dot_f32(): fp32 products
 * added in index order, no FMA.  That order is one dependent chain per
 * product, so done row by row it runs at an add's latency, not at memory
 * speed.  Here the lanes are centroids instead of dimensions: blocks of
 * 16 centroid rows are transposed in registers (8 x 8 at a time) so that
 * lane j of a vector holds centroid j's element i, and each lane then
 * performs exactly the scalar loop's operations in the scalar loop's
 * order; eight independent chains (4 query rows x 2 halves) keep the
 * adders busy.  Built with -ffp-contract=off (ISO C), so a * b + c stays
 * a rounded multiply and a rounded add, in every clone.
 */
#include <stddef.h>
#include <stdint.h>

#include <nelssa/attention.h>

#include "kmeans_internal.h"
#include "scores_internal.h"

typedef float v8 __attribute__((vector_size(32)));
typedef float v8_u __attribute__((vector_size(32), aligned(4), may_alias));

#define BLOCK 16u	/* centroid rows per block: two vectors */
#define CHUNK 128u	/* dimensions transposed at a time (8 KiB of stack) */
#define ROWS 4u		/* query rows per pass over a chunk */

/*
 * A broadcast: x - 0 is x for every x, signed zeros included.  A macro,
 * because a function returning a v8 would change the ABI of the default
 * (pre-AVX) clone.
 */
#define SPLAT(x) ((x) - (v8){ 0 })

#define SH(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)

/*
 * Rows @p[0..8) (stride @ld floats), dimensions @i..@i+8: column k of the
 * 8 x 8 block, i.e. element i + k of every row, goes to @col[k].
 */
static inline void transpose8(const float *p, size_t ld, v8 *col)
{
	v8 r[8], t[8], s[8];

	for (int j = 0; j < 8; j++)
		r[j] = *(const v8_u *)(p + j * ld);
	for (int j = 0; j < 8; j += 2) {
		t[j] = SH(r[j], r[j + 1], 0, 8, 1, 9, 4, 12, 5, 13);
		t[j + 1] = SH(r[j], r[j + 1], 2, 10, 3, 11, 6, 14, 7, 15);
	}
	for (int j = 0; j < 8; j += 4)
		for (int h = 0; h < 2; h++) {
			s[j + h] = SH(t[j + h], t[j + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
			s[j + h + 2] = SH(t[j + h], t[j + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
		}
	/* s[0..4) hold rows 0-3 of columns {0,4}, {2,6}, {1,5}, {3,7}; s[4..8) rows 4-7. */
	col[0] = SH(s[0], s[4], 0, 1, 2, 3, 8, 9, 10, 11);
	col[4] = SH(s[0], s[4], 4, 5, 6, 7, 12, 13, 14, 15);
	col[1] = SH(s[2], s[6], 0, 1, 2, 3, 8, 9, 10, 11);
	col[5] = SH(s[2], s[6], 4, 5, 6, 7, 12, 13, 14, 15);
	col[2] = SH(s[1], s[5], 0, 1, 2, 3, 8, 9, 10, 11);
	col[6] = SH(s[1], s[5], 4, 5, 6, 7, 12, 13, 14, 15);
	col[3] = SH(s[3], s[7], 0, 1, 2, 3, 8, 9, 10, 11);
	col[7] = SH(s[3], s[7], 4, 5, 6, 7, 12, 13, 14, 15);
}

/*
 * Element i0 + i of centroid rows @c[0..16) for i < @len into @lo[i]
 * (rows 0-7) and @hi[i] (rows 8-15); the last len % 8 elements by hand.
 */
static inline void transpose_chunk(const float *c, uint32_t d, uint32_t len, v8 *lo, v8 *hi)
{
	uint32_t i = 0;

	for (; i + 8 <= len; i += 8) {
		transpose8(c + i, d, lo + i);
		transpose8(c + (size_t)8 * d + i, d, hi + i);
	}
	for (; i < len; i++)
		for (int j = 0; j < 8; j++) {
			lo[i][j] = c[(size_t)j * d + i];
			hi[i][j] = c[(size_t)(j + 8) * d + i];
		}
}

/* @nr (1..ROWS) query rows over one transposed chunk: the scalar loop per lane. */
static inline void rows_chunk(const float *q, uint32_t d, uint32_t nr, const v8 *lo,
			      const v8 *hi, uint32_t len, v8 *acc)
{
	v8 a[2 * ROWS];

	for (uint32_t r = 0; r < 2 * nr; r++)
		a[r] = acc[r];
	for (uint32_t i = 0; i < len; i++)
		for (uint32_t r = 0; r < nr; r++) {
			v8 x = SPLAT(q[(size_t)r * d + i]);

			a[2 * r] = a[2 * r] + x * lo[i];
			a[2 * r + 1] = a[2 * r + 1] + x * hi[i];
		}
	for (uint32_t r = 0; r < 2 * nr; r++)
		acc[r] = a[r];
}

NELSSA_KM_CLONES
void nelssa_group_dots(const float *q, uint32_t group, uint32_t d, const float *rows,
		       uint32_t n, float *out)
{
	v8 lo[CHUNK], hi[CHUNK], acc[2 * NELSSA_ATTN_MAX_GROUP];
	uint32_t c = 0;

	for (; c + BLOCK <= n; c += BLOCK) {
		const float *blk = rows + (size_t)c * d;

		for (uint32_t r = 0; r < 2 * group; r++)
			acc[r] = (v8){ 0 };
		for (uint32_t i0 = 0; i0 < d; i0 += CHUNK) {
			uint32_t len = d - i0 < CHUNK ? d - i0 : CHUNK;

			transpose_chunk(blk + i0, d, len, lo, hi);
			for (uint32_t r = 0; r < group; r += ROWS) {
				const float *qr = q + (size_t)r * d + i0;
				v8 *ar = acc + 2 * r;

				/* Constant row counts, so each case is fully unrolled. */
				switch (group - r < ROWS ? group - r : ROWS) {
				case 4:
					rows_chunk(qr, d, 4, lo, hi, len, ar);
					break;
				case 3:
					rows_chunk(qr, d, 3, lo, hi, len, ar);
					break;
				case 2:
					rows_chunk(qr, d, 2, lo, hi, len, ar);
					break;
				default:
					rows_chunk(qr, d, 1, lo, hi, len, ar);
					break;
				}
			}
		}
		for (uint32_t r = 0; r < group; r++)
			for (int j = 0; j < 8; j++) {
				out[(size_t)r * n + c + j] = acc[2 * r][j];
				out[(size_t)r * n + c + 8 + j] = acc[2 * r + 1][j];
			}
	}
	for (; c < n; c++)
		for (uint32_t r = 0; r < group; r++)
			out[(size_t)r * n + c] = nelssa_dot_f32(q + (size_t)r * d,
							       rows + (size_t)c * d, d);
}
