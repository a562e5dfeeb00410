// SPDX-License-Identifier: MIT
/*
 * The firmware against hostile descriptors: valid commands of every
 * opcode with operands -- KV_WRITE and SPARSE_ATTN packed and with a
 * kv_stride, 16- and 8-bit, FILL, COPY -- mutated at random (parameters, operands, work items, selected
 * ids, table entries, strides; boundary values more often than not) and
 * run, each ISA in turn.  Whatever the status:
 *
 * - the firmware touches no byte outside the command's operands: under
 *   ASan everything else of device memory is poisoned while it runs (in
 *   8-byte granules, so up to 7 bytes just before an unaligned operand
 *   stay readable: a read there goes unseen, a write does not);
 * - a refused command writes nothing;
 * - an accepted one writes only inside the operands the opcode writes
 *   (npnm_rules_operand_access()).
 *
 * Deterministic for a run seed (NELSSA_TEST_SEED replays a failure); the
 * failing mutation is printed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <nelssa/fw.h>

#include "testutil.h"
#include "npnm_rules.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define MEM (128u << 10)
#define D 64u
#define ROWB (2u * D)			/* a bf16 row */
#define TILE 1088u			/* an 8-bit tile at head dim 64 */
#define ITERS 8000u			/* mutated commands per seed kind and ISA */

enum kind { K_KV, K_KV_STRIDE, K_KV_TILED, K_ATTN, K_ATTN_STRIDE, K_ATTN_TILED, K_FILL,
	    K_COPY, K_NR };

static const char *const kind_name[K_NR] = {
	"kv_write", "kv_write strided", "kv_write int8", "sparse_attn",
	"sparse_attn strided", "sparse_attn int8", "fill", "copy",
};

struct base {
	struct npnm_cmd cmd;
	uint8_t *mem;			/* the device memory the command was built in */
};

static void fill_random(struct tu_rng *rng, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)tu_next(rng);
}

/* bf16 rows of modest values: random sign and mantissa, exponent near 1. */
static void fill_rows(struct tu_rng *rng, uint8_t *p, size_t bytes)
{
	for (size_t i = 0; i + 1 < bytes; i += 2) {
		uint16_t h = (uint16_t)((tu_next(rng) & 0x807f) | 0x3f00);

		memcpy(p + i, &h, 2);
	}
}

/* 8-bit tiles: random codes, scales 1/64 per 32 channels. */
static void fill_tiles(struct tu_rng *rng, uint8_t *p, uint32_t tiles)
{
	const float sc = 1.0f / 64;

	for (uint32_t t = 0; t < tiles; t++) {
		fill_random(rng, p + t * TILE, 16 * D);
		for (unsigned int i = 0; i < 16 * D; i++)
			p[t * TILE + i] &= 0x3f;	/* finite E4M3, small int8 */
		for (unsigned int g = 0; g < D / 32; g++)
			memcpy(p + t * TILE + 16 * D + 4 * g, &sc, 4);
	}
}

/*
 * KV_WRITE: source at 0 (24 KiB), store at 32 KiB (96 KiB): 40 rows (3
 * tiles) with 3 clusters, scattered for bf16 packed, into a store of 200
 * tokens.
 */
static void build_kv(struct base *b, struct tu_rng *rng, enum kind k)
{
	struct npnm_kv_write_params *p = &b->cmd.p.kv_write;
	const struct npnm_cluster t[3] = { { 0, 10 }, { 10, 20 }, { 30, 10 } };
	const int tiled = k == K_KV_TILED;
	const uint32_t rows = tiled ? 3 * TILE : 40 * ROWB;

	b->cmd.opcode = NPNM_OP_KV_WRITE;
	b->cmd.op[NPNM_KV_SRC] = (struct npnm_operand){ 1, 0, 0, 24u << 10 };
	b->cmd.op[NPNM_KV_DST] = (struct npnm_operand){ 1, 0, 32u << 10, 96u << 10 };
	*p = (struct npnm_kv_write_params){
		.k_off = 0, .v_off = 32u << 10, .table_off = 64u << 10, .nr_tokens = 40,
		.nr_clusters = 3, .max_tokens = 200, .max_clusters = 32, .head_dim = D,
		.kv_dtype = tiled ? NPNM_DTYPE_INT8 : NPNM_DTYPE_BF16,
	};
	if (tiled)
		fill_tiles(rng, b->mem, 6);
	else
		fill_rows(rng, b->mem, 2 * rows);
	memcpy(b->mem + 2 * rows, t, sizeof(t));
	if (k == K_KV) {
		uint32_t *idx = (uint32_t *)(b->mem + 2 * rows + sizeof(t));

		for (uint32_t i = 0; i < 40; i++)
			idx[i] = (i * 7 + 3) % 40;
		p->flags = NPNM_KV_F_SCATTER;
	}
	if (k == K_KV_STRIDE) {
		p->v_off = 16 * ROWB;
		p->kv_stride = 2 * 16 * ROWB;
		p->table_off = 13 * p->kv_stride;
	}
}

