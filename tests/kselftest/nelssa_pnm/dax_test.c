// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm's device-dax carve-out (module parameter dax_mb) on the card
 * NPNM_DEV: the dax device and what sysfs and daxctl say about it, the
 * allocator never handing the carve-out out, bytes written through
 * /dev/daxX.Y seen by commands on a DAX window and the reverse, the
 * window rules, System RAM (daxctl) and back, and a reset leaving the
 * carve-out alone.  Skips on a card without a carve-out; the daxctl parts
 * skip without daxctl.
 *
 * The suite leaves the carve-out as it found it: a device-dax instance.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

#define DAX_MAP		(2UL << 20)	/* the dax device's alignment */

FIXTURE(dax) {
	int fd;			/* the card */
	char name[32];		/* its dax device, "daxX.Y" */
	char chardev[64];	/* /dev/daxX.Y */
	__u64 size;		/* sysfs dax_size */
	__u64 offset;		/* sysfs dax_offset */
	int node;		/* sysfs dax_node */
};

FIXTURE_SETUP(dax)
{
	self->fd = open(NPNM_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd);
	if (npnm_dax_name(self->name, sizeof(self->name)))
		return;		/* each test skips */
	snprintf(self->chardev, sizeof(self->chardev), "/dev/%s", self->name);
	self->size = npnm_sysfs_read(npnm_sysfs("dax_size"));
	self->offset = npnm_sysfs_read(npnm_sysfs("dax_offset"));
	self->node = (int)npnm_sysfs_read(npnm_sysfs("dax_node"));
}

FIXTURE_TEARDOWN(dax)
{
	close(self->fd);
}

/* Why a test cannot run here (no carve-out; no daxctl when it needs it), or NULL. */
static const char *cannot_run(const char *name, int daxctl)
{
	if (!name[0])
		return "the device has no device-dax carve-out";
	if (daxctl && !npnm_have_daxctl())
		return "no daxctl";
	return NULL;
}

/* A shared mapping of the first @len bytes of the dax device, or MAP_FAILED. */
static __u8 *dax_map(const char *chardev, size_t len)
{
	int fd = open(chardev, O_RDWR | O_CLOEXEC);
	void *p;

	if (fd < 0)
		return MAP_FAILED;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p;
}

/* A DAX window: @size bytes at carve-out offset @off; its handle or -errno. */
static int window(int fd, __u64 off, __u64 size, struct npnm_mem_alloc *ma)
{
	memset(ma, 0, sizeof(*ma));
	ma->size = size;
	ma->flags = NPNM_MEM_F_DAX;
	ma->dax_offset = off;
	return npnm_ioctl(fd, NPNM_IOC_MEM_ALLOC, ma);
}

static struct npnm_cmd copy_cmd(__u32 dst, __u64 doff, __u32 src, __u64 soff, __u64 len)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_COPY;
	c.op[NPNM_COPY_DST] = (struct npnm_operand){ .handle = dst, .offset = doff, .len = len };
	c.op[NPNM_COPY_SRC] = (struct npnm_operand){ .handle = src, .offset = soff, .len = len };
	return c;
}

TEST_F(dax, sysfs_and_dax_bus_agree)
{
	char s[64];

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	ASSERT_LT(0, self->size);
	EXPECT_EQ(self->size, npnm_sysfs_read(npnm_dax_sysfs(self->name, "size")));
	ASSERT_EQ(0, npnm_sysfs_str(npnm_dax_sysfs(self->name, "target_node"), s, sizeof(s)));
	EXPECT_EQ(self->node, atoi(s));
	/* The top of the card's memory: nothing of the allocator lies above it. */
	EXPECT_EQ(0, self->offset % DAX_MAP);
	EXPECT_LE(npnm_sysfs_read(npnm_sysfs("mem_total")), (long long)self->offset);
}

