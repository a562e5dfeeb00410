// SPDX-License-Identifier: MIT
/*
 * The "kdev" backend: a PNM card through the nelssa_pnm driver.
 *
 * Memory API on the uapi ioctls and mmap; the Command API submits one
 * IORING_OP_URING_CMD per command on a CQE32 ring (the device status and
 * time come back in res2) and reaps CQEs, with an eventfd registered on
 * the ring for poll/epoll users; exec uses the synchronous NPNM_IOC_EXEC
 * ioctl so that it never steals asynchronous completions.
 *
 * Where io_uring is unavailable (no NPNM_CAP_URING_CMD, io_uring disabled
 * or filtered, or NELSSA_KDEV_IOCTL=1 in the environment) the same API
 * runs on the batch ioctls: NPNM_IOC_SUBMIT and NPNM_IOC_WAIT, with the
 * device file itself as the event fd (the driver's poll()).  Submission
 * repeats the driver's context checks first, so that a bad command fails
 * at submit time exactly as on the sim backend; the driver checks again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kdev_dax.h"
#include "pnm_internal.h"

#define KDEV_RING 512u		/* SQ entries; the CQ has twice as many */

/*
 * A pinnable region (@dax) is a window on the carve-out at @dax_off, and
 * is mapped through the dax device.  Its carve-out extent goes back only
 * when it is freed (handle 0 then) and its last mapping is gone, as the
 * driver does with its own memory.
 */
struct kdev_region {
	uint32_t handle;
	uint64_t size, mmap_offset;
	bool dax;
	uint64_t dax_off;
	uint32_t maps;
};

struct kdev_map {
	void *addr;
	uint64_t size;
	bool dax;
	uint64_t dax_off;
};

/* What a CQE does not carry: the command's tag and sequence number. */
struct kdev_cmd {
	uint64_t user_tag, seqno;
};

struct kdev_ctx {
	int fd, efd;
	bool use_ioctl;		/* batch ioctls instead of io_uring */
	struct io_uring ring;
	pthread_mutex_t lock;		/* everything below, and the SQ */
	pthread_mutex_t cq_lock;	/* the CQ */
	struct npnm_info info;
	struct kdev_region *regions;
	size_t nregions, rcap;
	struct kdev_map *maps;
	size_t nmaps, mcap;
	uint32_t inflight;
	uint64_t next_seqno;
	struct kdev_dax dax;	/* taken on the first pinnable allocation */
};

