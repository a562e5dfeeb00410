/* SPDX-License-Identifier: MIT */
/*
 * Commands the PNM User Library must refuse at submission with -EINVAL,
 * because the driver refuses them (the command rules of
 * driver/npnm_rules.h): for every opcode, a command the rules accept
 * broken in one way -- a valid handle in a slot the opcode does not use,
 * any other byte in such a slot, a used slot without its handle or with
 * flags, any byte past the opcode's parameters, each reserved parameter
 * field, the header's flags and reserved words -- each with a piece of
 * the message that must name what is wrong.  The parameter sizes and the
 * used slots come from the uapi header's structures and comments, not
 * from the rules table.
 *
 * Operands that the device writes name region @dst, those it reads @src,
 * so a command that ran by mistake shows in @dst.
 */
#ifndef NELSSA_TEST_RULECASES_H
#define NELSSA_TEST_RULECASES_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <linux/nelssa_pnm.h>

struct rule_case {
	struct npnm_cmd cmd;
	char what[80];		/* for failure messages */
	char says[40];		/* must appear in nelssa_pnm_strerror() */
};

#define RC_LEN 4096u		/* bytes of each operand */

/* Parameter bytes and write/read slots per opcode, from the uapi header. */
static const struct {
	size_t param_bytes;
	unsigned int writes, reads;
} RC_OPS[NPNM_OP_MAX] = {
	[NPNM_OP_NOP] = { 0, 0, 0 },
	[NPNM_OP_FILL] = { sizeof(struct npnm_fill_params), 1u << NPNM_FILL_DST, 0 },
	[NPNM_OP_COPY] = { 0, 1u << NPNM_COPY_DST, 1u << NPNM_COPY_SRC },
	[NPNM_OP_KV_WRITE] = { sizeof(struct npnm_kv_write_params), 1u << NPNM_KV_DST,
			       1u << NPNM_KV_SRC },
	[NPNM_OP_SPARSE_ATTN] = { sizeof(struct npnm_sparse_attn_params), 1u << NPNM_ATTN_OUT,
				  (1u << NPNM_ATTN_ITEMS) | (1u << NPNM_ATTN_KV) |
				  (1u << NPNM_ATTN_IN) },
	[NPNM_OP_SELFTEST] = { sizeof(struct npnm_selftest_params), 0, 0 },
};

/* A command of @op with its slots filled and plausible parameters. */
static inline struct npnm_cmd rc_base(unsigned int op, uint32_t dst, uint32_t src)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = (uint16_t)op;
	c.user_tag = 0xbad0000u + op;
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		if (RC_OPS[op].writes & (1u << i))
			c.op[i] = (struct npnm_operand){ dst, 0, 0, RC_LEN };
		else if (RC_OPS[op].reads & (1u << i))
			c.op[i] = (struct npnm_operand){ src, 0, 0, RC_LEN };
	}
	switch (op) {
	case NPNM_OP_FILL:
		c.p.fill.pattern = 0x5a;
		c.p.fill.width = 1;
		break;
	case NPNM_OP_KV_WRITE:
		c.p.kv_write = (struct npnm_kv_write_params){
			.v_off = 1024, .table_off = 2048, .nr_tokens = 2, .nr_clusters = 1,
			.max_tokens = 4, .max_clusters = 4, .head_dim = 64,
			.kv_dtype = NPNM_DTYPE_BF16,
		};
		break;
	case NPNM_OP_SPARSE_ATTN:
		c.p.attn.head_dim = 64;
		c.p.attn.group = 1;
		c.p.attn.kv_dtype = NPNM_DTYPE_BF16;
		break;
	default:
		break;
	}
	return c;
}

