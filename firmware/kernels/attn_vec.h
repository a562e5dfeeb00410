/* SPDX-License-Identifier: MIT */
/*
 * SPARSE_ATTN work-item kernel, written once with GCC/Clang vector
 * extensions and compiled per ISA: the including file defines VW (lanes
 * of fp32 per vector: 4 NEON, 8 AVX2, 16 AVX-512) and NFW_VEC_FN, and is
 * built with that ISA's flags plus -ffp-contract=fast so a*b+c becomes FMA.
 *
 * The selected clusters' tokens go in tiles of NFW_TILE, taken in
 * selection order across cluster boundaries:
 *  - logits: VW accumulators (query rows x tokens), each K row widened once
 *    straight from device memory for a block of query rows (see
 *    widen2_bf16() for the shuffle-free layout), folded into VW logits by
 *    one transpose-and-add;
 *  - online softmax: the tile maximum rescales a row's state at most once
 *    per tile, and the weights come from one vector exp per VW tokens;
 *  - values: a block of rows x output vectors accumulates in registers
 *    over the tile, each V chunk widened once for the block.
 * Every line read issues a prefetch of one line of the next tile, and
 * where the including file sets NFW_FAR_PREFETCH one of the tile after
 * (pf_line()): selected clusters sit at random places in a store far
 * larger than the caches, the hardware prefetchers stop at page
 * boundaries, and a burst of a whole cluster's prefetches overflows the
 * core's miss buffers (Documentation/performance.rst has the
 * measurements).
 */
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#include <nelssa/half.h>

#include "../fw_internal.h"
#include "npnm_rules.h"

#ifndef VW
#error "define VW before including attn_vec.h"
#endif
#ifndef NFW_FAR_PREFETCH
#define NFW_FAR_PREFETCH 0
#endif
/*
 * NFW_BF16_NATIVE: the including file is built with the ISA's bf16 dot
 * product (Arm BFDOT, x86 AVX512_BF16's VDPBF16PS), which
 * NPNM_ATTN_F_BF16_DOTS over bf16 KV uses (KIND_BF16_DOT below);
 * elsewhere that flag rounds the operands and keeps the binary32 FMAs.
 */
#ifndef NFW_BF16_NATIVE
#define NFW_BF16_NATIVE 0
#endif

typedef float vf __attribute__((vector_size(VW * 4)));
typedef float vf_u __attribute__((vector_size(VW * 4), aligned(4), may_alias));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef uint32_t vu_u __attribute__((vector_size(VW * 4), aligned(2), may_alias));

static inline vf load(const float *p)
{
	return *(const vf_u *)p;
}

static inline void store(float *p, vf v)
{
	*(vf_u *)p = v;
}

/* x - 0 is x for every x, signed zeros included, so this folds to a broadcast. */
static inline vf splat(float x)
{
	return x - (vf){ 0 };
}

static inline vf blend(vi mask, vf yes, vf no)
{
	return (vf)(((vu)mask & (vu)yes) | (~(vu)mask & (vu)no));
}

/*
 * Widening without shuffles: one load of 2*VW halves is VW 32-bit lanes,
 * each holding an even element in its low half and an odd element in its
 * high half.  For bf16, "lane << 16" is the even element as fp32 and
 * "lane & 0xffff0000" the odd one, exactly.  So rows are widened into a
 * de-interleaved layout -- per 2*VW elements, the VW even ones then the VW
 * odd ones -- and the query rows are permuted the same way once per item;
 * dot products do not care about order, and the output is permuted back
 * at the end.
 */
static inline void widen2_bf16(const uint16_t *p, vf *even, vf *odd)
{
	vu u = *(const vu_u *)p;

	*even = (vf)(u << 16);
	*odd = (vf)(u & 0xffff0000u);
}

/*
 * Exact binary16 -> binary32 of the low 16 bits of each lane, integer ops
 * only (no F16C needed): shift exponent and fraction into place and
 * re-bias; infinities and NaNs get the rest of the exponent range;
 * subnormals are renormalised by one float subtraction, which is exact.
 */
static inline vf fp16_lanes(vu h)
{
	const vu shifted_exp = (vu){ 0 } + (0x7c00u << 13);
	vu u = (h & 0x7fffu) << 13;
	vu exp = u & shifted_exp;
	vi is_special = (vi)(exp == shifted_exp);
	vi is_small = (vi)(exp == 0);
	vf renorm;

	u += (127u - 15u) << 23;
	u += (vu)is_special & ((128u - 16u) << 23);
	renorm = (vf)(u + (1u << 23)) - splat(6.103515625e-05f);	/* 2^-14 */
	u = ((vu)is_small & (vu)renorm) | (~(vu)is_small & u);
	return (vf)(u | ((h & 0x8000u) << 16));
}

static inline void widen2_fp16(const uint16_t *p, vf *even, vf *odd)
{
	vu u = *(const vu_u *)p;

	*even = fp16_lanes(u & 0xffffu);
	*odd = fp16_lanes(u >> 16);
}

#if NFW_BF16_NATIVE
/*
 * The native bf16 dot product, the same operation on both ISAs: lane i
 * of the accumulator (VW fp32 lanes) gains x[2i] y[2i] + x[2i+1] y[2i+1]
 * of two vectors of 2 * VW bf16 elements -- BFDOT on Arm, VDPBF16PS on
 * x86.  bdot_zip() puts chunk @j of two V rows side by side, so each
 * 32-bit lane holds one channel of both rows (the pair of tokens a weight
 * word holds): NEON's zip keeps the channels in order; x86's unpacks work
 * within 128-bit blocks, so there the two accumulators of a chunk hold its
 * channels in blocks of four, alternately -- bacc_load() and bacc_store()
 * convert from and to natural order, once per tile and register block.
 */
#if VW == 4 && defined(__ARM_NEON)
typedef float32x4_t bacc;
typedef bfloat16x8_t bvec;

static inline bacc bacc_zero(void)
{
	return vdupq_n_f32(0.0f);
}

static inline bvec bload(const uint16_t *p)
{
	return vreinterpretq_bf16_u16(vld1q_u16(p));
}

static inline bacc bdot(bacc acc, bvec x, bvec y)
{
	return vbfdotq_f32(acc, x, y);
}

static inline bvec bpair(uint32_t w)
{
	return vreinterpretq_bf16_u32(vdupq_n_u32(w));
}

static inline void bdot_zip(const uint16_t *a, const uint16_t *b, bvec *lo, bvec *hi)
{
	uint16x8_t x = vld1q_u16(a), y = vld1q_u16(b);

	*lo = vreinterpretq_bf16_u16(vzip1q_u16(x, y));
	*hi = vreinterpretq_bf16_u16(vzip2q_u16(x, y));
}

static inline void bacc_load(const float *p, bacc *lo, bacc *hi)
{
	*lo = vld1q_f32(p);
	*hi = vld1q_f32(p + VW);
}

static inline void bacc_store(float *p, bacc lo, bacc hi)
{
	vst1q_f32(p, lo);
	vst1q_f32(p + VW, hi);
}
#elif VW == 16 && defined(__AVX512BF16__) && defined(__AVX512BW__)
typedef __m512 bacc;
typedef __m512bh bvec;

static inline bacc bacc_zero(void)
{
	return _mm512_setzero_ps();
}

static inline bvec bload(const uint16_t *p)
{
	return (bvec)_mm512_loadu_si512(p);
}

static inline bacc bdot(bacc acc, bvec x, bvec y)
{
	return _mm512_dpbf16_ps(acc, x, y);
}

static inline bvec bpair(uint32_t w)
{
	return (bvec)_mm512_set1_epi32((int)w);
}

