// SPDX-License-Identifier: MIT
/*
 * The Device Runtime: one queue of commands, one CMD Executor thread per
 * core.  An executor takes a command, validates it, runs its kernel and
 * reports the completion exactly once.  A SPARSE_ATTN command carries a
 * batch of work items; the executor that picks it up queues helper parts
 * at the front, one per other core, and every part then claims items one
 * at a time until none is left, so one command per device and decode
 * step uses every core, and a core that starts late (a sleeping thread,
 * a busy host CPU) takes fewer items instead of holding the command up
 * with a fixed share.  The part that finishes last completes the command.
 *
 * Idle executors poll the queue for spin_ns before sleeping on the
 * condition variable: a sleeping thread costs a futex wake-up (several
 * microseconds) on every command, which is most of a NOP's latency.
 *
 * A thread waiting for completions may lend itself to the device for a
 * short command (NOP, FILL or COPY of at most NFW_SHORT_BYTES) at the
 * head of the queue: nfw_runtime_help().  Spinning only helps while the
 * spinner and the thread it waits for each have a CPU; where they share
 * one, every hand-over was a spin window plus a futex wake-up (52 us for a
 * NOP against 1-5 us with a free core, Documentation/performance.rst).
 * The waiter running the command itself needs no hand-over at all, the
 * way io_uring issues a request inline and punts only what would block.
 * The task is unlinked under the queue lock, by whichever thread comes
 * first, so the command still runs and completes exactly once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include <nelssa/util.h>

#include "fw_internal.h"

struct job;

struct task {
	struct task *next;
	struct job *job;
	bool head;		/* first task of its job: validates, may split */
};

struct job {
	struct npnm_cmd desc;
	void *owner;
	uint64_t cookie;
	uint64_t t_start;
	atomic_uint parts_left;
	atomic_uint next_item;	/* SPARSE_ATTN: the next item to claim */
	atomic_uint status;
	uint32_t detail;
	struct task head;
};

struct nfw_runtime {
	struct nfw_runtime_config cfg;
	enum nfw_isa isa;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct task *first, *last;
	atomic_uint queued;
	atomic_uint helping;	/* threads in nfw_runtime_help() running a task */
	atomic_bool stopping;
	unsigned int nthreads;
	pthread_t *threads;
};

static void complete_job(struct nfw_runtime *rt, struct job *job)
{
	struct nfw_result res = {
		.status = atomic_load(&job->status),
		.detail = job->detail,
		.device_ns = job->t_start ? nelssa_now_ns() - job->t_start : 0,
	};

	rt->cfg.complete(job->owner, job->cookie, &res);
	free(job);
}

static void push_locked(struct nfw_runtime *rt, struct task *t, bool front)
{
	t->next = NULL;
	if (!rt->first) {
		rt->first = rt->last = t;
	} else if (front) {
		t->next = rt->first;
		rt->first = t;
	} else {
		rt->last->next = t;
		rt->last = t;
	}
	atomic_fetch_add(&rt->queued, 1);
}

/* Unlink the head task; called with the queue lock held and the queue not empty. */
static struct task *unlink_first_locked(struct nfw_runtime *rt)
{
	struct task *t = rt->first;

	rt->first = t->next;
	if (!rt->first)
		rt->last = NULL;
	atomic_fetch_sub(&rt->queued, 1);
	return t;
}

static struct task *pop(struct nfw_runtime *rt)
{
	struct task *t;
	uint64_t t0;

	if (rt->cfg.spin_ns) {
		t0 = nelssa_now_ns();
		while (!atomic_load_explicit(&rt->queued, memory_order_acquire) &&
		       !atomic_load(&rt->stopping) && nelssa_now_ns() - t0 < rt->cfg.spin_ns)
			nfw_cpu_relax();
	}
	pthread_mutex_lock(&rt->lock);
	while (!rt->first && !atomic_load(&rt->stopping))
		pthread_cond_wait(&rt->cond, &rt->lock);
	t = rt->first ? unlink_first_locked(rt) : NULL;
	pthread_mutex_unlock(&rt->lock);
	return t;
}

/* Queue helper parts of a SPARSE_ATTN batch; false if it runs unsplit. */
static bool split(struct nfw_runtime *rt, struct job *job)
{
	uint32_t items = job->desc.p.attn.nr_items;
	uint32_t parts = items < rt->nthreads ? items : rt->nthreads;
	struct task *t[256];
	uint32_t n;

	if (parts < 2)
		return false;
	for (n = 0; n < parts - 1; n++) {
		t[n] = calloc(1, sizeof(*t[n]));
		if (!t[n]) {
			/* Short of memory: run the whole batch here instead. */
			while (n)
				free(t[--n]);
			return false;
		}
		t[n]->job = job;
	}
	atomic_store(&job->next_item, 0);
	atomic_store(&job->parts_left, n + 1);
	pthread_mutex_lock(&rt->lock);
	while (n)
		push_locked(rt, t[--n], true);
	pthread_cond_broadcast(&rt->cond);
	pthread_mutex_unlock(&rt->lock);
	return true;
}

