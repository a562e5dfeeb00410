/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/**
 * DOC: command rules
 *
 * What a well-formed &struct npnm_cmd looks like, as far as can be told
 * from the descriptor alone: for every opcode the size of its parameter
 * structure, the operand slots it uses and what the device does with each,
 * and the reserved fields inside its parameters.  One table, compiled by
 * everyone who looks at a descriptor: the driver when a command is
 * submitted and the in-kernel mock when it runs one, the firmware (on the
 * card, in nelssa-devemu and inside the sim backend), and the PNM User
 * Library's kdev and sim backends before they submit.  When each of them
 * kept its own copy the copies drifted: the driver queued commands with a
 * handle in a slot the opcode does not use, or with bytes past the
 * parameters, that the firmware then failed with NPNM_ST_BAD_RESERVED and
 * the mock did not look at, although the uapi promises -EINVAL at
 * submission.  With one table, what the library refuses is what the driver
 * refuses, and what passes the driver is what the device accepts as far as
 * the descriptor goes.
 *
 * npnm_rules_check() applies the rules in this order and returns the
 * status of the first one broken:
 *
 * 1. &npnm_cmd.flags and &npnm_cmd.reserved are zero (BAD_RESERVED);
 * 2. operand slots, 0 to 3: a slot the opcode does not use is all zero
 *    (BAD_RESERVED); a slot it uses has a non-zero handle (BAD_OPERAND)
 *    and zero flags (BAD_RESERVED).  For an opcode beyond the table a slot
 *    counts as used exactly when its handle is not zero;
 * 3. the opcode is below NPNM_OP_MAX (BAD_OPCODE);
 * 4. the parameter bytes past the opcode's parameter structure are zero
 *    (BAD_RESERVED);
 * 5. the reserved fields inside the parameters are zero, or hold only the
 *    bits defined for them (BAD_RESERVED).
 *
 * Because the opcode comes after the operand slots, a verdict of
 * NPNM_ST_BAD_OPCODE means that everything that can be checked without
 * knowing the opcode was fine.  Such a command is not refused at
 * submission: the uapi documents an unknown opcode as a device status, and
 * a device may know opcodes the driver does not.  npnm_rules_submit_errno()
 * is that policy, so that the driver and the library cannot disagree on
 * it.  After a verdict of NPNM_ST_OK or NPNM_ST_BAD_OPCODE the slots in use
 * are exactly those with a non-zero handle.
 *
 * What the table cannot know stays with its callers: operand bounds
 * against regions (driver, library) or against device memory (firmware),
 * and the meaning of parameters -- fill width, KV element type, head
 * dimension, capacities, work items -- which only the device checks.
 *
 * The header depends on nothing but the uapi header and the __u8..__u64
 * types, so the kernel and userspace compile the same text.
 */
#ifndef _NPNM_RULES_H
#define _NPNM_RULES_H

#include <linux/errno.h>
#include <linux/types.h>
#include <linux/nelssa_pnm.h>

/**
 * enum npnm_access - what the device does with an operand.
 * @NPNM_ACCESS_NONE: Nothing: the opcode does not use the slot.
 * @NPNM_ACCESS_READ: The device reads the operand.
 * @NPNM_ACCESS_WRITE: The device writes the operand.
 * @NPNM_ACCESS_RW: The device reads and writes the operand.
 */
enum npnm_access {
	NPNM_ACCESS_NONE = 0,
	NPNM_ACCESS_READ = 1,
	NPNM_ACCESS_WRITE = 2,
	NPNM_ACCESS_RW = 3,
};

/**
 * enum npnm_rule_id - the rule a command broke (&npnm_rules_fault.rule).
 * @NPNM_RULE_OK: None: the command is well-formed.
 * @NPNM_RULE_CMD_FLAGS: &npnm_cmd.flags is not zero.
 * @NPNM_RULE_CMD_RESERVED: &npnm_cmd.reserved is not zero.
 * @NPNM_RULE_OPERAND_UNUSED: A slot the opcode does not use is not all zero.
 * @NPNM_RULE_OPERAND_MISSING: A slot the opcode uses has handle 0.
 * @NPNM_RULE_OPERAND_FLAGS: A used operand's flags are not zero.
 * @NPNM_RULE_OPCODE: The opcode is NPNM_OP_MAX or above.
 * @NPNM_RULE_PARAM_TAIL: A parameter byte past the opcode's parameter
 *	structure is not zero.
 * @NPNM_RULE_PARAM_RESERVED: A reserved field inside the parameters holds
 *	bits that are not defined for it.
 * @NPNM_RULE_NR: Number of rule ids.
 */