/* lo: channels 8b + 0..3 of 128-bit block b; hi: 8b + 4..7. */
static inline void bdot_zip(const uint16_t *a, const uint16_t *b, bvec *lo, bvec *hi)
{
	__m512i x = _mm512_loadu_si512(a), y = _mm512_loadu_si512(b);

	*lo = (bvec)_mm512_unpacklo_epi16(x, y);
	*hi = (bvec)_mm512_unpackhi_epi16(x, y);
}

/* Natural blocks n0..n7 (four channels each) -> lo (n0 n2 n4 n6), hi (n1 n3 n5 n7). */
static inline void bacc_load(const float *p, bacc *lo, bacc *hi)
{
	__m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + VW);

	*lo = _mm512_shuffle_f32x4(a, b, 0x88);
	*hi = _mm512_shuffle_f32x4(a, b, 0xdd);
}

static inline void bacc_store(float *p, bacc lo, bacc hi)
{
	__m512 a = _mm512_shuffle_f32x4(lo, hi, 0x44), b = _mm512_shuffle_f32x4(lo, hi, 0xee);

	_mm512_storeu_ps(p, _mm512_shuffle_f32x4(a, a, 0xd8));
	_mm512_storeu_ps(p + VW, _mm512_shuffle_f32x4(b, b, 0xd8));
}
#else
#error "NFW_BF16_NATIVE: no bf16 dot product for this ISA and width"
#endif
#endif

/*
 * The 8-bit types need no de-interleaving: one sign- or zero-extending
 * load turns VW bytes into VW 32-bit lanes in order (vpmovsxbd and
 * vpmovzxbd on x86), so their rows keep the natural element order and
 * the query is not permuted for them (perm()).  Both then take the
 * chunk's scale: a chunk of 2 * VW channels lies in one NPNM_KV_QGROUP
 * (2 * VW divides it), so one broadcast serves it, and code * scale is
 * the one rounding the format defines.
 */
_Static_assert(NPNM_KV_QGROUP % (2 * VW) == 0, "a chunk must lie in one scale group");

/*
 * VW bytes from @p, sign-extended (@sign) or zero-extended to VW 32-bit
 * lanes.  GCC 12 turns a generic __builtin_convertvector() of a byte
 * vector into one scalar insert per lane, so each ISA gets its extending
 * load spelled out.
 */
static inline vi ext8(const uint8_t *p, int sign)
{
#if VW == 8 && defined(__AVX2__)
	__m128i b = _mm_loadl_epi64((const __m128i *)p);

	return (vi)(sign ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
#elif VW == 16 && defined(__AVX512F__)
	__m128i b = _mm_loadu_si128((const __m128i *)p);

	return (vi)(sign ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
#elif VW == 4 && defined(__ARM_NEON)
	int8x8_t b = vreinterpret_s8_u32(vld1_dup_u32((const uint32_t *)(const void *)p));

	return (vi)(sign ? vmovl_s16(vget_low_s16(vmovl_s8(b))) :
		    vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_s8(b))))));
#else
	typedef int8_t vs8_u __attribute__((vector_size(VW), aligned(1), may_alias));
	typedef uint8_t vu8_u __attribute__((vector_size(VW), aligned(1), may_alias));

	return sign ? __builtin_convertvector(*(const vs8_u *)p, vi) :
		      (vi)__builtin_convertvector(*(const vu8_u *)p, vu);
#endif
}

static inline void widen2_int8(const uint8_t *p, float scale, vf *first, vf *second)
{
	*first = __builtin_convertvector(ext8(p, 1), vf) * scale;
	*second = __builtin_convertvector(ext8(p + VW, 1), vf) * scale;
}

/*
 * Exact E4M3 -> binary32 of a magnitude @mag (7 bits) and a sign already
 * in place: normal codes move exponent and fraction into place and
 * re-bias (7 -> 127); subnormal codes (exponent 0) are renormalised by one
 * exact float subtraction; 0x7f is NaN (E4M3 has no infinities).
 */
static inline vf fp8_lanes(vu mag, vu sign)
{
	vu u = (mag << 20) + ((127u - 7u) << 23);
	vf renorm = (vf)(u + (1u << 23)) - splat(0.015625f);	/* 2^-6 */
	vf x = blend((vi)(mag < 8u), renorm, (vf)u);

	x = blend((vi)(mag == 0x7fu), splat(__builtin_nanf("")), x);
	return (vf)((vu)x | sign);
}

/*
 * Where the ISA converts binary16 (F16C, AVX-512F, AArch64), E4M3 goes
 * through it: a code sign-extended to 16 bits and shifted left by 7 has
 * its exponent and fraction where binary16 keeps them and its sign in
 * bits 14 and 15, so masking bit 14 leaves the binary16 of value * 2^-8
 * for every finite code, subnormals included (binary16 has 5 exponent
 * bits to E4M3's 4).  Times 2^8 (exact) it is the code's value, then
 * times the scale the one rounding the format defines -- not times
 * (scale * 2^8), which overflows for a scale of 2^120 or more that a host
 * may well write; 0x7f would read 1.875, so it is turned into a NaN.
 * Four integer ops per 16 codes and a convert and two multiplies per
 * vector, where fp8_lanes() takes a dozen ops per vector.
 */
#if (VW == 8 && defined(__AVX2__) && defined(__F16C__)) || (VW == 16 && defined(__AVX512F__))
#define FP8_VIA_HALF 1
static inline __m256i fp8_halves(const uint8_t *p)
{
	__m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
	__m256i nan;

	h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xbf80));
	nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
				 _mm256_set1_epi16(0x3f80));
	return _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7e00)));
}
#elif VW == 4 && defined(__ARM_NEON) && defined(__aarch64__)
#define FP8_VIA_HALF 1
static inline int16x8_t fp8_halves(const uint8_t *p)
{
	int16x8_t h = vandq_s16(vshlq_n_s16(vmovl_s8(vld1_s8((const int8_t *)p)), 7),
				vdupq_n_s16((int16_t)0xbf80));
	uint16x8_t nan = vceqq_s16(vandq_s16(h, vdupq_n_s16(0x7fff)), vdupq_n_s16(0x3f80));

	return vorrq_s16(h, vandq_s16(vreinterpretq_s16_u16(nan), vdupq_n_s16(0x7e00)));
}
#else
#define FP8_VIA_HALF 0
#endif

static inline void widen2_fp8(const uint8_t *p, float scale, vf *first, vf *second)
{
#if FP8_VIA_HALF && VW == 8
	__m256i h = fp8_halves(p);

	*first = (vf)_mm256_cvtph_ps(_mm256_castsi256_si128(h)) * 256.0f * scale;
	*second = (vf)_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)) * 256.0f * scale;
#elif FP8_VIA_HALF && VW == 16
	*first = (vf)_mm512_cvtph_ps(fp8_halves(p)) * 256.0f * scale;
	*second = (vf)_mm512_cvtph_ps(fp8_halves(p + 16)) * 256.0f * scale;
#elif FP8_VIA_HALF && VW == 4
	int16x8_t h = fp8_halves(p);

	*first = (vf)vcvt_f32_f16(vreinterpret_f16_s16(vget_low_s16(h))) * 256.0f * scale;
	*second = (vf)vcvt_f32_f16(vreinterpret_f16_s16(vget_high_s16(h))) * 256.0f * scale;
#else
	vu a = (vu)ext8(p, 0), b = (vu)ext8(p + VW, 0);

	*first = fp8_lanes(a & 0x7fu, (a & 0x80u) << 24) * scale;
	*second = fp8_lanes(b & 0x7fu, (b & 0x80u) << 24) * scale;
#endif
}

/* The de-interleaved position of element @i of a 16-bit row. */
static inline uint32_t deint(uint32_t i)
{
	uint32_t base = i & ~(2u * VW - 1), k = i & (2u * VW - 1);

	return base + (k & 1u) * VW + k / 2;
}

