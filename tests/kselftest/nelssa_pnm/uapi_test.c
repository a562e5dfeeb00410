// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm uapi validation: every call with a bad size, unknown flags,
 * non-zero reserved bytes, bad pointers and unknown numbers fails with the
 * documented error and changes nothing.  One failure class per test.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <time.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

FIXTURE(dev) {
	int fd;
	struct npnm_mem_alloc ma;
};

FIXTURE_SETUP(dev)
{
	self->fd = open(NPNM_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, npnm_alloc(self->fd, 65536, &self->ma));
}

FIXTURE_TEARDOWN(dev)
{
	close(self->fd);
}

TEST_F(dev, get_info)
{
	struct npnm_info info;

	memset(&info, 0xff, sizeof(info));
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	EXPECT_EQ(NPNM_ABI_VERSION, info.abi_version);
	EXPECT_NE(0, info.mem_size);
	EXPECT_EQ(4096, info.mem_align);
	EXPECT_NE(0, info.opcodes & (1ULL << NPNM_OP_FILL));
	EXPECT_EQ(0, info.reserved[0] | info.reserved[1] | info.reserved[2] | info.reserved[3]);
}

/* A device that runs SPARSE_ATTN says for which shapes (nelssad sizes sessions by them). */
TEST_F(dev, get_info_attention_limits)
{
	struct npnm_info info;

	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	if (!(info.opcodes & (1ULL << NPNM_OP_SPARSE_ATTN)))
		SKIP(return, "the device runs no SPARSE_ATTN");
	EXPECT_NE(0, info.max_head_dim);
	EXPECT_NE(0, info.max_group);
}

/*
 * SPARSE_ATTN flags: the device reports only bits this uapi defines, and
 * a defined one it does not report is refused at submission (-EOPNOTSUPP,
 * nothing queued) rather than failing on the device.
 */
TEST_F(dev, attn_flags_reported_and_checked)
{
	long long submitted = npnm_sysfs_read(npnm_sysfs("stats/submitted"));
	struct npnm_submit s;
	struct npnm_info info;
	struct npnm_cmd c;

	ASSERT_LE(0, submitted);
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	/* The mock runs no attention; firmware from 1.1 takes bf16 dots. */
	EXPECT_EQ(npnm_is_mock() || info.fw_version < (1u << 16 | 1u) ? 0 : NPNM_ATTN_F_BF16_DOTS,
		  info.attn_flags);
	if (info.attn_flags & NPNM_ATTN_F_BF16_DOTS)
		SKIP(return, "the device takes every flag this uapi defines");
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_SPARSE_ATTN;
	for (int i = 0; i < 4; i++)
		c.op[i] = (struct npnm_operand){ .handle = self->ma.handle, .len = 4096 };
	c.p.attn.flags = NPNM_ATTN_F_BF16_DOTS;
	s = (struct npnm_submit){ .cmds_ptr = (uintptr_t)&c, .nr_cmds = 1 };
	EXPECT_EQ(-EOPNOTSUPP, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	EXPECT_EQ(0, s.nr_submitted);
	EXPECT_EQ(-EOPNOTSUPP, s.error);
	EXPECT_EQ(-EOPNOTSUPP, npnm_exec(self->fd, &c, NULL));
	EXPECT_EQ(submitted, npnm_sysfs_read(npnm_sysfs("stats/submitted")));
}

TEST_F(dev, get_info_bad_pointer)
{
	EXPECT_EQ(-EFAULT, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, (void *)8));
}

TEST_F(dev, unknown_ioctl)
{
	char buf[256] = { 0 };

	EXPECT_EQ(-ENOTTY, npnm_ioctl(self->fd, _IOWR(NPNM_IOCTL_MAGIC, 0x7f, buf), buf));
	/* Right number, wrong size: a different encoding, so unknown. */
	EXPECT_EQ(-ENOTTY, npnm_ioctl(self->fd, _IOWR(NPNM_IOCTL_MAGIC, 0x10, struct npnm_mem_free),
				      buf));
	EXPECT_EQ(-ENOTTY, npnm_ioctl(self->fd, _IOWR('T', 0x10, struct npnm_mem_alloc), buf));
}

TEST_F(dev, alloc_zero_size)
{
	struct npnm_mem_alloc ma = { 0 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_ALLOC, &ma));
}

