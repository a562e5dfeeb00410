// SPDX-License-Identifier: MIT
/*
 * sim contexts: what the driver does for an open file, done in-process.
 *
 * A context owns regions (named by handles valid only in it), resolves
 * each command's operands against them -- the firmware never sees a
 * handle, only device offsets -- and queues completions until reaped.
 * The completion queue is sized at submission, so a completion can never
 * be dropped for want of memory; an eventfd is readable exactly while the
 * queue is non-empty.  Lock order: context, then the device runtime's
 * queue; the runtime calls sim_complete() holding no lock of its own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "npnm_rules.h"
#include "sim.h"

/* How long a waiter leaves a short command to the executors (sim_wait()). */
#define SIM_HELP_AFTER_NS 1000u

struct sim_region {
	uint32_t handle;
	bool freed;		/* handle gone, still mapped */
	uint64_t dev_off, size;
	unsigned int busy;	/* queued or running commands using it */
	unsigned int maps;
};

struct sim_waiter {
	bool done;
	struct npnm_completion comp;
};

struct sim_ctx;

struct sim_cmd {
	struct sim_ctx *ctx;
	uint64_t seqno, user_tag;
	struct sim_region *regions[NPNM_CMD_MAX_OPERANDS];
	struct sim_waiter *waiter;	/* nelssa_pnm_exec(): not queued */
};

struct sim_ctx {
	struct sim_dev *dev;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sim_region **regions;	/* sorted by handle */
	size_t nregions, rcap;
	struct sim_region **zombies;	/* freed while mapped */
	size_t nzombies, zcap;
	uint32_t next_handle;
	struct npnm_completion *cq;	/* ring */
	size_t cq_head, cq_len, cq_cap;
	atomic_uint cq_ready;		/* cq_len, for lock-free spinning */
	uint32_t inflight;
	uint64_t next_seqno;
	int efd;
	bool efd_set;			/* efd written, not yet drained */
	bool closing;
};

static struct sim_ctx *ctx_of(struct nelssa_pnm *pnm)
{
	return pnm->priv;
}

