// SPDX-License-Identifier: MIT
/*
 * nfw_attn_peak(): the compute ceiling of each SPARSE_ATTN kernel, for
 * benchmarks that report a roofline min(memory, compute).  The vector
 * kernels' versions live in attn_vec.h, next to the loops they imitate;
 * this file has the scalar one (the numeric core's kernel, see
 * peak_rows()) and the dispatch, which follows nfw_attn_kernel()'s
 * fallback to scalar.
 */
#include <string.h>

#include "../fw_internal.h"
#include "npnm_rules.h"

#define PEAK_TOKENS 48u

static inline float bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/*
 * The scalar kernel (the numeric core's streaming kernel) sums each logit's
 * dot product in index order, a dependent chain, but its P.V step --
 * o[i] += w * v[i] for every output element -- is independent across
 * elements and the compiler vectorises it for the baseline ISA.  The
 * faster of the two is the ceiling: every element and query row here
 * goes through that P.V form, the weights of a block of @qb rows held for
 * each token's row of V.
 */
static inline void peak_rows(const uint16_t *restrict kv, uint32_t d, const float *restrict w,
			     float *restrict o, uint32_t qb)
{
	for (uint32_t u = 0; u < PEAK_TOKENS; u++) {
		const uint16_t *v = kv + (size_t)u * d;

		for (uint32_t r = 0; r < qb; r++) {
			const float wr = w[r * PEAK_TOKENS + u];
			float *orow = o + (size_t)r * d;

			for (uint32_t i = 0; i < d; i++)
				orow[i] += wr * bf16(v[i]);
		}
	}
}

#define PEAK_ROWS(qb)								\
	static __attribute__((noinline)) void peak_rows_##qb(const uint16_t *kv, uint32_t d, \
							     const float *w, float *o) \
	{									\
		peak_rows(kv, d, w, o, qb);					\
	}
PEAK_ROWS(4)
PEAK_ROWS(2)
PEAK_ROWS(1)

static uint64_t peak_scalar(uint32_t d, uint32_t g, uint64_t passes)
{
	uint16_t kv[PEAK_TOKENS * NFW_MAX_HEAD_DIM];
	float w[NFW_MAX_GROUP * PEAK_TOKENS], o[NFW_MAX_GROUP * NFW_MAX_HEAD_DIM];
	volatile float out;

	if (!d || d > NFW_MAX_HEAD_DIM || !g || g > NFW_MAX_GROUP)
		return 0;
	for (uint32_t i = 0; i < PEAK_TOKENS * d; i++)
		kv[i] = (uint16_t)(0x3f80u + i % 64u);	/* bf16 in [1, 1.5) */
	for (uint32_t i = 0; i < g * PEAK_TOKENS; i++)
		w[i] = 1.0f / 1024.0f;
	memset(o, 0, sizeof(o));
	for (uint64_t n = 0; n < passes; n++) {
		uint32_t r = 0;

		for (; r + 4 <= g; r += 4)
			peak_rows_4(kv, d, w + r * PEAK_TOKENS, o + (size_t)r * d);
		if (r + 2 <= g) {
			peak_rows_2(kv, d, w + r * PEAK_TOKENS, o + (size_t)r * d);
			r += 2;
		}
		if (r < g)
			peak_rows_1(kv, d, w + r * PEAK_TOKENS, o + (size_t)r * d);
		for (uint32_t i = 0; i < g * d; i++)	/* stays finite, however many passes */
			o[i] *= 0.5f;
	}
	out = o[0];
	(void)out;
	return passes * 2u * g * d * PEAK_TOKENS;
}

enum nfw_isa nfw_attn_isa(enum nfw_isa isa, uint32_t head_dim)
{
	nfw_attn_item_fn fn;

	isa = nfw_isa_resolve(isa);
	if (!nfw_isa_supported(isa))
		return NFW_ISA_SCALAR;
	fn = nfw_attn_kernel(isa, head_dim, 0);
	return fn == nfw_attn_item_scalar ? NFW_ISA_SCALAR : isa;
}

uint64_t nfw_attn_peak_flags(enum nfw_isa isa, uint32_t head_dim, uint32_t group,
			     uint8_t kv_dtype, uint32_t flags, uint64_t passes)
{
	nfw_attn_item_fn fn;

	isa = nfw_isa_resolve(isa);
	if (!nfw_isa_supported(isa) || !npnm_kv_known(kv_dtype) || (flags & ~NFW_ATTN_FLAGS))
		return 0;
	fn = nfw_attn_kernel(isa, head_dim, flags);
#ifdef NFW_HAVE_AVX512
	if (fn == nfw_attn_item_avx512)
		return nfw_attn_item_avx512_peak(head_dim, group, kv_dtype, flags, passes);
#endif
#ifdef NFW_HAVE_AVX2
	if (fn == nfw_attn_item_avx2)
		return nfw_attn_item_avx2_peak(head_dim, group, kv_dtype, flags, passes);
#endif
#ifdef NFW_HAVE_NEON
	if (fn == nfw_attn_item_neon)
		return nfw_attn_item_neon_peak(head_dim, group, kv_dtype, flags, passes);
#endif
#ifdef NFW_HAVE_AVX512_BF16
	if (fn == nfw_attn_item_avx512_bf16)
		return nfw_attn_item_avx512_bf16_peak(head_dim, group, kv_dtype, flags, passes);
#endif
#ifdef NFW_HAVE_NEON_BF16
	if (fn == nfw_attn_item_neon_bf16)
		return nfw_attn_item_neon_bf16_peak(head_dim, group, kv_dtype, flags, passes);
#endif
	return peak_scalar(head_dim, group, passes);	/* the 16-bit mix for every type */
}

uint64_t nfw_attn_peak_kv(enum nfw_isa isa, uint32_t head_dim, uint32_t group, uint8_t kv_dtype,
			  uint64_t passes)
{
	return nfw_attn_peak_flags(isa, head_dim, group, kv_dtype, 0, passes);
}

uint64_t nfw_attn_peak(enum nfw_isa isa, uint32_t head_dim, uint32_t group, uint64_t passes)
{
	return nfw_attn_peak_kv(isa, head_dim, group, NPNM_DTYPE_BF16, passes);
}
