// SPDX-License-Identifier: MIT
/*
 * Firmware kernels against float64 references: SPARSE_ATTN on every ISA
 * this CPU runs, across head dims, GQA groups, cluster sizes 1..64 and
 * selections from none to all; vector paths against the scalar path;
 * KV_WRITE (scatter and append) feeding attention; FILL and COPY; SELFTEST.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nelssa/fw.h>
#include <nelssa/half.h>

#include "fwfixture.h"
#include "../../firmware/fw_internal.h"

struct attn_case {
	enum nfw_isa isa;
	uint32_t d, g;
};

static void need_isa(enum nfw_isa isa)
{
	if (!nfw_isa_supported(isa))
		skip();
}

static void run_ok(struct fx *f, enum nfw_isa isa)
{
	uint32_t detail;

	assert_int_equal(nfw_run(&f->mem, &f->cmd, isa, &f->scratch, &detail), NPNM_ST_OK);
}

/* A batch of items with random lengths, cluster sizes and selections. */
static void attn_shape(void **state)
{
	const struct attn_case *c = *state;
	struct tu_rng rng;
	struct fx f;
	char what[64];

	need_isa(c->isa);
	tu_rng_for(&rng, "attn_shape", c->isa * 10000u + c->d * 10u + c->g);
	fx_init(&f, 64ull << 20, c->d, c->g, NPNM_DTYPE_BF16);
	fx_add_item(&f, &rng, 1 + tu_below(&rng, 3000), 1 + tu_below(&rng, 64), 0);
	fx_add_item(&f, &rng, 1 + tu_below(&rng, 3000), 1 + tu_below(&rng, 64), 1000);
	for (int i = 0; i < 4; i++)
		fx_add_item(&f, &rng, 1 + tu_below(&rng, 3000), 1 + tu_below(&rng, 64),
			    tu_below(&rng, 1001));
	fx_finish(&f);
	run_ok(&f, c->isa);
	for (uint32_t i = 0; i < f.nr_items; i++) {
		snprintf(what, sizeof(what), "%s d%u g%u item %u", nfw_isa_name(c->isa), c->d, c->g, i);
		assert_int_equal(fx_check(&f, i, what), 0);
	}
	fx_free(&f);
}

/*
 * Logits that climb over the tiles in processing order -- small steps
 * and, every 97 tokens, a jump well past the running maximum -- so the
 * vector kernels' online softmax rescales both rarely and often; the
 * output must still match float64.
 */
static void attn_logit_ramp(void **state)
{
	struct tu_rng rng;
	struct fx f;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fx_init(&f, 16ull << 20, 64, 4, NPNM_DTYPE_BF16);
	fx_add_item(&f, &rng, 3000, 16, 1000);
	fx_finish(&f);
	{
		const struct fx_item *it = &f.it[0];
		uint8_t *in = f.mem.base + f.cmd.op[NPNM_ATTN_IN].offset;
		const struct npnm_cluster *table =
			(const struct npnm_cluster *)(fx_kv(&f) + it->table);
		const uint32_t *sel = (const uint32_t *)(in + it->sel);
		uint16_t *k = (uint16_t *)(fx_kv(&f) + it->k);
		float *q = (float *)(in + it->q);
		uint32_t pos = 0;

		/* q_r = (1 + r / 4) e0 / scale, so a logit is (1 + r / 4) k[0]. */
		memset(q, 0, sizeof(float) * f.g * f.d);
		for (uint32_t r = 0; r < f.g; r++)
			q[r * f.d] = (1.0f + 0.25f * (float)r) / f.scale;
		for (uint32_t s = 0; s < it->n_sel; s++)
			for (uint32_t j = 0; j < table[sel[s]].count; j++, pos++) {
				uint16_t *row = k + (size_t)(table[sel[s]].first + j) * f.d;
				float x = -30.0f + 0.02f * (float)pos + (pos % 97 == 96 ? 12.0f : 0.0f);

				memset(row, 0, f.d * sizeof(*row));
				row[0] = nelssa_f32_to_bf16(x);
			}
	}
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		char what[32];

		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		run_ok(&f, (enum nfw_isa)isa);
		snprintf(what, sizeof(what), "%s ramp", nfw_isa_name((enum nfw_isa)isa));
		assert_int_equal(fx_check(&f, 0, what), 0);
	}
	fx_free(&f);
}

/* Every cluster size 1..64, all selected, on every supported ISA. */
static void attn_cluster_sizes(void **state)
{
	(void)state;
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		struct tu_rng rng;
		struct fx f;
		char what[48];

		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		tu_rng_for(&rng, __func__, (uint64_t)isa);
		for (uint32_t size = 1; size <= 64; size += 9) {
			fx_init(&f, 16ull << 20, 64, 4, NPNM_DTYPE_BF16);
			fx_add_item(&f, &rng, 40 * size + 3, 1, 1000);
			/* Regroup the single-token clusters into clusters of @size. */
			{
				struct npnm_cluster *t = (struct npnm_cluster *)(fx_kv(&f) + f.it[0].table);
				uint32_t *sel = (uint32_t *)(f.mem.base + (f.mem.size - (5ull << 20)) +
							     f.it[0].sel);
				uint32_t n = 0;

				for (uint32_t first = 0; first < f.it[0].n_tokens; first += size) {
					uint32_t cnt = f.it[0].n_tokens - first < size ?
						       f.it[0].n_tokens - first : size;

					t[n] = (struct npnm_cluster){ first, cnt };
					sel[n] = n;
					n++;
				}
				f.it[0].n_clusters = n;
				f.it[0].n_sel = n;
			}
			fx_finish(&f);
			run_ok(&f, (enum nfw_isa)isa);
			snprintf(what, sizeof(what), "%s cluster size %u", nfw_isa_name((enum nfw_isa)isa),
				 size);
			assert_int_equal(fx_check(&f, 0, what), 0);
			fx_free(&f);
		}
	}
}

/* Vector and scalar agree far more tightly than either does with float64. */
static void vector_matches_scalar(void **state)
{
	(void)state;
	for (int isa = NFW_ISA_AVX2; isa < NFW_ISA_COUNT; isa++) {
		struct tu_rng rng;
		struct fx f;
		float *ref;
		uint64_t out = 0;

		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		tu_rng_for(&rng, __func__, (uint64_t)isa);
		fx_init(&f, 32ull << 20, 128, 8, NPNM_DTYPE_BF16);
		for (int i = 0; i < 4; i++)
			fx_add_item(&f, &rng, 4000, 32, 100);
		fx_finish(&f);
		out = f.cmd.op[NPNM_ATTN_OUT].offset;
		run_ok(&f, NFW_ISA_SCALAR);
		ref = tu_alloc(f.out_used);
		memcpy(ref, f.mem.base + out, f.out_used);
		run_ok(&f, (enum nfw_isa)isa);
		for (uint64_t i = 0; i < f.out_used / 4; i++) {
			float a = ((float *)(f.mem.base + out))[i], b = ref[i];

			/* Same inputs, other summation order and exp: a few ulps. */
			if (!(fabsf(a - b) <= 2e-5f * (1.0f + fabsf(b))))
				fail_msg("%s [%llu] %g vs scalar %g", nfw_isa_name((enum nfw_isa)isa),
					 (unsigned long long)i, a, b);
		}
		free(ref);
		fx_free(&f);
	}
}

/* A head dim the vector path cannot tile falls back and stays correct. */
static void attn_odd_head_dim(void **state)
{
	struct tu_rng rng;
	struct fx f;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fx_init(&f, 16ull << 20, 72, 4, NPNM_DTYPE_BF16);
	fx_add_item(&f, &rng, 1500, 16, 300);
	fx_finish(&f);
	run_ok(&f, nfw_isa_resolve(NFW_ISA_AUTO));
	assert_int_equal(fx_check(&f, 0, "d72"), 0);
	fx_free(&f);
}

