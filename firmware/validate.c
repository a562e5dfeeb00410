// SPDX-License-Identifier: MIT
/*
 * Descriptor validation.  Everything a command will touch is checked here,
 * before any byte of device memory is written, so a malformed command
 * completes with a status and leaves memory exactly as it was.  The form
 * of the descriptor -- header, operand slots, parameter tail, reserved
 * fields -- is judged by the rules the driver and the library share
 * (driver/npnm_rules.h); this file adds device-memory bounds, and each
 * opcode's entry in the table (opdef.c) what its parameters mean.
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

uint32_t nfw_validate(const struct nfw_mem *mem, const struct npnm_cmd *desc,
		      struct nfw_scratch *scratch)
{
	uint32_t st = nfw_check_common(mem, desc);
	const struct nfw_opdef *def;

	if (st)
		return st;
	def = nfw_opdef(desc->opcode);
	if (!def)
		return NPNM_ST_BAD_OPCODE;	/* an opcode the rules know and this code does not */
	return def->validate ? def->validate(mem, desc, scratch) : NPNM_ST_OK;
}

void nfw_scratch_free(struct nfw_scratch *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}
