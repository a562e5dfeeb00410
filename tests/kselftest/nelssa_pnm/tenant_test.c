// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm as a multi-tenant host sees it, written from the uapi
 * documentation: one tenant's deadlines never fail the card for the
 * others, the deadline clock cannot be starved, close() and process death
 * abort queued work without waiting for the device, -EFAULT never loses or
 * duplicates work, quotas bound what one context and one uid may hold,
 * read-only opens only query, and device memory is never executable or
 * inherited.  Every command is held in flight by the driver's test hold.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <liburing.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

FIXTURE(tenant) {
	int fd;
	struct npnm_mem_alloc ma;
};

FIXTURE_SETUP(tenant)
{
	self->fd = open(NPNM_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, npnm_alloc(self->fd, 1 << 20, &self->ma));
}

FIXTURE_TEARDOWN(tenant)
{
	npnm_defaults();
	close(self->fd);
}

static int wait_n(int fd, struct npnm_completion *comp, __u32 n)
{
	struct npnm_wait w = { .comps_ptr = (uintptr_t)comp, .max_comps = n, .min_comps = n,
			       .timeout_ns = -1 };
	int ret = npnm_ioctl(fd, NPNM_IOC_WAIT, &w);

	return ret ? ret : (int)w.nr_comps;
}

/* Queue @n FILLs of @h through SUBMIT, in batches, tagged @tag, @tag + 1, ... */
static int submit_fills_tagged(int fd, __u32 h, int n, __u32 timeout_ms, __u64 tag)
{
	static struct npnm_cmd c[NPNM_MAX_BATCH_TEST];

	for (int done = 0; done < n;) {
		int k = n - done < NPNM_MAX_BATCH_TEST ? n - done : NPNM_MAX_BATCH_TEST;
		struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = k };
		int ret;

		for (int i = 0; i < k; i++) {
			c[i] = npnm_fill(h, 0, 4096, 1);
			c[i].timeout_ms = timeout_ms;
			c[i].user_tag = tag + done + i;
		}
		ret = npnm_ioctl(fd, NPNM_IOC_SUBMIT, &s);
		if (ret)
			return ret;
		done += k;
	}
	return 0;
}

static int submit_fills(int fd, __u32 h, int n, __u32 timeout_ms)
{
	return submit_fills_tagged(fd, h, n, timeout_ms, 0);
}

/*
 * Commands a test holds and then expects ABORTED (or OK) must not reach a
 * deadline first, however slow the machine (a debug kernel under TCG is):
 * they get ten minutes, far past the harness's own timeout.
 */
#define HELD_MS 600000

/* A page mapped read-only: readable, never writable. */
static void *ro_page(const void *content, size_t n)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memcpy(p, content, n);
	if (mprotect(p, 4096, PROT_READ)) {
		munmap(p, 4096);
		return NULL;
	}
	return p;
}

/* Issue 15 item 1: another context's timeout_ms = 1 fails only that command. */
TEST_F(tenant, short_deadline_fails_only_that_command)
{
	int other = open(NPNM_DEV, O_RDWR);
	struct npnm_mem_alloc ma;
	struct npnm_cmd c;
	__u32 status = 0;

	ASSERT_LE(0, other);
	ASSERT_EQ(0, npnm_alloc(other, 4096, &ma));
	c = npnm_fill(ma.handle, 0, 4096, 1);
	c.timeout_ms = 1;
	ASSERT_EQ(0, npnm_hold(1));
	EXPECT_EQ(-ETIMEDOUT, npnm_exec(other, &c, &status));
	EXPECT_EQ(NPNM_ST_TIMEOUT, status);
	ASSERT_EQ(0, npnm_hold(0));
	EXPECT_TRUE(npnm_state_is("live"));
	c = npnm_fill(self->ma.handle, 0, 4096, 2);
	EXPECT_EQ(0, npnm_exec(self->fd, &c, &status));
	EXPECT_EQ(NPNM_ST_OK, status);
	close(other);
}