static void attn_fp16(void **state)
{
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		struct tu_rng rng;
		struct fx f;

		(void)state;
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		tu_rng_for(&rng, __func__, (uint64_t)isa);
		fx_init(&f, 16ull << 20, 128, 4, NPNM_DTYPE_FP16);
		fx_add_item(&f, &rng, 2000, 24, 250);
		fx_add_item(&f, &rng, 700, 5, 1000);
		fx_finish(&f);
		run_ok(&f, (enum nfw_isa)isa);
		assert_int_equal(fx_check(&f, 0, "fp16"), 0);
		assert_int_equal(fx_check(&f, 1, "fp16"), 0);
		fx_free(&f);
	}
}

/*
 * The 8-bit types on every ISA: head dims that tile (128, 256, 64) and one
 * that does not (80: scalar on AVX2/AVX-512), clusters of 1..24 tokens so
 * that clusters start and end inside storage tiles, and items whose last
 * tile is partial.
 */
static void attn_tiled(void **state)
{
	static const uint32_t dims[] = { 128, 256, 64, 80 };
	static const uint8_t types[] = { NPNM_DTYPE_FP8_E4M3, NPNM_DTYPE_INT8 };

	(void)state;
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		for (unsigned int t = 0; t < 2; t++)
			for (unsigned int di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
				struct tu_rng rng;
				struct fx f;

				tu_rng_for(&rng, __func__, (uint64_t)isa * 100 + t * 10 + di);
				fx_init(&f, 16ull << 20, dims[di], 4 + di, types[t]);
				fx_add_item(&f, &rng, 1999, 24, 300);
				fx_add_item(&f, &rng, 333, 5, 1000);
				fx_add_item(&f, &rng, 7, 3, 1000);
				fx_finish(&f);
				run_ok(&f, (enum nfw_isa)isa);
				for (uint32_t i = 0; i < 3; i++)
					assert_int_equal(fx_check(&f, i, nfw_isa_name(isa)), 0);
				fx_free(&f);
			}
	}
}

/*
 * kv_stride on every ISA and KV type: K and V blocks adjacent (the
 * gathering layout), and blocks spaced wider than both with odd gaps.
 * Clusters of 1..40 tokens start anywhere, so they cross blocks; the gaps
 * hold NaN, so a row read from a packed-layout address poisons the output.
 * Also with NPNM_ATTN_F_BF16_DOTS (bf16 only).
 */
static void attn_kv_stride(void **state)
{
	static const uint8_t types[] = { NPNM_DTYPE_BF16, NPNM_DTYPE_FP16,
					 NPNM_DTYPE_FP8_E4M3, NPNM_DTYPE_INT8 };
	static const uint32_t dims[] = { 128, 64, 80 };

	(void)state;
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		for (unsigned int t = 0; t < sizeof(types); t++)
			for (unsigned int di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
				for (unsigned int mode = 0; mode < 3; mode++) {
					const uint64_t block = nelssa_kv_bytes((enum nelssa_kv_dtype)types[t],
									      dims[di], NPNM_KV_QTILE);
					const uint64_t b64 = (block + 63) / 64 * 64;
					struct tu_rng rng;
					char what[80];
					struct fx f;

					if (mode == 2 && types[t] != NPNM_DTYPE_BF16)
						continue;
					tu_rng_for(&rng, __func__,
						   (uint64_t)isa * 1000 + t * 100 + di * 10 + mode);
					fx_init(&f, 32ull << 20, dims[di], 4, types[t]);
					f.kv_stride = (uint32_t)(mode == 1 ? 2 * b64 + 384 : 2 * b64);
					if (mode == 2)
						f.flags = NPNM_ATTN_F_BF16_DOTS;
					fx_add_item(&f, &rng, 1999, 40, 300);
					fx_add_item(&f, &rng, 333, 5, 1000);
					fx_add_item(&f, &rng, 17, 3, 1000);
					fx_finish(&f);
					run_ok(&f, (enum nfw_isa)isa);
					for (uint32_t i = 0; i < 3; i++) {
						snprintf(what, sizeof(what), "%s %s d%u stride %u item %u",
							 nfw_isa_name(isa), types[t] == NPNM_DTYPE_BF16 ?
							 "bf16" : "other", dims[di], f.kv_stride, i);
						assert_int_equal(fx_check(&f, i, what), 0);
					}
					fx_free(&f);
				}
	}
}

/*
 * NPNM_ATTN_F_BF16_DOTS on every ISA and KV type, against float64 over the
 * bf16-rounded queries with the weights' rounding in the bound
 * (tu_attn_tol()).  The same outputs must fail the binary32 reference:
 * a kernel that ignored the flag would pass the first check alone.
 */
static void attn_bf16_dots(void **state)
{
	static const uint8_t types[] = { NPNM_DTYPE_BF16, NPNM_DTYPE_FP16, NPNM_DTYPE_FP8_E4M3,
					 NPNM_DTYPE_INT8 };

	(void)state;
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		for (unsigned int t = 0; t < sizeof(types); t++) {
			struct tu_rng rng;
			struct fx f;
			int unrounded_fails = 0;
			char what[64];

			tu_rng_for(&rng, __func__, (uint64_t)isa * 10 + t);
			fx_init(&f, 16ull << 20, t ? 128 : 64, 4 + t, types[t]);
			f.flags = NPNM_ATTN_F_BF16_DOTS;
			fx_add_item(&f, &rng, 2500, 24, 300);
			fx_add_item(&f, &rng, 333, 5, 1000);
			fx_add_item(&f, &rng, 17, 3, 1000);
			fx_finish(&f);
			run_ok(&f, (enum nfw_isa)isa);
			for (uint32_t i = 0; i < 3; i++) {
				snprintf(what, sizeof(what), "%s type %u item %u bf16 dots",
					 nfw_isa_name(isa), types[t], i);
				assert_int_equal(fx_check(&f, i, what), 0);
			}
			f.flags = 0;
			for (uint32_t i = 0; i < 3; i++)
				unrounded_fails += fx_check(&f, i, "binary32 reference (must fail)") != 0;
			assert_int_equal(unrounded_fails, 3);
			fx_free(&f);
		}
	}
}

/*
 * The CPU's own word on AVX512_BF16, read apart from isa.c's CPUID
 * check: the kernel's "avx512_bf16" flag in /proc/cpuinfo.
 */
static int cpuinfo_has(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[8192];
	int found = 0;

	while (f && !found && fgets(line, sizeof(line), f)) {
		char *tok, *save = NULL;

		if (strncmp(line, "flags", 5))
			continue;
		for (tok = strtok_r(strchr(line, ':'), " \t\n:", &save); tok && !found;
		     tok = strtok_r(NULL, " \t\n", &save))
			found = !strcmp(tok, flag);
		break;
	}
	if (f)
		fclose(f);
	return found;
}

/*
 * x86's native bf16 dot products (VDPBF16PS), NFW_ISA_AVX512_BF16
 * ("avx512-bf16"): supported only on a CPU with AVX512_BF16, and then
 * what auto resolves to; there NPNM_ATTN_F_BF16_DOTS takes the native
 * kernel at a dim that tiles (bf16 KV goes to VDPBF16PS; other types are
 * widened as in AVX-512's), while avx512 keeps the rounding kernel.
 * It matches float64 over the rounded queries at every dim and at groups
 * that use the 4-, 2- and 1-row blocks, odd token counts (a token paired
 * with the zero row) included; its compute ceiling counts the same flops.
 * Skipped where the CPU lacks the instructions or the compiler did.
 */
