// SPDX-License-Identifier: MIT
/*
 * The command rules the driver, the firmware and the library share
 * (driver/npnm_rules.h), against what the uapi header documents: for every
 * opcode, every bit of the parameter area, every byte of every operand
 * slot and of the header is set in turn, and the verdict is compared with
 * an expectation worked out from the uapi structures' offsetof/sizeof and
 * their comments -- never from the table under test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "npnm_rules.h"

#define FIELD(type, f, bits, nm)                                                            \
	{ offsetof(type, f), sizeof(((type *)0)->f), bits, nm }

struct want_field {
	size_t off, size;
	uint64_t allowed;
	const char *name;
};

/* What the uapi header says about each opcode. */
struct want {
	size_t param_bytes;
	unsigned int used;			/* bit per operand slot */
	enum npnm_access access[NPNM_CMD_MAX_OPERANDS];
	struct want_field resv[3];
	unsigned int nr_resv;
};

static const struct want WANT[NPNM_OP_MAX] = {
	[NPNM_OP_NOP] = { 0 },
	[NPNM_OP_FILL] = {
		sizeof(struct npnm_fill_params), 1u << NPNM_FILL_DST,
		{ [NPNM_FILL_DST] = NPNM_ACCESS_WRITE },
		{ FIELD(struct npnm_fill_params, pad, 0, "p.fill.pad") }, 1,
	},
	[NPNM_OP_COPY] = {
		0, (1u << NPNM_COPY_DST) | (1u << NPNM_COPY_SRC),
		{ [NPNM_COPY_DST] = NPNM_ACCESS_WRITE, [NPNM_COPY_SRC] = NPNM_ACCESS_READ },
		{ { 0 } }, 0,
	},
	[NPNM_OP_KV_WRITE] = {
		sizeof(struct npnm_kv_write_params), (1u << NPNM_KV_SRC) | (1u << NPNM_KV_DST),
		{ [NPNM_KV_SRC] = NPNM_ACCESS_READ, [NPNM_KV_DST] = NPNM_ACCESS_WRITE },
		{ FIELD(struct npnm_kv_write_params, pad, 0, "p.kv_write.pad"),
		  FIELD(struct npnm_kv_write_params, flags, NPNM_KV_F_SCATTER, "p.kv_write.flags"),
		  FIELD(struct npnm_kv_write_params, reserved, 0, "p.kv_write.reserved") },
		3,
	},
	[NPNM_OP_SPARSE_ATTN] = {
		sizeof(struct npnm_sparse_attn_params),
		(1u << NPNM_ATTN_ITEMS) | (1u << NPNM_ATTN_KV) | (1u << NPNM_ATTN_IN) |
			(1u << NPNM_ATTN_OUT),
		{ [NPNM_ATTN_ITEMS] = NPNM_ACCESS_READ, [NPNM_ATTN_KV] = NPNM_ACCESS_READ,
		  [NPNM_ATTN_IN] = NPNM_ACCESS_READ, [NPNM_ATTN_OUT] = NPNM_ACCESS_WRITE },
		{ FIELD(struct npnm_sparse_attn_params, flags, NPNM_ATTN_F_BF16_DOTS, "p.attn.flags"),
		  FIELD(struct npnm_sparse_attn_params, reserved, 0, "p.attn.reserved") },
		2,
	},
	[NPNM_OP_SELFTEST] = {
		sizeof(struct npnm_selftest_params), 0, { 0 },
		{ FIELD(struct npnm_selftest_params, pad, 0, "p.selftest.pad") }, 1,
	},
};

/* Opcodes beyond the table, as a newer library or a careless one sends them. */
static const unsigned int UNKNOWN[] = { NPNM_OP_MAX, NPNM_OP_MAX + 1, 0x7fff, 0xffff };
#define NR_UNKNOWN (sizeof(UNKNOWN) / sizeof(UNKNOWN[0]))

/* A command of @op that every rule accepts: used slots present, all else zero. */
static struct npnm_cmd base(unsigned int op)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = (uint16_t)op;
	c.timeout_ms = 17;
	c.user_tag = 0x1234;
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (op < NPNM_OP_MAX && (WANT[op].used & (1u << i)))
			c.op[i] = (struct npnm_operand){ 0x100 + i, 0, 4096 * i, 4096 };
	return c;
}

/* The verdict of an untouched base command of @op. */
static enum npnm_status base_status(unsigned int op)
{
	return op < NPNM_OP_MAX ? NPNM_ST_OK : NPNM_ST_BAD_OPCODE;
}