/*
 * Where element @i of a query or output row sits in the kernel: 8-bit rows
 * and native bf16 dot products keep the natural order (@natural).
 */
static inline uint32_t perm(int natural, uint32_t i)
{
	return natural ? i : deint(i);
}

/*
 * exp(x) for x <= 0 (softmax weights): Cody-Waite reduction and the Cephes
 * expf polynomial, within 2 ulp of expf over the range; below the fp32
 * normal range, and for -inf, it returns 0.
 */
static inline vf vexp(vf x)
{
	const float lo = -87.33654f;
	vi under = (vi)(x < lo);
	vf n, r, p;
	vi e;

	x = blend(under, splat(lo), x);
	n = x * 1.44269504088896341f;
	n = (n + 12582912.0f) - 12582912.0f;	/* round to nearest integer */
	r = x - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	p = splat(1.9875691500e-4f);
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	e = (__builtin_convertvector(n, vi) + 127) << 23;
	return blend(under, splat(0.0f), p * (vf)e);
}

/*
 * Transpose-and-add: @a and @b each hold @g partial sums per token for
 * VW / @g tokens; the result holds @g / 2 partial sums per token for the
 * tokens of both, in order.  VW - 1 such steps turn VW dot-product
 * accumulators into one vector of VW logits, three vector ops per token
 * instead of a full horizontal sum each.
 */
#if VW == 16
#define LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define LO4 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define HI4 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31
#define LO2 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29
#define HI2 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31
#define LO1 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define HI1 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#elif VW == 8
#define LO4 0, 1, 2, 3, 8, 9, 10, 11
#define HI4 4, 5, 6, 7, 12, 13, 14, 15
#define LO2 0, 1, 4, 5, 8, 9, 12, 13
#define HI2 2, 3, 6, 7, 10, 11, 14, 15
#define LO1 0, 2, 4, 6, 8, 10, 12, 14
#define HI1 1, 3, 5, 7, 9, 11, 13, 15
#elif VW == 4
#define LO2 0, 1, 4, 5
#define HI2 2, 3, 6, 7
#define LO1 0, 2, 4, 6
#define HI1 1, 3, 5, 7
#endif

#define FOLD(a, b, lo, hi) (__builtin_shufflevector(a, b, lo) + __builtin_shufflevector(a, b, hi))

static inline vf fold_all(vf *acc)
{
#if VW == 16
	for (int i = 0; i < 8; i++)
		acc[i] = FOLD(acc[2 * i], acc[2 * i + 1], LO8, HI8);
#endif
#if VW >= 8
	for (int i = 0; i < 4; i++)
		acc[i] = FOLD(acc[2 * i], acc[2 * i + 1], LO4, HI4);
#endif
	for (int i = 0; i < 2; i++)
		acc[i] = FOLD(acc[2 * i], acc[2 * i + 1], LO2, HI2);
	return FOLD(acc[0], acc[1], LO1, HI1);
}


/* Lane-tree reductions: log2(VW) shuffle + op steps instead of VW - 1 scalar ops. */
#if VW == 16
#define SW8 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7
#define SW4 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11
#define SW2 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13
#define SW1 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14
#elif VW == 8
#define SW4 4, 5, 6, 7, 0, 1, 2, 3
#define SW2 2, 3, 0, 1, 6, 7, 4, 5
#define SW1 1, 0, 3, 2, 5, 4, 7, 6
#elif VW == 4
#define SW2 2, 3, 0, 1
#define SW1 1, 0, 3, 2
#endif

static inline vf vmax(vf a, vf b)
{
	return blend((vi)(a > b), a, b);
}

static inline float hmax(vf v)
{
#if VW == 16
	v = vmax(v, __builtin_shufflevector(v, v, SW8));
#endif
#if VW >= 8
	v = vmax(v, __builtin_shufflevector(v, v, SW4));
#endif
	v = vmax(v, __builtin_shufflevector(v, v, SW2));
	v = vmax(v, __builtin_shufflevector(v, v, SW1));
	return v[0];
}

static inline float hsum(vf v)
{
#if VW == 16
	v += __builtin_shufflevector(v, v, SW8);
#endif
#if VW >= 8
	v += __builtin_shufflevector(v, v, SW4);
#endif
	v += __builtin_shufflevector(v, v, SW2);
	v += __builtin_shufflevector(v, v, SW1);
	return v[0];
}

#define ALWAYS_INLINE inline __attribute__((always_inline))

/*
 * Rows of one tile: NFW_TILE tokens taken in selection order, across
 * cluster boundaries, so the per-tile work (logit folds, softmax
 * rescaling) is spread over as many tokens as possible whatever the
 * cluster size.  K rows past the tile's tokens point at a zero row, as do
 * both K and V rows past the tokens of a tile being prefetched.
 */
struct rows {
	const uint8_t *k[NFW_TILE], *v[NFW_TILE];
	const float *ks[NFW_TILE], *vs[NFW_TILE];	/* scales of a tiled type */
	const uint8_t *pf[2 * NFW_TILE];	/* the same rows in prefetch order */
	uint32_t n;
};

/* The tile computed, the next one and the last one fetched (PF_TILES on). */
struct tile {
	const struct rows *cur, *next, *far;
};

/*
 * Prefetch, for each line read, the same line of the next tile into L1 and,
 * with NFW_FAR_PREFETCH, of the tile after it with the non-temporal hint.
 * The logit phase reads K rows and passes slots 0..NFW_TILE-1, the P.V
 * phase reads V rows and passes NFW_TILE + row, so the tiles ahead arrive
 * at a steady pace over the whole tile.  pf_slot() maps rows to slots so
 * that, with 16-token clusters, the K and V pages of every cluster of a
 * tile are in flight together -- the first half of each page in the logit
 * phase, the second in the P.V phase: one page at a time measured 25-30 %
 * slower.
 *
 * The far prefetch is for cores sharing memory when the arithmetic is
 * fast enough to wait on it (AVX-512): with two cores reading, one tile of
 * lead left the kernel 25 % behind a plain gather of the same lines; the
 * far prefetch gains 10 % there and costs one core alone up to 4 % (its
 * instructions: 7 % on cache-resident data).  Two tiles of lead into L1,
 * the far prefetch alone, or far prefetches for part of the lines all
 * measured slower, and the AVX2 kernel, bound by its arithmetic, lost 6-7 %
 * with it at one and two cores.
 */
static ALWAYS_INLINE void pf_line(const struct tile *t, uint32_t slot, uint32_t byte)
{
	__builtin_prefetch(t->next->pf[slot] + byte, 0, 3);
	if (NFW_FAR_PREFETCH)
		__builtin_prefetch(t->far->pf[slot] + byte, 0, 0);
}

/* The prefetch slot of row @row's K line (its V line is the next slot). */
static inline uint32_t pf_slot(uint32_t row)
{
	const uint32_t spread = NFW_TILE / 16, in = row % 16;

	return (in / 8) * NFW_TILE + ((in % 8) * spread + row / 16) * 2;
}

/*
 * Kinds of KV element, one specialisation of every loop each: KIND_BF16,
 * KIND_FP16, then the tiled KIND_FP8 and KIND_INT8 (one byte each, with a
 * scale per NPNM_KV_QGROUP channels), and with NFW_BF16_NATIVE the bf16
 * rows of NPNM_ATTN_F_BF16_DOTS, which go to the ISA's bf16 dot product
 * unwidened (KIND_BF16_DOT).
 */
enum { KIND_BF16, KIND_FP16, KIND_FP8, KIND_INT8, KIND_BF16_DOT, KINDS };

static inline uint32_t kind_bytes(int kind)
{
	return kind == KIND_FP8 || kind == KIND_INT8 ? 1 : 2;
}