static void attn_bf16_dots_vdpbf16ps(void **state)
{
	static const uint32_t dims[] = { 32, 64, 128, 256 }, groups[] = { 1, 3, 4, 6, 8 };

	(void)state;
	assert_int_equal(nfw_isa_parse("avx512-bf16"), NFW_ISA_AVX512_BF16);
	if (!cpuinfo_has("avx512_bf16") || !cpuinfo_has("avx512bw"))
		assert_false(nfw_isa_supported(NFW_ISA_AVX512_BF16));
	assert_int_equal(nfw_isa_resolve(NFW_ISA_AUTO) == NFW_ISA_AVX512_BF16,
			 nfw_isa_supported(NFW_ISA_AVX512_BF16));
	if (!nfw_isa_supported(NFW_ISA_AVX512_BF16)) {
		if (cpuinfo_has("avx512_bf16"))
			print_message("# the CPU has AVX512_BF16, the compiler built no VDPBF16PS "
				      "kernel\n");
		skip();
	}
#ifdef NFW_HAVE_AVX512_BF16
	assert_ptr_equal(nfw_attn_kernel(NFW_ISA_AVX512_BF16, 128, NPNM_ATTN_F_BF16_DOTS),
			 nfw_attn_item_avx512_bf16);
	assert_ptr_equal(nfw_attn_kernel(NFW_ISA_AVX512_BF16, 128, 0), nfw_attn_item_avx512);
	assert_ptr_equal(nfw_attn_kernel(NFW_ISA_AVX512, 128, NPNM_ATTN_F_BF16_DOTS),
			 nfw_attn_item_avx512);
	assert_ptr_equal(nfw_attn_kernel(NFW_ISA_AVX512_BF16, 48, NPNM_ATTN_F_BF16_DOTS),
			 nfw_attn_item_scalar);
	assert_int_equal(nfw_attn_peak_flags(NFW_ISA_AVX512_BF16, 128, 4, NPNM_DTYPE_BF16,
					     NPNM_ATTN_F_BF16_DOTS, 3), 3ull * 2 * 4 * 128 * 48);
	for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
		for (size_t gi = 0; gi < sizeof(groups) / sizeof(groups[0]); gi++) {
			const uint32_t d = dims[di], g = groups[gi];
			struct tu_rng rng;
			struct fx f;
			char what[64];

			tu_rng_for(&rng, __func__, d * 100u + g);
			fx_init(&f, 16ull << 20, d, g, NPNM_DTYPE_BF16);
			f.flags = NPNM_ATTN_F_BF16_DOTS;
			fx_add_item(&f, &rng, 1500, 16, 400);
			fx_add_item(&f, &rng, 333, 5, 1000);	/* odd clusters, odd tiles */
			fx_add_item(&f, &rng, 1, 1, 1000);
			fx_finish(&f);
			run_ok(&f, NFW_ISA_AVX512_BF16);
			for (uint32_t i = 0; i < 3; i++) {
				snprintf(what, sizeof(what), "vdpbf16ps d%u g%u item %u", d, g, i);
				assert_int_equal(fx_check(&f, i, what), 0);
			}
			fx_free(&f);
		}
#else
	fail_msg("avx512-bf16 supported without the VDPBF16PS kernel built");
#endif
}

/*
 * Every E4M3 and int8 code through every ISA's load path: the codes of a
 * quantised store are overwritten with all 254 finite E4M3 codes (all 256
 * int8 ones) in turn, subnormals and both zeros included, scales kept.
 */
static uint8_t finite_code(uint8_t dtype, uint32_t c)
{
	uint8_t code = (uint8_t)c;

	if (dtype == NPNM_DTYPE_FP8_E4M3 && (code & 0x7f) == 0x7f)
		code ^= 1;	/* NaN: its finite neighbour instead */
	return code;
}

static void attn_tiled_all_codes(void **state)
{
	static const uint8_t types[] = { NPNM_DTYPE_FP8_E4M3, NPNM_DTYPE_INT8 };

	(void)state;
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		for (unsigned int t = 0; t < 2; t++) {
			const uint32_t d = 64, n = 160;
			uint64_t tile = nelssa_kv_tile_bytes(d);
			struct tu_rng rng;
			struct fx f;
			uint32_t c = 0;

			tu_rng_for(&rng, __func__, (uint64_t)isa * 10 + t);
			fx_init(&f, 16ull << 20, d, 2, types[t]);
			fx_add_item(&f, &rng, n, 16, 1000);
			fx_finish(&f);
			for (uint32_t tk = 0; tk < n; tk++)
				for (uint32_t j = 0; j < d; j++, c++) {
					uint64_t at = tk / 16 * tile + tk % 16 * d + j;

					fx_kv(&f)[f.it[0].k + at] = finite_code(types[t], c);
					fx_kv(&f)[f.it[0].v + at] = finite_code(types[t], c * 37u);
				}
			run_ok(&f, (enum nfw_isa)isa);
			assert_int_equal(fx_check(&f, 0, nfw_isa_name(isa)), 0);
			/*
			 * A scale as large as a host may write (2^121) over zero
			 * codes is zero: scale * code, never (scale * 2^8) * (code
			 * / 2^8), whose first product is infinite.
			 */
			for (uint32_t tl = 0; tl < n / 16; tl++) {
				const float big = 0x1p121f;
				uint8_t *vt = fx_kv(&f) + f.it[0].v + tl * tile;

				memset(vt, 0, 16 * d);
				for (uint32_t g = 0; g < d / 32; g++)
					memcpy(vt + 16 * d + 4 * g, &big, 4);
			}
			run_ok(&f, (enum nfw_isa)isa);
			assert_int_equal(fx_check(&f, 0, nfw_isa_name(isa)), 0);
			if (types[t] == NPNM_DTYPE_FP8_E4M3) {
				/*
				 * A NaN code (0xff) in K: every path gives what the
				 * scalar one gives, NaN for NaN (payloads may differ).
				 */
				const uint8_t *out = f.mem.base + f.cmd.op[NPNM_ATTN_OUT].offset;
				uint64_t len = f.cmd.op[NPNM_ATTN_OUT].len;
				uint8_t *want = tu_alloc(len);

				fx_kv(&f)[f.it[0].k + 5 * d + 3] = 0xff;
				run_ok(&f, NFW_ISA_SCALAR);
				memcpy(want, out, len);
				run_ok(&f, (enum nfw_isa)isa);
				for (uint64_t b = 0; b < len; b += 4) {
					float x, y;

					memcpy(&x, out + b, 4);
					memcpy(&y, want + b, 4);
					assert_true(isnan(x) ? isnan(y) : x == y);
				}
				assert_true(isnan(((const float *)out)[0]));
				/* ...and a NaN LSE: never the empty state, which merges drop. */
				assert_true(isnan(((const float *)(out + f.it[0].lse))[0]));
				free(want);
			}
			fx_free(&f);
		}
	}
}

/* The kernel writes its outputs and nothing else in device memory. */
static void attn_writes_only_outputs(void **state)
{
	static const uint8_t types[] = { NPNM_DTYPE_BF16, NPNM_DTYPE_FP8_E4M3, NPNM_DTYPE_INT8 };

	(void)state;
	for (unsigned int ti = 0; ti < 3; ti++) {
		struct tu_rng rng;
		struct fx f;
		uint8_t *before;
		uint64_t out_off, out_len;

		tu_rng_for(&rng, __func__, ti);
		fx_init(&f, 16ull << 20, 128, 4, types[ti]);
		fx_add_item(&f, &rng, 1000, 16, 500);
		fx_add_item(&f, &rng, 1001, 16, 500);	/* a partial last tile */
		fx_finish(&f);
		memset(f.mem.base + f.cmd.op[NPNM_ATTN_OUT].offset, 0x5a, f.out_used);
		before = tu_alloc(f.mem.size);
		memcpy(before, f.mem.base, f.mem.size);
		run_ok(&f, nfw_isa_resolve(NFW_ISA_AUTO));
		out_off = f.cmd.op[NPNM_ATTN_OUT].offset;
		out_len = f.cmd.op[NPNM_ATTN_OUT].len;
		assert_memory_equal(f.mem.base, before, out_off);
		assert_memory_equal(f.mem.base + out_off + out_len, before + out_off + out_len,
				    f.mem.size - out_off - out_len);
		/* Inside OUT, only the o and lse ranges of the two items change. */
		for (uint64_t b = 0; b < out_len; b++) {
			int inside = 0;

			for (uint32_t i = 0; i < 2; i++)
				inside |= (b >= f.it[i].o && b < f.it[i].lse + 4ull * f.g);
			if (!inside)
				assert_int_equal(f.mem.base[out_off + b], 0x5a);
		}
		free(before);
		fx_free(&f);
	}
}

