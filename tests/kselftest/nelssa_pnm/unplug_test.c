// SPDX-License-Identifier: GPL-2.0-only
/*
 * Hot-unplug of a PCI card while a process uses it: a descriptor open, a
 * mapping live, commands queued through the ioctl and through io_uring.
 * The removal (echo 1 > /sys/bus/pci/devices/BDF/remove) aborts the
 * commands (-ECANCELED), revokes the mapping (SIGBUS), and every later
 * call fails with -ENXIO -- except WAIT, which still hands back the aborted
 * completions; close() then frees everything.  A rescan brings the card
 * back as a new device that works.
 *
 * NPNM_UNPLUG_DEV names the card (a /dev/nelssa_pnmN of the PCI backend).
 * Run it last: the card comes back under a number of the driver's choosing.
 *
 * With NPNM_DAX_UNPLUG set, the card with a device-dax carve-out goes the
 * same way twice: once with /dev/daxX.Y mapped (the mapping is revoked:
 * SIGBUS; the dax device goes before the card), once with the carve-out
 * online as System RAM through daxctl (the driver offlines it -- its pages
 * migrate back to the other nodes -- and kmem removes it before the card
 * goes: no memory of the card is left in the kernel).  Each time the
 * rescan brings the card back with its carve-out, as a device-dax again.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <liburing.h>
#include <limits.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

/* The PCI address of the device under test, from its class link. */
static int pci_bdf(char *bdf, size_t n)
{
	char link[PATH_MAX];
	ssize_t len = readlink(npnm_sysfs("device"), link, sizeof(link) - 1);
	const char *slash;

	if (len <= 0)
		return -1;
	link[len] = 0;
	slash = strrchr(link, '/');
	snprintf(bdf, n, "%.*s", (int)n - 1, slash ? slash + 1 : link);
	return 0;
}

/* After the rescan: the /dev node of a live PCI card with @mem_total bytes. */
static int find_card(long long mem_total, char *dev, size_t n)
{
	DIR *d = opendir("/sys/class/nelssa_pnm");
	struct dirent *e;
	int found = -1;

	if (!d)
		return -1;
	while ((e = readdir(d)) && found) {
		char path[PATH_MAX + 64];

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/nelssa_pnm/%s/mem_total", e->d_name);
		if (npnm_sysfs_read(path) == mem_total && n > strlen(e->d_name) + 5) {
			snprintf(dev, n, "/dev/%.*s", (int)(n - 6), e->d_name);
			found = 0;
		}
	}
	closedir(d);
	return found;
}

/* The /dev node of the card with a device-dax carve-out (there is one). */
static int find_dax_card(char *dev, size_t n)
{
	DIR *d = opendir("/sys/class/nelssa_pnm");
	struct dirent *e;
	int found = -1;

	if (!d)
		return -1;
	while ((e = readdir(d)) && found) {
		char path[PATH_MAX + 64], name[32];

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/nelssa_pnm/%s/dax_device", e->d_name);
		if (!npnm_sysfs_str(path, name, sizeof(name)) && !strncmp(name, "dax", 3) &&
		    n > strlen(e->d_name) + 5) {
			snprintf(dev, n, "/dev/%.*s", (int)(n - 6), e->d_name);
			found = 0;
		}
	}
	closedir(d);
	return found;
}

/* Unplugs the dax card NPNM_DEV names; its sysfs remove returned 0. */
static int unplug(void)
{
	char bdf[PATH_MAX], path[PATH_MAX + 64];

	if (pci_bdf(bdf, sizeof(bdf)))
		return -1;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/remove", bdf);
	return npnm_sysfs_write(path, "1");
}

/* After a rescan: the dax card is back, with a dax device mapped as before. */
static int dax_card_back(void)
{
	char dev[PATH_MAX], name[32], chardev[64];
	__u8 *p;
	int fd;

	if (npnm_sysfs_write("/sys/bus/pci/rescan", "1") || find_dax_card(dev, sizeof(dev)))
		return -1;
	setenv("NPNM_DEV", dev, 1);
	if (npnm_dax_name(name, sizeof(name)))
		return -1;
	snprintf(chardev, sizeof(chardev), "/dev/%s", name);
	fd = open(chardev, O_RDWR);
	if (fd < 0)
		return -1;
	p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -1;
	p[0] = 1;
	munmap(p, 2 << 20);
	return 0;
}

