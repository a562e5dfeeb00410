// SPDX-License-Identifier: MIT
/*
 * Every validation path of the firmware: each case starts from a valid
 * descriptor, breaks one thing, and expects one specific status -- and
 * device memory left exactly as it was.
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

#define MEM (16ull << 20)

enum base { B_NOP, B_FILL, B_COPY, B_KV, B_ATTN, B_SELFTEST };

struct vcase {
	const char *name;
	enum base base;
	void (*breakit)(struct fx *f);
	uint32_t want;
};

static struct npnm_attn_item *item0(struct fx *f)
{
	return (struct npnm_attn_item *)(f->mem.base + FX_ITEMS_OFF);
}

static uint32_t *sel0(struct fx *f)
{
	return (uint32_t *)(f->mem.base + f->cmd.op[NPNM_ATTN_IN].offset + f->it[0].sel);
}

static struct npnm_cluster *table0(struct fx *f)
{
	return (struct npnm_cluster *)(fx_kv(f) + f->it[0].table);
}

/* A valid command of each kind, built in @f. */
static void build(struct fx *f, enum base b)
{
	struct npnm_cmd *c = &f->cmd;
	struct tu_rng rng;

	tu_rng_for(&rng, "validate", b);
	fx_init(f, MEM, 64, 4, NPNM_DTYPE_BF16);
	switch (b) {
	case B_ATTN:
		fx_add_item(f, &rng, 300, 8, 500);
		fx_add_item(f, &rng, 200, 8, 500);
		fx_finish(f);
		return;
	default:
		break;
	}
	memset(c, 0, sizeof(*c));
	switch (b) {
	case B_NOP:
		c->opcode = NPNM_OP_NOP;
		break;
	case B_FILL:
		c->opcode = NPNM_OP_FILL;
		c->op[0] = (struct npnm_operand){ 1, 0, 4096, 4096 };
		c->p.fill.pattern = 0xbeef;
		c->p.fill.width = 2;
		break;
	case B_COPY:
		c->opcode = NPNM_OP_COPY;
		c->op[0] = (struct npnm_operand){ 1, 0, 8192, 4096 };
		c->op[1] = (struct npnm_operand){ 1, 0, 4096, 4096 };
		break;
	case B_KV: {
		struct npnm_cluster *t = (struct npnm_cluster *)(f->mem.base + 2 * 10 * 128);
		uint32_t *idx = (uint32_t *)(t + 2);

		t[0] = (struct npnm_cluster){ 0, 6 };
		t[1] = (struct npnm_cluster){ 6, 4 };
		for (uint32_t i = 0; i < 10; i++)
			idx[i] = 9 - i;
		c->opcode = NPNM_OP_KV_WRITE;
		c->op[NPNM_KV_SRC] = (struct npnm_operand){ 1, 0, 0, 65536 };
		c->op[NPNM_KV_DST] = (struct npnm_operand){ 1, 0, 1 << 20, 1 << 20 };
		c->p.kv_write = (struct npnm_kv_write_params){
			.k_off = 0, .v_off = 65536, .table_off = 131072, .first_token = 0,
			.nr_tokens = 10, .first_cluster = 0, .nr_clusters = 2, .max_tokens = 256,
			.max_clusters = 64, .head_dim = 64, .kv_dtype = NPNM_DTYPE_BF16,
			.flags = NPNM_KV_F_SCATTER,
		};
		break;
	}
	case B_SELFTEST:
		c->opcode = NPNM_OP_SELFTEST;
		c->p.selftest.mask = NFW_SELFTEST_MEMOPS;
		break;
	default:
		break;
	}
}

