// SPDX-License-Identifier: MIT
/* Executing one validated descriptor, and the scratch and clock helpers. */
#define _POSIX_C_SOURCE 200809L	/* clock_gettime */
#include <stdlib.h>
#include <time.h>

#include "fw_internal.h"

void *nfw_scratch_get(struct nfw_scratch *s, size_t bytes)
{
	if (bytes > s->cap) {
		void *p = malloc(bytes);

		if (!p)
			return NULL;
		free(s->buf);
		s->buf = p;
		s->cap = bytes;
	}
	return s->buf;
}

uint32_t nfw_execute(const struct nfw_mem *mem, const struct npnm_cmd *desc, enum nfw_isa isa,
		     uint32_t item_begin, uint32_t item_end, struct nfw_scratch *scratch,
		     uint32_t *detail)
{
	const struct nfw_opdef *def = nfw_opdef(desc->opcode);
	const struct nfw_exec_args x = {
		.isa = isa, .item_begin = item_begin, .item_end = item_end,
		.scratch = scratch, .detail = detail,
	};

	*detail = 0;
	if (!def || !def->execute)
		return NPNM_ST_OK;	/* validated: NOP */
	return def->execute(mem, desc, &x);
}

uint32_t nfw_run(const struct nfw_mem *mem, const struct npnm_cmd *desc, enum nfw_isa isa,
		 struct nfw_scratch *scratch, uint32_t *detail)
{
	uint32_t st = nfw_validate(mem, desc, scratch);

	*detail = 0;
	if (st)
		return st;
	return nfw_execute(mem, desc, isa, 0, UINT32_MAX, scratch, detail);
}