static void prep(struct io_uring *ring, int fd, const struct npnm_cmd *c, __u64 tag)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct npnm_exec ex = { .cmd_ptr = (uintptr_t)c };

	io_uring_prep_read(sqe, fd, NULL, 0, 0);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->cmd_op = NPNM_IOC_EXEC;
	memcpy(sqe->cmd, &ex, sizeof(ex));
	sqe->user_data = tag;
}

TEST(hot_unplug_with_everything_in_use)
{
	static struct npnm_cmd c[8], uc[4];
	struct npnm_completion comp[8];
	struct npnm_submit s = { .cmds_ptr = (uintptr_t)c, .nr_cmds = 8 };
	struct npnm_wait w = { .comps_ptr = (uintptr_t)comp, .max_comps = 8, .min_comps = 8,
			       .timeout_ns = -1 };
	const char *dev = getenv("NPNM_UNPLUG_DEV");
	char bdf[PATH_MAX], path[PATH_MAX + 64], again[PATH_MAX];
	struct npnm_mem_alloc ma;
	struct npnm_info info;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	long long mem_total;
	struct pollfd pfd;
	__u8 *p;
	int fd;

	if (!dev)
		SKIP(return, "NPNM_UNPLUG_DEV not set");
	setenv("NPNM_DEV", dev, 1);
	ASSERT_EQ(0, pci_bdf(bdf, sizeof(bdf)));
	mem_total = npnm_sysfs_read(npnm_sysfs("mem_total"));
	fd = open(dev, O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, npnm_alloc(fd, 1 << 20, &ma));
	p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	p[0] = 0x42;
	EXPECT_EQ(0, npnm_touch_sigbus(p));
	ASSERT_EQ(0, io_uring_queue_init(8, &ring, 0));
	ASSERT_EQ(0, npnm_hold(1));
	/* Long deadlines: aborted by the removal, never expired first. */
	for (int i = 0; i < 8; i++) {
		c[i] = npnm_fill(ma.handle, 4096, 4096, 1);
		c[i].timeout_ms = 600000;
	}
	ASSERT_EQ(0, npnm_ioctl(fd, NPNM_IOC_SUBMIT, &s));
	for (int i = 0; i < 4; i++) {
		uc[i] = npnm_fill(ma.handle, 8192, 4096, 2);
		uc[i].timeout_ms = 600000;
		prep(&ring, fd, &uc[i], 100 + i);
	}
	ASSERT_EQ(4, io_uring_submit(&ring));

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/remove", bdf);
	ASSERT_EQ(0, npnm_sysfs_write(path, "1"));

	/* Everything queued was aborted, on both paths. */
	ASSERT_EQ(0, npnm_ioctl(fd, NPNM_IOC_WAIT, &w));
	ASSERT_EQ(8, w.nr_comps);
	for (int i = 0; i < 8; i++) {
		EXPECT_EQ(-ECANCELED, comp[i].result);
		EXPECT_EQ(NPNM_ST_ABORTED, comp[i].status);
	}
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
		EXPECT_EQ(-ECANCELED, cqe->res);
		io_uring_cqe_seen(&ring, cqe);
	}
	/* The mapping is revoked, every call refused, the node gone. */
	EXPECT_EQ(1, npnm_touch_sigbus(p));
	EXPECT_EQ(-ENXIO, npnm_ioctl(fd, NPNM_IOC_GET_INFO, &info));
	EXPECT_EQ(-ENXIO, npnm_alloc(fd, 4096, &ma));
	EXPECT_EQ(-ENXIO, npnm_exec(fd, &c[0], NULL));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, ma.mmap_offset));
	EXPECT_EQ(ENXIO, errno);
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	EXPECT_EQ(1, poll(&pfd, 1, 0));
	EXPECT_TRUE(pfd.revents & POLLHUP);
	prep(&ring, fd, &uc[0], 200);
	ASSERT_EQ(1, io_uring_submit(&ring));
	ASSERT_EQ(0, io_uring_wait_cqe(&ring, &cqe));
	EXPECT_EQ(-ENXIO, cqe->res);
	io_uring_cqe_seen(&ring, cqe);
	EXPECT_NE(0, access(dev, F_OK));
	munmap(p, 1 << 20);
	io_uring_queue_exit(&ring);
	EXPECT_EQ(0, close(fd));

	/* The card comes back as a new device and works. */
	ASSERT_EQ(0, npnm_sysfs_write("/sys/bus/pci/rescan", "1"));
	ASSERT_EQ(0, find_card(mem_total, again, sizeof(again)));
	setenv("NPNM_DEV", again, 1);
	EXPECT_TRUE(npnm_state_settle("live", 10));
	fd = open(again, O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, npnm_alloc(fd, 4096, &ma));
	c[0] = npnm_fill(ma.handle, 0, 4096, 3);
	EXPECT_EQ(0, npnm_exec(fd, &c[0], NULL));
	close(fd);
}