static void expect(const struct npnm_cmd *c, enum npnm_status st, unsigned int rule,
		   const char *what)
{
	struct npnm_rules_fault why;
	enum npnm_status got;

	memset(&why, 0xa5, sizeof(why));
	got = npnm_rules_check_why(c, &why);
	if (got != st || why.rule != rule)
		fail_msg("%s: status %d rule %u (%s), expected status %d rule %u", what, got,
			 why.rule, npnm_rules_strerror(why.rule), st, rule);
	assert_int_equal(npnm_rules_check(c), st);
	if (rule != NPNM_RULE_PARAM_RESERVED)
		assert_null(why.field);
}

static void base_commands_pass(void **state)
{
	(void)state;
	for (unsigned int op = 0; op < NPNM_OP_MAX; op++) {
		struct npnm_cmd c = base(op);

		expect(&c, NPNM_ST_OK, NPNM_RULE_OK, "base");
	}
	for (size_t u = 0; u < NR_UNKNOWN; u++) {
		struct npnm_cmd c = base(UNKNOWN[u]);

		expect(&c, NPNM_ST_BAD_OPCODE, NPNM_RULE_OPCODE, "unknown opcode");
	}
}

/* Every opcode value: known ones by their slots, the rest BAD_OPCODE. */
static void every_opcode_value(void **state)
{
	(void)state;
	for (unsigned int v = 0; v <= 0xffff; v++) {
		struct npnm_cmd c;

		memset(&c, 0, sizeof(c));
		c.opcode = (uint16_t)v;
		if (v >= NPNM_OP_MAX) {
			assert_int_equal(npnm_rules_check(&c), NPNM_ST_BAD_OPCODE);
		} else if (WANT[v].used) {
			struct npnm_rules_fault why;

			/* A zeroed command misses the opcode's first operand. */
			assert_int_equal(npnm_rules_check_why(&c, &why), NPNM_ST_BAD_OPERAND);
			assert_int_equal(why.rule, NPNM_RULE_OPERAND_MISSING);
			assert_int_equal(1u << why.slot, WANT[v].used & -WANT[v].used);
		} else {
			assert_int_equal(npnm_rules_check(&c), NPNM_ST_OK);
		}
	}
}

/*
 * Bit @bit of parameter byte @k may be set for @op: inside the parameter
 * structure, and either outside every reserved field or one of the bits
 * the uapi defines for that field (found by storing the allowed value in
 * a zeroed structure of the uapi type and looking at its bytes).
 */
static int param_bit_allowed(unsigned int op, size_t k, unsigned int bit,
			     const struct want_field **field)
{
	const struct want *w = &WANT[op];

	*field = NULL;
	if (k >= w->param_bytes)
		return 0;
	for (unsigned int i = 0; i < w->nr_resv; i++) {
		const struct want_field *f = &w->resv[i];
		uint8_t image[NPNM_CMD_PARAMS_BYTES] = { 0 };

		if (k < f->off || k >= f->off + f->size)
			continue;
		*field = f;
		if (op == NPNM_OP_KV_WRITE && f->off == offsetof(struct npnm_kv_write_params, flags))
			((struct npnm_kv_write_params *)(void *)image)->flags = NPNM_KV_F_SCATTER;
		if (op == NPNM_OP_SPARSE_ATTN &&
		    f->off == offsetof(struct npnm_sparse_attn_params, flags))
			((struct npnm_sparse_attn_params *)(void *)image)->flags = NPNM_ATTN_F_BF16_DOTS;
		return (image[k] >> bit) & 1;
	}
	return 1;
}

static void every_param_bit(void **state)
{
	(void)state;
	for (unsigned int op = 0; op < NPNM_OP_MAX; op++) {
		for (size_t k = 0; k < NPNM_CMD_PARAMS_BYTES; k++) {
			for (unsigned int bit = 0; bit < 8; bit++) {
				struct npnm_cmd c = base(op);
				const struct want_field *f;
				struct npnm_rules_fault why;
				char what[64];

				((uint8_t *)&c.p)[k] = (uint8_t)(1u << bit);
				snprintf(what, sizeof(what), "op %u p byte %zu bit %u", op, k, bit);
				if (param_bit_allowed(op, k, bit, &f)) {
					expect(&c, NPNM_ST_OK, NPNM_RULE_OK, what);
					continue;
				}
				if (!f) {
					expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_PARAM_TAIL, what);
					npnm_rules_check_why(&c, &why);
					assert_int_equal(why.offset, k);
					continue;
				}
				expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_PARAM_RESERVED, what);
				npnm_rules_check_why(&c, &why);
				assert_int_equal(why.offset, f->off);
				assert_non_null(why.field);
				assert_string_equal(why.field, f->name);
			}
		}
	}
}