static struct kdev_ctx *kctx(struct nelssa_pnm *pnm)
{
	return pnm->priv;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 16;
	void *n;

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

static struct kdev_region *find_region(struct kdev_ctx *k, uint32_t handle)
{
	for (size_t i = 0; i < k->nregions; i++)
		if (handle && k->regions[i].handle == handle)
			return &k->regions[i];
	return NULL;
}

/* Drops @r from the table, its carve-out extent back once nothing uses it.  Under @k->lock. */
static void region_forget(struct kdev_ctx *k, struct kdev_region *r)
{
	if (r->dax && r->maps) {
		r->handle = 0;
		return;
	}
	if (r->dax)
		kdev_dax_put(&k->dax, r->dax_off, r->size);
	*r = k->regions[--k->nregions];
}

/* A mapping of the window at @dax_off is gone.  Under @k->lock. */
static void map_put(struct kdev_ctx *k, uint64_t dax_off)
{
	for (size_t i = 0; i < k->nregions; i++) {
		struct kdev_region *r = &k->regions[i];

		if (r->dax && r->dax_off == dax_off && r->maps) {
			r->maps--;
			if (!r->handle)
				region_forget(k, r);
			return;
		}
	}
}

static int kdev_open(struct nelssa_pnm *pnm, const char *spec)
{
	struct kdev_ctx *k = calloc(1, sizeof(*k));
	int ret;

	if (!k)
		return npnm_priv_error(-ENOMEM, "out of memory");
	k->fd = open(spec, O_RDWR | O_CLOEXEC);
	if (k->fd < 0) {
		ret = -errno;
		free(k);
		return npnm_priv_error(ret, "%s: %s", spec, strerror(-ret));
	}
	if (ioctl(k->fd, NPNM_IOC_GET_INFO, &k->info) < 0) {
		ret = npnm_priv_error(-errno, "%s: not a NELSSA PNM device (%s)", spec, strerror(errno));
		goto err_fd;
	}
	if (k->info.abi_version != NPNM_ABI_VERSION) {
		ret = npnm_priv_error(-EPROTO, "%s: driver ABI %u, this library speaks %u", spec,
				k->info.abi_version, NPNM_ABI_VERSION);
		goto err_fd;
	}
	k->use_ioctl = !(k->info.caps & NPNM_CAP_URING_CMD) || getenv("NELSSA_KDEV_IOCTL") ||
		       io_uring_queue_init(KDEV_RING, &k->ring, IORING_SETUP_CQE32);
	if (k->use_ioctl) {
		k->efd = k->fd;		/* the driver's poll() */
	} else {
		k->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (k->efd < 0 || io_uring_register_eventfd(&k->ring, k->efd)) {
			ret = npnm_priv_error(-errno ? -errno : -EIO, "eventfd setup failed");
			goto err_ring;
		}
	}
	pthread_mutex_init(&k->lock, NULL);
	pthread_mutex_init(&k->cq_lock, NULL);
	k->next_seqno = 1;
	k->dax.fd = -1;
	pnm->priv = k;
	return 0;

err_ring:
	if (k->efd >= 0)
		close(k->efd);
	io_uring_queue_exit(&k->ring);
err_fd:
	close(k->fd);
	free(k);
	return ret;
}

static int reap_locked(struct kdev_ctx *k, struct npnm_completion *comps, uint32_t max);

static void kdev_close(struct nelssa_pnm *pnm)
{
	struct kdev_ctx *k = kctx(pnm);
	struct npnm_completion c;

	/* Let in-flight commands finish so their records can be freed. */
	while (k->inflight && !k->use_ioctl) {
		struct io_uring_cqe *cqe;

		if (io_uring_wait_cqe(&k->ring, &cqe))
			break;
		reap_locked(k, &c, 1);
	}
	for (size_t i = 0; i < k->nmaps; i++)
		munmap(k->maps[i].addr, k->maps[i].size);
	if (!k->use_ioctl) {
		io_uring_queue_exit(&k->ring);
		close(k->efd);
	}
	close(k->fd);	/* the driver waits for in-flight commands, frees regions */
	kdev_dax_close(&k->dax);
	free(k->regions);
	free(k->maps);
	free(k);
}

static int kdev_info(struct nelssa_pnm *pnm, struct npnm_info *info)
{
	*info = kctx(pnm)->info;
	return 0;
}

/*
 * Zeroes a new window on the carve-out, which the driver hands out as it
 * is: by the card (FILL), so that no host CPU writes the memory, or --
 * a card without FILL -- through a mapping.
 */
static int zero_window(struct nelssa_pnm *pnm, struct kdev_ctx *k, uint32_t handle, uint64_t size,
		       uint64_t dax_off)
{
	struct npnm_cmd c = { .opcode = NPNM_OP_FILL };
	struct npnm_completion done;
	void *p;
	int ret;

	if (k->info.opcodes & (1u << NPNM_OP_FILL)) {
		c.op[NPNM_FILL_DST] = (struct npnm_operand){ .handle = handle, .len = size };
		c.p.fill.width = 8;
		ret = pnm->ops->exec(pnm, &c, &done);
		if (!ret && done.result)
			ret = npnm_priv_error(done.result, "%s: zeroing a carve-out window: %s",
					      pnm->name, nelssa_pnm_status_str(done.status));
		return ret;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, k->dax.fd, (off_t)dax_off);
	if (p == MAP_FAILED)
		return npnm_priv_error(-errno, "%s: mapping %s: %s", pnm->name, k->dax.name,
				       strerror(errno));
	memset(p, 0, size);
	munmap(p, size);
	return 0;
}

/*
 * The carve-out's part of a pinnable allocation: the dax device taken on
 * first use, an extent of it in @ma as a DAX window.  Under @k->lock.
 */
static int dax_place(struct nelssa_pnm *pnm, struct kdev_ctx *k, struct npnm_mem_alloc *ma)
{
	uint64_t len, off;
	int ret;

	if (!(k->info.caps & NPNM_CAP_DAX))
		return npnm_priv_error(-EOPNOTSUPP,
				       "%s has no device-dax carve-out", pnm->name);
	if (k->dax.fd < 0) {
		ret = kdev_dax_open(&k->dax, k->fd, pnm->name);
		if (ret)
			return ret;
	}
	if (kdev_dax_get(&k->dax, ma->size, &len, &off))
		return npnm_priv_error(-ENOMEM, "%s: no room for %llu bytes in its carve-out %s",
				       pnm->name, (unsigned long long)ma->size, k->dax.name);
	ma->size = len;
	ma->flags = NPNM_MEM_F_DAX;
	ma->dax_offset = off;
	return 0;
}

static int kdev_mem_alloc(struct nelssa_pnm *pnm, uint64_t size, uint32_t flags, uint32_t *handle,
			  uint64_t *alloc_size)
{
	struct kdev_ctx *k = kctx(pnm);
	struct npnm_mem_alloc ma = { .size = size };
	const bool dax = flags & NELSSA_PNM_MEM_PINNABLE;
	int ret = 0;

	if (dax) {
		pthread_mutex_lock(&k->lock);
		ret = dax_place(pnm, k, &ma);
		pthread_mutex_unlock(&k->lock);
		if (ret)
			return ret;
	}
	if (ioctl(k->fd, NPNM_IOC_MEM_ALLOC, &ma) < 0) {
		ret = npnm_priv_error(-errno, "%s: cannot allocate %llu bytes: %s", pnm->name,
				      (unsigned long long)size, strerror(errno));
		goto err_dax;
	}
	pthread_mutex_lock(&k->lock);
	if (grow((void **)&k->regions, &k->rcap, k->nregions + 1, sizeof(*k->regions)))
		ret = npnm_priv_error(-ENOMEM, "out of memory");
	else
		k->regions[k->nregions++] = (struct kdev_region){ ma.handle, ma.alloc_size,
								  ma.mmap_offset, dax,
								  ma.dax_offset, 0 };
	pthread_mutex_unlock(&k->lock);
	if (!ret && dax)
		ret = zero_window(pnm, k, ma.handle, ma.alloc_size, ma.dax_offset);
	if (ret) {
		struct npnm_mem_free mf = { .handle = ma.handle };
		struct kdev_region *r;

		ioctl(k->fd, NPNM_IOC_MEM_FREE, &mf);
		pthread_mutex_lock(&k->lock);
		r = find_region(k, ma.handle);
		if (r)
			*r = k->regions[--k->nregions];
		pthread_mutex_unlock(&k->lock);
		goto err_dax;
	}
	*handle = ma.handle;
	*alloc_size = ma.alloc_size;
	return 0;

err_dax:
	if (dax) {
		pthread_mutex_lock(&k->lock);
		kdev_dax_put(&k->dax, ma.dax_offset, ma.size);
		pthread_mutex_unlock(&k->lock);
	}
	return ret;
}

static int kdev_mem_free(struct nelssa_pnm *pnm, uint32_t handle)
{
	struct kdev_ctx *k = kctx(pnm);
	struct npnm_mem_free mf = { .handle = handle };
	struct kdev_region *r;

	if (ioctl(k->fd, NPNM_IOC_MEM_FREE, &mf) < 0)
		return npnm_priv_error(-errno, errno == EBUSY ? "region %u is used by a command" :
				 "unknown region handle %u", handle);
	pthread_mutex_lock(&k->lock);
	r = find_region(k, handle);
	if (r)
		region_forget(k, r);
	pthread_mutex_unlock(&k->lock);
	return 0;
}

static int kdev_mem_map(struct nelssa_pnm *pnm, uint32_t handle, void **addr, uint64_t *size)
{
	struct kdev_ctx *k = kctx(pnm);
	struct kdev_region *r;
	struct kdev_map m = { 0 };
	int fd = k->fd;
	uint64_t off = 0;
	void *p;

	pthread_mutex_lock(&k->lock);
	r = find_region(k, handle);
	if (r) {
		m = (struct kdev_map){ NULL, r->size, r->dax, r->dax_off };
		off = r->mmap_offset;
		/* A window is pinnable only through the dax device, not the card's node. */
		if (r->dax) {
			fd = k->dax.fd;
			off = r->dax_off;
			r->maps++;	/* its extent stays while this runs */
		}
	}
	pthread_mutex_unlock(&k->lock);
	if (!r)
		return npnm_priv_error(-EINVAL, "unknown region handle %u", handle);
	p = mmap(NULL, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
	if (p == MAP_FAILED) {
		p = NULL;
		errno = errno ? errno : EIO;
	}
	pthread_mutex_lock(&k->lock);
	m.addr = p;
	if (p && grow((void **)&k->maps, &k->mcap, k->nmaps + 1, sizeof(*k->maps))) {
		munmap(p, m.size);
		p = NULL;
		errno = ENOMEM;
	}
	if (p)
		k->maps[k->nmaps++] = m;
	else if (m.dax)
		map_put(k, m.dax_off);
	pthread_mutex_unlock(&k->lock);
	if (!p)
		return npnm_priv_error(-errno, "mmap of region %u failed: %s", handle,
				       strerror(errno));
	*addr = p;
	*size = m.size;
	return 0;
}

static int kdev_mem_unmap(struct nelssa_pnm *pnm, void *addr)
{
	struct kdev_ctx *k = kctx(pnm);
	struct kdev_map m = { 0 };

	pthread_mutex_lock(&k->lock);
	for (size_t i = 0; i < k->nmaps; i++) {
		if (k->maps[i].addr == addr) {
			m = k->maps[i];
			k->maps[i] = k->maps[--k->nmaps];
			break;
		}
	}
	pthread_mutex_unlock(&k->lock);
	if (!m.addr)
		return npnm_priv_error(-EINVAL, "%p is not a mapping of this context", addr);
	if (munmap(m.addr, m.size))
		return npnm_priv_error(-errno, "munmap failed");
	if (m.dax) {
		pthread_mutex_lock(&k->lock);
		map_put(k, m.dax_off);
		pthread_mutex_unlock(&k->lock);
	}
	return 0;
}

/*
 * The driver's checks, repeated so a bad command fails here: the command
 * rules it shares with the library, and every operand against the context.
 */
static int check(struct kdev_ctx *k, const struct npnm_cmd *c, uint32_t index)
{
	int ret = npnm_priv_check_rules(c, index);

	if (ret)
		return ret;
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		const struct npnm_operand *op = &c->op[i];
		struct kdev_region *r;

		if (!op->handle)
			continue;
		r = find_region(k, op->handle);
		if (!r)
			return npnm_priv_error(-EINVAL, "command %u: operand %u: unknown region handle %u",
					 index, i, op->handle);
		if (op->offset > r->size || op->len > r->size - op->offset)
			return npnm_priv_error(-EINVAL, "command %u: operand %u outside region %u", index,
					 i, op->handle);
	}
	return 0;
}

/* The fallback: the batch ioctl, after the same checks. */
static int submit_ioctl(struct kdev_ctx *k, const struct npnm_cmd *cmds, uint32_t n,
			uint64_t *first_seqno)
{
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)cmds };
	uint32_t i;
	int ret = 0;

	for (i = 0; i < n && !ret; i++)
		ret = check(k, &cmds[i], i);
	if (ret)
		i--;
	if (i) {
		s.nr_cmds = i;
		if (ioctl(k->fd, NPNM_IOC_SUBMIT, &s) < 0 && !s.nr_submitted)
			return npnm_priv_error(-errno, "submit failed: %s", strerror(errno));
		k->inflight += s.nr_submitted;
		if (first_seqno)
			*first_seqno = s.seqno;
		return (int)s.nr_submitted;
	}
	return ret;
}

