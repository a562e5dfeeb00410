// SPDX-License-Identifier: MIT
/*
 * nfw_attn_peak(): the compute ceiling of each SPARSE_ATTN kernel, for
 * benchmarks that report a roofline min(memory, compute).  The vector
 * kernels' versions live in attn_vec.h, next to the loops they imitate;
 * this file has the scalar one (the numeric core's kernel: one fp32
 * multiply-add per element and query row, summed in order) and the
 * dispatch, which follows nfw_attn_kernel()'s fallback to scalar.
 */
#include <string.h>

#include "../fw_internal.h"

#define PEAK_ACC 12		/* independent accumulators: rows x tokens */
#define PEAK_TOKENS 48u

static inline float bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static __attribute__((noinline)) void peak_rows(const float *q, const uint16_t *kv, uint32_t d,
						uint32_t qb, float *sink)
{
	const uint32_t tb = PEAK_ACC / qb;

	for (uint32_t t0 = 0; t0 < PEAK_TOKENS; t0 += tb) {
		float acc[PEAK_ACC] = { 0 };

		for (uint32_t j = 0; j < d; j++)
			for (uint32_t u = 0; u < tb; u++) {
				float k = bf16(kv[(size_t)(t0 + u) * d + j]);

				for (uint32_t r = 0; r < qb; r++)
					acc[r * tb + u] += q[(size_t)r * d + j] * k;
			}
		for (int i = 0; i < PEAK_ACC; i++)
			*sink += acc[i];
	}
}

static uint64_t peak_scalar(uint32_t d, uint32_t g, uint64_t passes)
{
	uint16_t kv[PEAK_TOKENS * NFW_MAX_HEAD_DIM];
	float q[NFW_MAX_GROUP * NFW_MAX_HEAD_DIM];
	volatile float out;
	float sink = 0.0f;

	if (!d || d > NFW_MAX_HEAD_DIM || !g || g > NFW_MAX_GROUP)
		return 0;
	for (uint32_t i = 0; i < PEAK_TOKENS * d; i++)
		kv[i] = (uint16_t)(0x3f80u + i % 64u);
	for (uint32_t i = 0; i < g * d; i++)
		q[i] = 1.0f / 1024.0f;
	for (uint64_t n = 0; n < passes; n++) {
		uint32_t r = 0;

		for (; r + 4 <= g; r += 4)
			peak_rows(q + (size_t)r * d, kv, d, 4, &sink);
		if (r + 2 <= g) {
			peak_rows(q + (size_t)r * d, kv, d, 2, &sink);
			r += 2;
		}
		if (r < g)
			peak_rows(q + (size_t)r * d, kv, d, 1, &sink);
		sink *= 0.5f;
	}
	out = sink;
	(void)out;
	return passes * 2u * g * d * PEAK_TOKENS;
}

enum nfw_isa nfw_attn_isa(enum nfw_isa isa, uint32_t head_dim)
{
	nfw_attn_item_fn fn;

	isa = nfw_isa_resolve(isa);
	if (!nfw_isa_supported(isa))
		return NFW_ISA_SCALAR;
	fn = nfw_attn_kernel(isa, head_dim);
	return fn == nfw_attn_item_scalar ? NFW_ISA_SCALAR : isa;
}

uint64_t nfw_attn_peak(enum nfw_isa isa, uint32_t head_dim, uint32_t group, uint64_t passes)
{
	nfw_attn_item_fn fn;

	isa = nfw_isa_resolve(isa);
	if (!nfw_isa_supported(isa))
		return 0;
	fn = nfw_attn_kernel(isa, head_dim);
#ifdef NFW_HAVE_AVX512
	if (fn == nfw_attn_item_avx512)
		return nfw_attn_item_avx512_peak(head_dim, group, passes);
#endif
#ifdef NFW_HAVE_AVX2
	if (fn == nfw_attn_item_avx2)
		return nfw_attn_item_avx2_peak(head_dim, group, passes);
#endif
#ifdef NFW_HAVE_NEON
	if (fn == nfw_attn_item_neon)
		return nfw_attn_item_neon_peak(head_dim, group, passes);
#endif
	return peak_scalar(head_dim, group, passes);
}
