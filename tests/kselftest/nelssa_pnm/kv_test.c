// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm KV_WRITE on the mock: dense writes, scattered rows landing in
 * cluster order, appends at the end, and the statuses of bad parameters --
 * with nothing written by a refused command.
 */
#define _GNU_SOURCE
#include <sys/mman.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

#define D 64
#define ROW (D * 2)
#define MAXT 64
#define MAXC 16

FIXTURE(kv) {
	int fd;
	struct npnm_mem_alloc src, dst;
	__u8 *s, *d;
	struct npnm_cmd c;
};

FIXTURE_SETUP(kv)
{
	self->fd = open(NPNM_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, npnm_alloc(self->fd, 65536, &self->src));
	ASSERT_EQ(0, npnm_alloc(self->fd, 65536, &self->dst));
	self->s = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd,
		       self->src.mmap_offset);
	self->d = mmap(NULL, 65536, PROT_READ, MAP_SHARED, self->fd, self->dst.mmap_offset);
	ASSERT_NE(MAP_FAILED, self->s);
	ASSERT_NE(MAP_FAILED, self->d);
	for (int i = 0; i < 65536; i++)
		self->s[i] = (__u8)(i * 13 + 1);
	memset(&self->c, 0, sizeof(self->c));
	self->c.opcode = NPNM_OP_KV_WRITE;
	self->c.op[NPNM_KV_SRC] = (struct npnm_operand){ .handle = self->src.handle, .len = 65536 };
	self->c.op[NPNM_KV_DST] = (struct npnm_operand){ .handle = self->dst.handle, .len = 65536 };
	self->c.p.kv_write = (struct npnm_kv_write_params){
		.k_off = 0, .v_off = MAXT * ROW, .table_off = 2 * MAXT * ROW, .nr_tokens = 10,
		.nr_clusters = 2, .max_tokens = MAXT, .max_clusters = MAXC, .head_dim = D,
		.kv_dtype = NPNM_DTYPE_BF16,
	};
	/* Table entries in the source: after K and V rows. */
	struct npnm_cluster t[2] = { { 0, 6 }, { 6, 4 } };

	memcpy(self->s + 2 * 10 * ROW, t, sizeof(t));
}

FIXTURE_TEARDOWN(kv)
{
	munmap(self->s, 65536);
	munmap((void *)self->d, 65536);
	close(self->fd);
}

TEST_F(kv, dense_then_append)
{
	__u32 status;

	ASSERT_EQ(0, npnm_exec(self->fd, &self->c, &status));
	EXPECT_EQ(0, memcmp(self->d, self->s, 10 * ROW));				/* K */
	EXPECT_EQ(0, memcmp(self->d + MAXT * ROW, self->s + 10 * ROW, 10 * ROW));	/* V */
	EXPECT_EQ(0, memcmp(self->d + 2 * MAXT * ROW, self->s + 20 * ROW, 16));	/* table */
	/* Append 10 more tokens and 2 clusters at the end. */
	self->c.p.kv_write.first_token = 10;
	self->c.p.kv_write.first_cluster = 2;
	ASSERT_EQ(0, npnm_exec(self->fd, &self->c, &status));
	EXPECT_EQ(0, memcmp(self->d + 10 * ROW, self->s, 10 * ROW));
	EXPECT_EQ(0, memcmp(self->d + 2 * MAXT * ROW + 16, self->s + 20 * ROW, 16));
}

TEST_F(kv, scatter_into_cluster_order)
{
	__u32 *idx = (__u32 *)(self->s + 2 * 10 * ROW + 16);

	for (int i = 0; i < 10; i++)
		idx[i] = (i * 7) % 10;	/* a permutation */
	self->c.p.kv_write.flags = NPNM_KV_F_SCATTER;
	ASSERT_EQ(0, npnm_exec(self->fd, &self->c, NULL));
	for (int i = 0; i < 10; i++) {
		EXPECT_EQ(0, memcmp(self->d + idx[i] * ROW, self->s + i * ROW, ROW));
		EXPECT_EQ(0, memcmp(self->d + MAXT * ROW + idx[i] * ROW,
				    self->s + (10 + i) * ROW, ROW));
	}
}

