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

uint64_t nfw_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t nfw_execute(const struct nfw_mem *mem, const struct npnm_cmd *desc, enum nfw_isa isa,
		     uint32_t item_begin, uint32_t item_end, struct nfw_scratch *scratch,
		     uint32_t *detail)
{
	*detail = 0;
	switch (desc->opcode) {
	case NPNM_OP_FILL:
		nfw_exec_fill(mem, desc);
		break;
	case NPNM_OP_COPY:
		nfw_exec_copy(mem, desc);
		break;
	case NPNM_OP_KV_WRITE:
		nfw_exec_kv_write(mem, desc);
		break;
	case NPNM_OP_SPARSE_ATTN:
		return nfw_exec_attn(mem, desc, nfw_isa_resolve(isa), item_begin, item_end, scratch);
	case NPNM_OP_SELFTEST:
		*detail = nfw_selftest(desc->p.selftest.mask, scratch);
		return *detail ? NPNM_ST_SELFTEST_FAIL : NPNM_ST_OK;
	default:
		break;
	}
	return NPNM_ST_OK;
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