/*
 * Queueing the documented max_inflight at the default deadline: queue
 * time counts (deadlines run from submission), so those that wait too long
 * time out one by one -- and the device stays live.
 */
TEST_F(tenant, max_inflight_queued_past_default_deadline)
{
	static struct npnm_completion comp[NPNM_MAX_INFLIGHT_TEST];
	struct npnm_info info;
	struct npnm_cmd c;
	int got = 0;

	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	ASSERT_EQ(NPNM_MAX_INFLIGHT_TEST, info.max_inflight);
	ASSERT_EQ(0, npnm_param("timeout_ms", "50"));
	ASSERT_EQ(0, npnm_hold(1));
	ASSERT_EQ(0, submit_fills(self->fd, self->ma.handle, info.max_inflight, 0));
	/* One more is refused: completions not yet reaped count too. */
	c = npnm_fill(self->ma.handle, 0, 4096, 1);
	{
		struct npnm_submit s = { .cmds_ptr = (uintptr_t)&c, .nr_cmds = 1 };

		EXPECT_EQ(-EAGAIN, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	}
	while (got < (int)info.max_inflight) {
		int r = wait_n(self->fd, comp + got, 1);

		ASSERT_LT(0, r);
		got += r;
	}
	for (int i = 0; i < got; i++) {
		ASSERT_EQ(-ETIMEDOUT, comp[i].result);
		ASSERT_EQ(NPNM_ST_TIMEOUT, comp[i].status);
	}
	ASSERT_EQ(0, npnm_hold(0));
	EXPECT_TRUE(npnm_state_is("live"));
	ASSERT_EQ(0, npnm_param("timeout_ms", "5000"));
	EXPECT_EQ(0, npnm_exec(self->fd, &c, NULL));
}

/*
 * Item 3: another context submitting all the time cannot postpone a short
 * deadline.  With re-arm-on-submit the EXEC below never returned while the
 * child kept submitting; the harness timeout is what would catch it.
 */
TEST_F(tenant, deadline_not_starved_by_other_submitters)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	__u32 status = 0;
	int ready[2], st;
	pid_t pid;
	char b;

	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, npnm_hold(1));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int fd = open(NPNM_DEV, O_RDWR);
		struct npnm_mem_alloc ma;
		int said = 0;

		if (fd < 0 || npnm_alloc(fd, 4096, &ma))
			_exit(2);
		for (;;) {
			struct npnm_cmd d = npnm_fill(ma.handle, 0, 4096, 1);
			struct npnm_submit s = { .cmds_ptr = (uintptr_t)&d, .nr_cmds = 1 };

			d.timeout_ms = 600000;
			if (npnm_ioctl(fd, NPNM_IOC_SUBMIT, &s) == -EAGAIN)
				_exit(3);	/* a minute of submissions: the parent is stuck */
			if (!said++ && write(ready[1], "r", 1) != 1)
				_exit(4);
			usleep(50000);
		}
	}
	close(ready[1]);
	ASSERT_EQ(1, read(ready[0], &b, 1));
	close(ready[0]);
	c.timeout_ms = 200;
	EXPECT_EQ(-ETIMEDOUT, npnm_exec(self->fd, &c, &status));
	EXPECT_EQ(NPNM_ST_TIMEOUT, status);
	kill(pid, SIGKILL);
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFSIGNALED(st));
}

/* Item 2: close() with 1,024 queued returns at once, having aborted them. */
TEST_F(tenant, close_aborts_1024_queued)
{
	long long used = npnm_sysfs_read(npnm_sysfs("mem_used"));
	long long aborted = npnm_sysfs_read(npnm_sysfs("stats/aborted"));
	struct npnm_mem_alloc ma;
	int fd = open(NPNM_DEV, O_RDWR);

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, npnm_alloc(fd, 65536, &ma));
	ASSERT_EQ(0, npnm_hold(1));
	ASSERT_EQ(0, submit_fills(fd, ma.handle, NPNM_MAX_INFLIGHT_TEST, HELD_MS));
	ASSERT_EQ(0, close(fd));
	/* Synchronously: no settling, the hold is still on. */
	EXPECT_EQ(aborted + NPNM_MAX_INFLIGHT_TEST,
		  npnm_sysfs_read(npnm_sysfs("stats/aborted")));
	EXPECT_EQ(used, npnm_sysfs_read(npnm_sysfs("mem_used")));
	ASSERT_EQ(0, npnm_hold(0));
}

