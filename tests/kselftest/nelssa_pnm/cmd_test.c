// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm command path: batches complete exactly once with their tags,
 * a busy region cannot be freed, a process killed with commands in flight
 * leaves the device working, and the watchdog expires a stuck command,
 * fails the device, and a reset brings it back.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

#define PARAM "/sys/module/nelssa_pnm/parameters/"

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
	npnm_sysfs_write(PARAM "mock_delay_us", "0");
	npnm_sysfs_write(PARAM "timeout_ms", "5000");
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
	__u64 len = npnm_slow_begin();
	struct npnm_mem_alloc big;
	struct npnm_cmd c[4];
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = 4 };
	struct npnm_mem_free mf;
	struct npnm_completion comp[4];

	ASSERT_EQ(0, npnm_alloc(self->fd, len < 4096 ? 4096 : len, &big));
	for (int i = 0; i < 4; i++)
		c[i] = npnm_fill(big.handle, 0, len, 1);
	mf = (struct npnm_mem_free){ .handle = big.handle };
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	EXPECT_EQ(-EBUSY, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	ASSERT_EQ(4, wait_n(self->fd, comp, 4));
	EXPECT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	npnm_slow_end();
}

TEST_F(cmd, killed_with_commands_in_flight)
{
	long long used = npnm_sysfs_read(npnm_sysfs("mem_used"));
	__u64 len = npnm_slow_begin();
	int status;
	pid_t pid;

	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int fd = open(NPNM_DEV, O_RDWR);
		struct npnm_mem_alloc ma;
		struct npnm_cmd c[16];
		struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = 16 };

		if (fd < 0 || npnm_alloc(fd, len < (1 << 20) ? 1 << 20 : len, &ma))
			_exit(2);
		for (int i = 0; i < 16; i++)
			c[i] = npnm_fill(ma.handle, 0, len, 1);
		if (npnm_ioctl(fd, NPNM_IOC_SUBMIT, &s))
			_exit(3);
		kill(getpid(), SIGKILL);
		_exit(4);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status));
	/* Its memory comes back once its commands have drained. */
	EXPECT_EQ(used, npnm_sysfs_settle("mem_used", used));
	npnm_slow_end();
	/* The device keeps serving others. */
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 7);

	EXPECT_EQ(0, npnm_exec(self->fd, &c, NULL));
}

TEST_F(cmd, watchdog_expires_and_reset_recovers)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	__u32 status = 0;
	char state[16] = { 0 };
	long long resets;
	int fd;

	if (!npnm_is_mock())
		SKIP(return, "steers the in-kernel mock");

	c.timeout_ms = 50;
	ASSERT_EQ(0, npnm_sysfs_write(PARAM "mock_delay_us", "600000"));
	EXPECT_EQ(-ETIMEDOUT, npnm_exec(self->fd, &c, &status));
	EXPECT_EQ(NPNM_ST_TIMEOUT, status);
	fd = open(npnm_sysfs("state"), O_RDONLY);
	ASSERT_LE(0, fd);
	ASSERT_LT(0, read(fd, state, sizeof(state) - 1));
	close(fd);
	EXPECT_EQ(0, strcmp(state, "failed\n"));
	/* A failed device refuses work until reset. */
	c.timeout_ms = 0;
	EXPECT_EQ(-EIO, npnm_exec(self->fd, &c, NULL));
	npnm_sysfs_write(PARAM "mock_delay_us", "0");
	usleep(700000);		/* let the expired command drain */
	resets = npnm_sysfs_read(npnm_sysfs("stats/resets"));
	ASSERT_EQ(0, npnm_sysfs_write(npnm_sysfs("state"), "reset"));
	EXPECT_EQ(resets + 1, npnm_sysfs_read(npnm_sysfs("stats/resets")));
	EXPECT_EQ(0, npnm_exec(self->fd, &c, NULL));
}

TEST_F(cmd, reset_revokes_mappings)
{
	__u8 *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, self->ma.mmap_offset);
	pid_t pid;
	int status;

	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0, p[0]);
	ASSERT_EQ(0, npnm_sysfs_write(npnm_sysfs("state"), "reset"));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		/* The child has no copy of the mapping (DONTCOPY): map again. */
		__u8 *q = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, self->ma.mmap_offset);

		if (q == MAP_FAILED)
			_exit(2);
		/* Revoked: this load raises SIGBUS. */
		_exit(__atomic_load_n(q, __ATOMIC_RELAXED) == 0xff ? 3 : 0);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(SIGBUS, WTERMSIG(status));
	munmap(p, 4096);
}

TEST_HARNESS_MAIN