static void run_range(struct nfw_runtime *rt, struct job *job, uint32_t begin, uint32_t end,
		      struct nfw_scratch *scratch)
{
	uint32_t detail = 0;
	uint32_t st = nfw_execute(&rt->cfg.mem, &job->desc, rt->isa, begin, end, scratch, &detail);

	if (st) {
		uint32_t ok = NPNM_ST_OK;

		if (atomic_compare_exchange_strong(&job->status, &ok, st))
			job->detail = detail;
	}
}

/* One part of a job: the whole of it, or claimed items of a split batch. */
static void run_part(struct nfw_runtime *rt, struct job *job, bool claim,
		     struct nfw_scratch *scratch)
{
	if (!claim) {
		run_range(rt, job, 0, UINT32_MAX, scratch);
	} else {
		uint32_t i;

		while ((i = atomic_fetch_add(&job->next_item, 1)) < job->desc.p.attn.nr_items)
			run_range(rt, job, i, i + 1, scratch);
	}
	if (atomic_fetch_sub(&job->parts_left, 1) == 1)
		complete_job(rt, job);
}

/* Run one task taken off the queue: a job's head, or a part of a split batch. */
static void run_task(struct nfw_runtime *rt, struct task *t, struct nfw_scratch *scratch)
{
	struct job *job = t->job;
	uint32_t st;

	if (!t->head) {
		run_part(rt, job, true, scratch);
		free(t);
		return;
	}
	job->t_start = nelssa_now_ns();
	st = nfw_validate(&rt->cfg.mem, &job->desc, scratch);
	if (st) {
		atomic_store(&job->status, st);
		complete_job(rt, job);
		return;
	}
	run_part(rt, job, nfw_opdef(job->desc.opcode)->split_items && rt->nthreads > 1 &&
		 split(rt, job), scratch);
}

static void *executor(void *arg)
{
	struct nfw_runtime *rt = arg;
	struct nfw_scratch scratch = { 0 };
	struct task *t;

	/* Allocated up front so that compute never fails for want of memory. */
	nfw_scratch_get(&scratch, NFW_ATTN_SCRATCH_BYTES);
	while ((t = pop(rt)))
		run_task(rt, t, &scratch);
	nfw_scratch_free(&scratch);
	return NULL;
}

bool nfw_runtime_help(struct nfw_runtime *rt)
{
	struct nfw_scratch none = { 0 };	/* short commands use none */
	struct task *t;

	/*
	 * A held lock is most likely an executor taking the queue: leave it
	 * the command rather than sleep on the mutex, which cost a futex
	 * wake-up (p99 12-18 us against 5 us with a free core).
	 */
	if (!atomic_load_explicit(&rt->queued, memory_order_acquire) ||
	    pthread_mutex_trylock(&rt->lock))
		return false;
	t = rt->first;
	/* Only the head: a short command behind a long one still waits its turn. */
	if (!t || !t->head || atomic_load(&rt->stopping) || !nfw_cmd_is_short(&t->job->desc)) {
		pthread_mutex_unlock(&rt->lock);
		return false;
	}
	unlink_first_locked(rt);
	/* Counted under the lock that saw !stopping: destroy waits for it. */
	atomic_fetch_add(&rt->helping, 1);
	pthread_mutex_unlock(&rt->lock);
	run_task(rt, t, &none);
	atomic_fetch_sub_explicit(&rt->helping, 1, memory_order_release);
	return true;
}

/* Executor @i, on its CPU when the configuration names a range. */
static int start_executor(struct nfw_runtime *rt, unsigned int i)
{
	pthread_attr_t attr;
	cpu_set_t cpus;
	int ret;

	if (!rt->cfg.cpu_count)
		return -pthread_create(&rt->threads[i], NULL, executor, rt);
	CPU_ZERO(&cpus);
	CPU_SET(rt->cfg.cpu_first + i % rt->cfg.cpu_count, &cpus);
	ret = pthread_attr_init(&attr);
	if (ret)
		return -ret;
	ret = pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus);
	if (!ret)
		ret = pthread_create(&rt->threads[i], &attr, executor, rt);
	pthread_attr_destroy(&attr);
	/* The range was checked; a sandbox refusing affinity still gets a device. */
	if (ret)
		ret = pthread_create(&rt->threads[i], NULL, executor, rt);
	return -ret;
}