static void expect_status(struct __test_metadata *_metadata, int fd, const struct npnm_cmd *c,
			  const __u8 *d, __u32 want)
{
	__u32 status = 0;

	EXPECT_EQ(-EIO, npnm_exec(fd, c, &status));
	EXPECT_EQ(want, status);
	for (int i = 0; i < 65536; i++)		/* nothing written */
		ASSERT_EQ(0, d[i]);
}

/*
 * kv_stride with K and V blocks adjacent (a block is 16 rows, 2048 bytes
 * here): a scattered write, then an append that crosses a block boundary;
 * every row must sit at its block's start (k_off + (t / 16) * stride) plus
 * its place in the block.  A device without NPNM_CAP_KV_STRIDE refuses the
 * stride at submission (an ASSERT: SKIP would mark a failed EXPECT passed;
 * the rig loads the mock with mock_kv_stride=0 for it); an unaligned stride
 * is a bad parameter.
 */
TEST_F(kv, stride_adjacent_blocks)
{
	const __u32 block = 16 * ROW, stride = 2 * block;
	__u32 *idx = (__u32 *)(self->s + 2 * 10 * ROW + 16);
	struct npnm_info info;
	__u32 status = 0;

	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	self->c.p.kv_write.v_off = block;
	self->c.p.kv_write.table_off = MAXT / 16 * stride;
	self->c.p.kv_write.kv_stride = stride;
	if (!(info.caps & NPNM_CAP_KV_STRIDE)) {
		ASSERT_EQ(-EOPNOTSUPP, npnm_exec(self->fd, &self->c, &status));
		SKIP(return, "the device takes no kv_stride (refused at submission)");
	}
	self->c.p.kv_write.kv_stride = stride + 32;
	expect_status(_metadata, self->fd, &self->c, self->d, NPNM_ST_BAD_PARAM);
	self->c.p.kv_write.kv_stride = stride;
	for (int i = 0; i < 10; i++)
		idx[i] = (i * 3) % 10;
	self->c.p.kv_write.flags = NPNM_KV_F_SCATTER;
	ASSERT_EQ(0, npnm_exec(self->fd, &self->c, &status));
	for (int i = 0; i < 10; i++) {
		EXPECT_EQ(0, memcmp(self->d + idx[i] * ROW, self->s + i * ROW, ROW));
		EXPECT_EQ(0, memcmp(self->d + block + idx[i] * ROW, self->s + (10 + i) * ROW,
				    ROW));
	}
	/* 20 more rows from token 10: 6 in block 0, 14 in block 1. */
	self->c.p.kv_write.flags = 0;
	self->c.p.kv_write.first_token = 10;
	self->c.p.kv_write.nr_tokens = 20;
	self->c.p.kv_write.first_cluster = 2;
	self->c.p.kv_write.nr_clusters = 0;
	ASSERT_EQ(0, npnm_exec(self->fd, &self->c, &status));
	for (int i = 0; i < 20; i++) {
		int t = 10 + i;
		__u32 at = t / 16 * stride + t % 16 * ROW;

		EXPECT_EQ(0, memcmp(self->d + at, self->s + i * ROW, ROW));
		EXPECT_EQ(0, memcmp(self->d + block + at, self->s + (20 + i) * ROW, ROW));
	}
	EXPECT_EQ(0, memcmp(self->d + MAXT / 16 * stride, self->s + 2 * 10 * ROW, 16));
	/* The rest of V block 1 (tokens 30 and 31) was never written. */
	for (__u32 b = 2 * stride - block + 14 * ROW; b < 2 * stride; b++)
		ASSERT_EQ(0, self->d[b]);
}

TEST_F(kv, bad_dtype)
{
	self->c.p.kv_write.kv_dtype = 0;
	expect_status(_metadata, self->fd, &self->c, self->d, NPNM_ST_BAD_PARAM);
}