static int kdev_submit(struct nelssa_pnm *pnm, const struct npnm_cmd *cmds, uint32_t n,
		       uint64_t *first_seqno)
{
	struct kdev_ctx *k = kctx(pnm);
	uint32_t i;
	int ret = 0;

	if (n > k->info.max_batch)
		return npnm_priv_error(-EINVAL, "%u commands: at most %u per batch", n, k->info.max_batch);
	pthread_mutex_lock(&k->lock);
	if (k->use_ioctl) {
		ret = submit_ioctl(k, cmds, n, first_seqno);
		pthread_mutex_unlock(&k->lock);
		return ret;
	}
	for (i = 0; i < n; i++) {
		struct npnm_exec ex = { .cmd_ptr = (uintptr_t)&cmds[i] };
		struct io_uring_sqe *sqe;
		struct kdev_cmd *rec;

		ret = check(k, &cmds[i], i);
		if (ret)
			break;
		/* Never more in flight than the CQ holds: no CQE is ever dropped. */
		if (k->inflight >= 2 * KDEV_RING || k->inflight >= k->info.max_inflight) {
			ret = npnm_priv_error(-EAGAIN, "%u commands in flight: reap completions first",
					k->inflight);
			break;
		}
		sqe = io_uring_get_sqe(&k->ring);
		if (!sqe) {
			io_uring_submit(&k->ring);
			sqe = io_uring_get_sqe(&k->ring);
		}
		rec = malloc(sizeof(*rec));
		if (!sqe || !rec) {
			free(rec);
			ret = npnm_priv_error(-ENOMEM, "no submission queue entry");
			break;
		}
		rec->user_tag = cmds[i].user_tag;
		rec->seqno = k->next_seqno++;
		if (!i && first_seqno)
			*first_seqno = rec->seqno;
		io_uring_prep_read(sqe, k->fd, NULL, 0, 0);	/* zeroes what must be zero */
		sqe->opcode = IORING_OP_URING_CMD;
		sqe->cmd_op = NPNM_IOC_EXEC;
		memcpy(sqe->cmd, &ex, sizeof(ex));
		io_uring_sqe_set_data(sqe, rec);
		k->inflight++;
	}
	/* The driver copies each descriptor during this call. */
	if (i && io_uring_submit(&k->ring) < 0)
		ret = npnm_priv_error(-EIO, "io_uring_submit failed");
	pthread_mutex_unlock(&k->lock);
	return i ? (int)i : ret;
}

