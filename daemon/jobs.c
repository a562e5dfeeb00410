// SPDX-License-Identifier: MIT
/*
 * The queues between the control thread and the poller (nelssad.h,
 * "Threads").  A control request goes to the poller as a job and comes
 * back with its answer; each queue has an eventfd its reader sleeps on,
 * the poller's among its epoll set, the control thread's in its poll().
 * The lock is held only to link or unlink a job, so neither thread ever
 * waits for the other's work: a prefill's ingest or a session's zeroing
 * cannot hold up a decode step, nor a step a control reply.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "nelssad.h"

static void q_init(struct nd_jobq *q, int fd)
{
	q->head = NULL;
	q->tail = &q->head;
	q->fd = fd;
	q->signalled = false;
}

int nd_jobs_init(struct nelssad *nd)
{
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	pthread_mutex_init(&nd->jobs_lock, NULL);
	q_init(&nd->to_poller, -1);	/* nd_dataplane_init() makes its eventfd */
	q_init(&nd->to_control, fd);
	return 0;
}

struct nd_job *nd_job_new(enum nd_job_kind kind, uint64_t conn)
{
	struct nd_job *j = calloc(1, sizeof(*j));

	if (j) {
		j->kind = kind;
		j->conn = conn;
	}
	return j;
}

/*
 * Called with jobs_lock held.  The eventfd is written only when it is not
 * already readable, and read only by nd_jobs_take() when it was written,
 * both under the lock, so that "readable" and q->signalled never disagree:
 * a reader that finds nothing makes no system call (the poller looks at
 * its queue on every turn), and an empty queue never leaves the fd
 * readable to spin its reader.
 */
static void signal_locked(struct nd_jobq *q)
{
	uint64_t one = 1;

	if (q->signalled || q->fd < 0)
		return;
	/* It fails only with no reader left (stopping): nobody to wake. */
	if (write(q->fd, &one, sizeof(one)) == sizeof(one))
		q->signalled = true;
}

void nd_jobs_wake(struct nelssad *nd, struct nd_jobq *q)
{
	pthread_mutex_lock(&nd->jobs_lock);
	signal_locked(q);
	pthread_mutex_unlock(&nd->jobs_lock);
}

static void push(struct nelssad *nd, struct nd_jobq *q, struct nd_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&nd->jobs_lock);
	*q->tail = j;
	q->tail = &j->next;
	signal_locked(q);
	pthread_mutex_unlock(&nd->jobs_lock);
}

void nd_job_post(struct nelssad *nd, struct nd_job *j)
{
	push(nd, &nd->to_poller, j);
}

void nd_job_done(struct nelssad *nd, struct nd_job *j)
{
	push(nd, &nd->to_control, j);
}

/* Every job of @q, oldest first. */
struct nd_job *nd_jobs_take(struct nelssad *nd, struct nd_jobq *q)
{
	struct nd_job *all;
	uint64_t v;

	pthread_mutex_lock(&nd->jobs_lock);
	if (q->signalled && read(q->fd, &v, sizeof(v)) == sizeof(v))
		q->signalled = false;
	all = q->head;
	q->head = NULL;
	q->tail = &q->head;
	pthread_mutex_unlock(&nd->jobs_lock);
	return all;
}

void nd_job_unreserve(struct nelssad *nd, struct nd_job *j)
{
	if (!j->s)
		return;
	nd_session_free(nd, j->s);
	j->s = NULL;
	nd->n_creating--;
}

/* Frees @j and a session it still carries (allocated or only reserved). */
void nd_job_free(struct nelssad *nd, struct nd_job *j)
{
	nd_job_unreserve(nd, j);
	free(j);
}

unsigned int nd_jobs_run(struct nelssad *nd)
{
	struct nd_job *j = nd_jobs_take(nd, &nd->to_poller), *next;
	unsigned int n = 0;

	for (; j; j = next, n++) {
		next = j->next;
		nd_control_job(nd, j);
		nd_job_done(nd, j);
	}
	return n;
}

/*
 * Both threads stopped (nd_dataplane_stop()): jobs never run or never
 * answered go, and a session one carries -- while UCX, which may hold
 * its memory registered, is still there.
 */
void nd_jobs_drop(struct nelssad *nd)
{
	struct nd_jobq *qs[] = { &nd->to_poller, &nd->to_control };

	for (unsigned int i = 0; i < 2; i++)
		for (struct nd_job *j = nd_jobs_take(nd, qs[i]), *n; j; j = n) {
			n = j->next;
			nd_job_free(nd, j);
		}
}

void nd_jobs_fini(struct nelssad *nd)
{
	nd_jobs_drop(nd);
	if (nd->to_control.fd >= 0)
		close(nd->to_control.fd);
	nd->to_control.fd = -1;
	pthread_mutex_destroy(&nd->jobs_lock);
}
