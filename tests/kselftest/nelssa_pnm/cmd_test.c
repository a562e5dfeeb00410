// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm command path: batches complete exactly once with their tags,
 * a busy region cannot be freed, a process killed with commands in flight
 * leaves the device working, a command's deadline fails that command only,
 * and a reset aborts what is in flight and makes old regions stale.
 * Commands stay in flight through the driver's test hold, never by racing.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

FIXTURE(cmd) {
	int fd;
	struct npnm_mem_alloc ma;
};

FIXTURE_SETUP(cmd)
{
	self->fd = open(NPNM_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, npnm_alloc(self->fd, 1 << 20, &self->ma));
}

FIXTURE_TEARDOWN(cmd)
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

TEST_F(cmd, batch_completes_exactly_once)
{
	enum { N = 200 };
	static struct npnm_cmd c[N];
	static struct npnm_completion comp[N];
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = N };
	int seen[N] = { 0 }, got = 0;

	for (int i = 0; i < N; i++) {
		c[i] = npnm_fill(self->ma.handle, (i % 256) * 4096, 4096, (__u8)i);
		c[i].user_tag = 1000 + i;
	}
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	ASSERT_EQ(N, s.nr_submitted);
	while (got < N) {
		int r = wait_n(self->fd, comp + got, 1);

		ASSERT_LT(0, r);
		got += r;
	}
	for (int i = 0; i < N; i++) {
		ASSERT_EQ(0, comp[i].result);
		ASSERT_LE(1000, comp[i].user_tag);
		ASSERT_GT(1000 + N, comp[i].user_tag);
		seen[comp[i].user_tag - 1000]++;
		ASSERT_EQ(s.seqno + (comp[i].user_tag - 1000), comp[i].seqno);
	}
	for (int i = 0; i < N; i++)
		ASSERT_EQ(1, seen[i]);
}

TEST_F(cmd, busy_region_cannot_be_freed)
{
	struct npnm_mem_alloc big;
	struct npnm_cmd c[4];
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = 4 };
	struct npnm_mem_free mf;
	struct npnm_completion comp[4];

	ASSERT_EQ(0, npnm_alloc(self->fd, 65536, &big));
	for (int i = 0; i < 4; i++) {
		c[i] = npnm_fill(big.handle, 0, 65536, 1);
		c[i].timeout_ms = 600000;	/* held, never expired */
	}
	mf = (struct npnm_mem_free){ .handle = big.handle };
	ASSERT_EQ(0, npnm_hold(1));
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	EXPECT_EQ(-EBUSY, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	ASSERT_EQ(0, npnm_hold(0));
	ASSERT_EQ(4, wait_n(self->fd, comp, 4));
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(0, comp[i].result);
	EXPECT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
}

TEST_F(cmd, killed_with_commands_in_flight)
{
	long long used = npnm_sysfs_read(npnm_sysfs("mem_used"));
	long long aborted = npnm_sysfs_read(npnm_sysfs("stats/aborted"));
	int status;
	pid_t pid;

	ASSERT_EQ(0, npnm_hold(1));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int fd = open(NPNM_DEV, O_RDWR);
		struct npnm_mem_alloc ma;
		struct npnm_cmd c[16];
		struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = 16 };

		if (fd < 0 || npnm_alloc(fd, 1 << 20, &ma))
			_exit(2);
		for (int i = 0; i < 16; i++) {
			c[i] = npnm_fill(ma.handle, 0, 1 << 20, 1);
			c[i].timeout_ms = 600000;	/* aborted, never expired */
		}
		if (npnm_ioctl(fd, NPNM_IOC_SUBMIT, &s))
			_exit(3);
		kill(getpid(), SIGKILL);
		_exit(4);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status));
	/* Aborted by the time the parent hears of the death; memory is back. */
	EXPECT_EQ(aborted + 16, npnm_sysfs_read(npnm_sysfs("stats/aborted")));
	EXPECT_EQ(used, npnm_sysfs_read(npnm_sysfs("mem_used")));
	ASSERT_EQ(0, npnm_hold(0));
	/* The device keeps serving others. */
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 7);

	EXPECT_EQ(0, npnm_exec(self->fd, &c, NULL));
}

/* A queued command past its own deadline fails alone: the device stays live. */
TEST_F(cmd, deadline_fails_only_that_command)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	long long timeouts = npnm_sysfs_read(npnm_sysfs("stats/timeouts"));
	__u32 status = 0;
	int other = open(NPNM_DEV, O_RDWR);
	struct npnm_mem_alloc ma;

	ASSERT_LE(0, other);
	ASSERT_EQ(0, npnm_alloc(other, 4096, &ma));
	c.timeout_ms = 1;
	ASSERT_EQ(0, npnm_hold(1));
	EXPECT_EQ(-ETIMEDOUT, npnm_exec(self->fd, &c, &status));
	EXPECT_EQ(NPNM_ST_TIMEOUT, status);
	ASSERT_EQ(0, npnm_hold(0));
	EXPECT_EQ(timeouts + 1, npnm_sysfs_read(npnm_sysfs("stats/timeouts")));
	EXPECT_TRUE(npnm_state_is("live"));
	/* Taken back before it ran: nothing is quarantined, the memory untouched. */
	EXPECT_EQ(0, npnm_sysfs_read(npnm_sysfs("stats/quarantined")));
	/* Every other context, and this one, keep working. */
	struct npnm_cmd d = npnm_fill(ma.handle, 0, 4096, 2);

	EXPECT_EQ(0, npnm_exec(other, &d, NULL));
	c.timeout_ms = 0;
	EXPECT_EQ(0, npnm_exec(self->fd, &c, NULL));
	close(other);
}

