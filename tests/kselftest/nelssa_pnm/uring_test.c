// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm io_uring submission: IORING_OP_URING_CMD with cmd_op =
 * NPNM_IOC_EXEC, single and batched, completion order, IOSQE_ASYNC,
 * CQE32 status, SQE128 tails, bad payloads, IOPOLL and read-only opens
 * refused, a process killed with 1,024 commands queued, and a command past
 * its deadline.  Commands are held in flight by the driver's test hold.
 */
#define _GNU_SOURCE
#include <liburing.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

FIXTURE(ring) {
	int fd;
	struct io_uring ring;
	struct npnm_mem_alloc ma;
	__u8 *map;
};

FIXTURE_SETUP(ring)
{
	self->fd = open(NPNM_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, io_uring_queue_init(128, &self->ring, IORING_SETUP_CQE32));
	ASSERT_EQ(0, npnm_alloc(self->fd, 1 << 20, &self->ma));
	self->map = mmap(NULL, 1 << 20, PROT_READ, MAP_SHARED, self->fd, self->ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, self->map);
}

FIXTURE_TEARDOWN(ring)
{
	npnm_defaults();
	munmap(self->map, 1 << 20);
	io_uring_queue_exit(&self->ring);
	close(self->fd);
}

/* One uring_cmd SQE carrying struct npnm_exec for @c. */
static void prep(struct io_uring *ring, int fd, const struct npnm_cmd *c, __u64 tag)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct npnm_exec ex = { .cmd_ptr = (uintptr_t)c };

	io_uring_prep_read(sqe, fd, NULL, 0, 0);	/* zeroes the fields that must be */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->cmd_op = NPNM_IOC_EXEC;
	memcpy(sqe->cmd, &ex, sizeof(ex));
	sqe->user_data = tag;
}

static int reap(struct io_uring *ring, __u64 *tag, __s32 *res, __u64 *res2)
{
	struct io_uring_cqe *cqe;
	int ret = io_uring_wait_cqe(ring, &cqe);

	if (ret)
		return ret;
	*tag = cqe->user_data;
	*res = cqe->res;
	*res2 = cqe->big_cqe[0];
	io_uring_cqe_seen(ring, cqe);
	return 0;
}

TEST_F(ring, single_fill)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 4096, 4096, 0x6b);
	__u64 tag, res2;
	__s32 res;

	prep(&self->ring, self->fd, &c, 42);
	ASSERT_EQ(1, io_uring_submit(&self->ring));
	ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
	EXPECT_EQ(42, tag);
	EXPECT_EQ(0, res);
	EXPECT_EQ(NPNM_ST_OK, NPNM_RES2_STATUS(res2));
	EXPECT_NE(0, NPNM_RES2_NS(res2));
	EXPECT_EQ(0x6b, self->map[4096]);
	EXPECT_EQ(0, self->map[4095]);
}

TEST_F(ring, batch_any_order_exactly_once)
{
	enum { N = 100 };
	static struct npnm_cmd c[N];
	int seen[N] = { 0 };
	__u64 tag, res2;
	__s32 res;

	/* Held while they are submitted: completion order is the device's. */
	ASSERT_EQ(0, npnm_hold(1));
	for (int i = 0; i < N; i++) {
		c[i] = npnm_fill(self->ma.handle, (i % 200) * 4096, 4096, (__u8)i);
		c[i].timeout_ms = 600000;	/* held, never expired */
		prep(&self->ring, self->fd, &c[i], i);
		if (i % 3 == 0)
			io_uring_sqe_set_flags(self->ring.sq.sqes + ((self->ring.sq.sqe_tail - 1) &
					       *self->ring.sq.kring_mask), IOSQE_ASYNC);
	}
	ASSERT_EQ(N, io_uring_submit(&self->ring));
	ASSERT_EQ(0, npnm_hold(0));
	for (int i = 0; i < N; i++) {
		ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
		ASSERT_GT(N, tag);
		ASSERT_EQ(0, res);
		seen[tag]++;
	}
	for (int i = 0; i < N; i++)
		ASSERT_EQ(1, seen[i]);
}