static void run_case(void **state)
{
	const struct vcase *vc = *state;
	struct fx f;
	uint8_t *before;
	uint32_t detail, st;

	build(&f, vc->base);
	/* The unbroken command is valid... */
	assert_int_equal(nfw_validate(&f.mem, &f.cmd, &f.scratch), NPNM_ST_OK);
	vc->breakit(&f);
	before = tu_alloc(f.mem.size);
	memcpy(before, f.mem.base, f.mem.size);
	/* ...and the broken one fails with exactly the expected status... */
	st = nfw_run(&f.mem, &f.cmd, NFW_ISA_SCALAR, &f.scratch, &detail);
	if (st != vc->want)
		fail_msg("%s: status %u, expected %u", vc->name, st, vc->want);
	/* ...without touching device memory. */
	assert_memory_equal(f.mem.base, before, f.mem.size);
	free(before);
	fx_free(&f);
}

#define CMD(f) (&(f)->cmd)
#define BREAK(fn, ...) static void fn(struct fx *f) { __VA_ARGS__; }

BREAK(bad_opcode, CMD(f)->opcode = NPNM_OP_MAX)
BREAK(bad_opcode_high, CMD(f)->opcode = 0xffff)
BREAK(hdr_flags, CMD(f)->flags = 1)
BREAK(hdr_reserved0, CMD(f)->reserved[0] = 1)
BREAK(hdr_reserved1, CMD(f)->reserved[1] = 1ull << 63)
BREAK(nop_operand_used, CMD(f)->op[2].len = 1)
BREAK(nop_params, CMD(f)->p.raw[7] = 1)
BREAK(nop_operand_handle, CMD(f)->op[0] = (struct npnm_operand){ 1, 0, 0, 16 })
BREAK(fill_missing_dst, CMD(f)->op[0].handle = 0)
BREAK(fill_op_flags, CMD(f)->op[0].flags = 4)
BREAK(fill_past_memory, CMD(f)->op[0].offset = MEM - 2048)
BREAK(fill_offset_wraps, { CMD(f)->op[0].offset = ~0ull - 100; CMD(f)->op[0].len = 4096; })
BREAK(fill_len_wraps, CMD(f)->op[0].len = ~0ull)
BREAK(fill_extra_operand, CMD(f)->op[3] = (struct npnm_operand){ 1, 0, 0, 16 })
BREAK(fill_width3, CMD(f)->p.fill.width = 3)
BREAK(fill_width0, CMD(f)->p.fill.width = 0)
BREAK(fill_pattern_high, CMD(f)->p.fill.pattern = 0x10000)
BREAK(fill_len_not_multiple, CMD(f)->op[0].len = 4095)
BREAK(fill_pad, CMD(f)->p.fill.pad = 1)
BREAK(fill_param_tail, CMD(f)->p.raw[4] = 9)
BREAK(copy_len_mismatch, CMD(f)->op[1].len = 4000)
BREAK(copy_missing_src, CMD(f)->op[1] = (struct npnm_operand){ 0 })
BREAK(copy_params, CMD(f)->p.raw[0] = 1)
BREAK(kv_dtype0, CMD(f)->p.kv_write.kv_dtype = 0)
BREAK(kv_dtype_unknown, CMD(f)->p.kv_write.kv_dtype = 5)
/* The 8-bit types: 10 tokens of d 64 are one 1088-byte tile per K and V. */
BREAK(kv_tiled_scatter, CMD(f)->p.kv_write.kv_dtype = NPNM_DTYPE_INT8)
BREAK(kv_tiled_mid_tile, { CMD(f)->p.kv_write.kv_dtype = NPNM_DTYPE_FP8_E4M3;
	  CMD(f)->p.kv_write.flags = 0; CMD(f)->p.kv_write.first_token = 8; })
BREAK(kv_tiled_src_short, { CMD(f)->p.kv_write.kv_dtype = NPNM_DTYPE_INT8;
	  CMD(f)->p.kv_write.flags = 0; CMD(f)->op[NPNM_KV_SRC].len = 2 * 1088 + 2 * 8 - 1; })
BREAK(kv_tiled_dst_capacity, { CMD(f)->p.kv_write.kv_dtype = NPNM_DTYPE_INT8;
	  CMD(f)->p.kv_write.flags = 0; CMD(f)->p.kv_write.max_tokens = 16384; })
