// SPDX-License-Identifier: MIT
/*
 * The firmware side of nelssa-devemu: the card's Device Runtime serving
 * the rings of Documentation/device-interface.rst.  The doorbell eventfd
 * wakes it; it copies submissions out of the SQ (so the driver may reuse
 * the slot at once) and hands them to the runtime's executors; each
 * completion goes to the CQ, then the guest's vector eventfd raises its
 * MSI-X interrupt.  A heartbeat thread ticks every NPNM_DEVIF_HEARTBEAT_MS.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <nelssa/fw.h>
#include <nelssa/util.h>

#include "devemu.h"

struct fw {
	const struct devemu *d;
	uint8_t *mem;
	struct npnm_devif_hdr *hdr;
	struct npnm_devif_sqe *sq;
	struct npnm_devif_cqe *cq;
	struct nfw_runtime *rt;
	pthread_mutex_t cq_lock;
	uint64_t submitted, completed;
	uint64_t start_ns;
	atomic_bool resetting;	/* completions of aborted commands are dropped */
	atomic_bool hung;	/* fault: a dead firmware, no heartbeat, no service */
};

static volatile sig_atomic_t stopping;

static void on_term(int sig)
{
	(void)sig;
	stopping = 1;
}

/* One-writer indices: the writer stores with release, the reader loads with acquire. */
static uint32_t load_idx(const __le32 *p)
{
	return le32toh(__atomic_load_n(p, __ATOMIC_ACQUIRE));
}

static void store_idx(__le32 *p, uint32_t v)
{
	__atomic_store_n(p, htole32(v), __ATOMIC_RELEASE);
}

static void ring_guest(const struct fw *f)
{
	uint64_t one = 1;

	if (write(f->d->guest_efd[0], &one, sizeof(one)) != sizeof(one))
		perror("nelssa-devemu: interrupt");
}

static void complete(void *owner, uint64_t cookie, const struct nfw_result *res)
{
	struct fw *f = owner;
	struct npnm_devif_cqe *e;
	uint32_t tail;
	uint64_t n;

	if (atomic_load(&f->resetting))
		return;
	pthread_mutex_lock(&f->cq_lock);
	n = ++f->completed;
	tail = le32toh(f->hdr->cq_tail);
	/* The driver never has more in flight than the CQ holds. */
	while (tail - load_idx(&f->hdr->cq_head) >= f->d->cq_entries && !stopping)
		usleep(100);
	e = &f->cq[tail & (f->d->cq_entries - 1)];
	if (n == f->d->faults.corrupt_nth)
		cookie ^= 0x5a5a5a5a00000000ull;	/* fault: a cookie the driver never issued */
	e->cookie = htole64(cookie);
	e->status = htole32(res->status);
	e->detail = htole32(res->detail);
	e->device_ns = htole64(res->device_ns);
	e->reserved = 0;
	store_idx(&f->hdr->cq_tail, tail + 1);
	pthread_mutex_unlock(&f->cq_lock);
	ring_guest(f);
}

static int start_runtime(struct fw *f)
{
	struct nfw_runtime_config cfg = {
		.mem = { f->mem, f->d->mem_size },
		.cores = f->d->cores,
		.isa = NFW_ISA_AUTO,
		.spin_ns = 0,		/* the host is shared with QEMU: never spin */
		.complete = complete,
	};

	return nfw_runtime_create(&cfg, &f->rt);
}

/* A reset: drop everything in flight, zero the rings, bump the epoch. */
static void do_reset(struct fw *f)
{
	atomic_store(&f->resetting, true);
	nfw_runtime_destroy(f->rt);	/* what was queued or running is dropped */
	f->rt = NULL;
	atomic_store(&f->resetting, false);
	store_idx(&f->hdr->sq_head, 0);
	store_idx(&f->hdr->cq_tail, 0);
	f->hdr->sq_tail = 0;
	f->hdr->cq_head = 0;
	if (start_runtime(f)) {
		f->hdr->fw_state = htole32(NPNM_FW_FAILED);
		return;
	}
	f->hdr->fw_state = htole32(NPNM_FW_READY);
	store_idx(&f->hdr->reset_epoch, le32toh(f->hdr->reset_epoch) + 1);
	if (f->d->verbose)
		fprintf(stderr, "nelssa-devemu: reset done\n");
}

static void drain_sq(struct fw *f)
{
	uint32_t head = le32toh(f->hdr->sq_head), tail = load_idx(&f->hdr->sq_tail);

	while (head != tail) {
		const struct npnm_devif_sqe *e = &f->sq[head & (f->d->sq_entries - 1)];
		struct npnm_cmd cmd = e->cmd;
		uint64_t cookie = le64toh(e->cookie);

		store_idx(&f->hdr->sq_head, ++head);	/* slot free for the driver */
		if (++f->submitted == f->d->faults.stall_nth)
			continue;	/* fault: this command never completes */
		if (f->submitted == f->d->faults.hang_nth) {
			atomic_store(&f->hung, true);	/* fault: the firmware dies here */
			return;
		}
		if (nfw_runtime_submit(f->rt, &cmd, f, cookie)) {
			struct nfw_result r = { .status = NPNM_ST_DEVICE_ERROR };

			complete(f, cookie, &r);
		}
		tail = load_idx(&f->hdr->sq_tail);
	}
}