/* kill -9 with 1,024 queued through the ioctl: aborted as the process dies. */
TEST_F(tenant, kill9_with_1024_queued)
{
	long long used = npnm_sysfs_read(npnm_sysfs("mem_used"));
	long long aborted = npnm_sysfs_read(npnm_sysfs("stats/aborted"));
	int ready[2], st;
	pid_t pid;
	char b;

	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, npnm_hold(1));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct npnm_mem_alloc ma;
		int fd = open(NPNM_DEV, O_RDWR);

		if (fd < 0 || npnm_alloc(fd, 65536, &ma) ||
		    submit_fills(fd, ma.handle, NPNM_MAX_INFLIGHT_TEST, HELD_MS))
			_exit(2);
		if (write(ready[1], "r", 1) != 1)
			_exit(3);
		pause();
		_exit(4);
	}
	close(ready[1]);
	ASSERT_EQ(1, read(ready[0], &b, 1));
	close(ready[0]);
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_EQ(aborted + NPNM_MAX_INFLIGHT_TEST,
		  npnm_sysfs_read(npnm_sysfs("stats/aborted")));
	EXPECT_EQ(used, npnm_sysfs_read(npnm_sysfs("mem_used")));
	ASSERT_EQ(0, npnm_hold(0));
}

/*
 * A forked child sharing the file: the parent dying aborts only the
 * parent's queued commands; the child's stay queued and complete.
 */
TEST_F(tenant, dying_process_aborts_only_its_own)
{
	struct npnm_completion comp;
	int go[2], st;
	pid_t pid;
	char b;

	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, npnm_hold(1));
	/* Ours, queued from this (surviving) process. */
	ASSERT_EQ(0, submit_fills_tagged(self->fd, self->ma.handle, 1, HELD_MS, 100));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		/* The shared file, another file table: queue one, then die. */
		if (submit_fills_tagged(self->fd, self->ma.handle, 1, HELD_MS, 200))
			_exit(2);
		if (write(go[1], "q", 1) != 1)
			_exit(3);
		pause();
		_exit(4);
	}
	close(go[1]);
	ASSERT_EQ(1, read(go[0], &b, 1));
	close(go[0]);
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	/* The child's was aborted at its death; ours was not. */
	ASSERT_EQ(1, wait_n(self->fd, &comp, 1));
	EXPECT_EQ(200, comp.user_tag);
	EXPECT_EQ(NPNM_ST_ABORTED, comp.status);
	ASSERT_EQ(0, npnm_hold(0));
	ASSERT_EQ(1, wait_n(self->fd, &comp, 1));
	EXPECT_EQ(100, comp.user_tag);
	EXPECT_EQ(NPNM_ST_OK, comp.status);
}

/*
 * Item 10: 100 io_uring users killed at once.  Their queued commands are
 * aborted as each dies; the memory comes back once io_uring has dropped
 * the requests' file references.  How long that took is logged, not
 * asserted (the bound only catches a hang).
 */