/* Unknown opcodes: their parameters cannot be judged, only the device can. */
static void unknown_opcode_params_not_judged(void **state)
{
	(void)state;
	for (size_t u = 0; u < NR_UNKNOWN; u++) {
		for (size_t k = 0; k < NPNM_CMD_PARAMS_BYTES; k++) {
			struct npnm_cmd c = base(UNKNOWN[u]);

			((uint8_t *)&c.p)[k] = 0xff;
			expect(&c, NPNM_ST_BAD_OPCODE, NPNM_RULE_OPCODE, "unknown opcode params");
		}
	}
}

static int in(size_t j, size_t off, size_t size)
{
	return j >= off && j < off + size;
}

static void check_slot_byte(unsigned int op, unsigned int slot, size_t j)
{
	const size_t hoff = offsetof(struct npnm_operand, handle);
	const size_t hsize = sizeof(((struct npnm_operand *)0)->handle);
	const size_t foff = offsetof(struct npnm_operand, flags);
	const size_t fsize = sizeof(((struct npnm_operand *)0)->flags);
	int used = op < NPNM_OP_MAX && (WANT[op].used & (1u << slot));
	struct npnm_cmd c = base(op);
	struct npnm_rules_fault why;
	char what[64];

	((uint8_t *)&c.op[slot])[j] ^= 0xff;	/* the handle of a used slot stays non-zero */
	snprintf(what, sizeof(what), "op %u slot %u byte %zu", op, slot, j);
	if (used && in(j, foff, fsize))
		expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_OPERAND_FLAGS, what);
	else if (used)
		expect(&c, NPNM_ST_OK, NPNM_RULE_OK, what);
	else if (op >= NPNM_OP_MAX && in(j, hoff, hsize))
		/* A handle makes the slot used; the device judges the opcode. */
		expect(&c, NPNM_ST_BAD_OPCODE, NPNM_RULE_OPCODE, what);
	else
		expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_OPERAND_UNUSED, what);
	if (npnm_rules_check_why(&c, &why) != base_status(op) && why.rule != NPNM_RULE_OPCODE)
		assert_int_equal(why.slot, slot);
}

static void every_operand_byte(void **state)
{
	(void)state;
	for (unsigned int op = 0; op < NPNM_OP_MAX + NR_UNKNOWN; op++) {
		unsigned int opcode = op < NPNM_OP_MAX ? op : UNKNOWN[op - NPNM_OP_MAX];

		for (unsigned int slot = 0; slot < NPNM_CMD_MAX_OPERANDS; slot++)
			for (size_t j = 0; j < sizeof(struct npnm_operand); j++)
				check_slot_byte(opcode, slot, j);
	}
}

/* Every slot an opcode uses is required, whatever else it holds. */
static void used_slots_are_required(void **state)
{
	(void)state;
	for (unsigned int op = 0; op < NPNM_OP_MAX; op++) {
		for (unsigned int slot = 0; slot < NPNM_CMD_MAX_OPERANDS; slot++) {
			struct npnm_cmd c = base(op);
			struct npnm_rules_fault why;

			if (!(WANT[op].used & (1u << slot)))
				continue;
			c.op[slot].handle = 0;
			expect(&c, NPNM_ST_BAD_OPERAND, NPNM_RULE_OPERAND_MISSING, "no handle");
			npnm_rules_check_why(&c, &why);
			assert_int_equal(why.slot, slot);
			memset(&c.op[slot], 0, sizeof(c.op[slot]));
			expect(&c, NPNM_ST_BAD_OPERAND, NPNM_RULE_OPERAND_MISSING, "empty slot");
		}
	}
}