/*
 * One SPARSE_ATTN item over the store at @store of @f's memory (K at 0, V
 * at @v_off, the table at @table_off), its queries already at 8 MiB, the
 * @ns ids @sel put beside them, outputs at 9 MiB (o, then the LSEs), run
 * on the best ISA here.
 */
static void one_item_cmd(struct fx *f, uint8_t dtype, uint64_t store, uint64_t v_off,
			 uint64_t table_off, uint32_t nr_tokens, uint32_t nr_clusters,
			 const uint32_t *sel, uint32_t ns)
{
	struct npnm_attn_item *it = (struct npnm_attn_item *)f->mem.base;

	memcpy(f->mem.base + (8ull << 20) + 4096, sel, sizeof(*sel) * ns);
	*it = (struct npnm_attn_item){
		.k_off = 0, .v_off = v_off, .table_off = table_off, .q_off = 0, .sel_off = 4096,
		.o_off = 0, .lse_off = (uint64_t)f->g * f->d * 4, .nr_tokens = nr_tokens,
		.nr_clusters = nr_clusters, .nr_sel = ns,
	};
	memset(&f->cmd, 0, sizeof(f->cmd));
	f->cmd.opcode = NPNM_OP_SPARSE_ATTN;
	f->cmd.op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ 1, 0, 0, sizeof(*it) };
	f->cmd.op[NPNM_ATTN_KV] = (struct npnm_operand){ 1, 0, store, 1ull << 20 };
	f->cmd.op[NPNM_ATTN_IN] = (struct npnm_operand){ 1, 0, 8ull << 20, 8192 };
	f->cmd.op[NPNM_ATTN_OUT] = (struct npnm_operand){ 1, 0, 9ull << 20, 8192 };
	f->cmd.p.attn = (struct npnm_sparse_attn_params){
		.nr_items = 1, .head_dim = (uint16_t)f->d, .group = (uint8_t)f->g, .kv_dtype = dtype,
	};
}

static void run_one_item(struct fx *f, uint8_t dtype, uint64_t store, uint64_t v_off,
			 uint64_t table_off, uint32_t nr_tokens, uint32_t nr_clusters,
			 const uint32_t *sel, uint32_t ns)
{
	one_item_cmd(f, dtype, store, v_off, table_off, nr_tokens, nr_clusters, sel, ns);
	run_ok(f, nfw_isa_resolve(NFW_ISA_AUTO));
}

/*
 * The weights P.V sees are bf16, their sum is not: two tokens, a zero V
 * row under logit 0 and a V row of ones under logit c = bf16(-0.3571),
 * so every output is exactly w' / (1 + w) with w = e^c in binary32 and w'
 * its bf16 rounding, which differs from w / (1 + w) by 3.7e-4 relative.
 */
static void attn_bf16_weights_rounded(void **state)
{
	(void)state;
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		const uint32_t d = 64, g = 2;
		struct fx f;
		uint16_t *k, *v;
		struct npnm_cluster *tab;
		uint32_t sel = 0;
		float *q, *o, *lse, c, w, w16, want;

		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		fx_init(&f, 16ull << 20, d, g, NPNM_DTYPE_BF16);
		k = (uint16_t *)(f.mem.base + (1ull << 20));
		v = k + 2 * d;
		tab = (struct npnm_cluster *)(v + 2 * d);
		q = (float *)(f.mem.base + (8ull << 20));
		c = nelssa_bf16_round(-0.3571f);
		for (uint32_t i = 0; i < d; i++) {
			k[i] = k[d + i] = v[i] = 0;
			v[d + i] = nelssa_f32_to_bf16(1.0f);
		}
		k[d] = nelssa_f32_to_bf16(1.0f);
		*tab = (struct npnm_cluster){ 0, 2 };
		for (uint32_t r = 0; r < g; r++)
			for (uint32_t i = 0; i < d; i++)
				q[r * d + i] = i ? 0.25f : -0.3571f;	/* rounds to c */
		one_item_cmd(&f, NPNM_DTYPE_BF16, 1ull << 20, 2 * d * 2, 4 * d * 2, 2, 1, &sel, 1);
		f.cmd.p.attn.flags = NPNM_ATTN_F_BF16_DOTS;
		f.cmd.p.attn.scale_f32 = nelssa_f32_bits(1.0f);
		run_ok(&f, (enum nfw_isa)isa);
		o = (float *)(f.mem.base + (9ull << 20));
		lse = o + g * d;
		w = expf(c);
		w16 = nelssa_bf16_round(w);
		want = w16 / (1.0f + w);
		assert_true(fabsf(w / (1.0f + w) - want) > 2e-4f * want);
		for (uint32_t r = 0; r < g; r++) {
			assert_true(fabsf(lse[r] - log1pf(w)) <= 4e-7f);
			for (uint32_t i = 0; i < d; i++)
				if (!(fabsf(o[r * d + i] - want) <= 4e-7f))
					fail_msg("%s o[%u][%u] %.9g, want %.9g", nfw_isa_name(isa), r, i,
						 o[r * d + i], want);
		}
		fx_free(&f);
	}
}

/*
 * Prefill through KV_WRITE with scatter (rows arrive in sequence order and
 * land in cluster order), then decode-time appends of new clusters at the
 * end, then SPARSE_ATTN over old and new clusters: checked against float64
 * over the source rows.
 */
static void kv_write_then_attn(void **state)
{
	const uint32_t d = 128, g = 4, prefill = 900, chunk = 128, chunks = 3;
	const uint32_t max_tokens = prefill + chunks * chunk, max_clusters = 256;
	const uint64_t row = d * 2, store = 1ull << 20, src = 4ull << 20;
	uint16_t *k_src = tu_alloc(row * max_tokens), *v_src = tu_alloc(row * max_tokens);
	uint32_t *perm = tu_alloc(4 * max_tokens), *tok = tu_alloc(4 * max_tokens);
	struct npnm_cluster tab[256];
	uint32_t nc = 0, detail;
	struct tu_rng rng;
	struct fx f;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fx_init(&f, 16ull << 20, d, g, NPNM_DTYPE_BF16);
	tu_fill_kv(&rng, k_src, (size_t)d * max_tokens, 2.0, NELSSA_KV_BF16);
	tu_fill_kv(&rng, v_src, (size_t)d * max_tokens, 1.0, NELSSA_KV_BF16);
	/* Prefill clusters: a random assignment of tokens to 60 clusters. */
	{
		uint32_t cl[1000], cnt[60] = { 0 }, pos[60], at = 0;

		for (uint32_t t = 0; t < prefill; t++) {
			cl[t] = tu_below(&rng, 60);
			cnt[cl[t]]++;
		}
		for (uint32_t c = 0; c < 60; c++) {
			pos[c] = at;
			tab[nc++] = (struct npnm_cluster){ at, cnt[c] };
			at += cnt[c];
		}
		for (uint32_t t = 0; t < prefill; t++)
			perm[t] = pos[cl[t]]++;	/* destination of source row t */
	}
	for (uint32_t step = 0; step <= chunks; step++) {
		uint32_t first = step ? prefill + (step - 1) * chunk : 0;
		uint32_t n = step ? chunk : prefill, c0 = step ? nc : 0, ncl = step ? 8 : 60;
		uint8_t *s = f.mem.base + src;
		struct npnm_cmd c;

		memcpy(s, k_src + (size_t)first * d, row * n);
		memcpy(s + row * n, v_src + (size_t)first * d, row * n);
		if (step) {
			for (uint32_t i = 0; i < 8; i++)
				tab[nc++] = (struct npnm_cluster){ first + i * 16, 16 };
		}
		memcpy(s + 2 * row * n, tab + c0, ncl * sizeof(tab[0]));
		if (!step)
			memcpy(s + 2 * row * n + ncl * sizeof(tab[0]), perm, 4 * n);
		memset(&c, 0, sizeof(c));
		c.opcode = NPNM_OP_KV_WRITE;
		c.op[NPNM_KV_SRC] = (struct npnm_operand){ 1, 0, src, 1ull << 20 };
		c.op[NPNM_KV_DST] = (struct npnm_operand){ 1, 0, store, 1ull << 20 };
		c.p.kv_write = (struct npnm_kv_write_params){
			.k_off = 0, .v_off = row * max_tokens, .table_off = 2 * row * max_tokens,
			.first_token = first, .nr_tokens = n, .first_cluster = c0, .nr_clusters = ncl,
			.max_tokens = max_tokens, .max_clusters = max_clusters, .head_dim = (uint16_t)d,
			.kv_dtype = NPNM_DTYPE_BF16, .flags = step ? 0 : NPNM_KV_F_SCATTER,
		};
		assert_int_equal(nfw_run(&f.mem, &c, NFW_ISA_SCALAR, &f.scratch, &detail), NPNM_ST_OK);
	}
	/* Now attention over a selection mixing prefill and appended clusters. */
	{
		uint8_t *in = f.mem.base + (8ull << 20), *out = f.mem.base + (9ull << 20);
		uint32_t sel[] = { 3, 61, 17, 60 + 8 * 3 - 1, 45, 64 }, ns = 6, n = 0;
		uint16_t *kg = tu_alloc(row * max_tokens), *vg = tu_alloc(row * max_tokens);
		struct nelssa_attn_geom geom = { d, g, NELSSA_KV_BF16, f.scale, 0 };

		tu_fill_f32(&rng, (float *)in, (size_t)g * d, 2.0);
		run_one_item(&f, NPNM_DTYPE_BF16, store, row * max_tokens, 2 * row * max_tokens,
			     max_tokens, nc, sel, ns);
		/* Reference from the source rows: invert the scatter permutation. */
		for (uint32_t t = 0; t < max_tokens; t++) {
			uint32_t to = t < prefill ? perm[t] : t;

			memcpy(kg + (size_t)to * d, k_src + (size_t)t * d, row);
			memcpy(vg + (size_t)to * d, v_src + (size_t)t * d, row);
		}
		for (uint32_t s = 0; s < ns; s++)
			for (uint32_t j = 0; j < tab[sel[s]].count; j++)
				tok[n++] = tab[sel[s]].first + j;
		assert_int_equal(tu_check_attn(&geom, (const float *)in, kg, vg, tok, n,
					       (const float *)out, (const float *)(out + g * d * 4),
					       "after appends"), 0);
		free(kg);
		free(vg);
	}
	free(k_src);
	free(v_src);
	free(perm);
	free(tok);
	fx_free(&f);
}

