// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm memory: allocation to exhaustion, mmap rules and abuse
 * (private maps, out-of-range offsets, mremap growth), contents seen
 * through device commands, use while freed, and isolation between
 * processes.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

FIXTURE(mem) {
	int fd;
};

FIXTURE_SETUP(mem)
{
	self->fd = open(NPNM_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd);
}

FIXTURE_TEARDOWN(mem)
{
	close(self->fd);
}

TEST_F(mem, alloc_rounds_and_zeroes)
{
	struct npnm_mem_alloc ma;
	__u8 *p;

	ASSERT_EQ(0, npnm_alloc(self->fd, 100, &ma));
	EXPECT_EQ(4096, ma.alloc_size);
	EXPECT_NE(0, ma.handle);
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	for (int i = 0; i < 4096; i++)
		ASSERT_EQ(0, p[i]);
	munmap(p, 4096);
}

TEST_F(mem, exhaustion_then_recovery)
{
	struct npnm_info info;
	struct npnm_mem_alloc ma;
	__u32 handles[1024];
	int n = 0;

	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	while (n < 1024 && !npnm_alloc(self->fd, 1 << 20, &ma))
		handles[n++] = ma.handle;
	EXPECT_EQ((int)(info.mem_size >> 20), n);
	EXPECT_EQ(-ENOMEM, npnm_alloc(self->fd, 1 << 20, &ma));
	EXPECT_EQ(-ENOMEM, npnm_alloc(self->fd, info.mem_size * 2, &ma));
	while (n) {
		struct npnm_mem_free mf = { .handle = handles[--n] };

		ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	}
	EXPECT_EQ(0, npnm_alloc(self->fd, info.mem_size - (1 << 20), &ma));
}

TEST_F(mem, device_writes_show_in_mapping)
{
	struct npnm_mem_alloc ma;
	struct npnm_cmd c;
	__u8 *p;

	ASSERT_EQ(0, npnm_alloc(self->fd, 16384, &ma));
	p = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	c = npnm_fill(ma.handle, 4096, 8192, 0x5a);
	ASSERT_EQ(0, npnm_exec(self->fd, &c, NULL));
	EXPECT_EQ(0, p[4095]);
	EXPECT_EQ(0x5a, p[4096]);
	EXPECT_EQ(0x5a, p[12287]);
	EXPECT_EQ(0, p[12288]);
	/* And the reverse: host writes, device COPY, host reads. */
	memcpy(p, "nelssa", 6);
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_COPY;
	c.op[0] = (struct npnm_operand){ .handle = ma.handle, .offset = 8192, .len = 6 };
	c.op[1] = (struct npnm_operand){ .handle = ma.handle, .offset = 0, .len = 6 };
	ASSERT_EQ(0, npnm_exec(self->fd, &c, NULL));
	EXPECT_EQ(0, memcmp(p + 8192, "nelssa", 6));
	munmap(p, 16384);
}

TEST_F(mem, mmap_private_refused)
{
	struct npnm_mem_alloc ma;

	ASSERT_EQ(0, npnm_alloc(self->fd, 4096, &ma));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, self->fd, ma.mmap_offset));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(mem, mmap_out_of_range_refused)
{
	struct npnm_mem_alloc ma;

	ASSERT_EQ(0, npnm_alloc(self->fd, 8192, &ma));
	/* Longer than the region, starting inside it, and an unknown handle. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 12288, PROT_READ, MAP_SHARED, self->fd, ma.mmap_offset));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 8192, PROT_READ, MAP_SHARED, self->fd,
				   ma.mmap_offset + 4096));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd,
				   ma.mmap_offset + (1ULL << 40)));
	/* Inside: fine. */
	void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, ma.mmap_offset + 4096);

	ASSERT_NE(MAP_FAILED, p);
	munmap(p, 4096);
}

TEST_F(mem, mremap_cannot_grow)
{
	struct npnm_mem_alloc ma;
	void *p, *q;

	ASSERT_EQ(0, npnm_alloc(self->fd, 8192, &ma));
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	q = mremap(p, 4096, 65536, MREMAP_MAYMOVE);
	EXPECT_EQ(MAP_FAILED, q);
	EXPECT_EQ(0, mprotect(p, 4096, PROT_READ | PROT_WRITE));
	munmap(p, 4096);
}

TEST_F(mem, mapping_outlives_free)
{
	struct npnm_mem_alloc ma;
	struct npnm_mem_free mf;
	__u8 *p;

	ASSERT_EQ(0, npnm_alloc(self->fd, 4096, &ma));
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	mf = (struct npnm_mem_free){ .handle = ma.handle };
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	/* The handle is gone ... */
	struct npnm_cmd c = npnm_fill(ma.handle, 0, 4096, 1);

	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &c, NULL));
	/* ... the memory stays ours until unmapped, and no one else gets it. */
	p[100] = 42;
	EXPECT_EQ(42, p[100]);
	munmap(p, 4096);
}

TEST_F(mem, mapping_not_inherited)
{
	struct npnm_mem_alloc ma;
	__u8 *p;
	pid_t pid;
	int status;

	ASSERT_EQ(0, npnm_alloc(self->fd, 4096, &ma));
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		unsigned char vec;

		/* VM_DONTCOPY: the child has no mapping there. */
		_exit(mincore(p, 4096, &vec) == 0 ? 1 : 0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, WEXITSTATUS(status));
	munmap(p, 4096);
}

/* Another process cannot name, map or use this one's regions. */
TEST_F(mem, isolation_between_processes)
{
	struct npnm_mem_alloc ma;
	int pipefd[2], status;
	pid_t pid;

	ASSERT_EQ(0, npnm_alloc(self->fd, 8192, &ma));
	ASSERT_EQ(0, pipe(pipefd));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int fd = open(NPNM_DEV, O_RDWR);
		struct npnm_cmd c = npnm_fill(ma.handle, 0, 4096, 1);
		struct npnm_mem_free mf = { .handle = ma.handle };
		int bad = 0;

		bad |= npnm_exec(fd, &c, NULL) != -EINVAL;
		bad |= npnm_ioctl(fd, NPNM_IOC_MEM_FREE, &mf) != -EINVAL;
		bad |= mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, ma.mmap_offset) != MAP_FAILED;
		_exit(bad);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, WEXITSTATUS(status));
	close(pipefd[0]);
	close(pipefd[1]);
}

TEST_HARNESS_MAIN