/* The header: flags and reserved must be zero; timeout and tag are free. */
static void every_header_byte(void **state)
{
	const size_t flags = offsetof(struct npnm_cmd, flags);
	const size_t timeout = offsetof(struct npnm_cmd, timeout_ms);
	const size_t tag = offsetof(struct npnm_cmd, user_tag);
	const size_t resv = offsetof(struct npnm_cmd, reserved);

	(void)state;
	for (unsigned int op = 0; op < NPNM_OP_MAX + NR_UNKNOWN; op++) {
		unsigned int opcode = op < NPNM_OP_MAX ? op : UNKNOWN[op - NPNM_OP_MAX];

		for (size_t j = 0; j < sizeof(struct npnm_cmd); j++) {
			struct npnm_cmd c = base(opcode);
			char what[64];

			if (!in(j, flags, sizeof(c.flags)) && !in(j, timeout, sizeof(c.timeout_ms)) &&
			    !in(j, tag, sizeof(c.user_tag)) && !in(j, resv, sizeof(c.reserved)))
				continue;
			((uint8_t *)&c)[j] ^= 0xff;
			snprintf(what, sizeof(what), "op %u header byte %zu", opcode, j);
			if (in(j, flags, sizeof(c.flags)))
				expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_CMD_FLAGS, what);
			else if (in(j, resv, sizeof(c.reserved)))
				expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_CMD_RESERVED, what);
			else
				expect(&c, base_status(opcode),
				       opcode < NPNM_OP_MAX ? NPNM_RULE_OK : NPNM_RULE_OPCODE, what);
		}
	}
	/* The header's fields, the operands and the parameters tile the command. */
	assert_int_equal(offsetof(struct npnm_cmd, op), tag + sizeof(((struct npnm_cmd *)0)->user_tag));
	assert_int_equal(offsetof(struct npnm_cmd, p), offsetof(struct npnm_cmd, op) +
			 NPNM_CMD_MAX_OPERANDS * sizeof(struct npnm_operand));
	assert_int_equal(resv, offsetof(struct npnm_cmd, p) + NPNM_CMD_PARAMS_BYTES);
}

/* The documented order: the first rule broken is the one reported. */
static void order_of_rules(void **state)
{
	struct npnm_rules_fault why;
	struct npnm_cmd c;

	(void)state;
	c = base(NPNM_OP_FILL);
	c.flags = 1;
	c.reserved[0] = 1;
	c.op[3].len = 1;
	expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_CMD_FLAGS, "flags first");
	c.flags = 0;
	expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_CMD_RESERVED, "then reserved");
	c.reserved[0] = 0;
	c.op[NPNM_FILL_DST].handle = 0;
	expect(&c, NPNM_ST_BAD_OPERAND, NPNM_RULE_OPERAND_MISSING, "slots in order");
	c = base(NPNM_OP_COPY);
	c.op[NPNM_COPY_DST].flags = 1;
	c.op[NPNM_COPY_SRC].handle = 0;
	c.p.raw[0] = 1;
	expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_OPERAND_FLAGS, "slot 0 before slot 1");
	c.op[NPNM_COPY_DST].flags = 0;
	expect(&c, NPNM_ST_BAD_OPERAND, NPNM_RULE_OPERAND_MISSING, "operands before params");
	npnm_rules_check_why(&c, &why);
	assert_int_equal(why.slot, NPNM_COPY_SRC);
	/* A missing handle is reported before the flags of the same slot. */
	c = base(NPNM_OP_FILL);
	c.op[NPNM_FILL_DST].handle = 0;
	c.op[NPNM_FILL_DST].flags = 1;
	expect(&c, NPNM_ST_BAD_OPERAND, NPNM_RULE_OPERAND_MISSING, "handle before flags");
	/* The opcode after the operands, before the parameters. */
	c = base(0x9999);
	c.op[1].offset = 8;
	c.p.raw[7] = 1;
	expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_OPERAND_UNUSED, "operands before opcode");
	c.op[1].handle = 5;
	c.op[1].flags = 2;
	expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_OPERAND_FLAGS, "flags of unknown op");
	c.op[1].flags = 0;
	expect(&c, NPNM_ST_BAD_OPCODE, NPNM_RULE_OPCODE, "opcode before params");
	/* The tail before the fields, the fields in order. */
	c = base(NPNM_OP_SPARSE_ATTN);
	c.p.attn.flags = 2;
	c.p.attn.reserved = 1;
	c.p.raw[7] = 1ull << 63;
	expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_PARAM_TAIL, "tail first");
	npnm_rules_check_why(&c, &why);
	assert_int_equal(why.offset, 63);
	c.p.raw[7] = 0;
	expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_PARAM_RESERVED, "then flags");
	npnm_rules_check_why(&c, &why);
	assert_string_equal(why.field, "p.attn.flags");
	c.p.attn.flags = 0;
	npnm_rules_check_why(&c, &why);
	assert_string_equal(why.field, "p.attn.reserved");
	/* KV_WRITE's parameters fill the area: no tail, three fields. */
	c = base(NPNM_OP_KV_WRITE);
	c.p.kv_write.flags = 2;
	c.p.kv_write.pad = 1;
	c.p.kv_write.reserved = 1;
	expect(&c, NPNM_ST_BAD_RESERVED, NPNM_RULE_PARAM_RESERVED, "pad first");
	npnm_rules_check_why(&c, &why);
	assert_string_equal(why.field, "p.kv_write.pad");
	c.p.kv_write.pad = 0;
	npnm_rules_check_why(&c, &why);
	assert_string_equal(why.field, "p.kv_write.flags");
	c.p.kv_write.flags = NPNM_KV_F_SCATTER;
	npnm_rules_check_why(&c, &why);
	assert_string_equal(why.field, "p.kv_write.reserved");
	c.p.kv_write.reserved = 0;
	c.p.kv_write.kv_stride = 8192;
	expect(&c, NPNM_ST_OK, NPNM_RULE_OK, "scatter and a stride are defined");
	assert_int_equal(npnm_rules_kv_stride(&c), 8192);
	/* The fault may be left out. */
	c.p.kv_write.flags = ~0u;
	assert_int_equal(npnm_rules_check_why(&c, NULL), NPNM_ST_BAD_RESERVED);
}