TEST(hot_unplug_with_dax_mapped)
{
	char dev[PATH_MAX], name[32], chardev[64];
	struct npnm_mem_alloc w;
	__u8 *d, *p;
	int fd, cfd;

	if (!getenv("NPNM_DAX_UNPLUG"))
		SKIP(return, "NPNM_DAX_UNPLUG not set");
	ASSERT_EQ(0, find_dax_card(dev, sizeof(dev)));
	setenv("NPNM_DEV", dev, 1);
	ASSERT_EQ(0, npnm_dax_name(name, sizeof(name)));
	snprintf(chardev, sizeof(chardev), "/dev/%s", name);
	fd = open(chardev, O_RDWR);
	ASSERT_LE(0, fd);
	d = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(MAP_FAILED, d);
	d[4096] = 0x42;
	/* And the same memory through a DAX window of the card's own node. */
	cfd = open(dev, O_RDWR);
	ASSERT_LE(0, cfd);
	memset(&w, 0, sizeof(w));
	w.size = 2 << 20;
	w.flags = NPNM_MEM_F_DAX;
	ASSERT_EQ(0, npnm_ioctl(cfd, NPNM_IOC_MEM_ALLOC, &w));
	p = mmap(NULL, 2 << 20, PROT_READ, MAP_SHARED, cfd, w.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0x42, p[4096]);

	ASSERT_EQ(0, unplug());
	EXPECT_EQ(1, npnm_touch_sigbus(d + 4096));
	EXPECT_EQ(1, npnm_touch_sigbus(p + 4096));
	EXPECT_NE(0, access(npnm_dax_sysfs(name, "size"), F_OK));
	EXPECT_NE(0, access(chardev, F_OK));
	munmap(d, 2 << 20);
	munmap(p, 2 << 20);
	close(fd);
	close(cfd);
	EXPECT_EQ(0, dax_card_back());
}

TEST(hot_unplug_with_system_ram)
{
	char dev[PATH_MAX], name[32], out[4096], path[128];
	unsigned long long start, block;
	long long before, size;
	int node;

	if (!getenv("NPNM_DAX_UNPLUG"))
		SKIP(return, "NPNM_DAX_UNPLUG not set");
	if (!npnm_have_daxctl())
		SKIP(return, "no daxctl");
	ASSERT_EQ(0, find_dax_card(dev, sizeof(dev)));
	setenv("NPNM_DEV", dev, 1);
	ASSERT_EQ(0, npnm_dax_name(name, sizeof(name)));
	node = (int)npnm_sysfs_read(npnm_sysfs("dax_node"));
	size = npnm_sysfs_read(npnm_sysfs("dax_size"));
	ASSERT_EQ(0, npnm_sysfs_str(npnm_dax_sysfs(name, "resource"), out, sizeof(out)));
	start = strtoull(out, NULL, 16);
	ASSERT_EQ(0, npnm_sysfs_str("/sys/devices/system/memory/block_size_bytes", out,
				    sizeof(out)));
	block = strtoull(out, NULL, 16);
	ASSERT_LT(0, block);
	before = npnm_node_mem_kb(node);
	ASSERT_EQ(0, npnm_run(out, sizeof(out), "daxctl reconfigure-device --mode=system-ram %s",
			      name)) TH_LOG("%s", out);
	ASSERT_EQ(before + (size >> 10), npnm_node_mem_kb(node));
	snprintf(path, sizeof(path), "/sys/devices/system/memory/memory%llu/state",
		 (start + block - 1) / block);
	ASSERT_EQ(0, npnm_sysfs_str(path, out, sizeof(out)));
	EXPECT_EQ(0, strncmp(out, "online", 6));

	ASSERT_EQ(0, unplug());
	/* Offlined and removed: the node and the memory blocks are as before. */
	EXPECT_EQ(before, npnm_node_mem_kb(node));
	EXPECT_NE(0, access(path, F_OK));
	EXPECT_NE(0, access(npnm_dax_sysfs(name, "size"), F_OK));
	EXPECT_EQ(0, dax_card_back());
	ASSERT_EQ(0, npnm_dax_name(name, sizeof(name)));
	EXPECT_TRUE(npnm_dax_mode_is(name, "devdax"));
}

TEST_HARNESS_MAIN