/* Elements @j .. @j + 2 * VW - 1 of row @p (scales @sc for a tiled kind). */
static ALWAYS_INLINE void widen2(int kind, const uint8_t *p, const float *sc, uint32_t j,
				 vf *even, vf *odd)
{
	switch (kind) {
	case KIND_BF16:
		widen2_bf16((const uint16_t *)p + j, even, odd);
		break;
	case KIND_FP16:
		widen2_fp16((const uint16_t *)p + j, even, odd);
		break;
	case KIND_FP8:
		widen2_fp8(p + j, sc[j / NPNM_KV_QGROUP], even, odd);
		break;
	default:
		widen2_int8(p + j, sc[j / NPNM_KV_QGROUP], even, odd);
		break;
	}
}

/*
 * A loaded value kept as one register for all its uses: GCC otherwise
 * folds the load into every FMA that uses it, one load per use, and on
 * AVX2 the logit loop then waits on the load ports (12 loads per 8 FMAs).
 */
#if VW == 8 && defined(__x86_64__)
#define KEEP_IN_REG(v) __asm__("" : "+x"(v))
#else
#define KEEP_IN_REG(v) ((void)0)
#endif

/*
 * A logit block's @qb x @tb = VW accumulators folded into VW logits by one
 * transpose-and-add, and each query row's @tb of them copied to @logit
 * ([row][NFW_TILE]) at token @t0.
 */
static ALWAYS_INLINE void put_logits(vf *acc, uint32_t qb, uint32_t tb, uint32_t r0, uint32_t t0,
				     float *logit)
{
	float lg[VW] __attribute__((aligned(VW * 4)));

	store(lg, fold_all(acc));
	/* A row's @tb logits are adjacent in @lg: one copy each. */
#pragma GCC unroll 16
	for (uint32_t r = 0; r < qb; r++)
		memcpy(&logit[(r0 + r) * NFW_TILE + t0], &lg[r * tb], tb * sizeof(float));
}

/*
 * Logits of the @qb query rows from @r0 against the @tb tokens from @t0,
 * unscaled, into @logit ([row][NFW_TILE]).  @qb x @tb = VW accumulators,
 * so each K row is widened once straight from device memory for all @qb
 * rows and the FMA chains are independent; one transpose-and-add folds
 * them into VW logits.
 */
static ALWAYS_INLINE void logits_tokens(const float *qp, uint32_t d, const struct tile *t,
					int kind, uint32_t qb, uint32_t tb, uint32_t r0,
					uint32_t t0, float *logit)
{
	vf acc[VW];
	const uint8_t *kr[VW], *pn[VW], *pfar[VW];
	const float *ks[VW];

#pragma GCC unroll 16
	for (uint32_t i = 0; i < qb * tb; i++)
		acc[i] = splat(0.0f);
	/* The rows and the lines to prefetch, once for the block. */
#pragma GCC unroll 16
	for (uint32_t u = 0; u < tb; u++) {
		kr[u] = t->cur->k[t0 + u];
		ks[u] = t->cur->ks[t0 + u];
		pn[u] = t->next->pf[t0 + u];
		pfar[u] = t->far->pf[t0 + u];
	}
	for (uint32_t j = 0; j < d; j += 2 * VW) {
		const float *q = qp + (size_t)r0 * d + j;
		vf e[VW], o[VW];

#pragma GCC unroll 16
		for (uint32_t u = 0; u < tb; u++) {
			/* pf_line() of slot t0 + u, as the P.V loop does it. */
			__builtin_prefetch(pn[u] + j * kind_bytes(kind), 0, 3);
			if (NFW_FAR_PREFETCH)
				__builtin_prefetch(pfar[u] + j * kind_bytes(kind), 0, 0);
			widen2(kind, kr[u], ks[u], j, &e[u], &o[u]);
		}
		/*
		 * Each query vector is loaded for the block's tokens where it
		 * is used: written as one load of every query vector up front,
		 * they crowded out accumulators (AVX2 spilled two of its eight;
		 * this order measured 5-8 % faster there).
		 */
#pragma GCC unroll 16
		for (uint32_t r = 0; r < qb; r++) {
			vf qe = load(q + (size_t)r * d), qo;

			KEEP_IN_REG(qe);
#pragma GCC unroll 16
			for (uint32_t u = 0; u < tb; u++)
				acc[r * tb + u] += qe * e[u];
			qo = load(q + (size_t)r * d + VW);
			KEEP_IN_REG(qo);
#pragma GCC unroll 16
			for (uint32_t u = 0; u < tb; u++)
				acc[r * tb + u] += qo * o[u];
		}
	}
	put_logits(acc, qb, tb, r0, t0, logit);
}

#if NFW_BF16_NATIVE
/*
 * logits_tokens() with the native bf16 dot product: the queries are bf16
 * in natural order (at @qp), each K row goes in unwidened, and one
 * instruction takes 2 * VW products into VW lanes -- lane i holds
 * elements 2i and 2i + 1 of each 2 * VW -- so the lanes still sum to the
 * dot product and put_logits() applies.
 */
static ALWAYS_INLINE void logits_bfdot(const float *qp, uint32_t d, const struct tile *t,
				       uint32_t qb, uint32_t tb, uint32_t r0, uint32_t t0,
				       float *logit)
{
	const uint16_t *qh = (const uint16_t *)(const void *)qp;
	bacc acc[VW];
	vf sums[VW];
	const uint16_t *kr[VW];
	const uint8_t *pn[VW], *pfar[VW];

#pragma GCC unroll 16
	for (uint32_t i = 0; i < qb * tb; i++)
		acc[i] = bacc_zero();
#pragma GCC unroll 16
	for (uint32_t u = 0; u < tb; u++) {
		kr[u] = (const uint16_t *)(const void *)t->cur->k[t0 + u];
		pn[u] = t->next->pf[t0 + u];
		pfar[u] = t->far->pf[t0 + u];
	}
	for (uint32_t j = 0; j < d; j += 2 * VW) {
		bvec k[VW];

#pragma GCC unroll 16
		for (uint32_t u = 0; u < tb; u++) {
			__builtin_prefetch(pn[u] + j * 2, 0, 3);
			if (NFW_FAR_PREFETCH)
				__builtin_prefetch(pfar[u] + j * 2, 0, 0);
			k[u] = bload(kr[u] + j);
		}
#pragma GCC unroll 16
		for (uint32_t r = 0; r < qb; r++) {
			bvec q = bload(qh + (size_t)(r0 + r) * d + j);

#pragma GCC unroll 16
			for (uint32_t u = 0; u < tb; u++)
				acc[r * tb + u] = bdot(acc[r * tb + u], q, k[u]);
		}
	}
#pragma GCC unroll 16
	for (uint32_t i = 0; i < VW; i++)
		sums[i] = (vf)acc[i];
	put_logits(sums, qb, tb, r0, t0, logit);
}
#endif

/* Logits of the @qb query rows from @r0 against the whole tile. */
static ALWAYS_INLINE void logits_block(const float *qp, uint32_t d, const struct tile *t, int kind,
				       uint32_t qb, uint32_t r0, float *logit)
{
	for (uint32_t t0 = 0; t0 < NFW_TILE; t0 += VW / qb) {
#if NFW_BF16_NATIVE
		if (kind == KIND_BF16_DOT) {
			logits_bfdot(qp, d, t, qb, VW / qb, r0, t0, logit);
			continue;
		}
#endif
		logits_tokens(qp, d, t, kind, qb, VW / qb, r0, t0, logit);
	}
}

/*
 * A row's reference maximum m is raised only when a logit exceeds it by
 * more than this (log space), so weights reach e^8 at most -- far from
 * fp32 overflow even summed over millions of tokens -- and the rescale,
 * with its horizontal max and expf, is rare after the first tiles.
 */
#define RESCALE_SLACK 8.0f