enum npnm_rule_id {
	NPNM_RULE_OK = 0,
	NPNM_RULE_CMD_FLAGS,
	NPNM_RULE_CMD_RESERVED,
	NPNM_RULE_OPERAND_UNUSED,
	NPNM_RULE_OPERAND_MISSING,
	NPNM_RULE_OPERAND_FLAGS,
	NPNM_RULE_OPCODE,
	NPNM_RULE_PARAM_TAIL,
	NPNM_RULE_PARAM_RESERVED,
	NPNM_RULE_NR,
};

/*
 * Every NPNM_ATTN_F_* bit of this header's uapi: the bits SPARSE_ATTN's
 * flags may hold, and all a driver may report in &npnm_info.attn_flags
 * (a newer device's other bits would fail here at submission).
 */
#define NPNM_RULES_ATTN_FLAGS	NPNM_ATTN_F_BF16_DOTS

/* Most reserved fields one parameter structure has. */
#define NPNM_RULES_MAX_FIELDS	3

/**
 * struct npnm_rules_field - a reserved field inside the parameter area.
 * @name: Its name, "p.<struct>.<field>", for messages.
 * @offset: Byte offset inside &npnm_cmd.p.
 * @size: Bytes: 1, 2, 4 or 8; 0 ends the list.
 * @allowed: Bits the field may hold; 0 for a field that must be zero.
 */
struct npnm_rules_field {
	const char *name;
	__u8 offset;
	__u8 size;
	__u64 allowed;
};

/**
 * struct npnm_rule - what one opcode's descriptor must look like.
 * @name: The opcode's name without NPNM_OP_, for messages.
 * @param_bytes: Size of its parameter structure; the bytes of &npnm_cmd.p
 *	past it must be zero.
 * @operands: Bit (1 << slot) for every operand slot it uses; every used
 *	slot is required.
 * @access: What the device does with the operand in each slot.
 * @fields: Reserved fields inside its parameters, ended by a zero @size.
 */
struct npnm_rule {
	const char *name;
	__u8 param_bytes;
	__u8 operands;
	__u8 access[NPNM_CMD_MAX_OPERANDS];
	struct npnm_rules_field fields[NPNM_RULES_MAX_FIELDS];
};

/**
 * struct npnm_rules_fault - where a command broke a rule.
 * @rule: enum npnm_rule_id.
 * @slot: The operand slot, for the NPNM_RULE_OPERAND_* rules.
 * @offset: For NPNM_RULE_PARAM_TAIL the first non-zero byte of
 *	&npnm_cmd.p past the parameters; for NPNM_RULE_PARAM_RESERVED the
 *	field's offset in &npnm_cmd.p.
 * @field: For NPNM_RULE_PARAM_RESERVED the field's name, else NULL.
 */
struct npnm_rules_fault {
	__u32 rule;
	__u32 slot;
	__u32 offset;
	const char *field;
};

/* NULL, which the kernel and userspace define in different headers. */
#define NPNM_RULES_NULL		((void *)0)

#define NPNM_RULES_SLOT(slot)	(1u << (slot))
/* Offset and size of parameter field @m (say kv_write.flags) inside &npnm_cmd.p. */
#define NPNM_RULES_POFF(m)	(__builtin_offsetof(struct npnm_cmd, p.m) - \
				 __builtin_offsetof(struct npnm_cmd, p))
#define NPNM_RULES_PSIZE(m)	sizeof(((struct npnm_cmd *)0)->p.m)

/**
 * npnm_kv_elem_bytes() - bytes of one K or V element of a row-addressed type
 * @dtype: enum npnm_kv_dtype.
 *
 * Only the 16-bit types are row-addressed (token t at t * head_dim
 * elements); the 8-bit types go in tiles with their scales, and their
 * sizes come from npnm_kv_bytes().
 *
 * Return: the width in bytes, or 0 for a tiled type and for a type this
 * build does not know.
 */
static inline unsigned int npnm_kv_elem_bytes(unsigned int dtype)
{
	switch (dtype) {
	case NPNM_DTYPE_BF16:
	case NPNM_DTYPE_FP16:
		return 2;
	default:
		return 0;
	}
}