/* One KV_WRITE of @p from the source at @src into the store at @store. */
static uint32_t kv_write(struct fx *f, uint64_t src, uint64_t store,
			 const struct npnm_kv_write_params *p)
{
	struct npnm_cmd c;
	uint32_t detail;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_KV_WRITE;
	c.op[NPNM_KV_SRC] = (struct npnm_operand){ 1, 0, src, 1ull << 20 };
	c.op[NPNM_KV_DST] = (struct npnm_operand){ 1, 0, store, 2ull << 20 };
	c.p.kv_write = *p;
	return nfw_run(&f->mem, &c, NFW_ISA_SCALAR, &f->scratch, &detail);
}

/*
 * The same KV_WRITEs -- a scattered prefill and appends that start inside
 * a block for bf16, tile-aligned writes for int8 -- into a packed store and
 * into one with K and V blocks adjacent: every row must land where the
 * uapi's block formula puts it, no byte between blocks may change, and
 * SPARSE_ATTN over the two stores must give the same bits.
 */
static void kv_write_strided_matches_packed(void **state)
{
	static const uint8_t types[] = { NPNM_DTYPE_BF16, NPNM_DTYPE_INT8 };
	const uint32_t d = 128, max_tokens = 700, max_clusters = 64;
	const uint64_t a_off = 1ull << 20, b_off = 3ull << 20, src = 5ull << 20;

	(void)state;
	for (unsigned int ti = 0; ti < 2; ti++) {
		const uint8_t dt = types[ti];
		const int tiled = nelssa_kv_is_tiled((enum nelssa_kv_dtype)dt);
		const uint64_t block = nelssa_kv_bytes((enum nelssa_kv_dtype)dt, d, NPNM_KV_QTILE);
		const uint64_t rowb = tiled ? d : 2ull * d, stride = 2 * block;
		const uint64_t cap = nelssa_kv_bytes((enum nelssa_kv_dtype)dt, d, max_tokens);
		const uint32_t firsts[] = { 0, tiled ? 304 : 300, tiled ? 416 : 421,
					    tiled ? 576 : 555 };
		const uint32_t counts[] = { tiled ? 304 : 300, tiled ? 112 : 121,
					    tiled ? 160 : 134, 100 };
		uint8_t *mem, *before;
		struct npnm_cluster tab[64];
		uint32_t nc = 0, sel[16], ns = 0, written = 0;
		struct tu_rng rng;
		struct fx f;

		tu_rng_for(&rng, __func__, ti);
		fx_init(&f, 16ull << 20, d, 4, dt);
		mem = f.mem.base;
		memset(mem + b_off, 0xee, 2ull << 20);
		for (unsigned int w = 0; w < 4; w++) {
			const uint32_t n = counts[w];
			const uint64_t rows = nelssa_kv_bytes((enum nelssa_kv_dtype)dt, d, n);
			const int scatter = !tiled && w == 0;
			struct npnm_kv_write_params p = {
				.k_off = 0, .v_off = cap, .table_off = 2 * cap,
				.first_token = firsts[w], .nr_tokens = n, .first_cluster = nc,
				.nr_clusters = 4, .max_tokens = max_tokens, .max_clusters = max_clusters,
				.head_dim = (uint16_t)d, .kv_dtype = dt,
				.flags = scatter ? NPNM_KV_F_SCATTER : 0,
			};

			/* Random bytes; the 8-bit scales as a tile's layout wants them. */
			tu_fill_kv(&rng, (uint16_t *)(mem + src), rows, 1.0, NELSSA_KV_BF16);
			if (tiled)
				for (uint64_t t = 0; t < 2 * rows; t += block)
					for (uint32_t g = 0; g < d / NPNM_KV_QGROUP; g++) {
						float sc = 0.01f * (float)(1 + g);

						memcpy(mem + src + t + NPNM_KV_QTILE * d + 4 * g, &sc, 4);
					}
			for (uint32_t i = 0; i < 4; i++) {
				uint32_t q = n / 4;

				tab[nc + i] = (struct npnm_cluster){ firsts[w] + i * q,
								     i == 3 ? n - 3 * q : q };
			}
			memcpy(mem + src + 2 * rows, tab + nc, 4 * sizeof(tab[0]));
			if (scatter) {
				uint32_t *idx = (uint32_t *)(mem + src + 2 * rows + 4 * sizeof(tab[0]));

				for (uint32_t i = 0; i < n; i++)
					idx[i] = i;
				for (uint32_t i = n - 1; i > 0; i--) {
					uint32_t j = tu_below(&rng, i + 1), x = idx[i];

					idx[i] = idx[j];
					idx[j] = x;
				}
			}
			assert_int_equal(kv_write(&f, src, a_off, &p), NPNM_ST_OK);
			p.v_off = block;
			p.table_off = (max_tokens + NPNM_KV_QTILE - 1) / NPNM_KV_QTILE * stride;
			p.kv_stride = (uint32_t)stride;
			assert_int_equal(kv_write(&f, src, b_off, &p), NPNM_ST_OK);
			nc += 4;
			written = firsts[w] + n;
		}
		/* Row by row (int8: its last tile is written whole), nothing between blocks. */
		before = tu_alloc(2ull << 20);
		memset(before, 0xee, 2ull << 20);
		if (tiled)
			written = (written + NPNM_KV_QTILE - 1) / NPNM_KV_QTILE * NPNM_KV_QTILE;
		for (uint32_t t = 0; t < written; t++) {
			uint64_t pa = tiled ? t / 16 * block + t % 16 * rowb : t * rowb;
			uint64_t pb = t / 16 * stride + t % 16 * rowb;

			assert_memory_equal(mem + a_off + pa, mem + b_off + pb, rowb);
			assert_memory_equal(mem + a_off + cap + pa, mem + b_off + block + pb, rowb);
			memcpy(before + pb, mem + a_off + pa, rowb);
			memcpy(before + block + pb, mem + a_off + cap + pa, rowb);
			if (tiled && t % 16 == 0) {
				const uint64_t sc = NPNM_KV_QTILE * d, n = block - sc;

				assert_memory_equal(mem + a_off + pa + sc, mem + b_off + pb + sc, n);
				memcpy(before + pb + sc, mem + b_off + pb + sc, n);
				memcpy(before + block + pb + sc, mem + b_off + block + pb + sc, n);
			}
		}
		{
			const uint64_t tb = (max_tokens + NPNM_KV_QTILE - 1) / NPNM_KV_QTILE * stride;

			memcpy(before + tb, mem + b_off + tb, nc * sizeof(tab[0]));
			assert_memory_equal(mem + b_off + tb, mem + a_off + 2 * cap, nc * sizeof(tab[0]));
			assert_memory_equal(mem + b_off, before, 2ull << 20);
		}
		free(before);
		/*
		 * Attention over both stores: the same bits, on every ISA (the
		 * scalar path, which head dims the vector kernels do not take
		 * also run, included).
		 */
		for (uint32_t c = 0; c < nc; c += 1 + tu_below(&rng, 3))
			sel[ns++] = c;
		tu_fill_f32(&rng, (float *)(mem + (8ull << 20)), 4ull * d, 2.0);
		for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
			const uint64_t tb = (max_tokens + NPNM_KV_QTILE - 1) / NPNM_KV_QTILE * stride;
			float oa[4 * 128 + 4];

			if (!nfw_isa_supported((enum nfw_isa)isa))
				continue;
			one_item_cmd(&f, dt, a_off, cap, 2 * cap, written, nc, sel, ns);
			run_ok(&f, (enum nfw_isa)isa);
			memcpy(oa, mem + (9ull << 20), sizeof(oa));
			one_item_cmd(&f, dt, b_off, block, tb, written, nc, sel, ns);
			f.cmd.p.attn.kv_stride = (uint32_t)stride;
			f.cmd.op[NPNM_ATTN_KV].len = tb + nc * sizeof(tab[0]);
			run_ok(&f, (enum nfw_isa)isa);
			if (memcmp(oa, mem + (9ull << 20), sizeof(oa)))
				fail_msg("%s %s: strided and packed stores give different bits",
					 nfw_isa_name(isa), tiled ? "int8" : "bf16");
		}
		fx_free(&f);
	}
}