/*
 * Each lane rounded to bfloat16 (to nearest, ties to even) and widened
 * back; a NaN stays as it is (the carry could make a NaN of all-ones
 * payload a zero).
 */
static inline vf bf16_round(vf x)
{
	vu u = (vu)x;
	vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;

	return blend((vi)(x == x), (vf)r, x);
}

/*
 * Online softmax of one row over the tile: logits past the tile's tokens
 * are -inf, the weights exp(logit - m) come from one vector exp per VW
 * tokens, and their sum is kept as a vector (*lv) so no tile pays a
 * horizontal sum.  With @bf16 (NPNM_ATTN_F_BF16_DOTS) the sum takes the
 * weights as computed and P.V their bf16 roundings, as FlashAttention
 * casts P for its P.V product.  With @pairs (KIND_BF16_DOT) the bf16
 * weights also go there as pairs of tokens 2i and 2i + 1 in one 32-bit
 * word, the operand bdot() takes in P.V.
 */
static void softmax_row(float *logit, float *p, uint32_t n, float scale, float *m, vf *lv,
			float *o, uint32_t d, int bf16, uint32_t *pairs)
{
	vf x[NFW_TILE / VW];
	vf mx = splat(-INFINITY);
	float top;

	for (uint32_t b = 0; b < NFW_TILE / VW; b++) {
		vi idx;

		for (int i = 0; i < VW; i++)
			idx[i] = (int32_t)(b * VW) + i;
		x[b] = blend(idx < (int32_t)n, load(logit + b * VW) * scale, splat(-INFINITY));
		mx = vmax(mx, x[b]);
	}
	top = hmax(mx);
	if (top > *m + RESCALE_SLACK) {
		float alpha = expf(*m - top);	/* 0 on the first tile */
		vf va = splat(alpha);

		*lv *= va;
		for (uint32_t j = 0; j < d; j += VW)
			store(o + j, load(o + j) * va);
		*m = top;
	}
	for (uint32_t b = 0; b < NFW_TILE / VW; b++) {
		vf w = vexp(x[b] - *m);

		store(p + b * VW, bf16 ? bf16_round(w) : w);
		*lv += w;
	}
	if (pairs)
		for (uint32_t i = 0; i < NFW_TILE / 2; i++) {
			uint32_t lo, hi;

			memcpy(&lo, &p[2 * i], sizeof(lo));
			memcpy(&hi, &p[2 * i + 1], sizeof(hi));
			pairs[i] = lo >> 16 | (hi & 0xffff0000u);	/* exact: already bf16 */
		}
}

/* P.V register blocks: rows x chunks of 2 * VW elements of the value row. */
#if VW == 8
#define PV_ROWS 4	/* AVX2 has 16 registers: 8 accumulators, 4 weights, the chunk */
#define PV_CHUNKS 1u
#else
#define PV_ROWS 4
#define PV_CHUNKS 2u
#endif

/*
 * o += p V for @rb rows from @r0 and @jb chunks of 2 * VW output elements
 * from @j0: the accumulators stay in registers over the tile's tokens and
 * each V chunk is widened once for all @rb rows.
 */
static ALWAYS_INLINE void pv_block(float *op, const float *p, uint32_t d, const struct tile *t,
				   int kind, uint32_t r0, uint32_t rb, uint32_t j0, uint32_t jb)
{
	vf acc[PV_ROWS][2 * PV_CHUNKS];

#pragma GCC unroll 8
	for (uint32_t r = 0; r < rb; r++)
#pragma GCC unroll 8
		for (uint32_t c = 0; c < 2 * jb; c++)
			acc[r][c] = load(op + (size_t)(r0 + r) * d + j0 + c * VW);
	for (uint32_t u = 0; u < t->cur->n; u++) {
#pragma GCC unroll 8
		for (uint32_t c = 0; c < jb; c++) {
			vf e, o;

			pf_line(t, NFW_TILE + u, (j0 + c * 2 * VW) * kind_bytes(kind));
			widen2(kind, t->cur->v[u], t->cur->vs[u], j0 + c * 2 * VW, &e, &o);
#pragma GCC unroll 8
			for (uint32_t r = 0; r < rb; r++) {
				vf pr = splat(p[(r0 + r) * NFW_TILE + u]);

				acc[r][2 * c] += pr * e;
				acc[r][2 * c + 1] += pr * o;
			}
		}
	}
#pragma GCC unroll 8
	for (uint32_t r = 0; r < rb; r++)
#pragma GCC unroll 8
		for (uint32_t c = 0; c < 2 * jb; c++)
			store(op + (size_t)(r0 + r) * d + j0 + c * VW, acc[r][c]);
}

#if NFW_BF16_NATIVE
/*
 * pv_block() with the native bf16 dot product: tokens go in pairs, the
 * two V rows' chunks zipped (bdot_zip()) so that each 32-bit lane holds
 * one channel of both, against the pair's bf16 weights (@p: the words
 * softmax_row() put in @pairs, NFW_TILE of them per row); an odd last
 * token pairs with the zero row past the tile and a zero weight.  Each
 * chunk of 2 * VW channels has two accumulators, in bdot_zip()'s order.
 */
static ALWAYS_INLINE void pv_bfdot(float *op, const float *p, uint32_t d, const struct tile *t,
				   uint32_t r0, uint32_t rb, uint32_t j0, uint32_t jb)
{
	const uint32_t *pairs = (const uint32_t *)(const void *)p;
	bacc acc[PV_ROWS][2 * PV_CHUNKS];

#pragma GCC unroll 8
	for (uint32_t r = 0; r < rb; r++)
#pragma GCC unroll 8
		for (uint32_t c = 0; c < jb; c++)
			bacc_load(op + (size_t)(r0 + r) * d + j0 + c * 2 * VW, &acc[r][2 * c],
				  &acc[r][2 * c + 1]);
	for (uint32_t u = 0; u < t->cur->n; u += 2) {
		const uint16_t *va = (const uint16_t *)(const void *)t->cur->v[u];
		const uint16_t *vb = (const uint16_t *)(const void *)t->cur->v[u + 1];

#pragma GCC unroll 8
		for (uint32_t c = 0; c < jb; c++) {
			const uint32_t j = j0 + c * 2 * VW;
			bvec lo, hi;

			bdot_zip(va + j, vb + j, &lo, &hi);
			pf_line(t, NFW_TILE + u, j * 2);
			pf_line(t, NFW_TILE + u + 1, j * 2);
#pragma GCC unroll 8
			for (uint32_t r = 0; r < rb; r++) {
				bvec w = bpair(pairs[(r0 + r) * NFW_TILE + u / 2]);

				acc[r][2 * c] = bdot(acc[r][2 * c], lo, w);
				acc[r][2 * c + 1] = bdot(acc[r][2 * c + 1], hi, w);
			}
		}
	}
#pragma GCC unroll 8
	for (uint32_t r = 0; r < rb; r++)
#pragma GCC unroll 8
		for (uint32_t c = 0; c < jb; c++)
			bacc_store(op + (size_t)(r0 + r) * d + j0 + c * 2 * VW, acc[r][2 * c],
				   acc[r][2 * c + 1]);
}
#endif

/* The rows of one P.V row block, full chunk blocks then single chunks. */
static ALWAYS_INLINE void pv_rows(float *op, const float *p, uint32_t d, const struct tile *t,
				  int kind, uint32_t r0, uint32_t rb)
{
	uint32_t j = 0;

#if NFW_BF16_NATIVE
	if (kind == KIND_BF16_DOT) {
		for (; j + PV_CHUNKS * 2 * VW <= d; j += PV_CHUNKS * 2 * VW)
			pv_bfdot(op, p, d, t, r0, rb, j, PV_CHUNKS);
		for (; j < d; j += 2 * VW)
			pv_bfdot(op, p, d, t, r0, rb, j, 1);
		return;
	}
#endif

	for (; j + PV_CHUNKS * 2 * VW <= d; j += PV_CHUNKS * 2 * VW)
		pv_block(op, p, d, t, kind, r0, rb, j, PV_CHUNKS);
	for (; j < d; j += 2 * VW)
		pv_block(op, p, d, t, kind, r0, rb, j, 1);
}