/**
 * npnm_kv_is_tiled() - is a KV type stored in tiles with scales
 * @dtype: enum npnm_kv_dtype.
 *
 * Return: 1 for NPNM_DTYPE_FP8_E4M3 and NPNM_DTYPE_INT8, else 0.
 */
static inline int npnm_kv_is_tiled(unsigned int dtype)
{
	return dtype == NPNM_DTYPE_FP8_E4M3 || dtype == NPNM_DTYPE_INT8;
}

/**
 * npnm_kv_known() - does this build know a KV type
 * @dtype: enum npnm_kv_dtype.
 *
 * Return: 1 if @dtype is a type the layout functions here describe.
 */
static inline int npnm_kv_known(unsigned int dtype)
{
	return npnm_kv_elem_bytes(dtype) || npnm_kv_is_tiled(dtype);
}

/**
 * npnm_kv_tile_bytes() - bytes of one tile of a tiled KV type
 * @head_dim: Elements per row, non-zero.
 *
 * NPNM_KV_QTILE rows of @head_dim bytes, a binary32 scale per
 * NPNM_KV_QGROUP channels, rounded up to NPNM_KV_QALIGN.
 *
 * Return: the tile size in bytes.
 */
static inline __u64 npnm_kv_tile_bytes(unsigned int head_dim)
{
	__u64 groups = (head_dim + NPNM_KV_QGROUP - 1) / NPNM_KV_QGROUP;
	__u64 b = (__u64)NPNM_KV_QTILE * head_dim + 4 * groups;

	return (b + NPNM_KV_QALIGN - 1) / NPNM_KV_QALIGN * NPNM_KV_QALIGN;
}

/**
 * npnm_kv_bytes() - bytes that hold the K (or V) rows of some tokens
 * @dtype: enum npnm_kv_dtype.
 * @head_dim: Elements per row.
 * @tokens: Tokens, counted from token 0 of the array.
 *
 * The one place sizes of KV arrays come from: the firmware and the host
 * tools bound every access with it (the mock, which reads only the 16-bit
 * types, uses npnm_kv_elem_bytes(), the same rule for them).  A tiled type
 * rounds up to whole tiles.
 *
 * Return: the size in bytes, or 0 for an unknown type.
 */
static inline __u64 npnm_kv_bytes(unsigned int dtype, unsigned int head_dim, __u64 tokens)
{
	if (npnm_kv_is_tiled(dtype))
		return (tokens + NPNM_KV_QTILE - 1) / NPNM_KV_QTILE * npnm_kv_tile_bytes(head_dim);
	return tokens * head_dim * npnm_kv_elem_bytes(dtype);
}

/**
 * npnm_kv_block_bytes() - bytes of one block of NPNM_KV_QTILE tokens, packed
 * @dtype: enum npnm_kv_dtype.
 * @head_dim: Elements per row.
 *
 * NPNM_KV_QTILE rows of a 16-bit type, one tile of an 8-bit type: the
 * stride of the packed layout (kv_stride 0).
 *
 * Return: the size in bytes, or 0 for an unknown type.
 */
static inline __u64 npnm_kv_block_bytes(unsigned int dtype, unsigned int head_dim)
{
	return npnm_kv_bytes(dtype, head_dim, NPNM_KV_QTILE);
}

/**
 * npnm_kv_stride_valid() - can a kv_stride describe a KV array
 * @dtype: enum npnm_kv_dtype, known.
 * @head_dim: Elements per row.
 * @kv_stride: &npnm_kv_write_params.kv_stride or
 *	&npnm_sparse_attn_params.kv_stride.
 *
 * Return: 1 for 0 (packed) and for a multiple of NPNM_KV_STRIDE_ALIGN of at
 * least one block's bytes, else 0.
 */
static inline int npnm_kv_stride_valid(unsigned int dtype, unsigned int head_dim,
				       __u32 kv_stride)
{
	return !kv_stride || (kv_stride % NPNM_KV_STRIDE_ALIGN == 0 &&
			      kv_stride >= npnm_kv_block_bytes(dtype, head_dim));
}

/**
 * npnm_kv_stride() - the block stride a kv_stride field stands for
 * @dtype: enum npnm_kv_dtype.
 * @head_dim: Elements per row.
 * @kv_stride: The field: 0 for the packed layout.
 *
 * Return: bytes from one block to the next.
 */
