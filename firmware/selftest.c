// SPDX-License-Identifier: MIT
/*
 * SELFTEST: the firmware checks its own kernels on built-in data in
 * private memory, so a card can be verified in the field without any host
 * buffers.  Attention is checked against the numeric core's reference
 * kernel on every ISA this CPU supports.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/half.h>

#include "fw_internal.h"

#define ST_MEM (1u << 20)

/* A fixed LCG: built-in data is the same on every run and every card. */
static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

static float rnd(uint32_t *s)
{
	return (float)lcg(s) / 8388608.0f - 1.0f;	/* [-1, 1) */
}

static struct npnm_operand operand(uint64_t off, uint64_t len)
{
	return (struct npnm_operand){ .handle = 1, .offset = off, .len = len };
}

static int check_memops(const struct nfw_mem *m, struct nfw_scratch *sc)
{
	struct npnm_cmd c;
	uint32_t detail;
	uint8_t ref[4096];

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_FILL;
	c.op[NPNM_FILL_DST] = operand(4096, 4096);
	c.p.fill.pattern = 0x0123456789abcdefull;
	c.p.fill.width = 8;
	if (nfw_run(m, &c, NFW_ISA_SCALAR, sc, &detail))
		return 1;
	for (int i = 0; i < 4096; i++)
		if (m->base[4096 + i] != (uint8_t)(0x0123456789abcdefull >> (8 * (i % 8))))
			return 1;
	/* Overlapping COPY behaves like memmove. */
	for (int i = 0; i < 8192; i++)
		m->base[i] = (uint8_t)(i * 7);
	memcpy(ref, m->base + 1000, sizeof(ref));
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_COPY;
	c.op[NPNM_COPY_DST] = operand(1500, 4096);
	c.op[NPNM_COPY_SRC] = operand(1000, 4096);
	if (nfw_run(m, &c, NFW_ISA_SCALAR, sc, &detail))
		return 1;
	return memcmp(m->base + 1500, ref, sizeof(ref)) != 0;
}

static int check_kv_write(const struct nfw_mem *m, struct nfw_scratch *sc)
{
	const uint32_t d = 64, n = 40;
	struct npnm_cmd c;
	struct npnm_cluster *tab;
	uint32_t *idx, detail, s = 7;
	uint16_t *src = (uint16_t *)m->base;

	memset(m->base, 0, ST_MEM);
	for (uint32_t i = 0; i < 2 * n * d; i++)
		src[i] = (uint16_t)lcg(&s);
	tab = (struct npnm_cluster *)(m->base + 2 * n * d * 2);
	tab[0] = (struct npnm_cluster){ 0, 25 };
	tab[1] = (struct npnm_cluster){ 25, 15 };
	idx = (uint32_t *)(tab + 2);
	for (uint32_t i = 0; i < n; i++)
		idx[i] = (i * 17) % n;	/* a permutation of 0..n-1 */
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_KV_WRITE;
	c.op[NPNM_KV_SRC] = operand(0, 65536);
	c.op[NPNM_KV_DST] = operand(65536, 65536);
	c.p.kv_write = (struct npnm_kv_write_params){
		.k_off = 0, .v_off = 16384, .table_off = 32768, .nr_tokens = n,
		.first_cluster = 3, .nr_clusters = 2, .max_tokens = 64, .max_clusters = 16,
		.head_dim = (uint16_t)d, .kv_dtype = NPNM_DTYPE_BF16, .flags = NPNM_KV_F_SCATTER,
	};
	if (nfw_run(m, &c, NFW_ISA_SCALAR, sc, &detail))
		return 1;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *dk = m->base + 65536 + (uint64_t)idx[i] * d * 2;

		if (memcmp(dk, src + i * d, d * 2) || memcmp(dk + 16384, src + (n + i) * d, d * 2))
			return 1;
	}
	return memcmp(m->base + 65536 + 32768 + 3 * sizeof(*tab), tab, 2 * sizeof(*tab)) != 0;
}

/*
 * A SPARSE_ATTN of one item, the item at offset 0 and its KV, inputs and
 * outputs in operands at @kv (@kv_len bytes), @in and @out (@io_len each).
 */
static struct npnm_cmd one_item_attn(uint64_t kv, uint64_t kv_len, uint64_t in, uint64_t out,
				     uint64_t io_len, struct npnm_sparse_attn_params p)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_SPARSE_ATTN;
	c.op[NPNM_ATTN_ITEMS] = operand(0, sizeof(struct npnm_attn_item));
	c.op[NPNM_ATTN_KV] = operand(kv, kv_len);
	c.op[NPNM_ATTN_IN] = operand(in, io_len);
	c.op[NPNM_ATTN_OUT] = operand(out, io_len);
	c.p.attn = p;
	return c;
}