struct kstate {
	const float *qp;
	float *op, *logit, *p;
	float m[NFW_MAX_GROUP];
	vf l[NFW_MAX_GROUP];	/* per-lane partial sums of the weights */
};

/*
 * Each register-blocked loop gets a function of its own, specialised for
 * its block shape and KV type: inlined into one big item function, the
 * P.V loop kept two of its sixteen accumulators on the stack.
 */
#define NOINLINE __attribute__((noinline))
typedef void (*logits_fn)(const float *qp, uint32_t d, const struct tile *t, uint32_t r0,
			  float *logit);
typedef void (*pv_fn)(float *op, const float *p, uint32_t d, const struct tile *t, uint32_t r0);

#define LOGITS_FN(qb, kind)							\
	static NOINLINE void logits_##qb##_##kind(const float *qp, uint32_t d,	\
						   const struct tile *t, uint32_t r0,	\
						   float *logit)			\
	{									\
		logits_block(qp, d, t, kind, qb, r0, logit);			\
	}
#define PV_FN(rb, kind)								\
	static NOINLINE void pv_##rb##_##kind(float *op, const float *p, uint32_t d, \
					      const struct tile *t, uint32_t r0)	\
	{									\
		pv_rows(op, p, d, t, kind, r0, rb);				\
	}
#define KIND_FNS(kind) LOGITS_FN(4, kind) LOGITS_FN(2, kind) LOGITS_FN(1, kind) \
	PV_FN(4, kind) PV_FN(1, kind)
_Static_assert(PV_ROWS == 4, "the P.V row blocks are named for 4 rows");
KIND_FNS(KIND_BF16)
KIND_FNS(KIND_FP16)
KIND_FNS(KIND_FP8)
KIND_FNS(KIND_INT8)
#if NFW_BF16_NATIVE
KIND_FNS(KIND_BF16_DOT)
#endif

static const logits_fn logits_fns[KINDS][3] = {
	{ logits_4_KIND_BF16, logits_2_KIND_BF16, logits_1_KIND_BF16 },
	{ logits_4_KIND_FP16, logits_2_KIND_FP16, logits_1_KIND_FP16 },
	{ logits_4_KIND_FP8, logits_2_KIND_FP8, logits_1_KIND_FP8 },
	{ logits_4_KIND_INT8, logits_2_KIND_INT8, logits_1_KIND_INT8 },
#if NFW_BF16_NATIVE
	{ logits_4_KIND_BF16_DOT, logits_2_KIND_BF16_DOT, logits_1_KIND_BF16_DOT },
#endif
};
static const pv_fn pv_fns[KINDS][2] = {
	{ pv_4_KIND_BF16, pv_1_KIND_BF16 },
	{ pv_4_KIND_FP16, pv_1_KIND_FP16 },
	{ pv_4_KIND_FP8, pv_1_KIND_FP8 },
	{ pv_4_KIND_INT8, pv_1_KIND_INT8 },
#if NFW_BF16_NATIVE
	{ pv_4_KIND_BF16_DOT, pv_1_KIND_BF16_DOT },
#endif
};

/* One tile of up to NFW_TILE tokens folded into every query row's state. */
static ALWAYS_INLINE void do_tile(struct kstate *s, const struct nfw_attn_args *a,
				  const struct tile *t, int kind)
{
	const uint32_t d = a->head_dim, g = a->group;
	/* KIND_BF16_DOT's weight pairs go where the row's logits were. */
	uint32_t *pairs = kind == KIND_BF16_DOT ? (uint32_t *)(void *)s->logit : NULL;
	const float *pv_in = pairs ? s->logit : s->p;
	uint32_t r = 0;

	for (; r + 4 <= g; r += 4)
		logits_fns[kind][0](s->qp, d, t, r, s->logit);
	if (r + 2 <= g) {
		logits_fns[kind][1](s->qp, d, t, r, s->logit);
		r += 2;
	}
	if (r < g)
		logits_fns[kind][2](s->qp, d, t, r, s->logit);
	for (r = 0; r < g; r++)
		softmax_row(s->logit + r * NFW_TILE, s->p + r * NFW_TILE, t->cur->n, a->scale, &s->m[r],
			    &s->l[r], s->op + (size_t)r * d, d, a->flags & NPNM_ATTN_F_BF16_DOTS,
			    pairs ? pairs + r * NFW_TILE : NULL);
	for (r = 0; r + PV_ROWS <= g; r += PV_ROWS)
		pv_fns[kind][0](s->op, pv_in, d, t, r);
	for (; r < g; r++)
		pv_fns[kind][1](s->op, pv_in, d, t, r);
}

/* Tiles prefetched ahead of the one computed. */
#define PF_TILES (NFW_FAR_PREFETCH ? 2u : 1u)
/* Selections ahead whose cluster-table entry is prefetched. */
#define PF_TABLE 8u

/* Walks the selected clusters' tokens in order, skipping unusable ids. */
struct token_iter {
	const struct nfw_attn_args *a;
	uint32_t sel, pos, end;
};

/* Next NFW_TILE tokens into @r (fewer at the end, n == 0 when done). */
/*
 * Token @t of the K or V array at @base, and its scales for a tiled type
 * (enum npnm_kv_dtype has the layout, blocks a->stride apart).  The scale line is a miss of its
 * own, once per tile: fetch it when its tile's first row is taken.
 */
static inline const uint8_t *row_at(const struct nfw_attn_args *a, const uint8_t *base,
				    uint32_t t, int first, const float **sc)
{
	const uint8_t *tile = base + (size_t)(t / NPNM_KV_QTILE) * a->stride;

	if (!a->tile_bytes)
		return tile + (size_t)(t % NPNM_KV_QTILE) * a->row_bytes;
	*sc = (const float *)(tile + (size_t)NPNM_KV_QTILE * a->head_dim);
	if (first || t % NPNM_KV_QTILE == 0)
		__builtin_prefetch(*sc, 0, 3);
	return tile + (size_t)(t % NPNM_KV_QTILE) * a->head_dim;
}

static void next_rows(struct token_iter *it, struct rows *r, const uint8_t *zero)
{
	const struct nfw_attn_args *a = it->a;

	r->n = 0;
	while (r->n < NFW_TILE) {
		struct npnm_cluster c;
		uint32_t take;

		if (it->pos == it->end) {
			if (it->sel == a->nr_sel)
				break;
			/* Table entries are misses of their own: fetch ahead too. */
			if (it->sel + PF_TABLE < a->nr_sel) {
				uint32_t id = __atomic_load_n(&a->sel[it->sel + PF_TABLE],
							      __ATOMIC_RELAXED);

				if (id < a->nr_clusters)
					__builtin_prefetch(&a->table[id], 0, 3);
			}
			if (!nfw_attn_cluster(a, it->sel, &c)) {
				it->pos = c.first;
				it->end = c.first + c.count;
			}
			it->sel++;
			continue;
		}
		/* The rest of this cluster, or what of it fits. */
		take = it->end - it->pos < NFW_TILE - r->n ? it->end - it->pos : NFW_TILE - r->n;
		for (uint32_t u = 0; u < take; u++) {
			uint32_t slot = pf_slot(r->n + u), at = r->n + u;

			r->k[at] = r->pf[slot] = row_at(a, a->k, it->pos + u, !u, &r->ks[at]);
			r->v[at] = r->pf[slot + 1] = row_at(a, a->v, it->pos + u, !u, &r->vs[at]);
		}
		r->n += take;
		it->pos += take;
	}
	for (uint32_t u = r->n; u < NFW_TILE; u++) {
		uint32_t slot = pf_slot(u);

		r->k[u] = r->pf[slot] = zero;
		r->v[u] = r->pf[slot + 1] = zero;
		r->ks[u] = r->vs[u] = (const float *)zero;
	}
}