/*
 * A command already running when its deadline passes completes
 * NPNM_ST_TIMEOUT at once; the device keeps its slot quarantined until it
 * reports the command, and is not failed.
 */
TEST_F(cmd, running_command_quarantined)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	__u32 status = 0;

	if (!npnm_is_mock())
		SKIP(return, "holds a running command on the in-kernel mock");
	c.timeout_ms = 20;
	ASSERT_EQ(0, npnm_mock_hold(1));
	EXPECT_EQ(-ETIMEDOUT, npnm_exec(self->fd, &c, &status));
	EXPECT_EQ(NPNM_ST_TIMEOUT, status);
	EXPECT_EQ(1, npnm_sysfs_read(npnm_sysfs("stats/quarantined")));
	EXPECT_TRUE(npnm_state_is("live"));
	ASSERT_EQ(0, npnm_mock_hold(0));
	EXPECT_EQ(0, npnm_sysfs_settle("stats/quarantined", 0));
	c.timeout_ms = 0;
	EXPECT_EQ(0, npnm_exec(self->fd, &c, NULL));
}

/* The whole device fails only by the administrator's watchdog. */
TEST_F(cmd, device_watchdog_fails_a_hung_device)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	long long resets = npnm_sysfs_read(npnm_sysfs("stats/resets"));
	__u32 status = 0;

	if (!npnm_is_mock())
		SKIP(return, "holds a running command on the in-kernel mock");
	ASSERT_EQ(0, npnm_param("watchdog_ms", "100"));
	c.timeout_ms = 60000;
	ASSERT_EQ(0, npnm_mock_hold(1));
	EXPECT_EQ(-EIO, npnm_exec(self->fd, &c, &status));
	EXPECT_EQ(NPNM_ST_DEVICE_ERROR, status);
	EXPECT_TRUE(npnm_state_is("failed"));
	/* A failed device refuses work until reset. */
	EXPECT_EQ(-EIO, npnm_exec(self->fd, &c, NULL));
	ASSERT_EQ(0, npnm_mock_hold(0));
	ASSERT_EQ(0, npnm_param("watchdog_ms", "10000"));
	ASSERT_EQ(0, npnm_sysfs_write(npnm_sysfs("state"), "reset"));
	EXPECT_EQ(resets + 1, npnm_sysfs_read(npnm_sysfs("stats/resets")));
	EXPECT_TRUE(npnm_state_is("live"));
	/* The failure made the old region stale; a new one works. */
	EXPECT_EQ(-ESTALE, npnm_exec(self->fd, &c, NULL));
	ASSERT_EQ(0, npnm_alloc(self->fd, 4096, &self->ma));
	c = npnm_fill(self->ma.handle, 0, 4096, 1);
	EXPECT_EQ(0, npnm_exec(self->fd, &c, NULL));
}

/* A reset aborts what is queued instead of refusing to run. */
TEST_F(cmd, reset_aborts_queued_commands)
{
	struct npnm_cmd c[8];
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = 8 };
	struct npnm_completion comp[8];

	for (int i = 0; i < 8; i++) {
		c[i] = npnm_fill(self->ma.handle, 0, 4096, 1);
		c[i].timeout_ms = 600000;	/* aborted, never expired */
	}
	ASSERT_EQ(0, npnm_hold(1));
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	ASSERT_EQ(0, npnm_sysfs_write(npnm_sysfs("state"), "reset"));
	ASSERT_EQ(0, npnm_hold(0));
	ASSERT_EQ(8, wait_n(self->fd, comp, 8));
	for (int i = 0; i < 8; i++) {
		EXPECT_EQ(-ECANCELED, comp[i].result);
		EXPECT_EQ(NPNM_ST_ABORTED, comp[i].status);
	}
}

/*
 * What survives a reset: handles (to be freed), nothing else.  Every
 * mapping is revoked -- also of a region freed while mapped -- and regions
 * from before it are stale: mmap and commands get -ESTALE, MEM_FREE works.
 */
TEST_F(cmd, reset_revokes_mappings_and_regions)
{
	struct npnm_mem_alloc gone;
	struct npnm_mem_free mf;
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	__u8 *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, self->ma.mmap_offset);
	__u8 *q;

	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0, p[0]);
	ASSERT_EQ(0, npnm_alloc(self->fd, 4096, &gone));
	q = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, gone.mmap_offset);
	ASSERT_NE(MAP_FAILED, q);
	mf = (struct npnm_mem_free){ .handle = gone.handle };
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	EXPECT_EQ(0, npnm_touch_sigbus(q));	/* freed but mapped: still ours */

	ASSERT_EQ(0, npnm_sysfs_write(npnm_sysfs("state"), "reset"));
	EXPECT_EQ(1, npnm_touch_sigbus(p));
	EXPECT_EQ(1, npnm_touch_sigbus(q));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd,
				   self->ma.mmap_offset));
	EXPECT_EQ(ESTALE, errno);
	EXPECT_EQ(-ESTALE, npnm_exec(self->fd, &c, NULL));
	mf = (struct npnm_mem_free){ .handle = self->ma.handle };
	EXPECT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	munmap(p, 4096);
	munmap(q, 4096);
	/* New regions work as before. */
	ASSERT_EQ(0, npnm_alloc(self->fd, 4096, &self->ma));
	c = npnm_fill(self->ma.handle, 0, 4096, 1);
	EXPECT_EQ(0, npnm_exec(self->fd, &c, NULL));
}

TEST_HARNESS_MAIN