/*
 * The 8-bit types (16-token tiles of 1088 bytes at this head dim): a
 * device that reads them (the emulated card) writes whole tiles from a
 * tile boundary and refuses a write from inside a tile; one that does not
 * (the mock) refuses both -- as npnm_info.kv_dtypes says, and with
 * nothing written.
 */
TEST_F(kv, tiled_types_as_advertised)
{
	const __u64 tile = 1088, cap = 4 * tile;	/* MAXT = 64 tokens */
	struct npnm_info info;
	struct npnm_cluster t[2] = { { 0, 6 }, { 6, 4 } };

	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	memcpy(self->s + 2 * tile, t, sizeof(t));
	self->c.p.kv_write.k_off = 0;
	self->c.p.kv_write.v_off = cap;
	self->c.p.kv_write.table_off = 2 * cap;
	for (__u8 dt = NPNM_DTYPE_FP8_E4M3; dt <= NPNM_DTYPE_INT8; dt++) {
		self->c.p.kv_write.kv_dtype = dt;
		self->c.p.kv_write.first_token = 8;	/* inside the first tile */
		expect_status(_metadata, self->fd, &self->c, self->d, NPNM_ST_BAD_PARAM);
		self->c.p.kv_write.first_token = 0;
		if (!(info.kv_dtypes & (1u << dt))) {
			expect_status(_metadata, self->fd, &self->c, self->d, NPNM_ST_BAD_PARAM);
			continue;
		}
		ASSERT_EQ(0, npnm_exec(self->fd, &self->c, NULL));
		EXPECT_EQ(0, memcmp(self->d, self->s, tile));			/* K tile */
		EXPECT_EQ(0, memcmp(self->d + cap, self->s + tile, tile));	/* V tile */
		EXPECT_EQ(0, memcmp(self->d + 2 * cap, self->s + 2 * tile, sizeof(t)));
		return;		/* the store is written now: the next type would find it so */
	}
}

/* Reserved bits are the shared rules' business: refused at submission. */
TEST_F(kv, bad_reserved)
{
	long long submitted = npnm_sysfs_read(npnm_sysfs("stats/submitted"));

	self->c.p.kv_write.pad = 1;
	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &self->c, NULL));
	self->c.p.kv_write.pad = 0;
	self->c.p.kv_write.flags = 2;
	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &self->c, NULL));
	self->c.p.kv_write.flags = 0;
	self->c.p.kv_write.reserved = 1;
	EXPECT_EQ(-EINVAL, npnm_exec(self->fd, &self->c, NULL));
	EXPECT_EQ(submitted, npnm_sysfs_read(npnm_sysfs("stats/submitted")));
	for (int i = 0; i < 65536; i++)
		ASSERT_EQ(0, self->d[i]);
}

TEST_F(kv, store_past_destination)
{
	self->c.p.kv_write.max_tokens = 4096;
	expect_status(_metadata, self->fd, &self->c, self->d, NPNM_ST_BAD_OPERAND);
}

TEST_F(kv, rows_past_capacity)
{
	self->c.p.kv_write.first_token = MAXT - 5;
	expect_status(_metadata, self->fd, &self->c, self->d, NPNM_ST_BAD_PARAM);
}

TEST_F(kv, table_entry_past_tokens)
{
	struct npnm_cluster bad = { MAXT - 2, 3 };

	memcpy(self->s + 2 * 10 * ROW + 8, &bad, sizeof(bad));
	expect_status(_metadata, self->fd, &self->c, self->d, NPNM_ST_BAD_CLUSTER);
}

TEST_F(kv, scatter_index_past_capacity)
{
	__u32 *idx = (__u32 *)(self->s + 2 * 10 * ROW + 16);

	for (int i = 0; i < 10; i++)
		idx[i] = i;
	idx[7] = MAXT;
	self->c.p.kv_write.flags = NPNM_KV_F_SCATTER;
	expect_status(_metadata, self->fd, &self->c, self->d, NPNM_ST_BAD_PARAM);
}

TEST_HARNESS_MAIN