TEST_F(ring, unknown_cmd_op)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	struct io_uring_sqe *sqe;
	__u64 tag, res2;
	__s32 res;

	prep(&self->ring, self->fd, &c, 1);
	sqe = &self->ring.sq.sqes[(self->ring.sq.sqe_tail - 1) & *self->ring.sq.kring_mask];
	sqe->cmd_op = NPNM_IOC_SUBMIT;
	ASSERT_EQ(1, io_uring_submit(&self->ring));
	ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
	EXPECT_EQ(-ENOTTY, res);
}

TEST_F(ring, bad_payload)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	struct npnm_exec ex = { .cmd_ptr = (uintptr_t)&c, .flags = 1 };
	struct io_uring_sqe *sqe;
	__u64 tag, res2;
	__s32 res;

	prep(&self->ring, self->fd, &c, 1);
	sqe = &self->ring.sq.sqes[(self->ring.sq.sqe_tail - 1) & *self->ring.sq.kring_mask];
	memcpy(sqe->cmd, &ex, sizeof(ex));
	ASSERT_EQ(1, io_uring_submit(&self->ring));
	ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
	EXPECT_EQ(-EINVAL, res);

	ex = (struct npnm_exec){ .cmd_ptr = 32 };	/* unreadable descriptor */
	prep(&self->ring, self->fd, &c, 2);
	sqe = &self->ring.sq.sqes[(self->ring.sq.sqe_tail - 1) & *self->ring.sq.kring_mask];
	memcpy(sqe->cmd, &ex, sizeof(ex));
	ASSERT_EQ(1, io_uring_submit(&self->ring));
	ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
	EXPECT_EQ(-EFAULT, res);
}

TEST_F(ring, bad_descriptor_and_device_status)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	__u64 tag, res2;
	__s32 res;

	c.reserved[0] = 1;				/* refused before the device */
	prep(&self->ring, self->fd, &c, 1);
	ASSERT_EQ(1, io_uring_submit(&self->ring));
	ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
	EXPECT_EQ(-EINVAL, res);

	c = npnm_fill(self->ma.handle, 0, 4096, 1);
	c.p.fill.width = 5;				/* refused by the device */
	prep(&self->ring, self->fd, &c, 2);
	ASSERT_EQ(1, io_uring_submit(&self->ring));
	ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
	EXPECT_EQ(-EIO, res);
	EXPECT_EQ(NPNM_ST_BAD_PARAM, NPNM_RES2_STATUS(res2));
}

TEST(sqe128_tail_must_be_zero)
{
	int fd = open(NPNM_DEV, O_RDWR);
	struct npnm_mem_alloc ma;
	struct io_uring ring;
	struct npnm_cmd c;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	struct npnm_exec ex;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, npnm_alloc(fd, 4096, &ma));
	ASSERT_EQ(0, io_uring_queue_init(8, &ring, IORING_SETUP_SQE128 | IORING_SETUP_CQE32));
	c = npnm_fill(ma.handle, 0, 4096, 1);
	ex = (struct npnm_exec){ .cmd_ptr = (uintptr_t)&c };
	for (int junk = 1; junk >= 0; junk--) {
		sqe = io_uring_get_sqe(&ring);
		/* io_uring_prep_rw clears only 16 command bytes: clear all 80. */
		io_uring_prep_read(sqe, fd, NULL, 0, 0);
		memset(sqe->cmd, 0, 80);
		sqe->opcode = IORING_OP_URING_CMD;
		sqe->cmd_op = NPNM_IOC_EXEC;
		memcpy(sqe->cmd, &ex, sizeof(ex));
		sqe->cmd[40] = junk;
		ASSERT_EQ(1, io_uring_submit(&ring));
		ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
		EXPECT_EQ(junk ? -EINVAL : 0, cqe->res);
		io_uring_cqe_seen(&ring, cqe);
	}
	io_uring_queue_exit(&ring);
	close(fd);
}

/*
 * 1,024 commands queued through io_uring, then SIGKILL: the dying
 * process's commands are aborted when its file table goes, so the ring's
 * teardown does not wait for the device, and the memory comes back.
 */
