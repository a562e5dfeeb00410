/* SPDX-License-Identifier: GPL-2.0-only */
/* Helpers shared by the nelssa_pnm kselftests. */
#ifndef NPNM_TEST_H
#define NPNM_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/nelssa_pnm.h>

/*
 * Limits the uapi documents (GET_INFO reports the first two; the tests
 * check that they match), and where handle 1 maps.
 */
#define NPNM_MAX_BATCH_TEST	256
#define NPNM_MAX_INFLIGHT_TEST	1024
#define NPNM_MMAP_STRIDE_TEST	0x1000000000ULL	/* 1 << 36 */

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

#define NPNM_PARAM "/sys/module/nelssa_pnm/parameters/"

static sigjmp_buf npnm_bus_jmp;

static inline void npnm_on_sigbus(int sig)
{
	(void)sig;
	siglongjmp(npnm_bus_jmp, 1);
}

/* 1 if reading *p raised SIGBUS, 0 if it read normally. */
static inline int npnm_touch_sigbus(__u8 *p)
{
	struct sigaction sa = { .sa_handler = npnm_on_sigbus }, old;
	int caught = 0;

	sigaction(SIGBUS, &sa, &old);
	if (sigsetjmp(npnm_bus_jmp, 1))
		caught = 1;
	else
		(void)__atomic_load_n(p, __ATOMIC_RELAXED);
	sigaction(SIGBUS, &old, NULL);
	return caught;
}

/* /sys/kernel/debug/nelssa_pnm/<device>/<file>, in a static buffer. */
static inline const char *npnm_debugfs(const char *file)
{
	static char path[256];
	const char *name = strrchr(npnm_dev(), '/');

	snprintf(path, sizeof(path), "/sys/kernel/debug/nelssa_pnm/%s/%s",
		 name ? name + 1 : npnm_dev(), file);
	return path;
}

/*
 * Commands held in flight deterministically, never by racing the device:
 * npnm_hold(1) keeps new commands of the device under test queued in the
 * driver (they can still be taken back) until npnm_hold(0); on the mock,
 * npnm_mock_hold(1) starts commands at submission and holds them running
 * until npnm_mock_hold(0).
 */
static inline int npnm_hold(int on)
{
	return npnm_sysfs_write(npnm_debugfs("hold"), on ? "1" : "0");
}

static inline int npnm_mock_hold(int on)
{
	return npnm_sysfs_write(NPNM_PARAM "mock_hold", on ? "1" : "0");
}

static inline int npnm_param(const char *name, const char *val)
{
	char path[128];

	snprintf(path, sizeof(path), NPNM_PARAM "%s", name);
	return npnm_sysfs_write(path, val);
}

/* "live", "failed": the device's sysfs state is @want. */
static inline int npnm_state_is(const char *want)
{
	char buf[16] = { 0 };
	int fd = open(npnm_sysfs("state"), O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	return n > 0 && !strncmp(buf, want, strlen(want)) && buf[strlen(want)] == '\n';
}

/* Wait up to @secs for the device's state to become @want (a bound, not a margin). */
static inline int npnm_state_settle(const char *want, int secs)
{
	for (int i = 0; i < secs * 20 && !npnm_state_is(want); i++)
		usleep(50000);
	return npnm_state_is(want);
}

/* The first line of sysfs file @path into @buf, without its newline; 0 or -1. */
static inline int npnm_sysfs_str(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY);
	ssize_t len = fd < 0 ? -1 : read(fd, buf, n - 1);

	if (fd >= 0)
		close(fd);
	if (len <= 0)
		return -1;
	buf[len] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/*
 * The device-dax carve-out of the device under test: its dax device's name
 * ("dax3.0") into @name; 0, or -1 when it has none ("none", "unsupported").
 */
static inline int npnm_dax_name(char *name, size_t n)
{
	if (npnm_sysfs_str(npnm_sysfs("dax_device"), name, n))
		return -1;
	return strncmp(name, "dax", 3) ? -1 : 0;
}

/* /sys/bus/dax/devices/<name>/<attr>, in a static buffer. */
static inline const char *npnm_dax_sysfs(const char *name, const char *attr)
{
	static char path[256];

	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/%s", name, attr);
	return path;
}

/* MemTotal of NUMA node @node in kB; 0 when the node has no memory or is offline. */
static inline long long npnm_node_mem_kb(int node)
{
	char path[96], line[256];
	long long kb = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/meminfo", node);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "MemTotal:");

		if (p) {
			kb = strtoll(p + 9, NULL, 10);
			break;
		}
	}
	fclose(f);
	return kb;
}

/*
 * Runs the shell command @fmt..., its output (stdout and stderr, the first
 * @n - 1 bytes) into @out when non-NULL; returns its exit status, -1 if it
 * did not exit.
 */
static inline int npnm_run(char *out, size_t n, const char *fmt, ...)
{
	char cmd[512];
	size_t len = 0;
	va_list ap;
	FILE *p;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd) - 8, fmt, ap);
	va_end(ap);
	strcat(cmd, " 2>&1");
	p = popen(cmd, "r");
	if (!p)
		return -1;
	for (;;) {
		char buf[512];
		size_t got = fread(buf, 1, sizeof(buf), p);

		if (!got)
			break;
		if (out && len + 1 < n) {
			size_t take = got < n - 1 - len ? got : n - 1 - len;

			memcpy(out + len, buf, take);
			len += take;
		}
	}
	if (out && n)
		out[len] = 0;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* daxctl, to reconfigure and list the carve-out, is there. */
static inline int npnm_have_daxctl(void)
{
	return npnm_run(NULL, 0, "daxctl version") == 0;
}

/* daxctl lists dax device @name in mode @mode ("devdax", "system-ram"). */
static inline int npnm_dax_mode_is(const char *name, const char *mode)
{
	char out[2048], want[64];

	if (npnm_run(out, sizeof(out), "daxctl list -d %s", name))
		return 0;
	snprintf(want, sizeof(want), "\"mode\":\"%s\"", mode);
	return !!strstr(out, want);
}

/* Back to the defaults every test may have changed. */
static inline void npnm_defaults(void)
{
	npnm_hold(0);
	npnm_mock_hold(0);
	npnm_param("mock_delay_us", "0");
	npnm_param("timeout_ms", "5000");
	npnm_param("watchdog_ms", "10000");
	npnm_param("ctx_max_regions", "1024");
	npnm_param("ctx_max_bytes", "0");
	npnm_param("uid_max_regions", "0");
	npnm_param("uid_max_bytes", "0");
}

#endif /* NPNM_TEST_H */
