// SPDX-License-Identifier: MIT
/*
 * PNM User Library front end: device names, argument checks every backend
 * shares, the bulk read/write path on top of mappings, and error text.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/log.h>

#include "npnm_rules.h"
#include "pnm_internal.h"

static _Thread_local char last_error[256];

int npnm_priv_error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	nelssa_log(NELSSA_LOG_ERR, "pnm", last_error);
	return err;
}

const char *nelssa_pnm_strerror(void)
{
	return last_error;
}

int npnm_priv_check_rules(const struct npnm_cmd *c, uint32_t index)
{
	struct npnm_rules_fault why;
	const char *words;
	char op[24];
	int ret;

	ret = npnm_rules_submit_errno(npnm_rules_check_why(c, &why));
	if (!ret)
		return 0;
	words = npnm_rules_strerror(why.rule);
	if (npnm_rule(c->opcode))
		snprintf(op, sizeof(op), "%s", npnm_rules_opname(c->opcode));
	else
		snprintf(op, sizeof(op), "opcode %u", c->opcode);
	switch (why.rule) {
	case NPNM_RULE_OPERAND_UNUSED:
	case NPNM_RULE_OPERAND_MISSING:
	case NPNM_RULE_OPERAND_FLAGS:
		return npnm_priv_error(ret, "command %u (%s): operand %u: %s", index, op, why.slot, words);
	case NPNM_RULE_PARAM_TAIL:
		if (!npnm_rules_param_bytes(c->opcode))
			return npnm_priv_error(ret, "command %u (%s): parameter byte %u: %s (it has none)",
					 index, op, why.offset, words);
		return npnm_priv_error(ret, "command %u (%s): parameter byte %u: %s (it has %u)", index,
				 op, why.offset, words, npnm_rules_param_bytes(c->opcode));
	case NPNM_RULE_PARAM_RESERVED:
		return npnm_priv_error(ret, "command %u (%s): %s: %s", index, op, why.field, words);
	default:
		return npnm_priv_error(ret, "command %u (%s): %s", index, op, words);
	}
}

int npnm_priv_status_result(uint32_t status)
{
	switch (status) {
	case NPNM_ST_OK:
		return 0;
	case NPNM_ST_TIMEOUT:
		return -ETIMEDOUT;
	case NPNM_ST_ABORTED:
		return -ECANCELED;
	default:
		return -EIO;
	}
}

const char *nelssa_pnm_status_str(uint32_t status)
{
	static const char *const s[] = {
		[NPNM_ST_OK] = "ok",
		[NPNM_ST_BAD_OPCODE] = "unknown opcode",
		[NPNM_ST_BAD_RESERVED] = "reserved field not zero",
		[NPNM_ST_BAD_OPERAND] = "operand out of bounds",
		[NPNM_ST_BAD_PARAM] = "parameter out of range",
		[NPNM_ST_BAD_CLUSTER] = "bad cluster id or table entry",
		[NPNM_ST_UNSUPPORTED] = "not supported by this device",
		[NPNM_ST_TIMEOUT] = "timed out",
		[NPNM_ST_ABORTED] = "aborted",
		[NPNM_ST_DEVICE_ERROR] = "device error",
		[NPNM_ST_SELFTEST_FAIL] = "selftest failed",
	};

	return status < sizeof(s) / sizeof(s[0]) ? s[status] : "unknown status";
}

int nelssa_pnm_open(const char *name, struct nelssa_pnm **out)
{
	const struct pnm_backend_ops *ops;
	struct nelssa_pnm *pnm;
	int ret;

	last_error[0] = 0;
	if (!name || !out)
		return npnm_priv_error(-EINVAL, "no device name");
	if (!strncmp(name, "sim:", 4)) {
		ops = pnm_sim_find();
		if (!ops)
			return -ENODEV;
	} else if (!strncmp(name, "/dev/nelssa_pnm", 15)) {
		ops = &pnm_kdev_ops;
	} else {
		return npnm_priv_error(-EINVAL, "%s: not a device name (sim:N or /dev/nelssa_pnmN)",
				       name);
	}
	if (strlen(name) >= sizeof(pnm->name))
		return npnm_priv_error(-EINVAL, "device name too long");
	pnm = calloc(1, sizeof(*pnm));
	if (!pnm)
		return npnm_priv_error(-ENOMEM, "out of memory");
	pnm->ops = ops;
	snprintf(pnm->name, sizeof(pnm->name), "%s", name);
	ret = ops->open(pnm, name);
	if (ret) {
		free(pnm);
		return ret;
	}
	*out = pnm;
	return 0;
}

void nelssa_pnm_close(struct nelssa_pnm *pnm)
{
	if (!pnm)
		return;
	pnm->ops->close(pnm);
	free(pnm);
}

const char *nelssa_pnm_name(const struct nelssa_pnm *pnm)
{
	return pnm->name;
}

const char *nelssa_pnm_backend(const struct nelssa_pnm *pnm)
{
	return pnm->ops->name;
}

int nelssa_pnm_info(struct nelssa_pnm *pnm, struct npnm_info *info)
{
	memset(info, 0, sizeof(*info));
	return pnm->ops->info(pnm, info);
}

int nelssa_pnm_mem_alloc_flags(struct nelssa_pnm *pnm, uint64_t size, uint32_t flags,
			       uint32_t *handle, uint64_t *alloc_size)
{
	uint64_t got;
	int ret;

	if (!size || !handle)
		return npnm_priv_error(-EINVAL, "region size must be non-zero");
	if (flags & ~NELSSA_PNM_MEM_PINNABLE)
		return npnm_priv_error(-EINVAL, "unknown allocation flags %#x",
				       flags & ~NELSSA_PNM_MEM_PINNABLE);
	ret = pnm->ops->mem_alloc(pnm, size, flags, handle, &got);
	if (!ret && alloc_size)
		*alloc_size = got;
	return ret;
}

int nelssa_pnm_mem_alloc(struct nelssa_pnm *pnm, uint64_t size, uint32_t *handle,
			 uint64_t *alloc_size)
{
	return nelssa_pnm_mem_alloc_flags(pnm, size, 0, handle, alloc_size);
}

int nelssa_pnm_mem_free(struct nelssa_pnm *pnm, uint32_t handle)
{
	return pnm->ops->mem_free(pnm, handle);
}

int nelssa_pnm_mem_map(struct nelssa_pnm *pnm, uint32_t handle, void **addr, uint64_t *size)
{
	uint64_t sz;
	void *p;
	int ret;

	if (!addr)
		return npnm_priv_error(-EINVAL, "no place for the mapping's address");
	ret = pnm->ops->mem_map(pnm, handle, &p, &sz);
	if (ret)
		return ret;
	*addr = p;
	if (size)
		*size = sz;
	return 0;
}

int nelssa_pnm_mem_unmap(struct nelssa_pnm *pnm, void *addr)
{
	return pnm->ops->mem_unmap(pnm, addr);
}

/* The bulk path: map, bounds-check, copy, unmap. */
static int mem_copy(struct nelssa_pnm *pnm, uint32_t handle, uint64_t offset, void *buf,
		    size_t len, int to_device)
{
	uint64_t size;
	void *m;
	uint8_t *p;
	int ret = pnm->ops->mem_map(pnm, handle, &m, &size);

	if (ret)
		return ret;
	p = m;
	if (offset > size || len > size - offset) {
		pnm->ops->mem_unmap(pnm, p);
		return npnm_priv_error(-EINVAL, "range [%llu, +%zu) outside region %u of %llu bytes",
				 (unsigned long long)offset, len, handle, (unsigned long long)size);
	}
	/* Nothing to copy: @buf may then be NULL, which memcpy() may not be given. */
	if (len && to_device)
		memcpy(p + offset, buf, len);
	else if (len)
		memcpy(buf, p + offset, len);
	return pnm->ops->mem_unmap(pnm, p);
}