/*
 * A 600-token store in clusters of 1..32 tokens, 4 query rows, a random
 * third of the clusters selected; every supported ISA against the
 * reference kernel of the numeric core, with SPARSE_ATTN @flags (bf16 dot
 * products: BFDOT where the CPU has it).
 */
static int check_attn(const struct nfw_mem *m, struct nfw_scratch *sc, uint8_t dtype,
		      uint32_t flags)
{
	const uint32_t d = 128, g = 4, n = 600;
	struct npnm_cluster tab[64];
	struct nelssa_cluster ntab[64];
	uint32_t sel[64], nc = 0, ns = 0, s = 12345, detail;
	struct npnm_attn_item *it;
	struct npnm_cmd c;
	float ro[128 * 4], rl[4];
	uint8_t *kv = m->base + 4096, *in = m->base + 4096 + 2 * n * d * 2 + 4096;
	uint8_t *out = in + 65536;
	struct nelssa_attn_geom geom = {
		d, g, dtype == NPNM_DTYPE_FP16 ? NELSSA_KV_FP16 : NELSSA_KV_BF16, 0.0883883476f, flags,
	};
	/*
	 * The reference and a kernel each round a weight to bf16 relative to
	 * their own running maximum, within 2^-8: outputs up to 2^-7 max|v|
	 * (|v| <= 2) apart.
	 */
	const float tol_o = 1e-4f + (flags ? 2.0f * 0x1p-7f : 0.0f);
	int bad = 0;

	memset(m->base, 0, ST_MEM);
	for (uint32_t t = 0; t < n;) {
		uint32_t cnt = 1 + lcg(&s) % 32;

		if (cnt > n - t)
			cnt = n - t;
		tab[nc] = (struct npnm_cluster){ t, cnt };
		ntab[nc] = (struct nelssa_cluster){ t, cnt };
		if (lcg(&s) % 3 == 0)
			sel[ns++] = nc;
		nc++;
		t += cnt;
	}
	for (uint32_t i = 0; i < 2 * n * d; i++) {
		float x = 2.0f * rnd(&s);
		uint16_t h = dtype == NPNM_DTYPE_FP16 ? nelssa_f32_to_fp16(x) : nelssa_f32_to_bf16(x);

		memcpy(kv + 2 * i, &h, 2);
	}
	memcpy(kv + 2 * n * d * 2, tab, nc * sizeof(tab[0]));
	for (uint32_t i = 0; i < g * d; i++) {
		float x = 2.0f * rnd(&s);

		memcpy(in + 4 * i, &x, 4);
	}
	memcpy(in + g * d * 4, sel, ns * 4);
	it = (struct npnm_attn_item *)m->base;
	*it = (struct npnm_attn_item){
		.k_off = 0, .v_off = n * d * 2, .table_off = 2 * n * d * 2, .q_off = 0,
		.sel_off = g * d * 4, .o_off = 0, .lse_off = g * d * 4,
		.nr_tokens = n, .nr_clusters = nc, .nr_sel = ns,
	};
	c = one_item_attn(4096, 2 * n * d * 2 + 4096, (uint64_t)(in - m->base),
			  (uint64_t)(out - m->base), 65536, (struct npnm_sparse_attn_params){
		.nr_items = 1, .head_dim = (uint16_t)d, .group = (uint8_t)g, .kv_dtype = dtype,
		.scale_f32 = nelssa_f32_bits(geom.scale), .flags = flags,
	});
	if (nelssa_attn_clusters(&geom, (const float *)in, kv, kv + n * d * 2, n, ntab, nc, sel, ns,
				 ro, rl))
		return 1;
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		memset(out, 0xff, 65536);
		if (nfw_run(m, &c, (enum nfw_isa)isa, sc, &detail))
			return 1;
		for (uint32_t r = 0; r < g; r++) {
			float l;

			memcpy(&l, out + g * d * 4 + 4 * r, 4);
			bad |= !(fabsf(l - rl[r]) <= 1e-4f * (1.0f + fabsf(rl[r])));
			for (uint32_t i = 0; i < d; i++) {
				float o;

				memcpy(&o, out + 4 * (r * d + i), 4);
				bad |= !(fabsf(o - ro[r * d + i]) <= tol_o);
			}
		}
	}
	return bad;
}

/*
 * That bf16 dot products round the weights, which the 600-token case's
 * tolerance is too loose to see: two tokens, a zero V row under logit 0
 * and a V row of ones under logit c = bf16(-0.3571), so on every ISA
 * every output is exactly fl(w' / (1 + w)), w = e^c, w' its bf16: 3.7e-4
 * relative from what binary32 weights give.
 */