static void *heartbeat(void *arg)
{
	struct fw *f = arg;
	uint64_t stop = f->d->faults.heartbeat_stop_ms;

	while (!stopping) {
		if ((!stop || nelssa_now_ns() - f->start_ns < stop * 1000000ull) && !atomic_load(&f->hung))
			__atomic_store_n(&f->hdr->heartbeat,
					 htole64(le64toh(f->hdr->heartbeat) + 1), __ATOMIC_RELEASE);
		usleep(NPNM_DEVIF_HEARTBEAT_MS * 1000);
	}
	return NULL;
}

static void write_header(struct fw *f)
{
	const struct devemu *d = f->d;
	struct npnm_devif_hdr *h = f->hdr;
	uint64_t sq_off = 4096, cq_off = sq_off + (uint64_t)d->sq_entries * sizeof(*f->sq);
	uint64_t heap_off = 1u << 20;

	memset(h, 0, sizeof(*h));
	h->version = htole16(NPNM_DEVIF_VERSION);
	h->hdr_size = htole16(sizeof(*h));
	h->mem_size = htole64(d->mem_size);
	h->heap_off = htole64(heap_off);
	h->heap_size = htole64(d->mem_size - heap_off);
	h->sq_off = htole64(sq_off);
	h->cq_off = htole64(cq_off);
	h->sq_entries = htole32(d->sq_entries);
	h->cq_entries = htole32(d->cq_entries);
	h->nr_cores = htole32(d->cores);
	h->fw_version = htole32(NFW_FW_VERSION);
	h->opcodes = htole64((1ull << NPNM_OP_MAX) - 1);
	h->kv_dtypes = htole32(NFW_KV_DTYPES);
	h->max_head_dim = htole16(NFW_MAX_HEAD_DIM);
	h->max_group = htole16(NFW_MAX_GROUP);
	h->attn_flags = htole32(NFW_ATTN_FLAGS);
	h->fw_state = htole32(NPNM_FW_READY);
	f->sq = (struct npnm_devif_sqe *)(f->mem + sq_off);
	f->cq = (struct npnm_devif_cqe *)(f->mem + cq_off);
	/* The magic last: a driver binds only to a complete header. */
	__atomic_store_n(&h->magic, htole32(NPNM_DEVIF_MAGIC), __ATOMIC_RELEASE);
}

int devemu_firmware(const struct devemu *d)
{
	struct fw f = { .d = d, .start_ns = nelssa_now_ns() };
	struct sigaction sa = { .sa_handler = on_term };
	pthread_t hb;
	int ret = 0;

	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	f.mem = mmap(NULL, d->mem_size, PROT_READ | PROT_WRITE, MAP_SHARED, d->shm_fd, 0);
	if (f.mem == MAP_FAILED) {
		perror("nelssa-devemu: mmap device memory");
		return 1;
	}
	f.hdr = (struct npnm_devif_hdr *)f.mem;
	pthread_mutex_init(&f.cq_lock, NULL);
	/* A restarted firmware keeps the rings' contents but starts over. */
	write_header(&f);
	if (start_runtime(&f)) {
		fprintf(stderr, "nelssa-devemu: cannot start the device runtime\n");
		return 1;
	}
	pthread_create(&hb, NULL, heartbeat, &f);
	uint32_t served = 0;	/* the reset request last served: each once */

	while (!stopping) {
		struct pollfd p = { .fd = d->fw_efd[0], .events = POLLIN };
		uint64_t v;
		uint32_t st;

		if (atomic_load(&f.hung)) {
			/* Dead on purpose: answer nothing, then ask to be restarted. */
			usleep(d->faults.restart_after_hang_ms * 1000);
			if (d->faults.restart_after_hang_ms) {
				ret = DEVEMU_EXIT_RESTART;
				break;
			}
			continue;
		}
		if (poll(&p, 1, NPNM_DEVIF_HEARTBEAT_MS) > 0 &&
		    read(d->fw_efd[0], &v, sizeof(v)) < 0 && errno != EAGAIN)
			break;
		st = le32toh(__atomic_load_n(&f.hdr->driver_state, __ATOMIC_ACQUIRE));
		if (NPNM_DRV_STATE(st) == NPNM_DRV_RESET) {
			/* A numbered request is served once; an unnumbered one until ATTACHED. */
			if (st != served) {
				f.hdr->fw_state = htole32(NPNM_FW_BOOTING);
				do_reset(&f);
				served = st;
			}
			continue;
		}
		served = 0;
		drain_sq(&f);
	}
	stopping = 1;
	pthread_join(hb, NULL);
	f.hdr->fw_state = htole32(NPNM_FW_FAILED);
	atomic_store(&f.resetting, true);	/* nothing more into the rings */
	nfw_runtime_destroy(f.rt);
	munmap(f.mem, d->mem_size);
	return ret;
}