BREAK(kv_tiled_misaligned, { CMD(f)->p.kv_write.kv_dtype = NPNM_DTYPE_FP8_E4M3;
	  CMD(f)->p.kv_write.flags = 0; CMD(f)->p.kv_write.v_off = 65538; })
BREAK(kv_head_dim0, CMD(f)->p.kv_write.head_dim = 0)
BREAK(kv_head_dim_big, CMD(f)->p.kv_write.head_dim = NFW_MAX_HEAD_DIM + 16)
BREAK(kv_flags, CMD(f)->p.kv_write.flags |= 1u << 7)
BREAK(kv_pad, CMD(f)->p.kv_write.pad = 1)
BREAK(kv_src_short, CMD(f)->op[NPNM_KV_SRC].len = 2 * 10 * 128 + 8)
BREAK(kv_dst_k_capacity, CMD(f)->p.kv_write.max_tokens = 16384)
BREAK(kv_dst_table, CMD(f)->p.kv_write.table_off = (1 << 20) - 8)
BREAK(kv_scatter_index, ((uint32_t *)(f->mem.base + 2 * 10 * 128 + 16))[3] = 256)
BREAK(kv_dense_past_capacity, { CMD(f)->p.kv_write.flags = 0; CMD(f)->p.kv_write.first_token = 250; })
BREAK(kv_clusters_past_capacity, CMD(f)->p.kv_write.first_cluster = 63)
BREAK(kv_table_entry_past_tokens, ((struct npnm_cluster *)(f->mem.base + 2 * 10 * 128))[1].count = 251)
BREAK(kv_misaligned, CMD(f)->p.kv_write.v_off = 65537)
/* d 64 bf16: a block of 16 rows is 2048 bytes. */
BREAK(kv_stride_below_block, CMD(f)->p.kv_write.kv_stride = 1984)
BREAK(kv_stride_unaligned, CMD(f)->p.kv_write.kv_stride = 4096 + 32)
BREAK(kv_stride_past_dst, CMD(f)->p.kv_write.kv_stride = 65536)
BREAK(kv_reserved, CMD(f)->p.kv_write.reserved = 1)
BREAK(attn_stride_below_block, CMD(f)->p.attn.kv_stride = 1024)
BREAK(attn_stride_unaligned, CMD(f)->p.attn.kv_stride = 2048 + 32)
BREAK(attn_stride_past_kv, CMD(f)->p.attn.kv_stride = 1u << 20)
BREAK(attn_flags, CMD(f)->p.attn.flags = 2)
BREAK(attn_reserved, CMD(f)->p.attn.reserved = 1)
BREAK(attn_dtype, CMD(f)->p.attn.kv_dtype = 0)
BREAK(attn_dtype_unknown, CMD(f)->p.attn.kv_dtype = 5)
BREAK(attn_tiled_tokens_past_operand, { CMD(f)->p.attn.kv_dtype = NPNM_DTYPE_INT8;
	  item0(f)->nr_tokens = 1u << 24; })
BREAK(attn_tiled_misaligned, { CMD(f)->p.attn.kv_dtype = NPNM_DTYPE_FP8_E4M3;
	  item0(f)->k_off += 2; })