static int check_bf16_weights(const struct nfw_mem *m, struct nfw_scratch *sc)
{
	const uint32_t d = 64, g = 2;
	uint16_t *kv = (uint16_t *)(m->base + 4096);
	float *q = (float *)(m->base + 65536), *o = (float *)(m->base + 131072);
	const float c = nelssa_bf16_round(-0.3571f), w = expf(c);
	const float want = nelssa_bf16_round(w) / (1.0f + w);
	struct npnm_attn_item *it = (struct npnm_attn_item *)m->base;
	struct npnm_cmd cmd;
	uint32_t detail;
	int bad = 0;

	memset(m->base, 0, ST_MEM);
	kv[d] = nelssa_f32_to_bf16(1.0f);		/* K rows: 0, e_0 */
	for (uint32_t i = 0; i < d; i++)
		kv[3 * d + i] = nelssa_f32_to_bf16(1.0f);	/* V rows: 0, ones */
	*(struct npnm_cluster *)(kv + 4 * d) = (struct npnm_cluster){ 0, 2 };
	for (uint32_t i = 0; i < g * d; i++)
		q[i] = i % d ? 0.25f : -0.3571f;
	*it = (struct npnm_attn_item){
		.k_off = 0, .v_off = 2 * d * 2, .table_off = 4 * d * 2, .q_off = 0,
		.sel_off = g * d * 4, .o_off = 0, .lse_off = g * d * 4,
		.nr_tokens = 2, .nr_clusters = 1, .nr_sel = 1,
	};
	cmd = one_item_attn(4096, 4096, 65536, 131072, 4096, (struct npnm_sparse_attn_params){
		.nr_items = 1, .head_dim = (uint16_t)d, .group = (uint8_t)g,
		.kv_dtype = NPNM_DTYPE_BF16, .scale_f32 = nelssa_f32_bits(1.0f),
		.flags = NPNM_ATTN_F_BF16_DOTS,
	});
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		memset(o, 0xff, 4096);
		if (nfw_run(m, &cmd, (enum nfw_isa)isa, sc, &detail))
			return 1;
		for (uint32_t r = 0; r < g; r++) {
			bad |= !(fabsf(o[g * d + r] - log1pf(w)) <= 4e-7f);
			for (uint32_t i = 0; i < d; i++)
				bad |= !(fabsf(o[r * d + i] - want) <= 4e-7f);
		}
	}
	return bad;
}

/* A few malformed descriptors must be refused with their specific status. */
static int check_validate(const struct nfw_mem *m, struct nfw_scratch *sc)
{
	struct npnm_cmd c;
	uint32_t detail;
	int bad = 0;

	memset(&c, 0, sizeof(c));
	c.opcode = 0x7fff;
	bad |= nfw_run(m, &c, NFW_ISA_SCALAR, sc, &detail) != NPNM_ST_BAD_OPCODE;
	c.opcode = NPNM_OP_NOP;
	c.reserved[1] = 1;
	bad |= nfw_run(m, &c, NFW_ISA_SCALAR, sc, &detail) != NPNM_ST_BAD_RESERVED;
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_FILL;
	c.op[NPNM_FILL_DST] = operand(m->size - 8, 16);
	c.p.fill.width = 1;
	bad |= nfw_run(m, &c, NFW_ISA_SCALAR, sc, &detail) != NPNM_ST_BAD_OPERAND;
	c.op[NPNM_FILL_DST] = operand(0, 16);
	c.p.fill.width = 3;
	bad |= nfw_run(m, &c, NFW_ISA_SCALAR, sc, &detail) != NPNM_ST_BAD_PARAM;
	return bad;
}

uint32_t nfw_selftest(uint32_t mask, struct nfw_scratch *scratch)
{
	struct nfw_mem m = { .base = calloc(1, ST_MEM), .size = ST_MEM };
	uint32_t failed = 0;

	if (!mask)
		mask = NFW_SELFTEST_ALL;
	if (!m.base)
		return mask;	/* cannot run: report every requested test failed */
	if ((mask & NFW_SELFTEST_MEMOPS) && check_memops(&m, scratch))
		failed |= NFW_SELFTEST_MEMOPS;
	if ((mask & NFW_SELFTEST_KV_WRITE) && check_kv_write(&m, scratch))
		failed |= NFW_SELFTEST_KV_WRITE;
	if ((mask & NFW_SELFTEST_ATTN) && check_attn(&m, scratch, NPNM_DTYPE_BF16, 0))
		failed |= NFW_SELFTEST_ATTN;
	if ((mask & NFW_SELFTEST_ATTN_FP16) && check_attn(&m, scratch, NPNM_DTYPE_FP16, 0))
		failed |= NFW_SELFTEST_ATTN_FP16;
	if ((mask & NFW_SELFTEST_ATTN_BF16_DOTS) &&
	    (check_attn(&m, scratch, NPNM_DTYPE_BF16, NPNM_ATTN_F_BF16_DOTS) ||
	     check_bf16_weights(&m, scratch)))
		failed |= NFW_SELFTEST_ATTN_BF16_DOTS;
	if ((mask & NFW_SELFTEST_VALIDATE) && check_validate(&m, scratch))
		failed |= NFW_SELFTEST_VALIDATE;
	free(m.base);
	return failed;
}