int nelssa_pnm_mem_write(struct nelssa_pnm *pnm, uint32_t handle, uint64_t offset,
			 const void *src, size_t len)
{
	return mem_copy(pnm, handle, offset, (void *)src, len, 1);
}

int nelssa_pnm_mem_read(struct nelssa_pnm *pnm, uint32_t handle, uint64_t offset, void *dst,
			size_t len)
{
	return mem_copy(pnm, handle, offset, dst, len, 0);
}

int nelssa_pnm_submit(struct nelssa_pnm *pnm, const struct npnm_cmd *cmds, uint32_t n,
		      uint64_t *first_seqno)
{
	if (!cmds || !n)
		return npnm_priv_error(-EINVAL, "no commands to submit");
	return pnm->ops->submit(pnm, cmds, n, first_seqno);
}

int nelssa_pnm_wait(struct nelssa_pnm *pnm, struct npnm_completion *comps, uint32_t min,
		    uint32_t max, int64_t timeout_ns)
{
	if (!comps || !max || min > max)
		return npnm_priv_error(-EINVAL, "need 0 <= min <= max and max >= 1");
	return pnm->ops->wait(pnm, comps, min, max, timeout_ns);
}

int nelssa_pnm_poll(struct nelssa_pnm *pnm, struct npnm_completion *comps, uint32_t max)
{
	int ret = nelssa_pnm_wait(pnm, comps, 0, max, 0);

	return ret == -ETIMEDOUT ? 0 : ret;
}

int nelssa_pnm_event_fd(struct nelssa_pnm *pnm)
{
	return pnm->ops->event_fd(pnm);
}

uint32_t nelssa_pnm_inflight(struct nelssa_pnm *pnm)
{
	return pnm->ops->inflight(pnm);
}

int nelssa_pnm_exec(struct nelssa_pnm *pnm, const struct npnm_cmd *cmd,
		    struct npnm_completion *comp)
{
	struct npnm_completion c;
	int ret;

	if (!cmd)
		return npnm_priv_error(-EINVAL, "no command");
	ret = pnm->ops->exec(pnm, cmd, &c);
	if (ret)
		return ret;
	if (comp)
		*comp = c;
	if (c.result)
		npnm_priv_error(c.result, "command failed on the device: %s",
			  nelssa_pnm_status_str(c.status));
	return c.result;
}