static inline size_t rc_add(struct rule_case *out, size_t n, size_t max,
			    const struct npnm_cmd *c, const char *says, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

static inline size_t rc_add(struct rule_case *out, size_t n, size_t max,
			    const struct npnm_cmd *c, const char *says, const char *fmt, ...)
{
	va_list ap;

	if (n >= max)
		return n;
	out[n].cmd = *c;
	snprintf(out[n].says, sizeof(out[n].says), "%s", says);
	va_start(ap, fmt);
	vsnprintf(out[n].what, sizeof(out[n].what), fmt, ap);
	va_end(ap);
	return n + 1;
}

/* Fill @out with up to @max cases; returns how many. */
static inline size_t rule_cases(uint32_t dst, uint32_t src, struct rule_case *out, size_t max)
{
	size_t n = 0;
	char says[40];

	for (unsigned int op = 0; op < NPNM_OP_MAX; op++) {
		const unsigned int used = RC_OPS[op].writes | RC_OPS[op].reads;
		struct npnm_cmd c;

		for (unsigned int s = 0; s < NPNM_CMD_MAX_OPERANDS; s++) {
			snprintf(says, sizeof(says), "operand %u", s);
			c = rc_base(op, dst, src);
			if (used & (1u << s)) {
				c.op[s].handle = 0;
				n = rc_add(out, n, max, &c, says, "op %u slot %u without handle", op, s);
				c = rc_base(op, dst, src);
				c.op[s].flags = 1;
				n = rc_add(out, n, max, &c, says, "op %u slot %u flags", op, s);
				continue;
			}
			/* The case: a handle that is valid, in a slot not used. */
			c.op[s] = (struct npnm_operand){ dst, 0, 0, RC_LEN };
			n = rc_add(out, n, max, &c, says, "op %u unused slot %u with a handle", op, s);
			c = rc_base(op, dst, src);
			c.op[s].len = 8;
			n = rc_add(out, n, max, &c, says, "op %u unused slot %u with a length", op, s);
		}
		for (size_t k = RC_OPS[op].param_bytes; k < NPNM_CMD_PARAMS_BYTES; k++) {
			c = rc_base(op, dst, src);
			((uint8_t *)&c.p)[k] = 0x80;
			snprintf(says, sizeof(says), "parameter byte %zu", k);
			n = rc_add(out, n, max, &c, says, "op %u parameter byte %zu", op, k);
		}
		c = rc_base(op, dst, src);
		c.flags = 1;
		n = rc_add(out, n, max, &c, "flags", "op %u command flags", op);
		c = rc_base(op, dst, src);
		c.reserved[1] = 1ull << 63;
		n = rc_add(out, n, max, &c, "reserved", "op %u command reserved", op);
	}
	{
		struct npnm_cmd c = rc_base(NPNM_OP_FILL, dst, src);

		c.p.fill.pad = 1;
		n = rc_add(out, n, max, &c, "p.fill.pad", "fill.pad");
		c = rc_base(NPNM_OP_KV_WRITE, dst, src);
		c.p.kv_write.pad = 1;
		n = rc_add(out, n, max, &c, "p.kv_write.pad", "kv_write.pad");
		c = rc_base(NPNM_OP_KV_WRITE, dst, src);
		c.p.kv_write.flags = NPNM_KV_F_SCATTER | 2;
		n = rc_add(out, n, max, &c, "p.kv_write.flags", "kv_write.flags bit 1");
		c = rc_base(NPNM_OP_KV_WRITE, dst, src);
		c.p.kv_write.reserved = 1u << 31;
		n = rc_add(out, n, max, &c, "p.kv_write.reserved", "kv_write.reserved");
		c = rc_base(NPNM_OP_SPARSE_ATTN, dst, src);
		c.p.attn.flags = 1u << 31;
		n = rc_add(out, n, max, &c, "p.attn.flags", "attn.flags");
		c = rc_base(NPNM_OP_SPARSE_ATTN, dst, src);
		c.p.attn.reserved = 1;
		n = rc_add(out, n, max, &c, "p.attn.reserved", "attn.reserved");
		c = rc_base(NPNM_OP_SELFTEST, dst, src);
		c.p.selftest.pad = 1;
		n = rc_add(out, n, max, &c, "p.selftest.pad", "selftest.pad");
		/* An unknown opcode is the device's to judge, a stray slot is not. */
		memset(&c, 0, sizeof(c));
		c.opcode = NPNM_OP_MAX;
		c.op[1].offset = 8;
		n = rc_add(out, n, max, &c, "operand 1", "unknown opcode, stray slot");
	}
	return n;
}

#endif /* NELSSA_TEST_RULECASES_H */