/* 1 when every CPU of the configured range is one this process may use. */
static int cpus_allowed(const struct nfw_runtime_config *cfg)
{
	cpu_set_t allowed;

	if (!cfg->cpu_count)
		return 1;
	if (cfg->cpu_count > CPU_SETSIZE || cfg->cpu_first > CPU_SETSIZE - cfg->cpu_count ||
	    sched_getaffinity(0, sizeof(allowed), &allowed))
		return 0;
	for (unsigned int c = cfg->cpu_first; c < cfg->cpu_first + cfg->cpu_count; c++)
		if (!CPU_ISSET(c, &allowed))
			return 0;
	return 1;
}

int nfw_runtime_create(const struct nfw_runtime_config *cfg, struct nfw_runtime **out)
{
	struct nfw_runtime *rt;
	int ret;

	if (!cfg || !cfg->complete || !cfg->mem.base || cfg->cores == 0 || cfg->cores > 256 ||
	    !cpus_allowed(cfg))
		return -EINVAL;
	if (!nfw_isa_supported(cfg->isa))
		return -EOPNOTSUPP;
	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->cfg = *cfg;
	rt->isa = nfw_isa_resolve(cfg->isa);
	rt->threads = calloc(cfg->cores, sizeof(*rt->threads));
	if (!rt->threads) {
		free(rt);
		return -ENOMEM;
	}
	pthread_mutex_init(&rt->lock, NULL);
	pthread_cond_init(&rt->cond, NULL);
	for (rt->nthreads = 0; rt->nthreads < cfg->cores; rt->nthreads++) {
		ret = start_executor(rt, rt->nthreads);
		if (ret) {
			nfw_runtime_destroy(rt);
			return ret;
		}
	}
	*out = rt;
	return 0;
}

int nfw_runtime_submit(struct nfw_runtime *rt, const struct npnm_cmd *desc, void *owner,
		       uint64_t cookie)
{
	struct job *job;

	if (atomic_load(&rt->stopping))
		return -ESHUTDOWN;
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->desc = *desc;
	job->owner = owner;
	job->cookie = cookie;
	atomic_init(&job->parts_left, 1);
	atomic_init(&job->status, NPNM_ST_OK);
	job->head.job = job;
	job->head.head = true;
	pthread_mutex_lock(&rt->lock);
	if (atomic_load(&rt->stopping)) {
		pthread_mutex_unlock(&rt->lock);
		free(job);
		return -ESHUTDOWN;
	}
	push_locked(rt, &job->head, false);
	pthread_cond_signal(&rt->cond);
	pthread_mutex_unlock(&rt->lock);
	return 0;
}

/* Unlink the queued head tasks that @match selects, completing them ABORTED. */
static unsigned int abort_queued(struct nfw_runtime *rt, void *owner, bool all)
{
	struct task *aborted = NULL, **pp, *t;
	unsigned int n = 0;

	pthread_mutex_lock(&rt->lock);
	rt->last = NULL;
	for (pp = &rt->first; (t = *pp);) {
		if (t->head && (all || t->job->owner == owner)) {
			*pp = t->next;
			t->next = aborted;
			aborted = t;
			atomic_fetch_sub(&rt->queued, 1);
			continue;
		}
		rt->last = t;
		pp = &t->next;
	}
	pthread_mutex_unlock(&rt->lock);
	while ((t = aborted)) {
		aborted = t->next;
		atomic_store(&t->job->status, NPNM_ST_ABORTED);
		complete_job(rt, t->job);
		n++;
	}
	return n;
}

unsigned int nfw_runtime_cancel(struct nfw_runtime *rt, void *owner)
{
	return abort_queued(rt, owner, false);
}

void nfw_runtime_destroy(struct nfw_runtime *rt)
{
	if (!rt)
		return;
	pthread_mutex_lock(&rt->lock);
	atomic_store(&rt->stopping, true);
	pthread_mutex_unlock(&rt->lock);
	abort_queued(rt, NULL, true);
	/* Parts of running commands stay queued and are drained before exit. */
	pthread_mutex_lock(&rt->lock);
	pthread_cond_broadcast(&rt->cond);
	pthread_mutex_unlock(&rt->lock);
	for (unsigned int i = 0; i < rt->nthreads; i++)
		pthread_join(rt->threads[i], NULL);
	/* A helper that took a command before stopping runs one short command. */
	while (atomic_load_explicit(&rt->helping, memory_order_acquire))
		sched_yield();
	pthread_cond_destroy(&rt->cond);
	pthread_mutex_destroy(&rt->lock);
	free(rt->threads);
	free(rt);
}

enum nfw_isa nfw_runtime_isa(const struct nfw_runtime *rt)
{
	return rt->isa;
}