static struct sim_region *lookup(struct sim_ctx *c, uint32_t handle)
{
	size_t lo = 0, hi = c->nregions;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (c->regions[mid]->handle == handle)
			return c->regions[mid];
		if (c->regions[mid]->handle < handle)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void release_region(struct sim_ctx *c, struct sim_region *r)
{
	pthread_mutex_lock(&c->dev->lock);
	nelssa_extent_put(&c->dev->alloc, r->dev_off, r->size);
	pthread_mutex_unlock(&c->dev->lock);
	free(r);
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	void *n;
	size_t ncap = *cap ? *cap : 16;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	n = realloc(*arr, ncap * elem);
	if (!n)
		return -ENOMEM;
	*arr = n;
	*cap = ncap;
	return 0;
}

/* Called with c->lock held. */
static void cq_push(struct sim_ctx *c, const struct npnm_completion *comp)
{
	uint64_t one = 1;

	c->cq[(c->cq_head + c->cq_len) % c->cq_cap] = *comp;
	if (c->cq_len++ == 0) {
		if (write(c->efd, &one, sizeof(one)) != sizeof(one))
			abort();	/* an eventfd write only fails on overflow */
		c->efd_set = true;
	}
	atomic_store_explicit(&c->cq_ready, (unsigned int)c->cq_len, memory_order_release);
}

/* Make room in the ring for @more completions, keeping order. */
static int cq_reserve(struct sim_ctx *c, size_t more)
{
	size_t need = c->cq_len + c->inflight + more, ncap = c->cq_cap ? c->cq_cap : 64;
	struct npnm_completion *n;

	if (need <= c->cq_cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	n = malloc(ncap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (size_t i = 0; i < c->cq_len; i++)
		n[i] = c->cq[(c->cq_head + i) % c->cq_cap];
	free(c->cq);
	c->cq = n;
	c->cq_head = 0;
	c->cq_cap = ncap;
	return 0;
}

void sim_complete(void *owner, uint64_t cookie, const struct nfw_result *res)
{
	struct sim_ctx *c = owner;
	struct sim_cmd *cmd = (struct sim_cmd *)(uintptr_t)cookie;
	struct npnm_completion comp = {
		.user_tag = cmd->user_tag,
		.seqno = cmd->seqno,
		.result = npnm_priv_status_result(res->status),
		.status = res->status,
		.device_ns = res->device_ns,
		.detail = res->detail,
	};

	pthread_mutex_lock(&c->lock);
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (cmd->regions[i])
			cmd->regions[i]->busy--;
	if (cmd->waiter) {
		cmd->waiter->comp = comp;
		cmd->waiter->done = true;
	} else {
		cq_push(c, &comp);
	}
	c->inflight--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	free(cmd);
}

static int sim_open(struct nelssa_pnm *pnm, const char *spec)
{
	struct sim_opts o;
	struct sim_ctx *c;
	int ret = sim_parse(spec, &o);

	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return npnm_priv_error(-ENOMEM, "out of memory");
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		ret = npnm_priv_error(-errno, "eventfd failed");
		free(c);
		return ret;
	}
	ret = sim_dev_get(&o, &c->dev);
	if (ret) {
		close(c->efd);
		free(c);
		return ret;
	}
	pthread_mutex_init(&c->lock, NULL);
	{
		/* Deadlines are CLOCK_MONOTONIC: immune to wall-clock jumps. */
		pthread_condattr_t attr;

		pthread_condattr_init(&attr);
		pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
		pthread_cond_init(&c->cond, &attr);
		pthread_condattr_destroy(&attr);
	}
	c->next_handle = 1;
	c->next_seqno = 1;
	pnm->priv = c;
	return 0;
}

static void sim_close(struct nelssa_pnm *pnm)
{
	struct sim_ctx *c = ctx_of(pnm);

	pthread_mutex_lock(&c->lock);
	c->closing = true;
	pthread_mutex_unlock(&c->lock);
	/* Queued commands complete ABORTED; running ones finish. */
	nfw_runtime_cancel(c->dev->rt, c);
	pthread_mutex_lock(&c->lock);
	while (c->inflight)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < c->nregions; i++)
		release_region(c, c->regions[i]);
	for (size_t i = 0; i < c->nzombies; i++)
		release_region(c, c->zombies[i]);
	free(c->regions);
	free(c->zombies);
	free(c->cq);
	close(c->efd);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	sim_dev_put(c->dev);
	free(c);
}

static int sim_info(struct nelssa_pnm *pnm, struct npnm_info *info)
{
	struct sim_dev *d = ctx_of(pnm)->dev;

	info->abi_version = NPNM_ABI_VERSION;
	/* kv_stride=off: as firmware 1.1, the last without it. */
	info->fw_version = d->opts.no_kv_stride ? (1u << 16) | 1u : NFW_FW_VERSION;
	info->caps = NPNM_CAP_MMAP | NPNM_CAP_COMPUTE | NPNM_CAP_KV_SCATTER |
		     (d->opts.no_kv_stride ? 0 : NPNM_CAP_KV_STRIDE);
	info->opcodes = (1ull << NPNM_OP_MAX) - 1;
	info->mem_size = d->alloc.size - SIM_ALIGN;	/* less the reserved granule */
	info->mem_align = SIM_ALIGN;
	info->nr_cores = d->opts.cores;
	info->max_batch = SIM_MAX_BATCH;
	info->max_inflight = SIM_MAX_INFLIGHT;
	info->kv_dtypes = NFW_KV_DTYPES;
	info->max_head_dim = NFW_MAX_HEAD_DIM;
	info->max_group = NFW_MAX_GROUP;
	info->attn_flags = NFW_ATTN_FLAGS;
	return 0;
}

/* Every sim region is pinnable: device memory is this process's own memory. */
static int sim_mem_alloc(struct nelssa_pnm *pnm, uint64_t size, uint32_t flags, uint32_t *handle,
			 uint64_t *alloc_size)
{
	struct sim_ctx *c = ctx_of(pnm);
	struct sim_region *r = calloc(1, sizeof(*r));
	uint8_t *p;
	int ret;

	(void)flags;
	if (!r)
		return npnm_priv_error(-ENOMEM, "out of memory");
	if (size > ~0ull - SIM_ALIGN) {
		free(r);
		return npnm_priv_error(-ENOMEM, "region of %llu bytes is larger than the device",
				 (unsigned long long)size);
	}
	r->size = (size + SIM_ALIGN - 1) & ~(uint64_t)(SIM_ALIGN - 1);
	pthread_mutex_lock(&c->dev->lock);
	ret = nelssa_extent_get(&c->dev->alloc, r->size, &r->dev_off);
	pthread_mutex_unlock(&c->dev->lock);
	if (ret) {
		free(r);
		return npnm_priv_error(-ENOMEM, "%s: no room for %llu bytes of device memory", pnm->name,
				 (unsigned long long)size);
	}
	/* Hand out zeroes, never a previous owner's data. */
	p = c->dev->mem + r->dev_off;
	if (r->size >= (2u << 20))
		madvise(p, r->size, MADV_DONTNEED);	/* anonymous: reads back as zero */
	else
		memset(p, 0, r->size);
	pthread_mutex_lock(&c->lock);
	if (grow((void **)&c->regions, &c->rcap, c->nregions + 1, sizeof(*c->regions))) {
		pthread_mutex_unlock(&c->lock);
		release_region(c, r);
		return npnm_priv_error(-ENOMEM, "out of memory");
	}
	r->handle = c->next_handle++;
	c->regions[c->nregions++] = r;	/* handles only grow: stays sorted */
	pthread_mutex_unlock(&c->lock);
	*handle = r->handle;
	*alloc_size = r->size;
	return 0;
}

static int sim_mem_free(struct nelssa_pnm *pnm, uint32_t handle)
{
	struct sim_ctx *c = ctx_of(pnm);
	struct sim_region *r;
	size_t i;

	pthread_mutex_lock(&c->lock);
	r = lookup(c, handle);
	if (!r) {
		pthread_mutex_unlock(&c->lock);
		return npnm_priv_error(-EINVAL, "unknown region handle %u", handle);
	}
	if (r->busy) {
		pthread_mutex_unlock(&c->lock);
		return npnm_priv_error(-EBUSY, "region %u is used by %u queued or running commands",
				 handle, r->busy);
	}
	if (r->maps && grow((void **)&c->zombies, &c->zcap, c->nzombies + 1, sizeof(r))) {
		pthread_mutex_unlock(&c->lock);
		return npnm_priv_error(-ENOMEM, "out of memory");
	}
	for (i = 0; c->regions[i] != r; i++)
		;
	memmove(&c->regions[i], &c->regions[i + 1], (c->nregions - i - 1) * sizeof(r));
	c->nregions--;
	if (r->maps) {
		r->freed = true;
		c->zombies[c->nzombies++] = r;
		r = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (r)
		release_region(c, r);
	return 0;
}

static int sim_mem_map(struct nelssa_pnm *pnm, uint32_t handle, void **addr, uint64_t *size)
{
	struct sim_ctx *c = ctx_of(pnm);
	struct sim_region *r;

	pthread_mutex_lock(&c->lock);
	r = lookup(c, handle);
	if (r) {
		r->maps++;
		*size = r->size;
	}
	pthread_mutex_unlock(&c->lock);
	if (!r)
		return npnm_priv_error(-EINVAL, "unknown region handle %u", handle);
	*addr = c->dev->mem + r->dev_off;
	return 0;
}

static int sim_mem_unmap(struct nelssa_pnm *pnm, void *addr)
{
	struct sim_ctx *c = ctx_of(pnm);
	uint64_t off = (uint64_t)((uint8_t *)addr - c->dev->mem);
	struct sim_region *r = NULL, *dead = NULL;

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->nregions && !r; i++)
		if (c->regions[i]->dev_off == off && c->regions[i]->maps)
			r = c->regions[i];
	for (size_t i = 0; i < c->nzombies && !r; i++) {
		if (c->zombies[i]->dev_off != off)
			continue;
		r = c->zombies[i];
		if (r->maps == 1) {
			dead = r;
			c->zombies[i] = c->zombies[--c->nzombies];
		}
	}
	if (r)
		r->maps--;
	pthread_mutex_unlock(&c->lock);
	if (!r)
		return npnm_priv_error(-EINVAL, "%p is not a mapping of this context", addr);
	if (dead)
		release_region(c, dead);
	return 0;
}

/* The driver's checks: the command rules, and every operand against this context. */
static int resolve(struct sim_ctx *c, const struct npnm_cmd *in, struct npnm_cmd *out,
		   struct sim_region **regions, uint32_t index)
{
	int ret;