static inline __u64 npnm_kv_stride(unsigned int dtype, unsigned int head_dim, __u32 kv_stride)
{
	return kv_stride ? kv_stride : npnm_kv_block_bytes(dtype, head_dim);
}

/**
 * npnm_kv_row_offset() - where token @t's row starts in a K or V array
 * @dtype: enum npnm_kv_dtype, known.
 * @head_dim: Elements per row.
 * @kv_stride: The array's kv_stride (0 for packed).
 * @t: Token index.
 *
 * Its block's start plus the rows before it in the block (a tiled type's
 * scales follow the block's NPNM_KV_QTILE rows of @head_dim bytes).
 *
 * Return: the byte offset from the array's start.
 */
static inline __u64 npnm_kv_row_offset(unsigned int dtype, unsigned int head_dim,
				       __u32 kv_stride, __u64 t)
{
	__u64 row = (__u64)head_dim * (npnm_kv_is_tiled(dtype) ? 1 : npnm_kv_elem_bytes(dtype));

	return t / NPNM_KV_QTILE * npnm_kv_stride(dtype, head_dim, kv_stride) +
	       t % NPNM_KV_QTILE * row;
}

/**
 * npnm_kv_span() - bytes a K or V array of some tokens reaches
 * @dtype: enum npnm_kv_dtype.
 * @head_dim: Elements per row.
 * @kv_stride: The array's kv_stride (0 for packed).
 * @tokens: Tokens, counted from token 0 of the array.
 *
 * From the array's start to the end of its last block's data (the gap a
 * stride leaves after the last block is not counted).  With kv_stride 0
 * this is npnm_kv_bytes(): the one bound every access is checked against.
 *
 * Return: the size in bytes, or 0 for an unknown type.
 */
static inline __u64 npnm_kv_span(unsigned int dtype, unsigned int head_dim, __u32 kv_stride,
				 __u64 tokens)
{
	__u64 full;

	if (!kv_stride || !tokens)
		return npnm_kv_bytes(dtype, head_dim, tokens);
	full = (tokens - 1) / NPNM_KV_QTILE;
	return full * kv_stride +
	       npnm_kv_bytes(dtype, head_dim, tokens - full * NPNM_KV_QTILE);
}

/**
 * npnm_kv_align() - alignment an array of a KV type needs in device memory
 * @dtype: enum npnm_kv_dtype.
 *
 * Return: 2 for the 16-bit types, 4 for the tiled ones (their scales are
 * binary32), 0 for an unknown type.
 */
static inline unsigned int npnm_kv_align(unsigned int dtype)
{
	return npnm_kv_is_tiled(dtype) ? 4 : npnm_kv_elem_bytes(dtype);
}

/**
 * npnm_rule() - the rules of one opcode
 * @opcode: enum npnm_opcode.
 *
 * Return: the opcode's entry of the table, or NULL for an opcode at or
 * beyond NPNM_OP_MAX.
 */