/*
 * SPARSE_ATTN: items at 0, KV at 4 KiB (two stores of 150 tokens in 15
 * clusters), queries and ids at 96 KiB, outputs at 112 KiB.
 */
static void build_attn(struct base *b, struct tu_rng *rng, enum kind k)
{
	const int tiled = k == K_ATTN_TILED, strided = k == K_ATTN_STRIDE;
	const uint32_t block = tiled ? TILE : 16 * ROWB, nblk = 10;	/* 150 tokens */
	const uint32_t arr = nblk * block, store = 2 * arr + 256;
	uint8_t *kv = b->mem + 4096, *in = b->mem + (96u << 10);
	struct npnm_attn_item *it = (struct npnm_attn_item *)b->mem;

	b->cmd.opcode = NPNM_OP_SPARSE_ATTN;
	b->cmd.op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ 1, 0, 0, 2 * sizeof(*it) };
	b->cmd.op[NPNM_ATTN_KV] = (struct npnm_operand){ 1, 0, 4096, 2 * store };
	b->cmd.op[NPNM_ATTN_IN] = (struct npnm_operand){ 1, 0, 96u << 10, 8192 };
	b->cmd.op[NPNM_ATTN_OUT] = (struct npnm_operand){ 1, 0, 112u << 10, 8192 };
	b->cmd.p.attn = (struct npnm_sparse_attn_params){
		.nr_items = 2, .head_dim = D, .group = 4,
		.kv_dtype = tiled ? NPNM_DTYPE_FP8_E4M3 : NPNM_DTYPE_BF16,
		.kv_stride = strided ? 2 * block : 0,
	};
	for (uint32_t i = 0; i < 2; i++) {
		uint8_t *s = kv + i * store;
		struct npnm_cluster *t = (struct npnm_cluster *)(s + 2 * arr);
		uint32_t *sel = (uint32_t *)(in + 2048 + i * 512);

		if (tiled)
			fill_tiles(rng, s, 2 * nblk);
		else
			fill_rows(rng, s, 2 * arr);
		for (uint32_t c = 0; c < 15; c++)
			t[c] = (struct npnm_cluster){ c * 10, 10 };
		for (uint32_t j = 0; j < 8; j++)
			sel[j] = (j * 4 + i) % 15;
		it[i] = (struct npnm_attn_item){
			.k_off = i * store, .v_off = i * store + (strided ? block : arr),
			.table_off = i * store + 2 * arr, .q_off = i * 1024,
			.sel_off = 2048 + i * 512, .o_off = i * 2048, .lse_off = 4096 + i * 64,
			.nr_tokens = 150, .nr_clusters = 15, .nr_sel = 8,
		};
	}
	for (uint32_t i = 0; i < 2 * 4 * D; i++) {
		float q = (float)(tu_uniform(rng) - 0.5);

		memcpy(in + 4 * i, &q, 4);
	}
}

static void build(struct base *b, struct tu_rng *rng, enum kind k)
{
	memset(&b->cmd, 0, sizeof(b->cmd));
	memset(b->mem, 0, MEM);
	switch (k) {
	case K_KV:
	case K_KV_STRIDE:
	case K_KV_TILED:
		build_kv(b, rng, k);
		break;
	case K_ATTN:
	case K_ATTN_STRIDE:
	case K_ATTN_TILED:
		build_attn(b, rng, k);
		break;
	case K_FILL:
		b->cmd.opcode = NPNM_OP_FILL;
		b->cmd.op[0] = (struct npnm_operand){ 1, 0, 4096, 8192 };
		b->cmd.p.fill.pattern = 0xa5a5;
		b->cmd.p.fill.width = 2;
		break;
	default:
		b->cmd.opcode = NPNM_OP_COPY;
		b->cmd.op[0] = (struct npnm_operand){ 1, 0, 65536, 8192 };
		b->cmd.op[1] = (struct npnm_operand){ 1, 0, 4096, 8192 };
		fill_random(rng, b->mem + 4096, 8192);
		break;
	}
}