TEST_F(dax, char_device_never_world_accessible)
{
	struct stat st;

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	ASSERT_EQ(0, stat(self->chardev, &st));
	EXPECT_TRUE(S_ISCHR(st.st_mode));
	EXPECT_EQ(0, st.st_mode & 0007);
}

TEST_F(dax, get_info_counts_allocator_memory_only)
{
	struct npnm_info info;

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	EXPECT_EQ(npnm_sysfs_read(npnm_sysfs("mem_total")), (long long)info.mem_size);
	EXPECT_TRUE(info.caps & NPNM_CAP_DAX);
}

TEST_F(dax, daxctl_lists_it)
{
	char out[2048], want[64];

	if (cannot_run(self->name, 1))
		SKIP(return, "%s", cannot_run(self->name, 1));
	ASSERT_EQ(0, npnm_run(out, sizeof(out), "daxctl list -d %s", self->name));
	snprintf(want, sizeof(want), "\"chardev\":\"%s\"", self->name);
	EXPECT_NE(NULL, strstr(out, want)) TH_LOG("%s", out);
	EXPECT_NE(NULL, strstr(out, "\"mode\":\"devdax\"")) TH_LOG("%s", out);
	snprintf(want, sizeof(want), "\"target_node\":%d", self->node);
	EXPECT_NE(NULL, strstr(out, want)) TH_LOG("%s", out);
}

/* Everything the allocator has, filled by the card, leaves the carve-out as it was. */
TEST_F(dax, allocator_never_hands_out_the_carve_out)
{
	struct npnm_mem_alloc ma, more;
	struct npnm_info info;
	struct npnm_cmd c;
	__u8 *d;
	size_t bad = 0;

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	d = dax_map(self->chardev, self->size);
	ASSERT_NE(MAP_FAILED, d);
	memset(d, 0xc3, self->size);
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &info));
	ASSERT_EQ(0, npnm_alloc(self->fd, info.mem_size, &ma));
	EXPECT_EQ(-ENOMEM, npnm_alloc(self->fd, 4096, &more));
	c = npnm_fill(ma.handle, 0, info.mem_size, 0x3c);
	ASSERT_EQ(0, npnm_exec(self->fd, &c, NULL));
	for (size_t i = 0; i < self->size; i++)
		bad += d[i] != 0xc3;
	EXPECT_EQ(0, bad);
	munmap(d, self->size);
}

TEST_F(dax, dax_writes_reach_commands)
{
	static const char msg[] = "written through /dev/dax";
	struct npnm_mem_alloc w, r;
	struct npnm_cmd c;
	__u8 *d, *p;

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	d = dax_map(self->chardev, DAX_MAP);
	ASSERT_NE(MAP_FAILED, d);
	memcpy(d + 4096 + 17, msg, sizeof(msg));
	ASSERT_EQ(0, window(self->fd, 0, DAX_MAP, &w));
	ASSERT_EQ(0, npnm_alloc(self->fd, 4096, &r));
	c = copy_cmd(r.handle, 0, w.handle, 4096 + 17, sizeof(msg));
	ASSERT_EQ(0, npnm_exec(self->fd, &c, NULL));
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, r.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0, memcmp(p, msg, sizeof(msg)));
	munmap(p, 4096);
	munmap(d, DAX_MAP);
}

TEST_F(dax, command_writes_reach_dax)
{
	struct npnm_mem_alloc w;
	struct npnm_cmd c;
	__u8 *d;

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	d = dax_map(self->chardev, 2 * DAX_MAP);
	ASSERT_NE(MAP_FAILED, d);
	memset(d + DAX_MAP, 0, DAX_MAP);
	/* A window that starts 1 MiB into the second 2 MiB of the carve-out. */
	ASSERT_EQ(0, window(self->fd, DAX_MAP + (1 << 20), 1 << 20, &w));
	c = npnm_fill(w.handle, 8192, 4096, 0x77);
	ASSERT_EQ(0, npnm_exec(self->fd, &c, NULL));
	EXPECT_EQ(0, d[DAX_MAP + (1 << 20) + 8191]);
	EXPECT_EQ(0x77, d[DAX_MAP + (1 << 20) + 8192]);
	EXPECT_EQ(0x77, d[DAX_MAP + (1 << 20) + 12287]);
	EXPECT_EQ(0, d[DAX_MAP + (1 << 20) + 12288]);
	munmap(d, 2 * DAX_MAP);
}