static void prefetch_rows(const struct rows *r, uint32_t row_bytes)
{
	for (uint32_t u = 0; u < r->n; u++)
		for (uint32_t b = 0; b < row_bytes; b += 64) {
			__builtin_prefetch(r->k[u] + b, 0, 3);
			__builtin_prefetch(r->v[u] + b, 0, 3);
		}
}

static ALWAYS_INLINE void run_item(const struct nfw_attn_args *a, struct kstate *s,
				   const uint8_t *zero, int kind)
{
	struct token_iter it = { a, 0, 0, 0 };
	struct rows ring[PF_TILES + 1];

	/* The first tiles have nothing before them to hide their fetch. */
	for (uint32_t i = 0; i < PF_TILES; i++) {
		next_rows(&it, &ring[i], zero);
		prefetch_rows(&ring[i], a->head_dim * kind_bytes(kind));
	}
	for (uint32_t i = 0; ring[i % (PF_TILES + 1)].n; i++) {
		struct rows *last = &ring[(i + PF_TILES) % (PF_TILES + 1)];
		struct tile t = { &ring[i % (PF_TILES + 1)], &ring[(i + 1) % (PF_TILES + 1)], last };

		next_rows(&it, last, zero);
		do_tile(s, a, &t, kind);
	}
}

/* Items of NPNM_ATTN_F_BF16_DOTS over bf16 KV where the ISA has the products. */
static void run_native(const struct nfw_attn_args *a, struct kstate *s, const uint8_t *zero)
{
#if NFW_BF16_NATIVE
	run_item(a, s, zero, KIND_BF16_DOT);
#else
	(void)a, (void)s, (void)zero;	/* never called: native is 0 */
#endif
}

void NFW_VEC_FN(const struct nfw_attn_args *a, float *scratch)
{
	const uint32_t d = a->head_dim, g = a->group;
	float *qp = scratch;				/* [g][d] permuted queries */
	float *op = qp + (size_t)g * d;			/* [g][d] permuted outputs */
	float *logit = op + (size_t)g * d;		/* [g][NFW_TILE] */
	float *p = logit + (size_t)g * NFW_TILE;	/* [g][NFW_TILE] softmax weights */
	/* A zero row of any kind, [d] halves; read as scales it is zeros too. */
	uint8_t *zero = (uint8_t *)(p + (size_t)g * NFW_TILE);
	struct kstate s = { .qp = qp, .op = op, .logit = logit, .p = p };
	const int bf16_dots = !!(a->flags & NPNM_ATTN_F_BF16_DOTS);
	/* The native products take bf16 KV as it is; other types are widened. */
	const int native = NFW_BF16_NATIVE && bf16_dots && a->kv_dtype == NPNM_DTYPE_BF16;
	const int natural = native || a->kv_dtype == NPNM_DTYPE_FP8_E4M3 ||
			    a->kv_dtype == NPNM_DTYPE_INT8;
	uint16_t *qh = (uint16_t *)(void *)qp;	/* native: bf16 queries */

	memset(zero, 0, d * sizeof(uint16_t));
	for (uint32_t r = 0; r < g; r++) {
		for (uint32_t i = 0; i < d; i++) {
			float x = a->q[(size_t)r * d + i];

			if (native)
				qh[(size_t)r * d + i] = nelssa_f32_to_bf16(x);
			else
				qp[(size_t)r * d + perm(natural, i)] =
					bf16_dots ? nelssa_bf16_round(x) : x;
			op[(size_t)r * d + i] = 0.0f;
		}
		s.m[r] = -INFINITY;
		s.l[r] = splat(0.0f);
	}
	if (native)
		run_native(a, &s, zero);
	else if (a->kv_dtype == NPNM_DTYPE_FP16)
		run_item(a, &s, zero, KIND_FP16);
	else if (a->kv_dtype == NPNM_DTYPE_FP8_E4M3)
		run_item(a, &s, zero, KIND_FP8);
	else if (a->kv_dtype == NPNM_DTYPE_INT8)
		run_item(a, &s, zero, KIND_INT8);
	else
		run_item(a, &s, zero, KIND_BF16);
	for (uint32_t r = 0; r < g; r++) {
		float l = hsum(s.l[r]), inv = l > 0.0f ? l : isnan(l) ? l : 1.0f;

		/* A NaN logit makes a NaN state (o and LSE), never the empty one. */
		a->lse[r] = l > 0.0f ? s.m[r] + logf(l) : isnan(l) ? l : -INFINITY;
		for (uint32_t i = 0; i < d; i++)
			a->o[(size_t)r * d + i] = op[(size_t)r * d + perm(natural, i)] / inv;
	}
}

/*
 * The compute ceiling of this kernel (nfw_attn_peak()): the logit loop's
 * instruction mix with nothing else around it -- no softmax, folds,
 * prefetches or misses.  Per 2 * VW KV elements one load from L1 and the
 * two widening ops, and per query row two FMAs with a query vector loaded
 * from L1 once for the block's tokens (the P.V loop does the same FMAs per
 * element with a broadcast weight in place of that load).  Query rows go
 * in blocks of 4, 2 and 1 as in do_tile(), each block against enough
 * tokens for PEAK_ACC independent accumulators.  Of the variants measured
 * on AVX2 this one is the fastest: twelve accumulators with the query
 * vectors as FMA memory operands came 6 % slower (bound by the load ports).
 */
#if VW == 8
#define PEAK_ACC 8	/* AVX2's 16 registers: 8 accumulators, 4 widened rows, a query */
#else
#define PEAK_ACC 16
#endif
#define PEAK_TOKENS 48u	/* a multiple of PEAK_ACC / qb for qb = 4, 2, 1 */

#if NFW_BF16_NATIVE
/*
 * The native logit loop's mix (logits_bfdot()): per 2 * VW KV elements
 * one load, and per query row a load and one bf16 dot product; @q is read
 * as bf16.
 */
static ALWAYS_INLINE void peak_bfdot(const float *q, const uint8_t *kv, uint32_t d, uint32_t qb,
				     vf *sink)
{
	const uint32_t tb = PEAK_ACC / qb;
	const uint16_t *qh = (const uint16_t *)(const void *)q;
	const uint16_t *kh = (const uint16_t *)(const void *)kv;

	for (uint32_t t0 = 0; t0 < PEAK_TOKENS; t0 += tb) {
		bacc acc[PEAK_ACC];

#pragma GCC unroll 16
		for (int i = 0; i < PEAK_ACC; i++)
			acc[i] = bacc_zero();
		for (uint32_t j = 0; j < d; j += 2 * VW) {
			bvec k[PEAK_ACC];

#pragma GCC unroll 16
			for (uint32_t u = 0; u < tb; u++)
				k[u] = bload(kh + (size_t)(t0 + u) * d + j);
#pragma GCC unroll 16
			for (uint32_t r = 0; r < qb; r++) {
				bvec qv = bload(qh + (size_t)r * d + j);

#pragma GCC unroll 16
				for (uint32_t u = 0; u < tb; u++)
					acc[r * tb + u] = bdot(acc[r * tb + u], qv, k[u]);
			}
		}
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_ACC; i++)
			*sink += (vf)acc[i];
	}
}
#endif