static int reap_locked(struct kdev_ctx *k, struct npnm_completion *comps, uint32_t max)
{
	struct io_uring_cqe *cqe;
	uint32_t n = 0;
	uint64_t drain;

	while (n < max && !io_uring_peek_cqe(&k->ring, &cqe)) {
		struct kdev_cmd *rec = io_uring_cqe_get_data(cqe);

		comps[n++] = (struct npnm_completion){
			.user_tag = rec->user_tag,
			.seqno = rec->seqno,
			.result = cqe->res,
			.status = cqe->res < 0 && !cqe->big_cqe[0] ? NPNM_ST_OK :
				  NPNM_RES2_STATUS(cqe->big_cqe[0]),
			.device_ns = NPNM_RES2_NS(cqe->big_cqe[0]),
		};
		free(rec);
		io_uring_cqe_seen(&k->ring, cqe);
		pthread_mutex_lock(&k->lock);
		k->inflight--;
		pthread_mutex_unlock(&k->lock);
	}
	if (!io_uring_cq_ready(&k->ring) && read(k->efd, &drain, sizeof(drain)) < 0 &&
	    errno != EAGAIN)
		abort();
	return (int)n;
}

/* The fallback: NPNM_IOC_WAIT with an absolute CLOCK_MONOTONIC deadline. */
static int wait_ioctl(struct kdev_ctx *k, struct npnm_completion *comps, uint32_t min,
		      uint32_t max, int64_t timeout_ns)
{
	struct npnm_wait w = { .comps_ptr = (uintptr_t)comps, .max_comps = max,
			       .min_comps = min };
	struct timespec now;
	uint32_t inflight;
	int ret;

	pthread_mutex_lock(&k->lock);
	inflight = k->inflight;
	pthread_mutex_unlock(&k->lock);
	if (min && !inflight)
		return npnm_priv_error(-EAGAIN, "nothing in flight to wait for");
	if (min > inflight)
		w.min_comps = inflight;
	clock_gettime(CLOCK_MONOTONIC, &now);
	w.timeout_ns = timeout_ns < 0 ? -1 : timeout_ns == 0 ? 0 :
		       now.tv_sec * 1000000000LL + now.tv_nsec + timeout_ns;
	ret = ioctl(k->fd, NPNM_IOC_WAIT, &w) < 0 ? -errno : 0;
	pthread_mutex_lock(&k->lock);
	k->inflight -= w.nr_comps;
	pthread_mutex_unlock(&k->lock);
	if (w.nr_comps || !min)
		return (int)w.nr_comps;
	return npnm_priv_error(ret ? ret : -ETIMEDOUT, "no completion within the timeout");
}