/*
 * The KV block layout against known answers: packed offsets are today's
 * (t * row, or tile then row), and a span is the end of the farthest row
 * (or tile, scales included) of the tokens, found by walking them.
 */
static void kv_layout(void **state)
{
	static const unsigned int dtypes[] = { NPNM_DTYPE_BF16, NPNM_DTYPE_FP16,
					       NPNM_DTYPE_FP8_E4M3, NPNM_DTYPE_INT8 };
	static const unsigned int dims[] = { 1, 32, 100, 128, 256 };
	static const uint64_t counts[] = { 0, 1, 15, 16, 17, 33, 1000 };

	(void)state;
	for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
		for (size_t h = 0; h < sizeof(dims) / sizeof(dims[0]); h++) {
			const unsigned int dt = dtypes[d], hd = dims[h];
			const int tiled = dt >= NPNM_DTYPE_FP8_E4M3;
			const uint64_t block = npnm_kv_block_bytes(dt, hd);
			const uint64_t rup = (block + 63) / 64 * 64;
			const uint32_t strides[] = { 0, (uint32_t)rup + 64, 2 * (uint32_t)rup,
						     3 * (uint32_t)rup + 192 };

			assert_int_equal(block, tiled ? npnm_kv_tile_bytes(hd) : 32ull * hd);
			assert_true(npnm_kv_stride_valid(dt, hd, 0));
			assert_int_equal(npnm_kv_stride_valid(dt, hd, (uint32_t)rup), 1);
			assert_false(npnm_kv_stride_valid(dt, hd, (uint32_t)rup + 1));
			if (rup > 64)
				assert_false(npnm_kv_stride_valid(dt, hd, (uint32_t)rup - 64));
			for (size_t si = 0; si < sizeof(strides) / sizeof(strides[0]); si++) {
				const uint32_t st = strides[si];
				const uint64_t step = st ? st : block;

				assert_true(npnm_kv_stride_valid(dt, hd, st));
				assert_int_equal(npnm_kv_stride(dt, hd, st), step);
				for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
					uint64_t end = 0;

					for (uint64_t t = 0; t < counts[ci]; t++) {
						uint64_t at = npnm_kv_row_offset(dt, hd, st, t);
						uint64_t e = tiled ? (t / 16) * step + block :
							     at + 2ull * hd;

						if (!st)
							assert_int_equal(at, tiled ?
									 t / 16 * block + t % 16 * hd :
									 t * 2ull * hd);
						else
							assert_int_equal(at, t / 16 * st +
									 t % 16 * (tiled ? 1 : 2) * hd);
						end = e > end ? e : end;
					}
					assert_int_equal(npnm_kv_span(dt, hd, st, counts[ci]), end);
					if (!st)
						assert_int_equal(end, npnm_kv_bytes(dt, hd, counts[ci]));
				}
			}
		}
	}
	assert_int_equal(npnm_kv_block_bytes(0, 128), 0);
}