/*
 * The 8-bit types through KV_WRITE as the client writes them: a prefill
 * of 500 tokens, then appends of 37, each written from the tile its first
 * new token falls in, that tile quantised again with its earlier tokens.
 * After every write the whole store must be, byte for byte, the host's
 * quantisation of all tokens so far in one go; and attention over prefill
 * and appended clusters -- clusters that start and end inside tiles --
 * must match float64 over the host's decoded codes.
 */
static void kv_write_tiled_then_attn(void **state)
{
	static const uint8_t types[] = { NPNM_DTYPE_FP8_E4M3, NPNM_DTYPE_INT8 };
	const uint32_t d = 128, g = 4, prefill = 500, chunk = 37, chunks = 3;
	const uint32_t max_tokens = 1024, max_clusters = 128;
	const uint64_t store = 1ull << 20, src = 4ull << 20;

	(void)state;
	for (unsigned int ti = 0; ti < 2; ti++) {
		enum nelssa_kv_dtype dt = (enum nelssa_kv_dtype)types[ti];
		const uint64_t cap = nelssa_kv_bytes(dt, d, max_tokens);
		uint8_t *hk = tu_alloc(cap), *hv = tu_alloc(cap);	/* the host's copy */
		float *xk = tu_alloc(sizeof(float) * d * max_tokens), *kf, *vf;
		float *xv = tu_alloc(sizeof(float) * d * max_tokens);
		uint32_t *tok = tu_alloc(4 * max_tokens), nc = 0, first = 0, detail, n = 0;
		struct npnm_cluster tab[128];
		struct tu_rng rng;
		struct fx f;

		tu_rng_for(&rng, __func__, ti);
		fx_init(&f, 16ull << 20, d, g, types[ti]);
		tu_fill_f32(&rng, xk, (size_t)max_tokens * d, 2.0);
		tu_fill_f32(&rng, xv, (size_t)max_tokens * d, 1.0);
		for (uint32_t step = 0; step <= chunks; step++) {
			uint32_t cnt = step ? chunk : prefill, c0 = nc;
			const uint32_t a = first / NELSSA_KV_QTILE * NELSSA_KV_QTILE;
			const uint32_t w = first + cnt - a;	/* tokens written */
			uint64_t at = nelssa_kv_bytes(dt, d, a), bytes = nelssa_kv_bytes(dt, d, w);
			uint64_t all = nelssa_kv_bytes(dt, d, first + cnt);
			uint8_t *sp = f.mem.base + src;
			struct npnm_cmd c;

			/* Clusters of 1..23 tokens over the new tokens. */
			for (uint32_t t = first; t < first + cnt;) {
				uint32_t len = 1 + tu_below(&rng, 23);

				len = len < first + cnt - t ? len : first + cnt - t;
				tab[nc++] = (struct npnm_cluster){ t, len };
				t += len;
			}
			/* The write: tokens [a, first + cnt), quantised on their own... */
			assert_int_equal(nelssa_kv_quantize(dt, d, xk + (size_t)a * d, w, sp), 0);
			assert_int_equal(nelssa_kv_quantize(dt, d, xv + (size_t)a * d, w, sp + bytes),
					 0);
			memcpy(sp + 2 * bytes, tab + c0, (nc - c0) * sizeof(tab[0]));
			/* ...and the reference: every token so far at once. */
			assert_int_equal(nelssa_kv_quantize(dt, d, xk, first + cnt, hk), 0);
			assert_int_equal(nelssa_kv_quantize(dt, d, xv, first + cnt, hv), 0);
			memset(&c, 0, sizeof(c));
			c.opcode = NPNM_OP_KV_WRITE;
			c.op[NPNM_KV_SRC] = (struct npnm_operand){ 1, 0, src, 1ull << 20 };
			c.op[NPNM_KV_DST] = (struct npnm_operand){ 1, 0, store, 1ull << 20 };
			c.p.kv_write = (struct npnm_kv_write_params){
				.k_off = 0, .v_off = cap, .table_off = 2 * cap, .first_token = a,
				.nr_tokens = w, .first_cluster = c0, .nr_clusters = nc - c0,
				.max_tokens = max_tokens, .max_clusters = max_clusters,
				.head_dim = (uint16_t)d, .kv_dtype = types[ti],
			};
			assert_int_equal(nfw_run(&f.mem, &c, NFW_ISA_SCALAR, &f.scratch, &detail),
					 NPNM_ST_OK);
			assert_true(at + bytes == all);
			assert_memory_equal(f.mem.base + store, hk, all);
			assert_memory_equal(f.mem.base + store + cap, hv, all);
			first += cnt;
		}
		{
			uint8_t *in = f.mem.base + (8ull << 20), *out = f.mem.base + (9ull << 20);
			struct nelssa_attn_geom geom = { d, g, TU_KV_F32, f.scale, 0 };
			uint32_t sel[12], ns = 0;

			for (uint32_t i = 0; i < nc && ns < 12; i += 1 + nc / 12)
				sel[ns++] = nc - 1 - i;	/* newest first, prefill too */
			tu_fill_f32(&rng, (float *)in, (size_t)g * d, 2.0);
			run_one_item(&f, types[ti], store, cap, 2 * cap, first, nc, sel, ns);
			kf = tu_alloc(sizeof(*kf) * d * max_tokens);
			vf = tu_alloc(sizeof(*vf) * d * max_tokens);
			tu_decode_tiled(hk, first, d, dt, kf);
			tu_decode_tiled(hv, first, d, dt, vf);
			for (uint32_t s = 0; s < ns; s++)
				for (uint32_t j = 0; j < tab[sel[s]].count; j++)
					tok[n++] = tab[sel[s]].first + j;
			assert_int_equal(tu_check_attn(&geom, (const float *)in,
						       (const uint16_t *)(void *)kf,
						       (const uint16_t *)(void *)vf, tok, n,
						       (const float *)out,
						       (const float *)(out + g * d * 4), "tiled"), 0);
			free(kf);
			free(vf);
		}
		free(hk);
		free(hv);
		free(xk);
		free(xv);
		free(tok);
		fx_free(&f);
	}
}