static inline const struct npnm_rule *npnm_rule(unsigned int opcode)
{
	static const struct npnm_rule rules[NPNM_OP_MAX] = {
		[NPNM_OP_NOP] = {
			.name = "NOP",
		},
		[NPNM_OP_FILL] = {
			.name = "FILL",
			.param_bytes = sizeof(struct npnm_fill_params),
			.operands = NPNM_RULES_SLOT(NPNM_FILL_DST),
			.access = { [NPNM_FILL_DST] = NPNM_ACCESS_WRITE },
			.fields = {
				{ .name = "p.fill.pad", .offset = NPNM_RULES_POFF(fill.pad),
				  .size = NPNM_RULES_PSIZE(fill.pad) },
			},
		},
		[NPNM_OP_COPY] = {
			.name = "COPY",
			.operands = NPNM_RULES_SLOT(NPNM_COPY_DST) |
				    NPNM_RULES_SLOT(NPNM_COPY_SRC),
			.access = {
				[NPNM_COPY_DST] = NPNM_ACCESS_WRITE,
				[NPNM_COPY_SRC] = NPNM_ACCESS_READ,
			},
		},
		[NPNM_OP_KV_WRITE] = {
			.name = "KV_WRITE",
			.param_bytes = sizeof(struct npnm_kv_write_params),
			.operands = NPNM_RULES_SLOT(NPNM_KV_SRC) |
				    NPNM_RULES_SLOT(NPNM_KV_DST),
			.access = {
				[NPNM_KV_SRC] = NPNM_ACCESS_READ,
				[NPNM_KV_DST] = NPNM_ACCESS_WRITE,
			},
			.fields = {
				{ .name = "p.kv_write.pad", .offset = NPNM_RULES_POFF(kv_write.pad),
				  .size = NPNM_RULES_PSIZE(kv_write.pad) },
				{ .name = "p.kv_write.flags",
				  .offset = NPNM_RULES_POFF(kv_write.flags),
				  .size = NPNM_RULES_PSIZE(kv_write.flags),
				  .allowed = NPNM_KV_F_SCATTER },
				{ .name = "p.kv_write.reserved",
				  .offset = NPNM_RULES_POFF(kv_write.reserved),
				  .size = NPNM_RULES_PSIZE(kv_write.reserved) },
			},
		},
		[NPNM_OP_SPARSE_ATTN] = {
			.name = "SPARSE_ATTN",
			.param_bytes = sizeof(struct npnm_sparse_attn_params),
			.operands = NPNM_RULES_SLOT(NPNM_ATTN_ITEMS) |
				    NPNM_RULES_SLOT(NPNM_ATTN_KV) |
				    NPNM_RULES_SLOT(NPNM_ATTN_IN) |
				    NPNM_RULES_SLOT(NPNM_ATTN_OUT),
			.access = {
				[NPNM_ATTN_ITEMS] = NPNM_ACCESS_READ,
				[NPNM_ATTN_KV] = NPNM_ACCESS_READ,
				[NPNM_ATTN_IN] = NPNM_ACCESS_READ,
				[NPNM_ATTN_OUT] = NPNM_ACCESS_WRITE,
			},
			.fields = {
				{ .name = "p.attn.flags", .offset = NPNM_RULES_POFF(attn.flags),
				  .size = NPNM_RULES_PSIZE(attn.flags),
				  .allowed = NPNM_RULES_ATTN_FLAGS },
				{ .name = "p.attn.reserved",
				  .offset = NPNM_RULES_POFF(attn.reserved),
				  .size = NPNM_RULES_PSIZE(attn.reserved) },
			},
		},
		[NPNM_OP_SELFTEST] = {
			.name = "SELFTEST",
			.param_bytes = sizeof(struct npnm_selftest_params),
			.fields = {
				{ .name = "p.selftest.pad", .offset = NPNM_RULES_POFF(selftest.pad),
				  .size = NPNM_RULES_PSIZE(selftest.pad) },
			},
		},
	};

	return opcode < NPNM_OP_MAX ? &rules[opcode] : NPNM_RULES_NULL;
}

/**
 * npnm_rules_operand_used() - does an opcode use an operand slot
 * @opcode: enum npnm_opcode.
 * @slot: Operand slot, 0 to NPNM_CMD_MAX_OPERANDS - 1.
 *
 * Return: 1 if @opcode uses (and so requires) @slot, 0 if it does not or
 * @opcode or @slot is out of range.
 */
static inline int npnm_rules_operand_used(unsigned int opcode, unsigned int slot)
{
	const struct npnm_rule *r = npnm_rule(opcode);

	return r && slot < NPNM_CMD_MAX_OPERANDS && (r->operands & NPNM_RULES_SLOT(slot));
}

/**
 * npnm_rules_operand_access() - what the device does with an operand
 * @opcode: enum npnm_opcode.
 * @slot: Operand slot, 0 to NPNM_CMD_MAX_OPERANDS - 1.
 *
 * Return: enum npnm_access; NPNM_ACCESS_NONE for a slot @opcode does not
 * use, and for @opcode or @slot out of range.
 */
static inline enum npnm_access npnm_rules_operand_access(unsigned int opcode, unsigned int slot)
{
	const struct npnm_rule *r = npnm_rule(opcode);

	if (!r || slot >= NPNM_CMD_MAX_OPERANDS)
		return NPNM_ACCESS_NONE;
	return (enum npnm_access)r->access[slot];
}

/**
 * npnm_rules_param_bytes() - size of an opcode's parameter structure
 * @opcode: enum npnm_opcode.
 *
 * Return: bytes at the start of &npnm_cmd.p the opcode gives a meaning; 0
 * for an opcode without parameters and for one out of range.
 */