/* A value a careless or hostile host would write: boundaries mostly. */
static uint64_t nasty(struct tu_rng *rng, uint64_t near)
{
	static const uint64_t fixed[] = { 0, 1, 2, 4, 63, 64, 65, 4096, 32768, MEM - 1, MEM,
					  MEM + 1, 0x7fffffff, 0x80000000, 0xffffffff,
					  0x100000000ull, ~0ull, ~0ull - 63 };

	switch (tu_below(rng, 4)) {
	case 0:
		return fixed[tu_below(rng, sizeof(fixed) / sizeof(fixed[0]))];
	case 1:
		return near + tu_below(rng, 129) - 64;	/* just around the valid value */
	case 2:
		return near ^ (1ull << tu_below(rng, 64));
	default:
		return tu_next(rng) >> tu_below(rng, 64);
	}
}

static void put_field(void *p, unsigned int size, uint64_t v)
{
	uint8_t b[8];

	for (unsigned int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	memcpy(p, b, size);
}

static uint64_t get_field(const void *p, unsigned int size)
{
	uint8_t b[8] = { 0 };
	uint64_t v = 0;

	memcpy(b, p, size);
	for (unsigned int i = 0; i < 8; i++)
		v |= (uint64_t)b[i] << (8 * i);
	return v;
}

/* One mutation of @c (and of the device memory its operands point at). */
static int mutate(struct npnm_cmd *c, uint8_t *mem, struct tu_rng *rng, char *what, size_t len)
{
	static const unsigned int sizes[] = { 1, 2, 4, 8 };
	unsigned int size = sizes[tu_below(rng, 4)], at;

	switch (tu_below(rng, 6)) {
	case 0: {	/* a parameter field */
		at = tu_below(rng, NPNM_CMD_PARAMS_BYTES / size) * size;
		put_field((uint8_t *)&c->p + at,
			  size, nasty(rng, get_field((uint8_t *)&c->p + at, size)));
		return snprintf(what, len, "p byte %u (%u bytes)", at, size);
	}
	case 1: {	/* an operand's offset or length */
		unsigned int slot = tu_below(rng, NPNM_CMD_MAX_OPERANDS);
		int is_len = tu_below(rng, 2);
		__u64 *f = is_len ? &c->op[slot].len : &c->op[slot].offset;

		*f = nasty(rng, *f);
		return snprintf(what, len, "operand %u %s", slot, is_len ? "len" : "offset");
	}
	case 2: {	/* the stride alone, around what a layout needs */
		static const uint32_t st[] = { 0, 64, 1984, 2048, 2048 + 32, 2112, 4096, 4160,
					       1u << 20, 0xffffffc0 };
		uint32_t v = st[tu_below(rng, sizeof(st) / sizeof(st[0]))];

		if (c->opcode == NPNM_OP_KV_WRITE)
			c->p.kv_write.kv_stride = v;
		else
			c->p.attn.kv_stride = v;
		return snprintf(what, len, "kv_stride %u", v);
	}
	default: {	/* bytes inside a read operand: items, ids, table entries */
		unsigned int slot = tu_below(rng, NPNM_CMD_MAX_OPERANDS);
		uint64_t off = c->op[slot].offset, n = c->op[slot].len;

		if (!(npnm_rules_operand_access(c->opcode, slot) & NPNM_ACCESS_READ) ||
		    off >= MEM || n < 8 || n > MEM - off)
			return snprintf(what, len, "nothing");
		at = (unsigned int)(off + tu_below(rng, (uint32_t)(n / size)) * size);
		put_field(mem + at, size, nasty(rng, get_field(mem + at, size)));
		return snprintf(what, len, "memory byte %u (%u bytes)", at, size);
	}
	}
}

/*
 * The parts of [0, MEM) no operand of @c the device may @access covers,
 * in order, into @gap ([start, end) pairs); returns how many.
 */
static unsigned int gaps(const struct npnm_cmd *c, int access, uint64_t gap[][2])
{
	uint64_t cut[NPNM_CMD_MAX_OPERANDS][2];
	unsigned int n = 0, g = 0;
	uint64_t at = 0;

	for (unsigned int s = 0; s < NPNM_CMD_MAX_OPERANDS; s++) {
		const struct npnm_operand *op = &c->op[s];
		uint64_t e;

		if (!op->handle || !(npnm_rules_operand_access(c->opcode, s) & access) ||
		    op->offset >= MEM)
			continue;
		e = op->len > MEM - op->offset ? MEM : op->offset + op->len;
		cut[n][0] = op->offset;
		cut[n++][1] = e;
	}
	for (;;) {
		/* The operand that starts first among those ending past @at. */
		int best = -1;

		for (unsigned int i = 0; i < n; i++)
			if (cut[i][1] > at && (best < 0 || cut[i][0] < cut[best][0]))
				best = (int)i;
		if (best < 0 || cut[best][0] > at) {
			uint64_t end = best < 0 ? MEM : cut[best][0];

			if (end > at) {
				gap[g][0] = at;
				gap[g++][1] = end;
			}
			if (best < 0)
				return g;
		}
		at = cut[best][1];
	}
}

static void fuzz_kind(enum kind k)
{
	struct nfw_scratch scratch = { 0 };
	struct tu_rng rng;
	struct base b;
	uint8_t *mem = tu_alloc(MEM), *before = tu_alloc(MEM), *seen = tu_alloc(MEM);
	uint32_t accepted = 0, refused = 0;

	b.mem = before;
	for (int isa = NFW_ISA_SCALAR; isa < NFW_ISA_COUNT; isa++) {
		if (!nfw_isa_supported((enum nfw_isa)isa))
			continue;
		tu_rng_for(&rng, kind_name[k], (uint64_t)isa);
		build(&b, &rng, k);
		for (uint32_t i = 0; i < ITERS; i++) {
			struct nfw_mem m = { mem, MEM };
			struct npnm_cmd c = b.cmd;
			uint32_t st, detail, n = 1 + tu_below(&rng, 3);
			uint64_t gap[NPNM_CMD_MAX_OPERANDS + 1][2];
			unsigned int ng;
			char what[3][48];

			memcpy(mem, before, MEM);
			for (uint32_t j = 0; j < n; j++)
				mutate(&c, mem, &rng, what[j], sizeof(what[j]));
			memcpy(seen, mem, MEM);
			/* What the device may not touch at all, poisoned while it runs. */
			ng = gaps(&c, NPNM_ACCESS_RW, gap);
			for (unsigned int g = 0; g < ng; g++)
				POISON(mem + gap[g][0], gap[g][1] - gap[g][0]);
			st = nfw_run(&m, &c, (enum nfw_isa)isa, &scratch, &detail);
			UNPOISON(mem, MEM);
			/* Refused: nothing written; accepted: only where it writes. */
			if (st == NPNM_ST_OK) {
				ng = gaps(&c, NPNM_ACCESS_WRITE, gap);
			} else {
				ng = 1;
				gap[0][0] = 0;
				gap[0][1] = MEM;
			}
			for (unsigned int g = 0; g < ng; g++) {
				uint64_t x = gap[g][0];

				if (!memcmp(mem + x, seen + x, gap[g][1] - x))
					continue;
				while (mem[x] == seen[x])
					x++;
				fail_msg("%s on %s, mutation %u (%s%s%s%s%s): status %u, byte %llu "
					 "written where it may not be", kind_name[k], nfw_isa_name(isa),
					 i, what[0], n > 1 ? ", " : "", n > 1 ? what[1] : "",
					 n > 2 ? ", " : "", n > 2 ? what[2] : "", st,
					 (unsigned long long)x);
			}
			if (st == NPNM_ST_OK)
				accepted++;
			else
				refused++;
		}
	}
	/* Both outcomes were exercised: the mutations are neither all fatal nor all harmless. */
	printf("# %s: %u accepted, %u refused\n", kind_name[k], accepted, refused);
	assert_true(accepted > 0);
	if (k != K_FILL && k != K_COPY)
		assert_true(refused > 0);
	nfw_scratch_free(&scratch);
	free(mem);
	free(before);
	free(seen);
}

#define FUZZ(k, fn) static void fn(void **state) { (void)state; fuzz_kind(k); }
FUZZ(K_KV, kv_write)
FUZZ(K_KV_STRIDE, kv_write_strided)
FUZZ(K_KV_TILED, kv_write_int8)
FUZZ(K_ATTN, sparse_attn)
FUZZ(K_ATTN_STRIDE, sparse_attn_strided)
FUZZ(K_ATTN_TILED, sparse_attn_fp8)
FUZZ(K_FILL, fill)
FUZZ(K_COPY, copy)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kv_write),
		cmocka_unit_test(kv_write_strided),
		cmocka_unit_test(kv_write_int8),
		cmocka_unit_test(sparse_attn),
		cmocka_unit_test(sparse_attn_strided),
		cmocka_unit_test(sparse_attn_fp8),
		cmocka_unit_test(fill),
		cmocka_unit_test(copy),
	};

	tu_init("fw_fuzz");
	return cmocka_run_group_tests_name("fw_fuzz", tests, NULL, NULL);
}