static ALWAYS_INLINE void peak_block(const float *q, const uint8_t *kv, const float *sc,
				     uint32_t d, uint32_t qb, int kind, vf *sink)
{
	const uint32_t tb = PEAK_ACC / qb;

#if NFW_BF16_NATIVE
	if (kind == KIND_BF16_DOT) {
		peak_bfdot(q, kv, d, qb, sink);
		return;
	}
#endif

	for (uint32_t t0 = 0; t0 < PEAK_TOKENS; t0 += tb) {
		vf acc[PEAK_ACC];

#pragma GCC unroll 16
		for (int i = 0; i < PEAK_ACC; i++)
			acc[i] = splat(0.0f);
		for (uint32_t j = 0; j < d; j += 2 * VW) {
			vf e[PEAK_ACC], o[PEAK_ACC];

#pragma GCC unroll 16
			for (uint32_t u = 0; u < tb; u++)
				widen2(kind, kv + (size_t)(t0 + u) * d * kind_bytes(kind), sc, j, &e[u],
				       &o[u]);
#pragma GCC unroll 16
			for (uint32_t r = 0; r < qb; r++) {
				vf qe = load(q + (size_t)r * d + j), qo;

				KEEP_IN_REG(qe);
#pragma GCC unroll 16
				for (uint32_t u = 0; u < tb; u++)
					acc[r * tb + u] += qe * e[u];
				qo = load(q + (size_t)r * d + j + VW);
				KEEP_IN_REG(qo);
#pragma GCC unroll 16
				for (uint32_t u = 0; u < tb; u++)
					acc[r * tb + u] += qo * o[u];
			}
		}
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_ACC; i++)
			*sink += acc[i];
	}
}

/*
 * One function per block shape and KV kind, and per common head dim a
 * copy with the dim a constant: every query vector is then a fixed
 * displacement from one base register, as in a hand-scheduled loop,
 * instead of a recomputed address (a generic copy covers the other dims;
 * the kinds other than bf16 get the copy for 128 only).
 */
#define PEAK_FN(qb, dim, kind)							\
	static NOINLINE void peak_##qb##_##dim##_##kind(const float *q, const uint8_t *kv, \
							const float *sc, uint32_t d, vf *sink) \
	{									\
		peak_block(q, kv, sc, dim ? dim : d, qb, kind, sink);		\
	}
#define PEAK_FNS(dim, kind) PEAK_FN(4, dim, kind) PEAK_FN(2, dim, kind) PEAK_FN(1, dim, kind)
PEAK_FNS(0, KIND_BF16)
PEAK_FNS(64, KIND_BF16)
PEAK_FNS(128, KIND_BF16)
PEAK_FNS(256, KIND_BF16)
PEAK_FNS(0, KIND_FP16)
PEAK_FNS(128, KIND_FP16)
PEAK_FNS(0, KIND_FP8)
PEAK_FNS(128, KIND_FP8)
PEAK_FNS(0, KIND_INT8)
PEAK_FNS(128, KIND_INT8)
#if NFW_BF16_NATIVE
PEAK_FNS(0, KIND_BF16_DOT)
PEAK_FNS(128, KIND_BF16_DOT)
#endif

typedef void (*peak_fn)(const float *q, const uint8_t *kv, const float *sc, uint32_t d,
			vf *sink);

#define PEAK_ROWS(dim, kind) { peak_4_##dim##_##kind, peak_2_##dim##_##kind, peak_1_##dim##_##kind }

/* [kind][dim: any, 64, 128, 256][4, 2, 1 rows]: compile-time dims where there are copies. */
static const peak_fn peak_table[KINDS][4][3] = {
	[KIND_BF16] = { PEAK_ROWS(0, KIND_BF16), PEAK_ROWS(64, KIND_BF16),
			PEAK_ROWS(128, KIND_BF16), PEAK_ROWS(256, KIND_BF16) },
	[KIND_FP16] = { PEAK_ROWS(0, KIND_FP16), PEAK_ROWS(0, KIND_FP16),
			PEAK_ROWS(128, KIND_FP16), PEAK_ROWS(0, KIND_FP16) },
	[KIND_FP8] = { PEAK_ROWS(0, KIND_FP8), PEAK_ROWS(0, KIND_FP8),
		       PEAK_ROWS(128, KIND_FP8), PEAK_ROWS(0, KIND_FP8) },
	[KIND_INT8] = { PEAK_ROWS(0, KIND_INT8), PEAK_ROWS(0, KIND_INT8),
			PEAK_ROWS(128, KIND_INT8), PEAK_ROWS(0, KIND_INT8) },
#if NFW_BF16_NATIVE
	[KIND_BF16_DOT] = { PEAK_ROWS(0, KIND_BF16_DOT), PEAK_ROWS(0, KIND_BF16_DOT),
			    PEAK_ROWS(128, KIND_BF16_DOT), PEAK_ROWS(0, KIND_BF16_DOT) },
#endif
};

#define PEAK_NAME_(fn) fn##_peak
#define PEAK_NAME(fn) PEAK_NAME_(fn)

uint64_t PEAK_NAME(NFW_VEC_FN)(uint32_t d, uint32_t g, uint8_t kv_dtype, uint32_t flags,
			       uint64_t passes)
{
	uint8_t kv[2 * PEAK_TOKENS * NFW_MAX_HEAD_DIM] __attribute__((aligned(64)));	/* 24 KiB */
	float q[NFW_MAX_GROUP * NFW_MAX_HEAD_DIM] __attribute__((aligned(64)));	/* 16 KiB */
	float sc[NFW_MAX_HEAD_DIM / NPNM_KV_QGROUP];
	const int native = NFW_BF16_NATIVE && (flags & NPNM_ATTN_F_BF16_DOTS) &&
			   kv_dtype == NPNM_DTYPE_BF16;
	const int kind = native ? KIND_BF16_DOT : kv_dtype == NPNM_DTYPE_BF16 ? KIND_BF16 :
			 kv_dtype == NPNM_DTYPE_FP16 ? KIND_FP16 :
			 kv_dtype == NPNM_DTYPE_FP8_E4M3 ? KIND_FP8 : KIND_INT8;
	const peak_fn *fns;
	volatile float out;
	vf sink = splat(0.0f);

	if (!d || d > NFW_MAX_HEAD_DIM || d % (2 * VW) || !g || g > NFW_MAX_GROUP ||
	    !npnm_kv_known(kv_dtype))
		return 0;
	/* Values in [1, 1.5) or so in every kind, scales 1/64: no denormals, no NaN. */
	for (uint32_t i = 0; i < PEAK_TOKENS * d; i++) {
		if (kind == KIND_BF16 || kind == KIND_BF16_DOT || kind == KIND_FP16) {
			uint16_t h = (uint16_t)((kind == KIND_FP16 ? 0x3c00u : 0x3f80u) + i % 64u);

			memcpy(kv + 2 * i, &h, 2);
		} else {
			kv[i] = (uint8_t)(kind == KIND_FP8 ? 0x38u + i % 4u : 64u + i % 32u);
		}
	}
	for (uint32_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++)
		sc[i] = 1.0f / 64.0f;
	for (uint32_t i = 0; i < g * d; i++)
		q[i] = 1.0f / 1024.0f;
	fns = peak_table[kind][d == 64 ? 1 : d == 128 ? 2 : d == 256 ? 3 : 0];
	for (uint64_t n = 0; n < passes; n++) {
		uint32_t r = 0;

		for (; r + 4 <= g; r += 4)
			fns[0](q + (size_t)r * d, kv, sc, d, &sink);
		if (r + 2 <= g) {
			fns[1](q + (size_t)r * d, kv, sc, d, &sink);
			r += 2;
		}
		if (r < g)
			fns[2](q + (size_t)r * d, kv, sc, d, &sink);
		sink *= 0.5f;	/* stays finite, however many passes */
	}
	out = hsum(sink);
	(void)out;
	return passes * 2u * g * d * PEAK_TOKENS;
}