static inline unsigned int npnm_rules_param_bytes(unsigned int opcode)
{
	const struct npnm_rule *r = npnm_rule(opcode);

	return r ? r->param_bytes : 0;
}

/**
 * npnm_rules_opname() - an opcode's name, for messages
 * @opcode: enum npnm_opcode.
 *
 * Return: "FILL", "SPARSE_ATTN", ...; "unknown" for an opcode out of range.
 */
static inline const char *npnm_rules_opname(unsigned int opcode)
{
	const struct npnm_rule *r = npnm_rule(opcode);

	return r ? r->name : "unknown";
}

/* Index of the first non-zero byte of @p[0, @n), or @n if there is none. */
static inline unsigned int npnm_rules_nonzero(const void *p, unsigned int n)
{
	const __u8 *b = p;
	unsigned int i;

	for (i = 0; i < n; i++)
		if (b[i])
			break;
	return i;
}

/* The value of reserved field @f of @c's parameters (fields are aligned). */
static inline __u64 npnm_rules_field_value(const struct npnm_cmd *c,
					   const struct npnm_rules_field *f)
{
	const void *v = (const __u8 *)&c->p + f->offset;

	switch (f->size) {
	case 1:
		return *(const __u8 *)v;
	case 2:
		return *(const __u16 *)v;
	case 4:
		return *(const __u32 *)v;
	default:
		return *(const __u64 *)v;
	}
}

/**
 * npnm_rules_status() - the device status of a broken rule
 * @rule: enum npnm_rule_id.
 *
 * Return: NPNM_ST_OK for NPNM_RULE_OK, NPNM_ST_BAD_OPCODE for
 * NPNM_RULE_OPCODE, NPNM_ST_BAD_OPERAND for NPNM_RULE_OPERAND_MISSING and
 * NPNM_ST_BAD_RESERVED for the others.
 */
static inline enum npnm_status npnm_rules_status(unsigned int rule)
{
	switch (rule) {
	case NPNM_RULE_OK:
		return NPNM_ST_OK;
	case NPNM_RULE_OPCODE:
		return NPNM_ST_BAD_OPCODE;
	case NPNM_RULE_OPERAND_MISSING:
		return NPNM_ST_BAD_OPERAND;
	default:
		return NPNM_ST_BAD_RESERVED;
	}
}

/* Record @rule at @slot or @offset in @why (which may be NULL); its status. */
static inline enum npnm_status npnm_rules_fail(struct npnm_rules_fault *why, unsigned int rule,
					       unsigned int slot, unsigned int offset)
{
	if (why) {
		why->rule = rule;
		why->slot = slot;
		why->offset = offset;
		why->field = NPNM_RULES_NULL;
	}
	return npnm_rules_status(rule);
}

/**
 * npnm_rules_check_why() - check a command against the rules, saying why
 * @c: The command, as submitted (operands still carry handles).
 * @why: Filled with the rule broken and where, or with NPNM_RULE_OK; may
 *	be NULL.
 *
 * Applies the rules in the order the "command rules" section lists and
 * stops at the first one broken.  Does not look at regions, device memory
 * or the meaning of parameters.
 *
 * Return: NPNM_ST_OK; NPNM_ST_BAD_RESERVED, NPNM_ST_BAD_OPERAND or
 * NPNM_ST_BAD_OPCODE as npnm_rules_status() gives for the rule broken.
 */
static inline enum npnm_status npnm_rules_check_why(const struct npnm_cmd *c,
						    struct npnm_rules_fault *why)
{
	const struct npnm_rule *r = npnm_rule(c->opcode);
	unsigned int i, n;

	if (c->flags)
		return npnm_rules_fail(why, NPNM_RULE_CMD_FLAGS, 0, 0);
	if (npnm_rules_nonzero(c->reserved, sizeof(c->reserved)) < sizeof(c->reserved))
		return npnm_rules_fail(why, NPNM_RULE_CMD_RESERVED, 0, 0);
	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		const struct npnm_operand *op = &c->op[i];
		int used = r ? !!(r->operands & NPNM_RULES_SLOT(i)) : op->handle != 0;