TEST_F(dax, window_maps_the_same_bytes)
{
	struct npnm_mem_alloc w;
	__u8 *d, *p;

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	d = dax_map(self->chardev, DAX_MAP);
	ASSERT_NE(MAP_FAILED, d);
	ASSERT_EQ(0, window(self->fd, 0, DAX_MAP, &w));
	EXPECT_EQ(DAX_MAP, w.alloc_size);
	p = mmap(NULL, DAX_MAP, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, w.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	d[12345] = 0xa1;
	EXPECT_EQ(0xa1, p[12345]);
	p[54321] = 0x1a;
	EXPECT_EQ(0x1a, d[54321]);
	munmap(p, DAX_MAP);
	munmap(d, DAX_MAP);
}

TEST_F(dax, bad_windows_refused)
{
	struct npnm_mem_alloc w;

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	EXPECT_EQ(-EINVAL, window(self->fd, 100, 4096, &w));
	EXPECT_EQ(-EINVAL, window(self->fd, self->size, 4096, &w));
	EXPECT_EQ(-EINVAL, window(self->fd, self->size - 4096, 8192, &w));
	EXPECT_EQ(-EINVAL, window(self->fd, 0, self->size + 4096, &w));
	EXPECT_EQ(-EINVAL, window(self->fd, 0, 0, &w));
	/* dax_offset means nothing without the flag, and no other flag exists. */
	memset(&w, 0, sizeof(w));
	w.size = 4096;
	w.dax_offset = 4096;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_ALLOC, &w));
	memset(&w, 0, sizeof(w));
	w.size = 4096;
	w.flags = NPNM_MEM_F_DAX << 1;
	EXPECT_EQ(-EINVAL, npnm_ioctl(self->fd, NPNM_IOC_MEM_ALLOC, &w));
	/* The whole carve-out is fine. */
	EXPECT_EQ(0, window(self->fd, 0, self->size, &w));
}

/* A device without a carve-out (the in-kernel mock) has no windows. */
TEST_F(dax, no_windows_without_a_carve_out)
{
	DIR *dir = opendir("/sys/class/nelssa_pnm");
	struct npnm_mem_alloc w;
	struct dirent *e;
	int fd = -1;

	ASSERT_NE(NULL, dir);
	while (fd < 0 && (e = readdir(dir))) {
		char path[PATH_MAX], s[32], dev[300];

		snprintf(path, sizeof(path), "/sys/class/nelssa_pnm/%s/dax_device", e->d_name);
		if (e->d_name[0] == '.' || npnm_sysfs_str(path, s, sizeof(s)) || strcmp(s, "none"))
			continue;
		snprintf(dev, sizeof(dev), "/dev/%s", e->d_name);
		fd = open(dev, O_RDWR | O_CLOEXEC);
	}
	closedir(dir);
	if (fd < 0)
		SKIP(return, "every device has a carve-out");
	EXPECT_EQ(-EOPNOTSUPP, window(fd, 0, 4096, &w));
	close(fd);
}

/*
 * daxctl hands the carve-out to kmem as System RAM of its node, and back;
 * while it is System RAM no window may alias it.
 */
