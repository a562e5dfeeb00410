// SPDX-License-Identifier: MIT
/*
 * Descriptor validation.  Everything a command will touch is checked here,
 * before any byte of device memory is written, so a malformed command
 * completes with a status and leaves memory exactly as it was.
 */
#include <stdlib.h>
#include <string.h>

#include "fw_internal.h"

static int all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

uint32_t nfw_check_common(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			  unsigned int used, size_t param_bytes)
{
	if (desc->flags || !all_zero(desc->reserved, sizeof(desc->reserved)))
		return NPNM_ST_BAD_RESERVED;
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		const struct npnm_operand *op = &desc->op[i];

		if (!(used & (1u << i))) {
			if (!all_zero(op, sizeof(*op)))
				return NPNM_ST_BAD_RESERVED;
			continue;
		}
		if (!op->handle)
			return NPNM_ST_BAD_OPERAND;	/* a required operand is missing */
		if (op->flags)
			return NPNM_ST_BAD_RESERVED;
		if (!nfw_fits(mem->size, op->offset, op->len))
			return NPNM_ST_BAD_OPERAND;
	}
	if (!all_zero((const uint8_t *)&desc->p + param_bytes, sizeof(desc->p) - param_bytes))
		return NPNM_ST_BAD_RESERVED;
	return NPNM_ST_OK;
}

static uint32_t validate_fill(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	const struct npnm_fill_params *f = &desc->p.fill;
	uint32_t st = nfw_check_common(mem, desc, 1u << NPNM_FILL_DST, sizeof(*f));

	if (st)
		return st;
	if (f->pad)
		return NPNM_ST_BAD_RESERVED;
	if (f->width != 1 && f->width != 2 && f->width != 4 && f->width != 8)
		return NPNM_ST_BAD_PARAM;
	if (f->width < 8 && (f->pattern >> (8 * f->width)))
		return NPNM_ST_BAD_PARAM;
	if (desc->op[NPNM_FILL_DST].len % f->width)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

static uint32_t validate_copy(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	uint32_t st = nfw_check_common(mem, desc, (1u << NPNM_COPY_DST) | (1u << NPNM_COPY_SRC), 0);

	if (st)
		return st;
	if (desc->op[NPNM_COPY_DST].len != desc->op[NPNM_COPY_SRC].len)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

static uint32_t validate_selftest(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	uint32_t st = nfw_check_common(mem, desc, 0, sizeof(desc->p.selftest));

	if (st)
		return st;
	if (desc->p.selftest.pad)
		return NPNM_ST_BAD_RESERVED;
	if (desc->p.selftest.mask & ~NFW_SELFTEST_ALL)
		return NPNM_ST_BAD_PARAM;
	return NPNM_ST_OK;
}

uint32_t nfw_validate(const struct nfw_mem *mem, const struct npnm_cmd *desc,
		      struct nfw_scratch *scratch)
{
	switch (desc->opcode) {
	case NPNM_OP_NOP:
		return nfw_check_common(mem, desc, 0, 0);
	case NPNM_OP_FILL:
		return validate_fill(mem, desc);
	case NPNM_OP_COPY:
		return validate_copy(mem, desc);
	case NPNM_OP_KV_WRITE:
		return nfw_validate_kv_write(mem, desc);
	case NPNM_OP_SPARSE_ATTN:
		return nfw_validate_attn(mem, desc, scratch);
	case NPNM_OP_SELFTEST:
		return validate_selftest(mem, desc);
	default:
		return NPNM_ST_BAD_OPCODE;
	}
}

void nfw_scratch_free(struct nfw_scratch *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}