		if (!used) {
			if (npnm_rules_nonzero(op, sizeof(*op)) < sizeof(*op))
				return npnm_rules_fail(why, NPNM_RULE_OPERAND_UNUSED, i, 0);
			continue;
		}
		if (!op->handle)
			return npnm_rules_fail(why, NPNM_RULE_OPERAND_MISSING, i, 0);
		if (op->flags)
			return npnm_rules_fail(why, NPNM_RULE_OPERAND_FLAGS, i, 0);
	}
	if (!r)
		return npnm_rules_fail(why, NPNM_RULE_OPCODE, 0, 0);
	n = npnm_rules_nonzero((const __u8 *)&c->p + r->param_bytes,
			       sizeof(c->p) - r->param_bytes);
	if (n < sizeof(c->p) - r->param_bytes)
		return npnm_rules_fail(why, NPNM_RULE_PARAM_TAIL, 0, r->param_bytes + n);
	for (i = 0; i < NPNM_RULES_MAX_FIELDS && r->fields[i].size; i++) {
		const struct npnm_rules_field *f = &r->fields[i];

		if (!(npnm_rules_field_value(c, f) & ~f->allowed))
			continue;
		npnm_rules_fail(why, NPNM_RULE_PARAM_RESERVED, 0, f->offset);
		if (why)
			why->field = f->name;
		return NPNM_ST_BAD_RESERVED;
	}
	return npnm_rules_fail(why, NPNM_RULE_OK, 0, 0);
}

/**
 * npnm_rules_check() - check a command against the rules
 * @c: The command, as submitted (operands still carry handles).
 *
 * npnm_rules_check_why() without the details.
 *
 * Return: NPNM_ST_OK, NPNM_ST_BAD_RESERVED, NPNM_ST_BAD_OPERAND or
 * NPNM_ST_BAD_OPCODE.
 */
static inline enum npnm_status npnm_rules_check(const struct npnm_cmd *c)
{
	return npnm_rules_check_why(c, NPNM_RULES_NULL);
}

/**
 * npnm_rules_submit_errno() - what a submitter does with a verdict
 * @status: What npnm_rules_check() returned.
 *
 * Return: 0 to go on with the command: NPNM_ST_OK, and NPNM_ST_BAD_OPCODE,
 * which the device reports in the completion; -EINVAL to refuse it.
 */
static inline int npnm_rules_submit_errno(enum npnm_status status)
{
	return status == NPNM_ST_OK || status == NPNM_ST_BAD_OPCODE ? 0 : -EINVAL;
}

/**
 * npnm_rules_kv_stride() - the KV block stride a command asks for
 * @c: The command.
 *
 * A submitter refuses a non-zero stride with -EOPNOTSUPP on a device
 * without NPNM_CAP_KV_STRIDE, as it refuses attention flags the device does
 * not report: older firmware reads the field as a reserved word.
 *
 * Return: &npnm_kv_write_params.kv_stride or
 * &npnm_sparse_attn_params.kv_stride; 0 for other opcodes.
 */
static inline __u32 npnm_rules_kv_stride(const struct npnm_cmd *c)
{
	if (c->opcode == NPNM_OP_KV_WRITE)
		return c->p.kv_write.kv_stride;
	if (c->opcode == NPNM_OP_SPARSE_ATTN)
		return c->p.attn.kv_stride;
	return 0;
}

/**
 * npnm_rules_strerror() - a broken rule in words
 * @rule: enum npnm_rule_id.
 *
 * Return: a short phrase ("operand flags must be zero", ...) naming the
 * rule; never NULL.
 */
static inline const char *npnm_rules_strerror(unsigned int rule)
{
	static const char * const words[NPNM_RULE_NR] = {
		[NPNM_RULE_OK] = "no rule broken",
		[NPNM_RULE_CMD_FLAGS] = "command flags must be zero",
		[NPNM_RULE_CMD_RESERVED] = "command reserved words must be zero",
		[NPNM_RULE_OPERAND_UNUSED] = "slot not used by the opcode must be all zero",
		[NPNM_RULE_OPERAND_MISSING] = "slot required by the opcode has handle 0",
		[NPNM_RULE_OPERAND_FLAGS] = "operand flags must be zero",
		[NPNM_RULE_OPCODE] = "unknown opcode",
		[NPNM_RULE_PARAM_TAIL] = "bytes past the opcode's parameters must be zero",
		[NPNM_RULE_PARAM_RESERVED] = "reserved bits not zero",
	};

	return rule < NPNM_RULE_NR ? words[rule] : "unknown rule";
}