TEST(hundred_killed_uring_users)
{
	enum { P = 100, Q = 4 };
	long long used = npnm_sysfs_read(npnm_sysfs("mem_used"));
	long long aborted = npnm_sysfs_read(npnm_sysfs("stats/aborted"));
	struct timespec t0, t1;
	pid_t pids[P];
	int ready[2], st;
	char b;

	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, npnm_hold(1));
	for (int i = 0; i < P; i++) {
		pids[i] = fork();
		ASSERT_LE(0, pids[i]);
		if (pids[i] == 0) {
			struct npnm_cmd c[Q];
			struct io_uring ring;
			struct npnm_mem_alloc ma;
			int fd = open(NPNM_DEV, O_RDWR);

			if (fd < 0 || npnm_alloc(fd, 65536, &ma) ||
			    io_uring_queue_init(Q, &ring, 0))
				_exit(2);
			for (int k = 0; k < Q; k++) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
				struct npnm_exec ex = { .cmd_ptr = (uintptr_t)&c[k] };

				c[k] = npnm_fill(ma.handle, 0, 4096, 1);
				c[k].timeout_ms = HELD_MS;
				io_uring_prep_read(sqe, fd, NULL, 0, 0);
				sqe->opcode = IORING_OP_URING_CMD;
				sqe->cmd_op = NPNM_IOC_EXEC;
				memcpy(sqe->cmd, &ex, sizeof(ex));
			}
			if (io_uring_submit(&ring) != Q || write(ready[1], "r", 1) != 1)
				_exit(3);
			pause();
			_exit(4);
		}
	}
	close(ready[1]);
	for (int i = 0; i < P; i++)
		ASSERT_EQ(1, read(ready[0], &b, 1));
	close(ready[0]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < P; i++)
		ASSERT_EQ(0, kill(pids[i], SIGKILL));
	for (int i = 0; i < P; i++)
		ASSERT_EQ(pids[i], waitpid(pids[i], &st, 0));
	EXPECT_EQ(aborted + P * Q, npnm_sysfs_read(npnm_sysfs("stats/aborted")));
	for (int i = 0; i < 1200 && npnm_sysfs_read(npnm_sysfs("mem_used")) != used; i++)
		usleep(50000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	EXPECT_EQ(used, npnm_sysfs_read(npnm_sysfs("mem_used")));
	TH_LOG("memory of %d killed io_uring users back %.0f ms after the kills", P,
	       (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
	ASSERT_EQ(0, npnm_hold(0));
}

/* close() right after -ETIMEDOUT of a running command: nothing dangles. */
TEST(close_right_after_timeout)
{
	long long used = npnm_sysfs_read(npnm_sysfs("mem_used"));
	struct npnm_mem_alloc ma;
	struct npnm_cmd c;
	int fd = open(NPNM_DEV, O_RDWR);

	if (!npnm_is_mock())
		SKIP(return, "holds a running command on the in-kernel mock");
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, npnm_alloc(fd, 4096, &ma));
	c = npnm_fill(ma.handle, 0, 4096, 1);
	c.timeout_ms = 10;
	ASSERT_EQ(0, npnm_mock_hold(1));
	EXPECT_EQ(-ETIMEDOUT, npnm_exec(fd, &c, NULL));
	ASSERT_EQ(0, close(fd));
	/* The running command keeps the region until the device lets go. */
	EXPECT_EQ(1, npnm_sysfs_read(npnm_sysfs("stats/quarantined")));
	ASSERT_EQ(0, npnm_mock_hold(0));
	EXPECT_EQ(0, npnm_sysfs_settle("stats/quarantined", 0));
	EXPECT_EQ(used, npnm_sysfs_settle("mem_used", used));
}

/* Item 5: SUBMIT into an unwritable struct queues nothing. */
TEST_F(tenant, submit_unwritable_queues_nothing)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)&c, .nr_cmds = 1 };
	long long submitted = npnm_sysfs_read(npnm_sysfs("stats/submitted"));
	struct npnm_completion comp;
	struct npnm_wait w = { .comps_ptr = (uintptr_t)&comp, .max_comps = 1 };
	void *ro = ro_page(&s, sizeof(s));

	ASSERT_NE(NULL, ro);
	EXPECT_EQ(-EFAULT, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, ro));
	EXPECT_EQ(submitted, npnm_sysfs_read(npnm_sysfs("stats/submitted")));
	EXPECT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));	/* min_comps 0: no wait */
	EXPECT_EQ(0, w.nr_comps);
	munmap(ro, 4096);
}