static void accessors(void **state)
{
	(void)state;
	for (unsigned int op = 0; op < NPNM_OP_MAX; op++) {
		const struct npnm_rule *r = npnm_rule(op);

		assert_non_null(r);
		assert_int_equal(npnm_rules_param_bytes(op), WANT[op].param_bytes);
		assert_true(strlen(npnm_rules_opname(op)) > 0);
		for (unsigned int slot = 0; slot < NPNM_CMD_MAX_OPERANDS; slot++) {
			int used = !!(WANT[op].used & (1u << slot));

			assert_int_equal(npnm_rules_operand_used(op, slot), used);
			assert_int_equal(npnm_rules_operand_access(op, slot), WANT[op].access[slot]);
			/* A used slot is read or written, an unused one neither. */
			assert_int_equal(WANT[op].access[slot] != NPNM_ACCESS_NONE, used);
		}
		assert_int_equal(npnm_rules_operand_used(op, NPNM_CMD_MAX_OPERANDS), 0);
		assert_int_equal(npnm_rules_operand_access(op, NPNM_CMD_MAX_OPERANDS),
				 NPNM_ACCESS_NONE);
	}
	assert_string_equal(npnm_rules_opname(NPNM_OP_SPARSE_ATTN), "SPARSE_ATTN");
	assert_int_equal(NPNM_ACCESS_RW, NPNM_ACCESS_READ | NPNM_ACCESS_WRITE);
	for (size_t u = 0; u < NR_UNKNOWN; u++) {
		assert_null(npnm_rule(UNKNOWN[u]));
		assert_int_equal(npnm_rules_param_bytes(UNKNOWN[u]), 0);
		assert_string_equal(npnm_rules_opname(UNKNOWN[u]), "unknown");
		for (unsigned int slot = 0; slot < NPNM_CMD_MAX_OPERANDS; slot++) {
			assert_int_equal(npnm_rules_operand_used(UNKNOWN[u], slot), 0);
			assert_int_equal(npnm_rules_operand_access(UNKNOWN[u], slot),
					 NPNM_ACCESS_NONE);
		}
	}
}

/* Statuses, the submission policy and the words of every rule. */
static void statuses_and_words(void **state)
{
	(void)state;
	for (unsigned int rule = 0; rule < NPNM_RULE_NR; rule++) {
		enum npnm_status st = npnm_rules_status(rule);
		const char *s = npnm_rules_strerror(rule);

		assert_true(strlen(s) > 0);
		for (unsigned int other = 0; other < rule; other++)
			assert_string_not_equal(s, npnm_rules_strerror(other));
		switch (rule) {
		case NPNM_RULE_OK:
			assert_int_equal(st, NPNM_ST_OK);
			break;
		case NPNM_RULE_OPCODE:
			assert_int_equal(st, NPNM_ST_BAD_OPCODE);
			break;
		case NPNM_RULE_OPERAND_MISSING:
			assert_int_equal(st, NPNM_ST_BAD_OPERAND);
			break;
		default:
			assert_int_equal(st, NPNM_ST_BAD_RESERVED);
			break;
		}
		/* Refused at submission unless the device is the one to judge it. */
		assert_int_equal(npnm_rules_submit_errno(st),
				 rule == NPNM_RULE_OK || rule == NPNM_RULE_OPCODE ? 0 : -EINVAL);
	}
	assert_string_equal(npnm_rules_strerror(NPNM_RULE_NR), "unknown rule");
	assert_string_equal(npnm_rules_strerror(~0u), "unknown rule");
	for (unsigned int st = NPNM_ST_BAD_PARAM; st <= NPNM_ST_SELFTEST_FAIL; st++)
		assert_int_equal(npnm_rules_submit_errno((enum npnm_status)st), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(base_commands_pass),
		cmocka_unit_test(every_opcode_value),
		cmocka_unit_test(every_param_bit),
		cmocka_unit_test(unknown_opcode_params_not_judged),
		cmocka_unit_test(every_operand_byte),
		cmocka_unit_test(used_slots_are_required),
		cmocka_unit_test(every_header_byte),
		cmocka_unit_test(order_of_rules),
		cmocka_unit_test(accessors),
		cmocka_unit_test(kv_layout),
		cmocka_unit_test(statuses_and_words),
	};

	return cmocka_run_group_tests_name("npnm_rules", tests, NULL, NULL);
}
