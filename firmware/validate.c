// SPDX-License-Identifier: MIT
/*
 * Descriptor validation.  Everything a command will touch is checked here,
 * before any byte of device memory is written, so a malformed command
 * completes with a status and leaves memory exactly as it was.  The form
 * of the descriptor -- header, operand slots, parameter tail, reserved
 * fields -- is judged by the rules the driver and the library share
 * (driver/npnm_rules.h); this file adds device-memory bounds and what
 * parameters mean.
 */
#include <stdlib.h>

#include "fw_internal.h"
#include "npnm_rules.h"

uint32_t nfw_check_common(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	uint32_t st = npnm_rules_check(desc);

	if (st)
		return st;
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		const struct npnm_operand *op = &desc->op[i];

		if (npnm_rules_operand_used(desc->opcode, i) &&
		    !nfw_fits(mem->size, op->offset, op->len))
			return NPNM_ST_BAD_OPERAND;
	}
	return NPNM_ST_OK;
}

static uint32_t validate_fill(const struct npnm_cmd *desc)
{
	const struct npnm_fill_params *f = &desc->p.fill;

	if (f->width != 1 && f->width != 2 && f->width != 4 && f->width != 8)
		return NPNM_ST_BAD_PARAM;
	if (f->width < 8 && (f->pattern >> (8 * f->width)))
		return NPNM_ST_BAD_PARAM;
	if (desc->op[NPNM_FILL_DST].len % f->width)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

static uint32_t validate_copy(const struct npnm_cmd *desc)
{
	if (desc->op[NPNM_COPY_DST].len != desc->op[NPNM_COPY_SRC].len)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

static uint32_t validate_selftest(const struct npnm_cmd *desc)
{
	if (desc->p.selftest.mask & ~NFW_SELFTEST_ALL)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

uint32_t nfw_validate(const struct nfw_mem *mem, const struct npnm_cmd *desc,
		      struct nfw_scratch *scratch)
{
	uint32_t st = nfw_check_common(mem, desc);

	if (st)
		return st;
	switch (desc->opcode) {
	case NPNM_OP_NOP:
		return NPNM_ST_OK;
	case NPNM_OP_FILL:
		return validate_fill(desc);
	case NPNM_OP_COPY:
		return validate_copy(desc);
	case NPNM_OP_KV_WRITE:
		return nfw_validate_kv_write(mem, desc);
	case NPNM_OP_SPARSE_ATTN:
		return nfw_validate_attn(mem, desc, scratch);
	case NPNM_OP_SELFTEST:
		return validate_selftest(desc);
	default:
		return NPNM_ST_BAD_OPCODE;	/* an opcode the rules know and this code does not */
	}
}

void nfw_scratch_free(struct nfw_scratch *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}