BREAK(attn_head_dim0, CMD(f)->p.attn.head_dim = 0)
BREAK(attn_head_dim_big, CMD(f)->p.attn.head_dim = 512)
BREAK(attn_group0, CMD(f)->p.attn.group = 0)
BREAK(attn_group_big, CMD(f)->p.attn.group = NFW_MAX_GROUP + 1)
BREAK(attn_scale_negative, CMD(f)->p.attn.scale_f32 = nelssa_f32_bits(-1.0f))
BREAK(attn_scale_nan, CMD(f)->p.attn.scale_f32 = 0x7fc00000)
BREAK(attn_scale_inf, CMD(f)->p.attn.scale_f32 = 0x7f800000)
BREAK(attn_items_short, CMD(f)->p.attn.nr_items = 3)
BREAK(attn_missing_out, CMD(f)->op[NPNM_ATTN_OUT].handle = 0)
BREAK(attn_op_flags, CMD(f)->op[NPNM_ATTN_KV].flags = 1)
BREAK(attn_item_reserved, item0(f)->reserved = 1)
BREAK(attn_k_past_kv, item0(f)->k_off = f->cmd.op[NPNM_ATTN_KV].len - 64)
BREAK(attn_v_past_kv, item0(f)->nr_tokens = 1u << 30)
BREAK(attn_table_past_kv, item0(f)->nr_clusters = 1u << 28)
BREAK(attn_q_past_in, item0(f)->q_off = f->cmd.op[NPNM_ATTN_IN].len - 4)
BREAK(attn_sel_past_in, item0(f)->nr_sel = 1u << 24)
BREAK(attn_o_past_out, item0(f)->o_off = f->cmd.op[NPNM_ATTN_OUT].len - 16)
BREAK(attn_lse_past_out, item0(f)->lse_off = f->cmd.op[NPNM_ATTN_OUT].len)
BREAK(attn_q_misaligned, item0(f)->q_off += 2)
BREAK(attn_k_misaligned, item0(f)->k_off += 1)
BREAK(attn_sel_beyond_table, sel0(f)[0] = f->it[0].n_clusters)
BREAK(attn_sel_duplicate, sel0(f)[1] = sel0(f)[0])
BREAK(attn_table_past_tokens, table0(f)[sel0(f)[0]].count = f->it[0].n_tokens + 1)
BREAK(attn_table_first_wraps, { table0(f)[sel0(f)[0]].first = ~0u; table0(f)[sel0(f)[0]].count = 2; })
BREAK(selftest_mask, CMD(f)->p.selftest.mask = 1u << 31)
BREAK(selftest_pad, CMD(f)->p.selftest.pad = 1)
BREAK(selftest_param_tail, CMD(f)->p.raw[1] = 1)
BREAK(selftest_operand, CMD(f)->op[0] = (struct npnm_operand){ 1, 0, 0, 8 })