/*
 * The tiled size rule at its edges: stores that end exactly at their
 * operand's end are taken, one byte less is NPNM_ST_BAD_OPERAND -- for a
 * SPARSE_ATTN item of 17 tokens (two tiles, the second partial) and for a
 * KV_WRITE of the last token of a 257-token capacity (17 tiles).
 */
static void tiled_bounds_exact(void **state)
{
	const uint32_t d = 64;
	const uint64_t t17 = nelssa_kv_bytes(NELSSA_KV_INT8, d, 17);	/* 2 x 1088 */
	const uint64_t cap = nelssa_kv_bytes(NELSSA_KV_INT8, d, 257);	/* 17 x 1088 */
	uint32_t detail, sel = 0;
	struct fx f;

	(void)state;
	assert_int_equal(t17, 2 * 1088);
	assert_int_equal(cap, 17 * 1088);
	fx_init(&f, 16ull << 20, d, 1, NPNM_DTYPE_INT8);
	for (int shorter = 0; shorter < 2; shorter++) {
		struct npnm_attn_item *it = (struct npnm_attn_item *)f.mem.base;
		struct npnm_cluster *tab = (struct npnm_cluster *)(f.mem.base + (1 << 20));

		*tab = (struct npnm_cluster){ 0, 17 };
		memcpy(f.mem.base + (2 << 20) + 256, &sel, 4);
		*it = (struct npnm_attn_item){
			.k_off = 64, .v_off = 64 + t17, .table_off = 0, .q_off = 0, .sel_off = 256,
			.o_off = 0, .lse_off = 256, .nr_tokens = 17, .nr_clusters = 1, .nr_sel = 1,
		};
		memset(&f.cmd, 0, sizeof(f.cmd));
		f.cmd.opcode = NPNM_OP_SPARSE_ATTN;
		f.cmd.op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ 1, 0, 0, sizeof(*it) };
		f.cmd.op[NPNM_ATTN_KV] = (struct npnm_operand){ 1, 0, 1 << 20,
								64 + 2 * t17 - shorter };
		f.cmd.op[NPNM_ATTN_IN] = (struct npnm_operand){ 1, 0, 2 << 20, 512 };
		f.cmd.op[NPNM_ATTN_OUT] = (struct npnm_operand){ 1, 0, 3 << 20, 512 };
		f.cmd.p.attn = (struct npnm_sparse_attn_params){
			.nr_items = 1, .head_dim = (uint16_t)d, .group = 1, .kv_dtype = NPNM_DTYPE_INT8,
		};
		assert_int_equal(nfw_run(&f.mem, &f.cmd, NFW_ISA_SCALAR, &f.scratch, &detail),
				 shorter ? NPNM_ST_BAD_OPERAND : NPNM_ST_OK);
	}
	for (int shorter = 0; shorter < 2; shorter++) {
		struct npnm_cmd c;

		memset(&c, 0, sizeof(c));
		c.opcode = NPNM_OP_KV_WRITE;
		c.op[NPNM_KV_SRC] = (struct npnm_operand){ 1, 0, 4 << 20, 2 * 1088 };
		c.op[NPNM_KV_DST] = (struct npnm_operand){ 1, 0, 5 << 20, 64 + 2 * cap - shorter };
		c.p.kv_write = (struct npnm_kv_write_params){
			.k_off = 64, .v_off = 64 + cap, .table_off = 0, .first_token = 256,
			.nr_tokens = 1, .max_tokens = 257, .max_clusters = 8, .head_dim = (uint16_t)d,
			.kv_dtype = NPNM_DTYPE_INT8,
		};
		assert_int_equal(nfw_run(&f.mem, &c, NFW_ISA_SCALAR, &f.scratch, &detail),
				 shorter ? NPNM_ST_BAD_OPERAND : NPNM_ST_OK);
	}
	fx_free(&f);
}

static void fill_and_copy(void **state)
{
	struct nfw_mem m = { tu_alloc(1 << 16), 1 << 16 };
	struct nfw_scratch sc = { 0 };
	static const uint32_t widths[] = { 1, 2, 4, 8 };
	uint8_t ref[1 << 16];
	struct npnm_cmd c;
	uint32_t detail;

	(void)state;
	for (int w = 0; w < 4; w++) {
		uint64_t pat = 0xf1e2d3c4b5a69788ull >> (64 - 8 * widths[w]);

		memset(m.base, 0, m.size);
		memset(&c, 0, sizeof(c));
		c.opcode = NPNM_OP_FILL;
		c.op[NPNM_FILL_DST] = (struct npnm_operand){ 1, 0, 1000, 8 * 333 };
		c.p.fill.pattern = widths[w] == 8 ? 0xf1e2d3c4b5a69788ull : pat;
		c.p.fill.width = widths[w];
		assert_int_equal(nfw_run(&m, &c, NFW_ISA_SCALAR, &sc, &detail), NPNM_ST_OK);
		for (uint32_t i = 0; i < m.size; i++) {
			uint8_t want = i >= 1000 && i < 1000 + 8 * 333 ?
				       (uint8_t)(c.p.fill.pattern >> (8 * ((i - 1000) % widths[w]))) : 0;

			assert_int_equal(m.base[i], want);
		}
	}
	/* Overlapping copies in both directions behave like memmove. */
	for (int dir = 0; dir < 2; dir++) {
		for (uint32_t i = 0; i < m.size; i++)
			m.base[i] = (uint8_t)(i * 31 + 7);
		memcpy(ref, m.base, m.size);
		memmove(ref + (dir ? 100 : 300), ref + (dir ? 300 : 100), 5000);
		memset(&c, 0, sizeof(c));
		c.opcode = NPNM_OP_COPY;
		c.op[NPNM_COPY_DST] = (struct npnm_operand){ 1, 0, dir ? 100 : 300, 5000 };
		c.op[NPNM_COPY_SRC] = (struct npnm_operand){ 1, 0, dir ? 300 : 100, 5000 };
		assert_int_equal(nfw_run(&m, &c, NFW_ISA_SCALAR, &sc, &detail), NPNM_ST_OK);
		assert_memory_equal(m.base, ref, m.size);
	}
	free(m.base);
	nfw_scratch_free(&sc);
}

/*
 * Softmax weights at ulp precision: items of two tokens whose logits are 0
 * and x, with V rows 0 and 1, give o = e^x / (1 + e^x) and lse =
 * log(1 + e^x) exactly.  Sweeping x over [-80, 80] checks each ISA's
 * vector exp to a few ulps, which the statistical bound cannot.
 */