TEST_F(dev, alloc_flags)
{
	struct npnm_mem_alloc ma = { .size = 4096, .flags = NPNM_MEM_F_DAX << 1 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_ALLOC, &ma));
}

TEST_F(dev, alloc_dax_offset_without_dax)
{
	struct npnm_mem_alloc ma = { .size = 4096, .dax_offset = 4096 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_ALLOC, &ma));
}

TEST_F(dev, alloc_reserved)
{
	struct npnm_mem_alloc ma = { .size = 4096 };

	ma.reserved = 1;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_ALLOC, &ma));
}

TEST_F(dev, alloc_bad_pointer)
{
	EXPECT_EQ(-EFAULT, npnm_ioctl(self->fd, NPNM_IOC_MEM_ALLOC, NULL));
}

TEST_F(dev, free_unknown_handle)
{
	struct npnm_mem_free mf = { .handle = self->ma.handle + 100 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	mf.handle = 0;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
}

TEST_F(dev, free_reserved)
{
	struct npnm_mem_free mf = { .handle = self->ma.handle, .reserved = 1 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	mf.reserved = 0;
	mf.flags = 2;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	mf.flags = 0;
	EXPECT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));	/* unchanged before */
}

TEST_F(dev, submit_bad_header)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)&c, .nr_cmds = 1 };

	s.flags = 1;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	s.flags = 0;
	s.reserved[0] = 1;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	s.reserved[0] = 0;
	s.nr_cmds = 0;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	s.nr_cmds = 100000;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
}

TEST_F(dev, submit_bad_cmds_pointer)
{
	struct npnm_submit s = { .cmds_ptr = 16, .nr_cmds = 1 };

	EXPECT_EQ(-EFAULT, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	EXPECT_EQ(0, s.nr_submitted);
	EXPECT_EQ(-EFAULT, s.error);
}

TEST_F(dev, cmd_reserved)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);

	c.reserved[1] = 1;
	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &c, NULL));
	c.reserved[1] = 0;
	c.flags = 1;
	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &c, NULL));
}

TEST_F(dev, cmd_unused_operand_not_zero)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);

	c.op[3].len = 8;
	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &c, NULL));
}

TEST_F(dev, cmd_operand_flags)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);

	c.op[0].flags = 1;
	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &c, NULL));
}

TEST_F(dev, cmd_unknown_handle)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle + 7, 0, 4096, 1);

	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &c, NULL));
}

TEST_F(dev, cmd_operand_out_of_region)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 65536 - 8, 16, 1);

	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &c, NULL));
	c = npnm_fill(self->ma.handle, (~0ULL) - 4, 16, 1);
	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &c, NULL));
}

TEST_F(dev, batch_stops_at_bad_command)
{
	struct npnm_cmd c[3] = {
		npnm_fill(self->ma.handle, 0, 4096, 1),
		npnm_fill(self->ma.handle, 0, 1 << 20, 1),	/* past the region */
		npnm_fill(self->ma.handle, 0, 4096, 1),
	};
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = 3 };
	struct npnm_completion comp[4];
	struct npnm_wait w = { .comps_ptr = (uintptr_t)comp, .max_comps = 4, .min_comps = 1,
			       .timeout_ns = -1 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_SUBMIT, &s));
	EXPECT_EQ(1, s.nr_submitted);
	EXPECT_EQ(-EINVAL, s.error);
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));
	EXPECT_EQ(1, w.nr_comps);
	EXPECT_EQ(s.seqno, comp[0].seqno);
}

TEST_F(dev, wait_bad_args)
{
	struct npnm_completion comp[2];
	struct npnm_wait w = { .comps_ptr = (uintptr_t)comp, .max_comps = 0 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));
	w.max_comps = 1;
	w.min_comps = 2;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));
	w.min_comps = 0;
	w.reserved[1] = 5;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));
	w.reserved[1] = 0;
	EXPECT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));	/* a poll: nothing */
	EXPECT_EQ(0, w.nr_comps);
}

TEST_F(dev, wait_times_out)
{
	struct npnm_completion comp[1];
	struct npnm_wait w = { .comps_ptr = (uintptr_t)comp, .max_comps = 1, .min_comps = 1 };
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	w.timeout_ns = ts.tv_sec * 1000000000LL + ts.tv_nsec + 20000000;	/* +20 ms */
	EXPECT_EQ(-ETIMEDOUT, npnm_ioctl(self->fd, NPNM_IOC_WAIT, &w));
}