	*out = *in;
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		regions[i] = NULL;
	ret = npnm_priv_check_rules(in, index);
	if (ret)
		return ret;
	/* As the driver refuses it for firmware that reads the field as reserved. */
	if (npnm_rules_kv_stride(in) && c->dev->opts.no_kv_stride)
		return npnm_priv_error(-EOPNOTSUPP, "command %u: kv_stride %u, and sim:%u was "
				       "made without it (kv_stride=off)", index,
				       npnm_rules_kv_stride(in), c->dev->opts.index);
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		const struct npnm_operand *op = &in->op[i];
		struct sim_region *r;

		if (!op->handle)
			continue;
		r = lookup(c, op->handle);
		if (!r)
			return npnm_priv_error(-EINVAL, "command %u: operand %u: unknown region handle %u",
					 index, i, op->handle);
		if (op->offset > r->size || op->len > r->size - op->offset)
			return npnm_priv_error(-EINVAL, "command %u: operand %u: [%llu, +%llu) outside region "
					 "%u of %llu bytes", index, i,
					 (unsigned long long)op->offset, (unsigned long long)op->len,
					 op->handle, (unsigned long long)r->size);
		out->op[i].offset = r->dev_off + op->offset;
		regions[i] = r;
	}
	return 0;
}

/* Queue one command; called with c->lock held. */
static int submit_one(struct sim_ctx *c, const struct npnm_cmd *in, uint32_t index,
		      struct sim_waiter *waiter, uint64_t *seqno)
{
	struct npnm_cmd desc;
	struct sim_cmd *cmd;
	int ret;