/* EXEC into an unwritable struct runs nothing. */
TEST_F(tenant, exec_unwritable_runs_nothing)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	struct npnm_exec ex = { .cmd_ptr = (uintptr_t)&c };
	long long submitted = npnm_sysfs_read(npnm_sysfs("stats/submitted"));
	void *ro = ro_page(&ex, sizeof(ex));

	ASSERT_NE(NULL, ro);
	EXPECT_EQ(-EFAULT, npnm_ioctl(self->fd, NPNM_IOC_EXEC, ro));
	EXPECT_EQ(submitted, npnm_sysfs_read(npnm_sysfs("stats/submitted")));
	munmap(ro, 4096);
}

/* WAIT that cannot write its struct or its array consumes nothing. */
TEST_F(tenant, wait_unwritable_consumes_nothing)
{
	struct npnm_completion comp[4], *ro_comp;
	struct npnm_wait w = { .max_comps = 4, .min_comps = 2, .timeout_ns = -1 };
	void *ro;

	ASSERT_EQ(0, submit_fills(self->fd, self->ma.handle, 2, 0));
	/* The struct itself read-only. */
	w.comps_ptr = (uintptr_t)comp;
	ro = ro_page(&w, sizeof(w));
	ASSERT_NE(NULL, ro);
	EXPECT_EQ(-EFAULT, npnm_ioctl(self->fd, NPNM_IOC_WAIT, ro));
	munmap(ro, 4096);
	/* The array read-only. */
	ro_comp = ro_page(comp, sizeof(comp));
	ASSERT_NE(NULL, ro_comp);
	w.comps_ptr = (uintptr_t)ro_comp;
	EXPECT_EQ(-EFAULT, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));
	munmap(ro_comp, 4096);
	/*
	 * Both completions are still there, once each.  (In which order the
	 * device finished them is its business: two cores run them at once.)
	 */
	ASSERT_EQ(2, wait_n(self->fd, comp, 2));
	EXPECT_EQ(1, comp[0].user_tag + comp[1].user_tag);
	EXPECT_NE(comp[0].user_tag, comp[1].user_tag);
	EXPECT_EQ(1, comp[0].seqno > comp[1].seqno ? comp[0].seqno - comp[1].seqno :
		  comp[1].seqno - comp[0].seqno);
	w.comps_ptr = (uintptr_t)comp;
	w.min_comps = 0;
	EXPECT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));
	EXPECT_EQ(0, w.nr_comps);
}

/* Item 8: one context cannot take every region of the device. */
TEST_F(tenant, context_region_quota)
{
	struct npnm_mem_alloc ma;
	int other = open(NPNM_DEV, O_RDWR);
	int n = 0;

	ASSERT_LE(0, other);
	ASSERT_EQ(0, npnm_param("ctx_max_regions", "8"));
	/* This context already holds one region (the fixture's). */
	while (n < 16 && !npnm_alloc(self->fd, 4096, &ma))
		n++;
	EXPECT_EQ(7, n);
	EXPECT_EQ(-EDQUOT, npnm_alloc(self->fd, 4096, &ma));
	/* Another context of the same uid has its own quota. */
	EXPECT_EQ(0, npnm_alloc(other, 4096, &ma));
	close(other);
	/* Freeing makes room again. */
	{
		struct npnm_mem_free mf = { .handle = self->ma.handle };

		ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	}
	EXPECT_EQ(0, npnm_alloc(self->fd, 4096, &self->ma));
}

TEST_F(tenant, context_byte_quota)
{
	struct npnm_mem_alloc ma;

	ASSERT_EQ(0, npnm_param("ctx_max_bytes", "1114112"));	/* 1 MiB + 64 KiB */
	EXPECT_EQ(0, npnm_alloc(self->fd, 65536, &ma));
	EXPECT_EQ(-EDQUOT, npnm_alloc(self->fd, 4096, &ma));
	/* Rounded up to pages before it is counted. */
	ASSERT_EQ(0, npnm_param("ctx_max_bytes", "1118208"));	/* + 4 KiB */
	EXPECT_EQ(0, npnm_alloc(self->fd, 1, &ma));
	EXPECT_EQ(-EDQUOT, npnm_alloc(self->fd, 1, &ma));
}

