/* SPDX-License-Identifier: GPL-2.0-only */
/* Helpers shared by the nelssa_pnm kselftests. */
#ifndef NPNM_TEST_H
#define NPNM_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/nelssa_pnm.h>

/* The device under test: $NPNM_DEV, else /dev/nelssa_pnm0. */
static inline const char *npnm_dev(void)
{
	const char *d = getenv("NPNM_DEV");

	return d && *d ? d : "/dev/nelssa_pnm0";
}

#define NPNM_DEV npnm_dev()

/* /sys/class/nelssa_pnm/<device>/<attr>, in a static buffer. */
static inline const char *npnm_sysfs(const char *attr)
{
	static char path[256];
	const char *name = strrchr(npnm_dev(), '/');

	snprintf(path, sizeof(path), "/sys/class/nelssa_pnm/%s/%s", name ? name + 1 : npnm_dev(),
		 attr);
	return path;
}

/* Tests that steer the in-kernel mock (its delay) only run on it. */
static inline int npnm_is_mock(void)
{
	char buf[16] = { 0 };
	int fd = open(npnm_sysfs("backend"), O_RDONLY);

	if (fd < 0)
		return 0;
	if (read(fd, buf, sizeof(buf) - 1) < 0)
		buf[0] = 0;
	close(fd);
	return !strncmp(buf, "mock", 4);
}

/* ioctl() returning -errno, so ASSERT_EQ(-EINVAL, ...) reads naturally. */
static inline int npnm_ioctl(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg) < 0 ? -errno : 0;
}

static inline int npnm_alloc(int fd, __u64 size, struct npnm_mem_alloc *ma)
{
	memset(ma, 0, sizeof(*ma));
	ma->size = size;
	return npnm_ioctl(fd, NPNM_IOC_MEM_ALLOC, ma);
}

static inline struct npnm_cmd npnm_fill(__u32 handle, __u64 off, __u64 len, __u8 byte)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_FILL;
	c.op[NPNM_FILL_DST].handle = handle;
	c.op[NPNM_FILL_DST].offset = off;
	c.op[NPNM_FILL_DST].len = len;
	c.p.fill.pattern = byte;
	c.p.fill.width = 1;
	return c;
}

static inline int npnm_exec(int fd, const struct npnm_cmd *c, __u32 *status)
{
	struct npnm_exec ex = { .cmd_ptr = (uintptr_t)c };
	int ret = npnm_ioctl(fd, NPNM_IOC_EXEC, &ex);

	if (status)
		*status = ex.status;
	return ret;
}

static inline int npnm_sysfs_write(const char *attr, const char *val)
{
	int fd = open(attr, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, val, strlen(val));
	close(fd);
	return n < 0 ? -errno : 0;
}

/* A sysfs number, or -1. */
static inline long long npnm_sysfs_read(const char *attr)
{
	char buf[32] = { 0 };
	int fd = open(attr, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtoll(buf, NULL, 10) : -1;
}

/*
 * Poll the device's sysfs number @attr for up to five seconds until it
 * reads @want (work still draining); returns the last value read.
 */
static inline long long npnm_sysfs_settle(const char *attr, long long want)
{
	long long v = npnm_sysfs_read(npnm_sysfs(attr));

	for (int i = 0; i < 100 && v != want; i++) {
		usleep(50000);
		v = npnm_sysfs_read(npnm_sysfs(attr));
	}
	return v;
}

/*
 * Commands that stay in flight a while: on the mock through its delay
 * parameter, on a card by filling a large region.  Returns the bytes a
 * slow FILL should cover (the caller's region must be that large).
 */
static inline __u64 npnm_slow_begin(void)
{
	if (npnm_is_mock()) {
		npnm_sysfs_write("/sys/module/nelssa_pnm/parameters/mock_delay_us", "100000");
		return 4096;
	}
	return 32ULL << 20;
}

static inline void npnm_slow_end(void)
{
	npnm_sysfs_write("/sys/module/nelssa_pnm/parameters/mock_delay_us", "0");
}

#endif /* NPNM_TEST_H */