static int kdev_wait(struct nelssa_pnm *pnm, struct npnm_completion *comps, uint32_t min,
		     uint32_t max, int64_t timeout_ns)
{
	struct kdev_ctx *k = kctx(pnm);

	if (k->use_ioctl)
		return wait_ioctl(k, comps, min, max, timeout_ns);
	struct __kernel_timespec ts = { 0 }, *tsp = NULL;
	struct io_uring_cqe *cqe;
	uint32_t inflight;
	int n, ret = 0;

	pthread_mutex_lock(&k->lock);
	inflight = k->inflight;
	pthread_mutex_unlock(&k->lock);
	pthread_mutex_lock(&k->cq_lock);
	if (min && !io_uring_cq_ready(&k->ring) && !inflight) {
		pthread_mutex_unlock(&k->cq_lock);
		return npnm_priv_error(-EAGAIN, "nothing in flight to wait for");
	}
	if (timeout_ns > 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tsp = &ts;
	}
	if (min && timeout_ns != 0) {
		ret = io_uring_wait_cqes(&k->ring, &cqe, min < inflight ? min : inflight, tsp, NULL);
		if (ret == -ETIME)
			ret = -ETIMEDOUT;
	}
	n = reap_locked(k, comps, max);
	pthread_mutex_unlock(&k->cq_lock);
	if (n || !min)
		return n;
	return npnm_priv_error(ret ? ret : -ETIMEDOUT, "no completion within the timeout");
}

