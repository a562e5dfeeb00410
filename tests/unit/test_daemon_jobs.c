// SPDX-License-Identifier: MIT
/*
 * The queues between nelssad's control thread and its poller
 * (daemon/jobs.c): jobs come out in the order they went in, each queue's
 * eventfd is readable exactly while a wake-up is owed -- after a post or
 * a wake, until its reader takes -- so a reader that finds nothing is
 * never woken again for it (the poller looks on every turn), and no
 * wake-up is lost between two threads (a consumer that sleeps only on
 * the fd still receives every job a producer posts).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cmocka.h>

#include "nelssad.h"

#define THREAD_JOBS 20000u

static unsigned int ran;	/* nd_control_job() calls */
static uint64_t last_conn;

/* The poller's work on a job, reduced to recording that it ran, in order. */
void nd_control_job(struct nelssad *nd, struct nd_job *j)
{
	(void)nd;
	assert_true(j->conn > last_conn);
	last_conn = j->conn;
	j->status = -(int)j->conn;
	ran++;
}

void nd_session_free(struct nelssad *nd, struct nd_session *s)
{
	(void)nd;
	(void)s;
	fail_msg("no job here carries a session");
}

static int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static int setup(void **state)
{
	struct nelssad *nd = calloc(1, sizeof(*nd));

	if (!nd || nd_jobs_init(nd))
		return -1;
	/* As nd_dataplane_init() makes it. */
	nd->to_poller.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ran = 0;
	last_conn = 0;
	*state = nd;
	return nd->to_poller.fd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	struct nelssad *nd = *state;

	nd_jobs_fini(nd);
	close(nd->to_poller.fd);
	free(nd);
	return 0;
}

static struct nd_job *post(struct nelssad *nd, uint64_t conn)
{
	struct nd_job *j = nd_job_new(ND_JOB_MSG, conn);

	assert_non_null(j);
	nd_job_post(nd, j);
	return j;
}

static void empty_queue_is_quiet(void **state)
{
	struct nelssad *nd = *state;

	assert_false(readable(nd->to_poller.fd));
	assert_null(nd_jobs_take(nd, &nd->to_poller));
	assert_int_equal(nd_jobs_run(nd), 0);
	assert_false(readable(nd->to_poller.fd));
	assert_false(readable(nd->to_control.fd));
}

static void jobs_come_out_in_order_and_the_take_drains(void **state)
{
	struct nelssad *nd = *state;
	struct nd_job *a = post(nd, 1), *b = post(nd, 2), *c = post(nd, 3), *got;

	assert_true(readable(nd->to_poller.fd));
	got = nd_jobs_take(nd, &nd->to_poller);
	assert_ptr_equal(got, a);
	assert_ptr_equal(got->next, b);
	assert_ptr_equal(got->next->next, c);
	assert_null(c->next);
	assert_false(readable(nd->to_poller.fd));
	assert_null(nd_jobs_take(nd, &nd->to_poller));
	for (; got; got = a) {
		a = got->next;
		nd_job_free(nd, got);
	}
}

/* A take with nothing queued still clears a wake-up (nd_dataplane_stop()'s). */
static void a_wake_without_a_job_is_drained_by_the_next_take(void **state)
{
	struct nelssad *nd = *state;

	nd_jobs_wake(nd, &nd->to_poller);
	nd_jobs_wake(nd, &nd->to_poller);
	assert_true(readable(nd->to_poller.fd));
	assert_null(nd_jobs_take(nd, &nd->to_poller));
	assert_false(readable(nd->to_poller.fd));
	post(nd, 7);
	assert_true(readable(nd->to_poller.fd));	/* signalled again after the drain */
	assert_int_equal(nd_jobs_run(nd), 1);
	assert_false(readable(nd->to_poller.fd));
	assert_true(readable(nd->to_control.fd));
	nd_job_free(nd, nd_jobs_take(nd, &nd->to_control));
	assert_false(readable(nd->to_control.fd));
}

static void run_answers_every_job_on_the_control_queue(void **state)
{
	struct nelssad *nd = *state;
	struct nd_job *j, *next;
	uint64_t want = 1;

	for (uint64_t i = 1; i <= 5; i++)
		post(nd, i);
	assert_int_equal(nd_jobs_run(nd), 5);
	assert_int_equal(ran, 5);
	assert_false(readable(nd->to_poller.fd));
	assert_true(readable(nd->to_control.fd));
	for (j = nd_jobs_take(nd, &nd->to_control); j; j = next, want++) {
		next = j->next;
		assert_int_equal(j->conn, want);
		assert_int_equal(j->status, -(int)want);
		nd_job_free(nd, j);
	}
	assert_int_equal(want, 6);
	assert_false(readable(nd->to_control.fd));
}

static void *producer(void *arg)
{
	struct nelssad *nd = arg;

	for (uint64_t i = 1; i <= THREAD_JOBS; i++)
		post(nd, i);
	return NULL;
}

/*
 * The consumer sleeps on the fd alone (no timeout that could hide a lost
 * wake-up: a lost one hangs, and meson's timeout fails the test).
 */
static void no_wake_up_is_lost_between_threads(void **state)
{
	struct nelssad *nd = *state;
	uint64_t want = 1;
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, producer, nd), 0);
	while (want <= THREAD_JOBS) {
		struct nd_job *j = nd_jobs_take(nd, &nd->to_poller), *next;

		if (!j) {
			struct pollfd p = { .fd = nd->to_poller.fd, .events = POLLIN };

			assert_int_equal(poll(&p, 1, -1), 1);
			continue;
		}
		for (; j; j = next, want++) {
			next = j->next;
			assert_int_equal(j->conn, want);
			nd_job_free(nd, j);
		}
	}
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_false(readable(nd->to_poller.fd));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(empty_queue_is_quiet, setup, teardown),
		cmocka_unit_test_setup_teardown(jobs_come_out_in_order_and_the_take_drains, setup,
						teardown),
		cmocka_unit_test_setup_teardown(a_wake_without_a_job_is_drained_by_the_next_take,
						setup, teardown),
		cmocka_unit_test_setup_teardown(run_answers_every_job_on_the_control_queue, setup,
						teardown),
		cmocka_unit_test_setup_teardown(no_wake_up_is_lost_between_threads, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