	if (c->closing)
		return npnm_priv_error(-ESHUTDOWN, "context is closing");
	if (c->inflight >= SIM_MAX_INFLIGHT)
		return npnm_priv_error(-EAGAIN, "%u commands in flight: reap completions first",
				 c->inflight);
	cmd = calloc(1, sizeof(*cmd));
	if (!cmd)
		return npnm_priv_error(-ENOMEM, "out of memory");
	ret = resolve(c, in, &desc, cmd->regions, index);
	if (!ret && !waiter && cq_reserve(c, 1))
		ret = npnm_priv_error(-ENOMEM, "out of memory");
	if (ret) {
		free(cmd);
		return ret;
	}
	cmd->ctx = c;
	cmd->seqno = c->next_seqno;
	cmd->user_tag = in->user_tag;
	cmd->waiter = waiter;
	ret = nfw_runtime_submit(c->dev->rt, &desc, c, (uint64_t)(uintptr_t)cmd);
	if (ret) {
		free(cmd);
		return npnm_priv_error(ret, "device is shutting down");
	}
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (cmd->regions[i])
			cmd->regions[i]->busy++;
	*seqno = c->next_seqno++;
	c->inflight++;
	return 0;
}

static int sim_submit(struct nelssa_pnm *pnm, const struct npnm_cmd *cmds, uint32_t n,
		      uint64_t *first_seqno)
{
	struct sim_ctx *c = ctx_of(pnm);
	uint64_t seqno, first = 0;
	uint32_t i;
	int ret = 0;

	if (n > SIM_MAX_BATCH)
		return npnm_priv_error(-EINVAL, "%u commands: at most %u per batch", n, SIM_MAX_BATCH);
	pthread_mutex_lock(&c->lock);
	for (i = 0; i < n; i++) {
		ret = submit_one(c, &cmds[i], i, NULL, &seqno);
		if (ret)
			break;
		if (!i)
			first = seqno;
	}
	pthread_mutex_unlock(&c->lock);
	if (i && first_seqno)
		*first_seqno = first;
	return i ? (int)i : ret;
}

/*
 * Spin briefly before sleeping: a condvar sleep costs more than a fast
 * command.  Once this wait has spun SIM_HELP_AFTER_NS, a short command
 * at the head of the device's queue has no running executor to take it
 * -- one with a CPU of its own starts it within a microsecond -- so this
 * thread runs it (nfw_runtime_help()), and tries again at most every
 * SIM_HELP_AFTER_NS after a refusal, so that a queue headed by a long
 * command is not a lock taken on every turn.  Helping at once measured
 * the same median but a p99 of 11-18 us against 5 us with a free core:
 * the executors, robbed of every command, fell asleep and each
 * submission paid their wake-up.  After 1 us (0.5 us alike) a free
 * core's p99 is 3-4 us; after 2 us a shared core's p90 reached 43 us,
 * the executor, woken meanwhile, taking the CPU for its spin window.
 * The spin window and the timeout bound the helping as they bound the
 * spin (one short command past them at most); with no spin it helps
 * once.
 */