static int kdev_exec(struct nelssa_pnm *pnm, const struct npnm_cmd *cmd,
		     struct npnm_completion *comp)
{
	struct kdev_ctx *k = kctx(pnm);
	struct npnm_exec ex = { .cmd_ptr = (uintptr_t)cmd };
	int ret;

	pthread_mutex_lock(&k->lock);
	ret = check(k, cmd, 0);
	pthread_mutex_unlock(&k->lock);
	if (ret)
		return ret;
	ret = ioctl(k->fd, NPNM_IOC_EXEC, &ex) < 0 ? -errno : 0;
	/* A failure with a device status completed; one without was refused. */
	if (ret && !ex.status)
		return npnm_priv_error(ret, "command refused: %s", strerror(-ret));
	*comp = (struct npnm_completion){ .user_tag = cmd->user_tag, .result = ret,
					  .status = ex.status };
	return 0;
}

static int kdev_event_fd(struct nelssa_pnm *pnm)
{
	return kctx(pnm)->efd;
}

static uint32_t kdev_inflight(struct nelssa_pnm *pnm)
{
	struct kdev_ctx *k = kctx(pnm);
	uint32_t n;

	pthread_mutex_lock(&k->lock);
	n = k->inflight;
	pthread_mutex_unlock(&k->lock);
	return n;
}

const struct pnm_backend_ops pnm_kdev_ops = {
	.name = "kdev",
	.open = kdev_open,
	.close = kdev_close,
	.info = kdev_info,
	.mem_alloc = kdev_mem_alloc,
	.mem_free = kdev_mem_free,
	.mem_map = kdev_mem_map,
	.mem_unmap = kdev_mem_unmap,
	.submit = kdev_submit,
	.wait = kdev_wait,
	.exec = kdev_exec,
	.event_fd = kdev_event_fd,
	.inflight = kdev_inflight,
};