TEST_F(ring, killed_with_1024_uring_cmds_queued)
{
	enum { N = 1024 };
	long long used = npnm_sysfs_read(npnm_sysfs("mem_used"));
	long long aborted = npnm_sysfs_read(npnm_sysfs("stats/aborted"));
	int status, ready[2];
	pid_t pid;
	char b;

	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, npnm_hold(1));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		static struct npnm_cmd c[N];
		struct io_uring ring;
		struct npnm_mem_alloc ma;
		int fd = open(NPNM_DEV, O_RDWR);

		if (fd < 0 || npnm_alloc(fd, 1 << 20, &ma) || io_uring_queue_init(N, &ring, 0))
			_exit(2);
		for (int i = 0; i < N; i++) {
			c[i] = npnm_fill(ma.handle, 0, 4096, 1);
			c[i].timeout_ms = 600000;	/* aborted, never expired */
			prep(&ring, fd, &c[i], i);
		}
		if (io_uring_submit(&ring) != N)
			_exit(3);
		if (write(ready[1], "r", 1) != 1)
			_exit(4);
		pause();
		_exit(5);
	}
	close(ready[1]);
	ASSERT_EQ(1, read(ready[0], &b, 1));
	close(ready[0]);
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status));
	/* Aborted as the process died, with the hold still on. */
	EXPECT_EQ(aborted + N, npnm_sysfs_read(npnm_sysfs("stats/aborted")));
	/* io_uring tears the ring down asynchronously: the memory follows. */
	EXPECT_EQ(used, npnm_sysfs_settle("mem_used", used));
	ASSERT_EQ(0, npnm_hold(0));
	/* The device and this context keep working. */
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 9);
	__u64 tag, res2;
	__s32 res;

	prep(&self->ring, self->fd, &c, 7);
	ASSERT_EQ(1, io_uring_submit(&self->ring));
	ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
	EXPECT_EQ(0, res);
}

TEST_F(ring, deadline_in_cqe)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	__u64 tag, res2;
	__s32 res;

	c.timeout_ms = 30;
	ASSERT_EQ(0, npnm_hold(1));
	prep(&self->ring, self->fd, &c, 5);
	ASSERT_EQ(1, io_uring_submit(&self->ring));
	ASSERT_EQ(0, reap(&self->ring, &tag, &res, &res2));
	EXPECT_EQ(-ETIMEDOUT, res);
	EXPECT_EQ(NPNM_ST_TIMEOUT, NPNM_RES2_STATUS(res2));
	EXPECT_EQ(0, NPNM_RES2_NS(res2));	/* never reached the device */
	ASSERT_EQ(0, npnm_hold(0));
	EXPECT_TRUE(npnm_state_is("live"));
}

/* The device interrupts on completion: polled rings are refused. */
TEST(iopoll_refused)
{
	struct npnm_mem_alloc ma;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct npnm_cmd c;
	int fd = open(NPNM_DEV, O_RDWR);

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, npnm_alloc(fd, 4096, &ma));
	ASSERT_EQ(0, io_uring_queue_init(8, &ring, IORING_SETUP_IOPOLL));
	c = npnm_fill(ma.handle, 0, 4096, 1);
	prep(&ring, fd, &c, 1);
	ASSERT_EQ(1, io_uring_submit(&ring));
	ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
	EXPECT_EQ(-EOPNOTSUPP, cqe->res);
	io_uring_cqe_seen(&ring, cqe);
	io_uring_queue_exit(&ring);
	close(fd);
}

/* A read-only open runs no commands, by io_uring either. */
TEST(read_only_open_cannot_submit)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct npnm_cmd c;
	int fd = open(NPNM_DEV, O_RDONLY);

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, io_uring_queue_init(8, &ring, 0));
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_NOP;
	prep(&ring, fd, &c, 1);
	ASSERT_EQ(1, io_uring_submit(&ring));
	ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
	EXPECT_EQ(-EBADF, cqe->res);
	io_uring_cqe_seen(&ring, cqe);
	io_uring_queue_exit(&ring);
	close(fd);
}

TEST_HARNESS_MAIN