static void spin_and_help(struct sim_ctx *c, uint32_t min, uint64_t spin, int64_t timeout_ns)
{
	uint64_t start = nelssa_now_ns(), next_help = spin < SIM_HELP_AFTER_NS ? spin :
									   SIM_HELP_AFTER_NS;

	for (bool first = true;; first = false) {
		uint64_t spun = nelssa_now_ns() - start;

		if (atomic_load_explicit(&c->cq_ready, memory_order_acquire) >= min ||
		    (timeout_ns > 0 && spun >= (uint64_t)timeout_ns) || (!first && spun >= spin))
			return;
		if (spun >= next_help) {
			if (nfw_runtime_help(c->dev->rt))
				continue;
			next_help = spun + SIM_HELP_AFTER_NS;
		}
		if (spun >= spin)
			return;
		nfw_cpu_relax();
	}
}

static int sim_wait(struct nelssa_pnm *pnm, struct npnm_completion *comps, uint32_t min,
		    uint32_t max, int64_t timeout_ns)
{
	struct sim_ctx *c = ctx_of(pnm);
	uint64_t start = nelssa_now_ns(), deadline = timeout_ns > 0 ? start + (uint64_t)timeout_ns : 0;
	uint64_t spin = c->dev->opts.spin_ns;
	struct timespec ts;
	uint32_t n = 0;
	uint64_t drain;

	if (min && timeout_ns != 0)
		spin_and_help(c, min, spin, timeout_ns);
	if (deadline) {
		ts.tv_sec = (time_t)(deadline / 1000000000ull);
		ts.tv_nsec = (long)(deadline % 1000000000ull);
	}
	pthread_mutex_lock(&c->lock);
	while (c->cq_len < min && timeout_ns != 0) {
		/* Nothing more can arrive: do not wait for it. */
		if (c->inflight == 0)
			break;
		if (deadline) {
			if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT)
				break;
		} else {
			pthread_cond_wait(&c->cond, &c->lock);
		}
	}
	while (n < max && c->cq_len) {
		comps[n++] = c->cq[c->cq_head];
		c->cq_head = (c->cq_head + 1) % c->cq_cap;
		c->cq_len--;
	}
	atomic_store_explicit(&c->cq_ready, (unsigned int)c->cq_len, memory_order_release);
	/*
	 * Drained only when written: a poll that finds nothing (the daemon's
	 * poller asks every device on every turn) makes no system call.
	 */
	if (!c->cq_len && c->efd_set) {
		/* EAGAIN: a caller read the event fd itself. */
		if (read(c->efd, &drain, sizeof(drain)) < 0 && errno != EAGAIN)
			abort();
		c->efd_set = false;
	}
	pthread_mutex_unlock(&c->lock);
	if (n || !min)
		return (int)n;
	if (!c->inflight && timeout_ns != 0 && (!deadline || nelssa_now_ns() < deadline))
		return npnm_priv_error(-EAGAIN, "nothing in flight to wait for");
	return npnm_priv_error(-ETIMEDOUT, "no completion within the timeout");
}

static int sim_exec(struct nelssa_pnm *pnm, const struct npnm_cmd *cmd,
		    struct npnm_completion *comp)
{
	struct sim_ctx *c = ctx_of(pnm);
	struct sim_waiter w = { 0 };
	uint64_t seqno;
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = submit_one(c, cmd, 0, &w, &seqno);
	while (!ret && !w.done)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	if (!ret)
		*comp = w.comp;
	return ret;
}

static int sim_event_fd(struct nelssa_pnm *pnm)
{
	return ctx_of(pnm)->efd;
}

static uint32_t sim_inflight(struct nelssa_pnm *pnm)
{
	struct sim_ctx *c = ctx_of(pnm);
	uint32_t n;

	pthread_mutex_lock(&c->lock);
	n = c->inflight + (uint32_t)c->cq_len;
	pthread_mutex_unlock(&c->lock);
	return n;
}

const struct pnm_backend_ops pnm_sim_ops = {
	.name = "sim",
	.open = sim_open,
	.close = sim_close,
	.info = sim_info,
	.mem_alloc = sim_mem_alloc,
	.mem_free = sim_mem_free,
	.mem_map = sim_mem_map,
	.mem_unmap = sim_mem_unmap,
	.submit = sim_submit,
	.wait = sim_wait,
	.exec = sim_exec,
	.event_fd = sim_event_fd,
	.inflight = sim_inflight,
};