/**
 * DOC: KV_WRITE geometry
 *
 * The checks of a KV_WRITE's parameters that need no device memory, in the
 * order a device applies them, for both devices that run the opcode: the
 * firmware and the in-kernel mock.  What follows them needs the source's
 * bytes (scatter indices, table entries), which each device reads its own
 * way (once, and checked again where used).
 */

/**
 * struct npnm_kv_write_geom - where a KV_WRITE's parts are
 * @rows: Bytes of the source's K (or V) part.
 * @src_table: The source's table entries, from its start.
 * @src_index: Its scatter indices (NPNM_KV_F_SCATTER).
 * @src_len: Bytes of the source the command reads.
 */
struct npnm_kv_write_geom {
	__u64 rows;
	__u64 src_table;
	__u64 src_index;
	__u64 src_len;
};

/* Do @len bytes at @off lie inside an operand of @op_len bytes. */
static inline int npnm_fits(__u64 op_len, __u64 off, __u64 len)
{
	return off <= op_len && len <= op_len - off;
}

/**
 * npnm_kv_write_geom() - check a KV_WRITE's parameters and place its parts
 * @c: The command, with operand offsets resolved to device memory.
 * @max_head_dim: The device's largest head dimension.
 * @g: Out: the source's layout, valid when NPNM_ST_OK is returned.
 *
 * A device that takes only some types (the mock: the 16-bit ones) refuses
 * the others before calling this.  The destination must hold the whole
 * store at capacity (@max_tokens rows in the command's blocks, and
 * @max_clusters table entries), so that later appends are checked against
 * the same bound.
 *
 * Return: NPNM_ST_OK; NPNM_ST_BAD_PARAM for a type, head dimension, stride,
 * alignment or range the device cannot take; NPNM_ST_BAD_OPERAND for a part
 * outside its operand.
 */
static inline enum npnm_status npnm_kv_write_geom(const struct npnm_cmd *c,
						  unsigned int max_head_dim,
						  struct npnm_kv_write_geom *g)
{
	const struct npnm_kv_write_params *p = &c->p.kv_write;
	const struct npnm_operand *src = &c->op[NPNM_KV_SRC], *dst = &c->op[NPNM_KV_DST];
	unsigned int align = npnm_kv_align(p->kv_dtype);
	__u64 cap;

	if (!npnm_kv_known(p->kv_dtype) || !p->head_dim || p->head_dim > max_head_dim)
		return NPNM_ST_BAD_PARAM;
	if (npnm_kv_is_tiled(p->kv_dtype) &&
	    ((p->flags & NPNM_KV_F_SCATTER) || p->first_token % NPNM_KV_QTILE))
		return NPNM_ST_BAD_PARAM;
	if (!npnm_kv_stride_valid(p->kv_dtype, p->head_dim, p->kv_stride))
		return NPNM_ST_BAD_PARAM;
	g->rows = npnm_kv_bytes(p->kv_dtype, p->head_dim, p->nr_tokens);
	g->src_table = 2 * g->rows;
	g->src_index = g->src_table + (__u64)p->nr_clusters * sizeof(struct npnm_cluster);
	g->src_len = g->src_index + ((p->flags & NPNM_KV_F_SCATTER) ? 4ULL * p->nr_tokens : 0);
	if (!npnm_fits(src->len, 0, g->src_len))
		return NPNM_ST_BAD_OPERAND;
	cap = npnm_kv_span(p->kv_dtype, p->head_dim, p->kv_stride, p->max_tokens);
	if (!npnm_fits(dst->len, p->k_off, cap) || !npnm_fits(dst->len, p->v_off, cap) ||
	    !npnm_fits(dst->len, p->table_off,
		       (__u64)p->max_clusters * sizeof(struct npnm_cluster)))
		return NPNM_ST_BAD_OPERAND;
	/* align is 2 or 4: masks, no 64-bit division on a 32-bit kernel. */
	if (((dst->offset + p->k_off) & (align - 1)) || ((dst->offset + p->v_off) & (align - 1)) ||
	    ((dst->offset + p->table_off) & 3) || (src->offset & 3) || (g->src_table & 3))
		return NPNM_ST_BAD_PARAM;
	if (!(p->flags & NPNM_KV_F_SCATTER) && (__u64)p->first_token + p->nr_tokens > p->max_tokens)
		return NPNM_ST_BAD_PARAM;
	if ((__u64)p->first_cluster + p->nr_clusters > p->max_clusters)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

#endif /* _NPNM_RULES_H */