#define C(n, b, w) { #n, b, n, w }
static const struct vcase cases[] = {
	C(bad_opcode, B_NOP, NPNM_ST_BAD_OPCODE),
	C(bad_opcode_high, B_NOP, NPNM_ST_BAD_OPCODE),
	C(hdr_flags, B_FILL, NPNM_ST_BAD_RESERVED),
	C(hdr_reserved0, B_NOP, NPNM_ST_BAD_RESERVED),
	C(hdr_reserved1, B_ATTN, NPNM_ST_BAD_RESERVED),
	C(nop_operand_used, B_NOP, NPNM_ST_BAD_RESERVED),
	C(nop_params, B_NOP, NPNM_ST_BAD_RESERVED),
	C(nop_operand_handle, B_NOP, NPNM_ST_BAD_RESERVED),
	C(fill_missing_dst, B_FILL, NPNM_ST_BAD_OPERAND),
	C(fill_op_flags, B_FILL, NPNM_ST_BAD_RESERVED),
	C(fill_past_memory, B_FILL, NPNM_ST_BAD_OPERAND),
	C(fill_offset_wraps, B_FILL, NPNM_ST_BAD_OPERAND),
	C(fill_len_wraps, B_FILL, NPNM_ST_BAD_OPERAND),
	C(fill_extra_operand, B_FILL, NPNM_ST_BAD_RESERVED),
	C(fill_width3, B_FILL, NPNM_ST_BAD_PARAM),
	C(fill_width0, B_FILL, NPNM_ST_BAD_PARAM),
	C(fill_pattern_high, B_FILL, NPNM_ST_BAD_PARAM),
	C(fill_len_not_multiple, B_FILL, NPNM_ST_BAD_PARAM),
	C(fill_pad, B_FILL, NPNM_ST_BAD_RESERVED),
	C(fill_param_tail, B_FILL, NPNM_ST_BAD_RESERVED),
	C(copy_len_mismatch, B_COPY, NPNM_ST_BAD_PARAM),
	C(copy_missing_src, B_COPY, NPNM_ST_BAD_OPERAND),
	C(copy_params, B_COPY, NPNM_ST_BAD_RESERVED),
	C(kv_dtype0, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_dtype_unknown, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_tiled_scatter, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_tiled_mid_tile, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_tiled_src_short, B_KV, NPNM_ST_BAD_OPERAND),
	C(kv_tiled_dst_capacity, B_KV, NPNM_ST_BAD_OPERAND),
	C(kv_tiled_misaligned, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_head_dim0, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_head_dim_big, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_flags, B_KV, NPNM_ST_BAD_RESERVED),
	C(kv_pad, B_KV, NPNM_ST_BAD_RESERVED),
	C(kv_src_short, B_KV, NPNM_ST_BAD_OPERAND),
	C(kv_dst_k_capacity, B_KV, NPNM_ST_BAD_OPERAND),
	C(kv_dst_table, B_KV, NPNM_ST_BAD_OPERAND),
	C(kv_scatter_index, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_dense_past_capacity, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_clusters_past_capacity, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_table_entry_past_tokens, B_KV, NPNM_ST_BAD_CLUSTER),
	C(kv_misaligned, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_stride_below_block, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_stride_unaligned, B_KV, NPNM_ST_BAD_PARAM),
	C(kv_stride_past_dst, B_KV, NPNM_ST_BAD_OPERAND),
	C(kv_reserved, B_KV, NPNM_ST_BAD_RESERVED),
	C(attn_stride_below_block, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_stride_unaligned, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_stride_past_kv, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_flags, B_ATTN, NPNM_ST_BAD_RESERVED),
	C(attn_reserved, B_ATTN, NPNM_ST_BAD_RESERVED),
	C(attn_dtype, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_dtype_unknown, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_tiled_tokens_past_operand, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_tiled_misaligned, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_head_dim0, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_head_dim_big, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_group0, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_group_big, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_scale_negative, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_scale_nan, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_scale_inf, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_items_short, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_missing_out, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_op_flags, B_ATTN, NPNM_ST_BAD_RESERVED),
	C(attn_item_reserved, B_ATTN, NPNM_ST_BAD_RESERVED),
	C(attn_k_past_kv, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_v_past_kv, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_table_past_kv, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_q_past_in, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_sel_past_in, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_o_past_out, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_lse_past_out, B_ATTN, NPNM_ST_BAD_OPERAND),
	C(attn_q_misaligned, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_k_misaligned, B_ATTN, NPNM_ST_BAD_PARAM),
	C(attn_sel_beyond_table, B_ATTN, NPNM_ST_BAD_CLUSTER),
	C(attn_sel_duplicate, B_ATTN, NPNM_ST_BAD_CLUSTER),
	C(attn_table_past_tokens, B_ATTN, NPNM_ST_BAD_CLUSTER),
	C(attn_table_first_wraps, B_ATTN, NPNM_ST_BAD_CLUSTER),
	C(selftest_mask, B_SELFTEST, NPNM_ST_BAD_PARAM),
	C(selftest_pad, B_SELFTEST, NPNM_ST_BAD_RESERVED),
	C(selftest_param_tail, B_SELFTEST, NPNM_ST_BAD_RESERVED),
	C(selftest_operand, B_SELFTEST, NPNM_ST_BAD_RESERVED),
};

int main(void)
{
	enum { N = sizeof(cases) / sizeof(cases[0]) };
	struct CMUnitTest tests[N];

	for (size_t i = 0; i < N; i++)
		tests[i] = (struct CMUnitTest){ cases[i].name, run_case, NULL, NULL,
						(void *)&cases[i] };
	tu_init("fw_validate");
	return _cmocka_run_group_tests("fw_validate", tests, N, NULL, NULL);
}