/*
 * The uid quota spans the uid's contexts on a device; another uid is not
 * affected.  The node is opened by uid 65534 through a temporary mode.
 */
TEST_F(tenant, uid_quota_spans_contexts)
{
	struct npnm_mem_alloc ma;
	struct stat stbuf;
	int other = open(NPNM_DEV, O_RDWR), st;
	pid_t pid;

	ASSERT_LE(0, other);
	/* The fixture holds 1 MiB already. */
	ASSERT_EQ(0, npnm_param("uid_max_bytes", "1179648"));	/* 1 MiB + 128 KiB */
	EXPECT_EQ(0, npnm_alloc(self->fd, 65536, &ma));
	EXPECT_EQ(0, npnm_alloc(other, 65536, &ma));
	EXPECT_EQ(-EDQUOT, npnm_alloc(other, 4096, &ma));
	EXPECT_EQ(-EDQUOT, npnm_alloc(self->fd, 4096, &ma));
	ASSERT_EQ(0, stat(NPNM_DEV, &stbuf));
	ASSERT_EQ(0, chmod(NPNM_DEV, 0666));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct npnm_mem_alloc m2;
		int fd;

		if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
			_exit(2);
		fd = open(NPNM_DEV, O_RDWR);
		if (fd < 0)
			_exit(3);
		_exit(npnm_alloc(fd, 65536, &m2) ? 4 : 0);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	chmod(NPNM_DEV, stbuf.st_mode & 07777);
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(0, WEXITSTATUS(st));
	/* Closing a context gives its share back. */
	close(other);
	EXPECT_EQ(0, npnm_alloc(self->fd, 65536, &ma));
}

/* Item 7: what a read-only open may do: query, nothing else. */
TEST(read_only_open_only_queries)
{
	struct npnm_info info;
	struct npnm_mem_alloc ma;
	struct npnm_cmd c;
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)&c, .nr_cmds = 1 };
	struct npnm_mem_free mf = { .handle = 1 };
	int fd = open(NPNM_DEV, O_RDONLY);

	ASSERT_LE(0, fd);
	memset(&c, 0, sizeof(c));
	EXPECT_EQ(0, npnm_ioctl(fd, NPNM_IOC_GET_INFO, &info));
	EXPECT_EQ(NPNM_ABI_VERSION, info.abi_version);
	EXPECT_EQ(-EBADF, npnm_alloc(fd, 4096, &ma));
	EXPECT_EQ(-EBADF, npnm_ioctl(fd, NPNM_IOC_MEM_FREE, &mf));
	EXPECT_EQ(-EBADF, npnm_ioctl(fd, NPNM_IOC_SUBMIT, &s));
	EXPECT_EQ(-EBADF, npnm_exec(fd, &c, NULL));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, NPNM_MMAP_STRIDE_TEST));
	EXPECT_EQ(EACCES, errno);
	close(fd);
}

/* Item 7: device memory is never executable, nor inherited over fork. */
TEST_F(tenant, no_exec_no_dofork)
{
	__u8 *p;
	int st;
	pid_t pid;

	errno = 0;
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_SHARED, self->fd,
				   self->ma.mmap_offset));
	EXPECT_EQ(EINVAL, errno);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, self->ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(-1, mprotect(p, 4096, PROT_READ | PROT_EXEC));
	EXPECT_EQ(EACCES, errno);
	EXPECT_EQ(-1, madvise(p, 4096, MADV_DOFORK));
	EXPECT_EQ(EINVAL, errno);
	p[0] = 0x5c;
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		unsigned char vec;

		/* Not there at all in the child. */
		_exit(mincore(p, 4096, &vec) == 0 ? 1 : 0);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(0, WEXITSTATUS(st));
	munmap(p, 4096);
}

TEST_HARNESS_MAIN
