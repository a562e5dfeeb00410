// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm error paths on the PCI backend, driven by nelssa-devemu's
 * fault injection (each fault has its own device, named by environment):
 *
 * NPNM_STALL_DEV   --stall-nth 3: the third command never completes ->
 *                  its deadline fails it alone (-ETIMEDOUT), its ring slot
 *                  stays quarantined and the card stays live; the device
 *                  watchdog, lowered for the test, then fails the card,
 *                  and the driver resets it.
 * NPNM_CORRUPT_DEV --corrupt-nth 2: the second completion carries a cookie
 *                  never issued -> device failed, the command completes
 *                  with NPNM_ST_DEVICE_ERROR, then reset by the driver.
 * NPNM_HANG_DEV    --hang-nth 2 --restart-after-hang-ms N: the firmware dies
 *                  at the second command -> heartbeat lost, device failed,
 *                  mappings revoked (SIGBUS) and the region stale (-ESTALE),
 *                  the pending command completes with an error; once
 *                  devemu restarts the firmware the driver resets the
 *                  device and new regions and contexts work.
 * NPNM_SILENT_DEV  --heartbeat-stop-ms N: the firmware runs on but stops
 *                  ticking -> device failed, and since nothing ticks it
 *                  stays failed: no automatic reset.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

static int open_fault_dev(const char *env, struct npnm_mem_alloc *ma)
{
	const char *dev = getenv(env);
	int fd;

	if (!dev)
		return -1;
	setenv("NPNM_DEV", dev, 1);	/* for npnm_sysfs() */
	fd = open(dev, O_RDWR | O_CLOEXEC);
	if (fd >= 0 && npnm_alloc(fd, 1 << 20, ma)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int state_is(const char *want)
{
	char buf[16] = { 0 };
	int fd = open(npnm_sysfs("state"), O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	return n > 0 && !strncmp(buf, want, strlen(want));
}

/* Wait up to @secs for the device to be live again after @resets0 resets. */
static int recovered(long long resets0, int secs)
{
	for (int i = 0; i < secs * 10; i++) {
		if (state_is("live") && npnm_sysfs_read(npnm_sysfs("stats/resets")) > resets0)
			return 1;
		usleep(100000);
	}
	return 0;
}

TEST(stalled_command_fails_alone_then_watchdog)
{
	struct npnm_mem_alloc ma;
	struct npnm_cmd c;
	__u32 status = 0;
	int fd = open_fault_dev("NPNM_STALL_DEV", &ma);

	if (fd < 0)
		SKIP(return, "NPNM_STALL_DEV not set");
	long long resets = npnm_sysfs_read(npnm_sysfs("stats/resets"));

	c = npnm_fill(ma.handle, 0, 4096, 1);
	/* The two that run get the default deadline: no margin to race. */
	ASSERT_EQ(0, npnm_exec(fd, &c, NULL));
	ASSERT_EQ(0, npnm_exec(fd, &c, NULL));
	c.timeout_ms = 300;
	EXPECT_EQ(-ETIMEDOUT, npnm_exec(fd, &c, &status));	/* the third stalls */
	EXPECT_EQ(NPNM_ST_TIMEOUT, status);
	EXPECT_LT(0, npnm_sysfs_read(npnm_sysfs("stats/timeouts")));
	/* Only that command failed: its slot is quarantined, the card works. */
	EXPECT_TRUE(state_is("live"));
	EXPECT_EQ(1, npnm_sysfs_read(npnm_sysfs("stats/quarantined")));
	c.timeout_ms = 0;
	EXPECT_EQ(0, npnm_exec(fd, &c, NULL));
	/* The card never reports it: the administrator's watchdog fails the card. */
	ASSERT_EQ(0, npnm_param("watchdog_ms", "500"));
	ASSERT_TRUE(recovered(resets, 10));
	npnm_param("watchdog_ms", "10000");
	EXPECT_EQ(0, npnm_sysfs_read(npnm_sysfs("stats/quarantined")));
	/* The reset made the region stale; a new one works. */
	EXPECT_EQ(-ESTALE, npnm_exec(fd, &c, NULL));
	ASSERT_EQ(0, npnm_alloc(fd, 4096, &ma));
	c = npnm_fill(ma.handle, 0, 4096, 1);
	EXPECT_EQ(0, npnm_exec(fd, &c, NULL));
	close(fd);
}

TEST(corrupt_completion_fails_the_device)
{
	struct npnm_mem_alloc ma;
	struct npnm_cmd c;
	__u32 status = 0;
	int fd = open_fault_dev("NPNM_CORRUPT_DEV", &ma);

	if (fd < 0)
		SKIP(return, "NPNM_CORRUPT_DEV not set");
	long long resets = npnm_sysfs_read(npnm_sysfs("stats/resets"));

	c = npnm_fill(ma.handle, 0, 4096, 1);
	ASSERT_EQ(0, npnm_exec(fd, &c, NULL));
	EXPECT_EQ(-EIO, npnm_exec(fd, &c, &status));		/* its completion is garbled */
	EXPECT_EQ(NPNM_ST_DEVICE_ERROR, status);
	ASSERT_TRUE(recovered(resets, 10));
	EXPECT_EQ(-ESTALE, npnm_exec(fd, &c, NULL));
	ASSERT_EQ(0, npnm_alloc(fd, 4096, &ma));
	c = npnm_fill(ma.handle, 0, 4096, 1);
	EXPECT_EQ(0, npnm_exec(fd, &c, NULL));
	close(fd);
}

TEST(firmware_death_then_restart)
{
	struct npnm_mem_alloc ma;
	struct npnm_completion comp;
	struct npnm_cmd c;
	struct npnm_submit s = { .cmds_ptr = 0, .nr_cmds = 1 };
	struct npnm_wait w = { .max_comps = 1, .min_comps = 1, .timeout_ns = -1 };
	__u8 *p;
	int fd = open_fault_dev("NPNM_HANG_DEV", &ma);
	long long resets;

	if (fd < 0)
		SKIP(return, "NPNM_HANG_DEV not set");
	resets = npnm_sysfs_read(npnm_sysfs("stats/resets"));
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, p);
	c = npnm_fill(ma.handle, 0, 4096, 0x33);
	ASSERT_EQ(0, npnm_exec(fd, &c, NULL));
	EXPECT_EQ(0x33, p[0]);
	/* The second command kills the firmware; it is pending when it dies. */
	s.cmds_ptr = (uintptr_t)&c;
	w.comps_ptr = (uintptr_t)&comp;
	ASSERT_EQ(0, npnm_ioctl(fd, NPNM_IOC_SUBMIT, &s));
	ASSERT_EQ(0, npnm_ioctl(fd, NPNM_IOC_WAIT, &w));	/* after the heartbeat timeout */
	EXPECT_EQ(-EIO, comp.result);
	EXPECT_EQ(NPNM_ST_DEVICE_ERROR, comp.status);
	EXPECT_TRUE(state_is("failed"));
	/* Our mapping is revoked: touching it raises SIGBUS... */
	EXPECT_EQ(1, npnm_touch_sigbus(p));
	/* ...and the region is stale: it cannot be mapped again. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, ma.mmap_offset));
	EXPECT_EQ(ESTALE, errno);
	munmap(p, 4096);
	close(fd);
	/* devemu restarts the firmware; the driver resets the card. */
	ASSERT_TRUE(recovered(resets, 30));
	/* New contexts work. */
	fd = open(getenv("NPNM_HANG_DEV"), O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, npnm_alloc(fd, 1 << 20, &ma));
	c = npnm_fill(ma.handle, 0, 4096, 0x44);
	EXPECT_EQ(0, npnm_exec(fd, &c, NULL));
	close(fd);
}

TEST(heartbeat_silence_fails_the_card_for_good)
{
	struct npnm_mem_alloc ma;
	struct npnm_cmd c;
	long long resets;
	int fd = open_fault_dev("NPNM_SILENT_DEV", &ma);

	if (fd < 0)
		SKIP(return, "NPNM_SILENT_DEV not set");
	resets = npnm_sysfs_read(npnm_sysfs("stats/resets"));
	c = npnm_fill(ma.handle, 0, 4096, 1);
	/* The heartbeat stops 3 s after devemu started; 2 s later it is dead. */
	for (int i = 0; i < 300 && !state_is("failed"); i++)
		usleep(100000);
	ASSERT_TRUE(state_is("failed"));
	EXPECT_EQ(-EIO, npnm_exec(fd, &c, NULL));
	sleep(1);		/* ten monitor periods */
	EXPECT_TRUE(state_is("failed"));
	EXPECT_EQ(resets, npnm_sysfs_read(npnm_sysfs("stats/resets")));
	close(fd);
}

TEST_HARNESS_MAIN