static void exp_accuracy(void **state)
{
	enum { ITEMS = 321, D = 16 };
	struct nfw_mem m = { tu_alloc(4 << 20), 4 << 20 };
	struct nfw_scratch sc = { 0 };
	struct npnm_attn_item *items = (struct npnm_attn_item *)m.base;
	uint8_t *kv = m.base + (1 << 20), *in = m.base + (2 << 20), *out = m.base + (3 << 20);
	const uint64_t per = 4 * D * 2 + 8;	/* K, V (2 rows each), one cluster */
	struct npnm_cmd c;
	uint32_t detail;

	(void)state;
	memset(in, 0, 4096);
	((float *)in)[0] = 1.0f;	/* q = e0, so a logit is k[0] */
	((uint32_t *)in)[D] = 0;	/* selection: cluster 0 */
	for (uint32_t i = 0; i < ITEMS; i++) {
		uint8_t *base = kv + i * per;
		uint16_t *k = (uint16_t *)base, *v = k + 2 * D;

		memset(base, 0, per);
		k[D] = nelssa_f32_to_bf16(-80.0f + 0.5f * (float)i);	/* token 1: logit x */
		for (int j = 0; j < D; j++)
			v[D + j] = nelssa_f32_to_bf16(1.0f);	/* token 1: V = 1; token 0: V = 0 */
		*(struct npnm_cluster *)(v + 2 * D) = (struct npnm_cluster){ 0, 2 };
		items[i] = (struct npnm_attn_item){
			.k_off = i * per, .v_off = i * per + 2 * D * 2, .table_off = i * per + 4 * D * 2,
			.q_off = 0, .sel_off = 4 * D, .o_off = i * (4 * D + 64), .lse_off = i * (4 * D + 64) + 4 * D,
			.nr_tokens = 2, .nr_clusters = 1, .nr_sel = 1,
		};
	}
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_SPARSE_ATTN;
	c.op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ 1, 0, 0, ITEMS * sizeof(*items) };
	c.op[NPNM_ATTN_KV] = (struct npnm_operand){ 1, 0, 1 << 20, ITEMS * per };
	c.op[NPNM_ATTN_IN] = (struct npnm_operand){ 1, 0, 2 << 20, 4096 };
	c.op[NPNM_ATTN_OUT] = (struct npnm_operand){ 1, 0, 3 << 20, ITEMS * (4 * D + 64) };
	c.p.attn = (struct npnm_sparse_attn_params){
		.nr_items = ITEMS, .head_dim = D, .group = 1, .kv_dtype = NPNM_DTYPE_BF16,
		.scale_f32 = nelssa_f32_bits(1.0f),
	};
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		assert_int_equal(nfw_run(&m, &c, (enum nfw_isa)isa, &sc, &detail), NPNM_ST_OK);
		for (uint32_t i = 0; i < ITEMS; i++) {
			double x = nelssa_bf16_to_f32(nelssa_f32_to_bf16(-80.0f + 0.5f * (float)i));
			double want = 1.0 / (1.0 + exp(-x)), lwant = log1p(exp(x));
			const float *o = (const float *)(out + i * (4 * D + 64));
			float lse = o[D];

			/* 4 ulps of the result: exp, one sum, one division. */
			if (!(fabs(o[3] - want) <= 4 * TU_U32 * want))
				fail_msg("%s x=%g: o %.9g want %.9g (%.2f ulp)",
					 nfw_isa_name((enum nfw_isa)isa), x, o[3], want,
					 fabs(o[3] - want) / (want * TU_U32 * 2));
			/* lse = 0 + log(l), l in [1, 2]: absolute error of a few ulps of 1. */
			if (!(fabs(lse - lwant) <= 4 * TU_U32 * (fabs(lwant) + 1.0)))
				fail_msg("%s x=%g: lse %.9g want %.9g", nfw_isa_name((enum nfw_isa)isa),
					 x, lse, lwant);
		}
	}
	nfw_scratch_free(&sc);
	free(m.base);
}

static void selftest_passes(void **state)
{
	struct nfw_scratch sc = { 0 };

	(void)state;
	assert_int_equal(nfw_selftest(0, &sc), 0);
	for (uint32_t bit = 1; bit & NFW_SELFTEST_ALL; bit <<= 1)
		assert_int_equal(nfw_selftest(bit, &sc), 0);
	nfw_scratch_free(&sc);
}

/*
 * nfw_attn_peak() does the flops it reports (2 per element, token and
 * query row over its 48 tokens), for every ISA here and the scalar
 * fallback of a head dim an ISA cannot tile; refuses bad shapes.
 */
static void attn_peak_counts(void **state)
{
	static const uint32_t shapes[][2] = { { 128, 4 }, { 64, 1 }, { 256, 3 }, { 96, 6 }, { 40, 2 } };

	(void)state;
	for (int isa = NFW_ISA_AUTO; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa)) {
			assert_int_equal(nfw_attn_peak((enum nfw_isa)isa, 128, 4, 1), 0);
			continue;
		}
		for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
			uint32_t d = shapes[i][0], g = shapes[i][1];

			assert_int_equal(nfw_attn_peak((enum nfw_isa)isa, d, g, 3), 3ull * 2 * g * d * 48);
		}
		assert_int_equal(nfw_attn_peak((enum nfw_isa)isa, 0, 4, 1), 0);
		assert_int_equal(nfw_attn_peak((enum nfw_isa)isa, 128, 0, 1), 0);
		assert_int_equal(nfw_attn_peak((enum nfw_isa)isa, NFW_MAX_HEAD_DIM + 32, 4, 1), 0);
		assert_int_equal(nfw_attn_peak((enum nfw_isa)isa, 128, NFW_MAX_GROUP + 1, 1), 0);
		/* Each KV type's own mix: the same flops counted; an unknown type refused. */
		for (uint8_t t = NPNM_DTYPE_BF16; t <= NPNM_DTYPE_INT8; t++)
			for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
				assert_int_equal(nfw_attn_peak_kv((enum nfw_isa)isa, shapes[i][0],
								  shapes[i][1], t, 2),
						 2ull * 2 * shapes[i][1] * shapes[i][0] * 48);
		assert_int_equal(nfw_attn_peak_kv((enum nfw_isa)isa, 128, 4, 0, 1), 0);
		assert_int_equal(nfw_attn_peak_kv((enum nfw_isa)isa, 128, 4, 5, 1), 0);
	}
	/* 40 is no multiple of 16: AVX2 and AVX-512 run (and measure) the scalar kernel. */
	assert_int_equal(nfw_attn_isa(NFW_ISA_SCALAR, 128), NFW_ISA_SCALAR);
	if (nfw_isa_supported(NFW_ISA_AVX2)) {
		assert_int_equal(nfw_attn_isa(NFW_ISA_AVX2, 128), NFW_ISA_AVX2);
		assert_int_equal(nfw_attn_isa(NFW_ISA_AVX2, 40), NFW_ISA_SCALAR);
	}
}

int main(void)
{
	/* Groups 3 and 6: row blocks of 4, 2 and 1 in the logit and P.V loops. */
	static struct attn_case cases[3 * 10];
	static char names[3 * 10][32];
	static const enum nfw_isa isas[] = { NFW_ISA_SCALAR, NFW_ISA_AVX2, NFW_ISA_AVX512 };
	static const uint32_t dims[] = { 64, 128 }, groups[] = { 1, 3, 4, 6, 8 };
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test(attn_cluster_sizes),
		cmocka_unit_test(attn_logit_ramp),
		cmocka_unit_test(vector_matches_scalar),
		cmocka_unit_test(attn_odd_head_dim),
		cmocka_unit_test(attn_fp16),
		cmocka_unit_test(attn_tiled),
		cmocka_unit_test(attn_tiled_all_codes),
		cmocka_unit_test(attn_kv_stride),
		cmocka_unit_test(attn_bf16_dots),
		cmocka_unit_test(attn_bf16_dots_vdpbf16ps),
		cmocka_unit_test(attn_bf16_weights_rounded),
		cmocka_unit_test(attn_writes_only_outputs),
		cmocka_unit_test(kv_write_then_attn),
		cmocka_unit_test(kv_write_tiled_then_attn),
		cmocka_unit_test(kv_write_strided_matches_packed),
		cmocka_unit_test(tiled_bounds_exact),
		cmocka_unit_test(fill_and_copy),
		cmocka_unit_test(exp_accuracy),
		cmocka_unit_test(selftest_passes),
		cmocka_unit_test(attn_peak_counts),
	};
	struct CMUnitTest tests[3 * 10 + sizeof(fixed) / sizeof(fixed[0])];
	size_t n = 0;

	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 2; j++)
			for (int k = 0; k < 5; k++) {
				struct attn_case *c = &cases[n];

				*c = (struct attn_case){ isas[i], dims[j], groups[k] };
				snprintf(names[n], sizeof(names[n]), "attn_%s_d%u_g%u",
					 nfw_isa_name(c->isa), c->d, c->g);
				tests[n] = (struct CMUnitTest){ names[n], attn_shape, NULL, NULL, c };
				n++;
			}
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		tests[n++] = fixed[i];

	tu_init("fw_kernels");
	return _cmocka_run_group_tests("fw_kernels", tests, n, NULL, NULL);
}
