// SPDX-License-Identifier: MIT
/*
 * The firmware's opcode table: for every opcode, how its parameters are
 * validated, how it runs, and whether its work items may be spread over
 * several CMD Executor threads -- one entry an opcode, in the spirit of
 * io_uring's opdef.c and the CXL mailbox's command table, so that adding
 * an opcode is adding one entry rather than a case in each of several
 * switches.  The descriptor's form (header, operand slots, reserved
 * fields) is judged before any entry is consulted, by the rules the driver
 * and the library share (nfw_check_common()).
 */
#include "fw_internal.h"

static uint32_t validate_fill(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			      struct nfw_scratch *scratch)
{
	const struct npnm_fill_params *f = &desc->p.fill;

	(void)mem;
	(void)scratch;
	if (f->width != 1 && f->width != 2 && f->width != 4 && f->width != 8)
		return NPNM_ST_BAD_PARAM;
	if (f->width < 8 && (f->pattern >> (8 * f->width)))
		return NPNM_ST_BAD_PARAM;
	if (desc->op[NPNM_FILL_DST].len % f->width)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

static uint32_t exec_fill(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			  const struct nfw_exec_args *x)
{
	(void)x;
	nfw_exec_fill(mem, desc);
	return NPNM_ST_OK;
}

static uint32_t validate_copy(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			      struct nfw_scratch *scratch)
{
	(void)mem;
	(void)scratch;
	if (desc->op[NPNM_COPY_DST].len != desc->op[NPNM_COPY_SRC].len)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

static uint32_t exec_copy(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			  const struct nfw_exec_args *x)
{
	(void)x;
	nfw_exec_copy(mem, desc);
	return NPNM_ST_OK;
}

static uint32_t validate_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc,
				  struct nfw_scratch *scratch)
{
	(void)scratch;
	return nfw_validate_kv_write(mem, desc);
}

static uint32_t exec_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			      const struct nfw_exec_args *x)
{
	(void)x;
	nfw_exec_kv_write(mem, desc);
	return NPNM_ST_OK;
}

static uint32_t exec_attn(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			  const struct nfw_exec_args *x)
{
	return nfw_exec_attn(mem, desc, nfw_isa_resolve(x->isa), x->item_begin, x->item_end,
			     x->scratch);
}

static uint32_t validate_selftest(const struct nfw_mem *mem, const struct npnm_cmd *desc,
				  struct nfw_scratch *scratch)
{
	(void)mem;
	(void)scratch;
	if (desc->p.selftest.mask & ~NFW_SELFTEST_ALL)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

static uint32_t exec_selftest(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			      const struct nfw_exec_args *x)
{
	(void)mem;
	*x->detail = nfw_selftest(desc->p.selftest.mask, x->scratch);
	return *x->detail ? NPNM_ST_SELFTEST_FAIL : NPNM_ST_OK;
}

static const struct nfw_opdef opdefs[NPNM_OP_MAX] = {
	[NPNM_OP_NOP] = {
		.name = "nop",
		.short_cmd = true,
	},
	[NPNM_OP_FILL] = {
		.name = "fill",
		.validate = validate_fill,
		.execute = exec_fill,
		.short_cmd = true,
	},
	[NPNM_OP_COPY] = {
		.name = "copy",
		.validate = validate_copy,
		.execute = exec_copy,
		.short_cmd = true,
	},
	[NPNM_OP_KV_WRITE] = {
		.name = "kv_write",
		.validate = validate_kv_write,
		.execute = exec_kv_write,
	},
	[NPNM_OP_SPARSE_ATTN] = {
		.name = "sparse_attn",
		.validate = nfw_validate_attn,
		.execute = exec_attn,
		.split_items = true,
	},
	[NPNM_OP_SELFTEST] = {
		.name = "selftest",
		.validate = validate_selftest,
		.execute = exec_selftest,
	},
};

const struct nfw_opdef *nfw_opdef(uint32_t opcode)
{
	if (opcode >= NPNM_OP_MAX || !opdefs[opcode].name)
		return NULL;
	return &opdefs[opcode];
}

bool nfw_cmd_is_short(const struct npnm_cmd *desc)
{
	const struct nfw_opdef *def = nfw_opdef(desc->opcode);

	if (!def || !def->short_cmd)
		return false;
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (desc->op[i].len > NFW_SHORT_BYTES)
			return false;
	return true;
}