TEST_F(dax, system_ram_and_back)
{
	long long before = npnm_node_mem_kb(self->node);
	struct npnm_mem_alloc w;
	char out[4096];
	__u8 *d;

	if (cannot_run(self->name, 1))
		SKIP(return, "%s", cannot_run(self->name, 1));
	ASSERT_EQ(0, npnm_run(out, sizeof(out), "daxctl reconfigure-device --mode=system-ram %s",
			      self->name)) TH_LOG("%s", out);
	EXPECT_TRUE(npnm_dax_mode_is(self->name, "system-ram"));
	EXPECT_EQ(before + (long long)(self->size >> 10), npnm_node_mem_kb(self->node));
	EXPECT_EQ(-EBUSY, window(self->fd, 0, 4096, &w));
	/* daxctl offlines the memory (--force) and rebinds device_dax. */
	ASSERT_EQ(0, npnm_run(out, sizeof(out),
			      "daxctl reconfigure-device --mode=devdax --force %s", self->name))
		TH_LOG("%s", out);
	EXPECT_TRUE(npnm_dax_mode_is(self->name, "devdax"));
	EXPECT_EQ(before, npnm_node_mem_kb(self->node));
	d = dax_map(self->chardev, DAX_MAP);
	ASSERT_NE(MAP_FAILED, d);
	d[0] = 0x42;
	EXPECT_EQ(0x42, d[0]);
	munmap(d, DAX_MAP);
	EXPECT_EQ(0, window(self->fd, 0, 4096, &w));
}

/* An open window keeps the carve-out from going online, until it is freed. */
TEST_F(dax, window_blocks_system_ram)
{
	long long before = npnm_node_mem_kb(self->node);
	struct npnm_mem_alloc w;
	struct npnm_mem_free mf;
	char out[4096];

	if (cannot_run(self->name, 1))
		SKIP(return, "%s", cannot_run(self->name, 1));
	ASSERT_EQ(0, window(self->fd, 0, 4096, &w));
	EXPECT_NE(0, npnm_run(out, sizeof(out), "daxctl reconfigure-device --mode=system-ram %s",
			      self->name)) TH_LOG("%s", out);
	EXPECT_EQ(before, npnm_node_mem_kb(self->node));
	ASSERT_EQ(0, npnm_run(out, sizeof(out),
			      "daxctl reconfigure-device --mode=devdax --force %s", self->name))
		TH_LOG("%s", out);
	mf = (struct npnm_mem_free){ .handle = w.handle };
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_MEM_FREE, &mf));
	ASSERT_EQ(0, npnm_run(out, sizeof(out), "daxctl reconfigure-device --mode=system-ram %s",
			      self->name)) TH_LOG("%s", out);
	EXPECT_EQ(before + (long long)(self->size >> 10), npnm_node_mem_kb(self->node));
	ASSERT_EQ(0, npnm_run(out, sizeof(out),
			      "daxctl reconfigure-device --mode=devdax --force %s", self->name))
		TH_LOG("%s", out);
	EXPECT_TRUE(npnm_dax_mode_is(self->name, "devdax"));
}

/*
 * A reset is the command path's: regions, windows included, go stale, but
 * the dax device, its mappings and its contents stay.
 */
TEST_F(dax, reset_leaves_the_carve_out_alone)
{
	struct npnm_mem_alloc w;
	struct npnm_cmd c;
	__u8 *d;

	if (cannot_run(self->name, 0))
		SKIP(return, "%s", cannot_run(self->name, 0));
	d = dax_map(self->chardev, DAX_MAP);
	ASSERT_NE(MAP_FAILED, d);
	d[777] = 0x5e;
	ASSERT_EQ(0, window(self->fd, 0, DAX_MAP, &w));
	ASSERT_EQ(0, npnm_sysfs_write(npnm_sysfs("state"), "reset"));
	ASSERT_TRUE(npnm_state_settle("live", 10));
	EXPECT_EQ(0, npnm_touch_sigbus(d + 777));
	EXPECT_EQ(0x5e, d[777]);
	c = npnm_fill(w.handle, 0, 4096, 1);
	EXPECT_EQ(-ESTALE, npnm_exec(self->fd, &c, NULL));
	munmap(d, DAX_MAP);
	EXPECT_EQ(0, window(self->fd, 0, DAX_MAP, &w));
}

TEST_HARNESS_MAIN