TEST_F(dev, exec_status_must_be_zero)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);
	struct npnm_exec ex = { .cmd_ptr = (uintptr_t)&c, .status = 3 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_EXEC, &ex));
	ex.status = 0;
	ex.flags = 1;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_EXEC, &ex));
	ex.flags = 0;
	ex.cmd_ptr = 24;
	EXPECT_EQ(-EFAULT, npnm_ioctl(self->fd, NPNM_IOC_EXEC, &ex));
}

TEST_F(dev, device_status_is_not_an_ioctl_error)
{
	struct npnm_cmd c;
	__u32 status = 0;

	memset(&c, 0, sizeof(c));
	c.opcode = 77;
	EXPECT_EQ(-EIO, npnm_exec(self->fd, &c, &status));
	EXPECT_EQ(NPNM_ST_BAD_OPCODE, status);
	c = npnm_fill(self->ma.handle, 0, 4096, 1);
	c.p.fill.width = 3;
	EXPECT_EQ(-EIO, npnm_exec(self->fd, &c, &status));
	EXPECT_EQ(NPNM_ST_BAD_PARAM, status);
	/* Well-formed, but nothing to attend to: the device says so. */
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_SPARSE_ATTN;
	for (int i = 0; i < 4; i++)
		c.op[i] = (struct npnm_operand){ .handle = self->ma.handle, .len = 4096 };
	EXPECT_EQ(-EIO, npnm_exec(self->fd, &c, &status));
	/* The mock cannot run it; the firmware refuses head_dim 0. */
	EXPECT_EQ(npnm_is_mock() ? NPNM_ST_UNSUPPORTED : NPNM_ST_BAD_PARAM, status);
}

/*
 * Issue 15 item 4: what the opcode rules forbid never reaches the device --
 * SUBMIT refuses it with -EINVAL and the submitted counter does not move.
 * One subtest a rule, each with an otherwise valid command.
 */
static void expect_refused(struct __test_metadata *_metadata, int fd, struct npnm_cmd *c)
{
	long long submitted = npnm_sysfs_read(npnm_sysfs("stats/submitted"));
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = 1 };

	EXPECT_EQ(-EINVAL, npnm_ioctl(fd, NPNM_IOC_SUBMIT, &s));
	EXPECT_EQ(0, s.nr_submitted);
	EXPECT_EQ(-EINVAL, s.error);
	EXPECT_EQ(-EINVAL, npnm_exec(fd, c, NULL));
	EXPECT_EQ(submitted, npnm_sysfs_read(npnm_sysfs("stats/submitted")));
}

TEST_F(dev, rule_valid_handle_in_unused_slot)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);

	c.op[1] = (struct npnm_operand){ .handle = self->ma.handle, .len = 4096 };
	expect_refused(_metadata, self->fd, &c);
}

TEST_F(dev, rule_bytes_past_parameters)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);

	c.p.raw[7] = 1ULL << 56;	/* the last byte of the parameter area */
	expect_refused(_metadata, self->fd, &c);
	c = npnm_fill(self->ma.handle, 0, 4096, 1);
	c.p.raw[2] = 1;			/* the first byte past struct npnm_fill_params */
	expect_refused(_metadata, self->fd, &c);
}

TEST_F(dev, rule_reserved_parameter_field)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);

	c.p.fill.pad = 1;
	expect_refused(_metadata, self->fd, &c);
}

TEST_F(dev, rule_nop_and_selftest_take_no_operands)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_NOP;
	c.p.raw[0] = 1;
	expect_refused(_metadata, self->fd, &c);
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_SELFTEST;
	c.op[0] = (struct npnm_operand){ .handle = self->ma.handle, .len = 4096 };
	expect_refused(_metadata, self->fd, &c);
	c.op[0] = (struct npnm_operand){ 0 };
	c.p.selftest.pad = 1;
	expect_refused(_metadata, self->fd, &c);
}

TEST_F(dev, rule_required_operand_missing)
{
	struct npnm_cmd c = npnm_fill(self->ma.handle, 0, 4096, 1);

	c.opcode = NPNM_OP_COPY;
	c.p.fill = (struct npnm_fill_params){ 0 };	/* COPY takes no parameters */
	expect_refused(_metadata, self->fd, &c);	/* no source */
}

TEST_HARNESS_MAIN
