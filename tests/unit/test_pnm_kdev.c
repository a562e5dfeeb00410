// SPDX-License-Identifier: MIT
/*
 * The kdev backend's submission checks, on every machine: the test is
 * linked with --wrap for open64(), ioctl() and io_uring_submit(), so the
 * library talks to a fake /dev/nelssa_pnm that counts what reaches the
 * "driver".  Every command the command rules forbid must fail submit and
 * exec with -EINVAL and reach neither the SUBMIT/EXEC ioctls nor the
 * io_uring; and over random commands the library accepts exactly what the
 * driver's checks (the shared rules plus region bounds, written out here)
 * accept.  On the QEMU rig test_pnm_sim runs the same refusals against
 * the real driver.
 *
 * The fake card can also have a device-dax carve-out (a memfd standing for
 * /dev/daxX.Y, its sysfs attributes served by the same open() wrapper), so
 * that pinnable regions are tested here against a second bookkeeping of
 * where each window lies: windows alive at once never overlap, each is
 * zeroed by the card before the caller sees it, and the mapping the
 * library returns is the carve-out's memory at the window.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include <nelssa/pnm.h>

#include "npnm_rules.h"
#include "rulecases.h"
#include "testutil.h"

#define FAKE_DEV "/dev/nelssa_pnm-fake"
#define FAKE_REGIONS 16
#define FAKE_DAX "/dev/dax9.0"
#define FAKE_DAX_SIZE (16ull << 20)
#define DAX_ALIGN (2ull << 20)

int __real_open64(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...);
int __real_ioctl(int fd, unsigned long req, ...);
int __wrap_ioctl(int fd, unsigned long req, ...);
int __real_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit(struct io_uring *ring);

/* The fake driver's state. */
static struct {
	int fd;				/* the open "device", or -1 */
	uint64_t caps;
	uint64_t size[FAKE_REGIONS + 1];	/* by handle; 0: none */
	int64_t dax_off[FAKE_REGIONS + 1];	/* a DAX window's offset, else -1 */
	int dax_mem;			/* the carve-out's memory (memfd), or -1 */
	unsigned int allocs, fills;	/* MEM_ALLOCs that reached the driver; FILLs of windows */
	uint32_t next_handle;
	unsigned int submit_calls, exec_calls, uring_submits;
	unsigned int cmds_seen;		/* commands that reached the driver */
	unsigned int cmds_refused;	/* ...that the driver's rules refuse */
	uint32_t pending;		/* submitted, not yet reaped */
	uint64_t next_seqno;
} fake = { .fd = -1 };

int __wrap_open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	va_start(ap, flags);
	if (flags & (O_CREAT | O_TMPFILE))
		mode = va_arg(ap, mode_t);
	va_end(ap);
	if (fake.dax_mem >= 0) {
		const char *text = NULL;

		if (!strncmp(path, "/sys/dev/char/", 14) && strstr(path, "/dax_device"))
			text = FAKE_DAX + 5;
		else if (!strncmp(path, "/sys/dev/char/", 14) && strstr(path, "/dax_size"))
			text = "16777216";
		else if (!strcmp(path, "/sys/bus/dax/devices/dax9.0/align"))
			text = "2097152";
		if (text) {
			int fd = memfd_create("attr", MFD_CLOEXEC);

			if (fd >= 0 && (dprintf(fd, "%s\n", text) < 0 || lseek(fd, 0, SEEK_SET)))
				abort();
			return fd;
		}
		if (!strcmp(path, FAKE_DAX)) {
			char self[64];

			/* An open file of its own, as open(2) of a device gives: flock() tells them apart. */
			snprintf(self, sizeof(self), "/proc/self/fd/%d", fake.dax_mem);
			return __real_open64(self, flags);
		}
	}
	if (strcmp(path, FAKE_DEV))
		return __real_open64(path, flags, mode);
	fake.fd = __real_open64("/dev/null", O_RDWR | O_CLOEXEC);
	return fake.fd;
}

/* Whether [off, off + len) of the carve-out is inside a window other than @self. */
static int dax_overlaps(uint64_t off, uint64_t len, uint32_t self)
{
	for (uint32_t h = 1; h <= FAKE_REGIONS; h++)
		if (h != self && fake.size[h] && fake.dax_off[h] >= 0 &&
		    off < (uint64_t)fake.dax_off[h] + fake.size[h] &&
		    (uint64_t)fake.dax_off[h] < off + len)
			return 1;
	return 0;
}

/* The card runs a FILL of a window on the carve-out's memory. */
static void dax_fill(const struct npnm_cmd *c)
{
	const struct npnm_operand *op = &c->op[NPNM_FILL_DST];
	uint8_t *m;

	if (c->opcode != NPNM_OP_FILL || !op->handle || op->handle > FAKE_REGIONS ||
	    fake.dax_off[op->handle] < 0)
		return;
	m = mmap(NULL, FAKE_DAX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fake.dax_mem, 0);
	assert_true(m != MAP_FAILED);
	assert_int_equal(c->p.fill.width, 8);
	for (uint64_t i = 0; i < op->len; i += 8)
		memcpy(m + fake.dax_off[op->handle] + op->offset + i, &c->p.fill.pattern, 8);
	munmap(m, FAKE_DAX_SIZE);
	fake.fills++;
}

/* What the driver does with a command: the shared rules, then its regions. */
static int driver_refuses(const struct npnm_cmd *c)
{
	if (npnm_rules_submit_errno(npnm_rules_check(c)))
		return 1;
	for (unsigned int i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		const struct npnm_operand *op = &c->op[i];
		uint64_t size;

		if (!op->handle)
			continue;
		size = op->handle <= FAKE_REGIONS ? fake.size[op->handle] : 0;
		if (!size || op->offset > size || op->len > size - op->offset)
			return 1;
	}
	return 0;
}

static void driver_sees(const struct npnm_cmd *c)
{
	fake.cmds_seen++;
	fake.cmds_refused += driver_refuses(c);
}

static int fake_ioctl(unsigned long req, void *arg)
{
	switch (req) {
	case NPNM_IOC_GET_INFO: {
		struct npnm_info *info = arg;

		*info = (struct npnm_info){
			.abi_version = NPNM_ABI_VERSION, .caps = fake.caps | NPNM_CAP_MMAP,
			.opcodes = (1ull << NPNM_OP_MAX) - 1, .mem_size = 1ull << 30,
			.mem_align = 4096, .nr_cores = 1, .max_batch = 16, .max_inflight = 1024,
			.kv_dtypes = (1u << NPNM_DTYPE_BF16) | (1u << NPNM_DTYPE_FP16),
			.max_head_dim = 256, .max_group = 16,
		};
		return 0;
	}
	case NPNM_IOC_MEM_ALLOC: {
		struct npnm_mem_alloc *ma = arg;
		const int dax = ma->flags & NPNM_MEM_F_DAX;
		const uint64_t size = (ma->size + 4095) & ~4095ull;

		fake.allocs++;
		if ((ma->flags & ~NPNM_MEM_F_DAX) || ma->reserved || (!dax && ma->dax_offset))
			return -EINVAL;
		if (dax && !(fake.caps & NPNM_CAP_DAX))
			return -EOPNOTSUPP;
		/* The driver's checks, and the library's extents disjoint. */
		if (dax && (ma->dax_offset % 4096 || size > FAKE_DAX_SIZE ||
			    ma->dax_offset > FAKE_DAX_SIZE - size))
			return -EINVAL;
		if (dax && dax_overlaps(ma->dax_offset, size, 0))
			fail_msg("window [%llu, +%llu) overlaps another",
				 (unsigned long long)ma->dax_offset, (unsigned long long)size);
		if (fake.next_handle >= FAKE_REGIONS)
			return -ENOMEM;
		ma->handle = ++fake.next_handle;
		ma->alloc_size = size;
		ma->mmap_offset = (uint64_t)ma->handle << 36;
		fake.size[ma->handle] = ma->alloc_size;
		fake.dax_off[ma->handle] = dax ? (int64_t)ma->dax_offset : -1;
		return 0;
	}
	case NPNM_IOC_MEM_FREE: {
		struct npnm_mem_free *mf = arg;

		if (!mf->handle || mf->handle > FAKE_REGIONS || !fake.size[mf->handle])
			return -EINVAL;
		fake.size[mf->handle] = 0;
		return 0;
	}
	case NPNM_IOC_SUBMIT: {
		struct npnm_submit *s = arg;
		const struct npnm_cmd *cmds = (const struct npnm_cmd *)(uintptr_t)s->cmds_ptr;

		fake.submit_calls++;
		for (uint32_t i = 0; i < s->nr_cmds; i++)
			driver_sees(&cmds[i]);
		s->seqno = fake.next_seqno;
		s->nr_submitted = s->nr_cmds;
		fake.next_seqno += s->nr_cmds;
		fake.pending += s->nr_cmds;
		return 0;
	}
	case NPNM_IOC_WAIT: {
		struct npnm_wait *w = arg;
		struct npnm_completion *comps = (struct npnm_completion *)(uintptr_t)w->comps_ptr;

		w->nr_comps = 0;
		while (fake.pending && w->nr_comps < w->max_comps) {
			comps[w->nr_comps++] = (struct npnm_completion){ .status = NPNM_ST_OK };
			fake.pending--;
		}
		return w->nr_comps ? 0 : -ETIMEDOUT;
	}
	case NPNM_IOC_EXEC: {
		struct npnm_exec *ex = arg;

		fake.exec_calls++;
		driver_sees((const struct npnm_cmd *)(uintptr_t)ex->cmd_ptr);
		if (fake.dax_mem >= 0)
			dax_fill((const struct npnm_cmd *)(uintptr_t)ex->cmd_ptr);
		ex->status = NPNM_ST_OK;
		return 0;
	}
	default:
		return -ENOTTY;
	}
}

int __wrap_ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	int ret;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (fd < 0 || fd != fake.fd)
		return __real_ioctl(fd, req, arg);
	ret = fake_ioctl(req, arg);
	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return ret;
}

int __wrap_io_uring_submit(struct io_uring *ring)
{
	fake.uring_submits++;
	return __real_io_uring_submit(ring);
}

static struct nelssa_pnm *open_fake(uint64_t caps)
{
	struct nelssa_pnm *p = NULL;
	int ret;

	if (fake.dax_mem > 0)
		close(fake.dax_mem);
	memset(&fake, 0, sizeof(fake));
	fake.fd = -1;
	fake.dax_mem = -1;
	fake.caps = caps;
	if (caps & NPNM_CAP_DAX) {
		/* Carve-out memory as the last owner left it: never handed out so. */
		static uint8_t junk[1 << 16];

		memset(junk, 0xa5, sizeof(junk));
		fake.dax_mem = memfd_create("carve-out", MFD_CLOEXEC);
		assert_true(fake.dax_mem >= 0);
		for (uint64_t off = 0; off < FAKE_DAX_SIZE; off += sizeof(junk))
			assert_int_equal(pwrite(fake.dax_mem, junk, sizeof(junk), (off_t)off),
					 sizeof(junk));
	}
	fake.next_seqno = 1;
	ret = nelssa_pnm_open(FAKE_DEV, &p);
	if (ret)
		fail_msg("open %s: %d %s", FAKE_DEV, ret, nelssa_pnm_strerror());
	assert_string_equal(nelssa_pnm_backend(p), "kdev");
	return p;
}

static uint32_t alloc(struct nelssa_pnm *p, uint64_t size)
{
	uint32_t h = 0;

	assert_int_equal(nelssa_pnm_mem_alloc(p, size, &h, NULL), 0);
	return h;
}

/* Every rule case fails submit and exec with -EINVAL, naming the rule. */
static void refuse_all(struct nelssa_pnm *p, uint32_t dst, uint32_t src)
{
	static struct rule_case cases[1024];
	size_t n = rule_cases(dst, src, cases, sizeof(cases) / sizeof(cases[0]));

	assert_true(n > 300 && n < sizeof(cases) / sizeof(cases[0]));
	for (size_t i = 0; i < n; i++) {
		if (nelssa_pnm_submit(p, &cases[i].cmd, 1, NULL) != -EINVAL)
			fail_msg("%s: submit did not fail with -EINVAL", cases[i].what);
		if (!strstr(nelssa_pnm_strerror(), cases[i].says))
			fail_msg("%s: '%s' does not say '%s'", cases[i].what, nelssa_pnm_strerror(),
				 cases[i].says);
		if (nelssa_pnm_exec(p, &cases[i].cmd, NULL) != -EINVAL)
			fail_msg("%s: exec did not fail with -EINVAL", cases[i].what);
		/* Behind a good command in a batch, it stops the batch there. */
		if (i % 16 == 0) {
			struct npnm_cmd two[2] = { rc_base(NPNM_OP_NOP, dst, src), cases[i].cmd };
			struct npnm_completion comp;

			assert_int_equal(nelssa_pnm_submit(p, two, 2, NULL), 1);
			assert_int_equal(nelssa_pnm_wait(p, &comp, 1, 1, -1), 1);
		}
	}
	assert_int_equal(nelssa_pnm_inflight(p), 0);
}

static void refused_on_the_ioctl_path(void **state)
{
	struct nelssa_pnm *p = open_fake(0);
	uint32_t dst = alloc(p, RC_LEN), src = alloc(p, RC_LEN);

	(void)state;
	refuse_all(p, dst, src);
	/* Only the good halves of the batches reached the driver. */
	assert_int_equal(fake.exec_calls, 0);
	assert_int_equal(fake.cmds_seen, fake.submit_calls);
	assert_int_equal(fake.cmds_refused, 0);
	assert_int_equal(fake.uring_submits, 0);
	/* Unbroken, every opcode's command reaches it, and the driver agrees. */
	for (unsigned int op = 0; op < NPNM_OP_MAX; op++) {
		struct npnm_cmd c = rc_base(op, dst, src);
		struct npnm_completion comp;
		unsigned int seen = fake.cmds_seen;

		assert_int_equal(nelssa_pnm_submit(p, &c, 1, NULL), 1);
		assert_int_equal(nelssa_pnm_wait(p, &comp, 1, 1, -1), 1);
		assert_int_equal(nelssa_pnm_exec(p, &c, &comp), 0);
		assert_int_equal(fake.cmds_seen, seen + 2);
	}
	assert_int_equal(fake.cmds_refused, 0);
	nelssa_pnm_close(p);
}

static int have_io_uring(void)
{
	struct io_uring ring;

	if (io_uring_queue_init(8, &ring, IORING_SETUP_CQE32))
		return 0;
	io_uring_queue_exit(&ring);
	return 1;
}

static void refused_on_the_uring_path(void **state)
{
	struct nelssa_pnm *p;
	struct npnm_completion comp;
	struct npnm_cmd c;
	uint32_t dst, src;

	(void)state;
	if (!have_io_uring())
		skip();
	p = open_fake(NPNM_CAP_URING_CMD);
	dst = alloc(p, RC_LEN);
	src = alloc(p, RC_LEN);
	refuse_all(p, dst, src);
	assert_int_equal(fake.submit_calls, 0);		/* io_uring, not the batch ioctl */
	assert_int_equal(fake.exec_calls, 0);
	assert_true(fake.uring_submits > 0);
	/* A good command goes to the ring (the fake file fails it there). */
	c = rc_base(NPNM_OP_FILL, dst, src);
	fake.uring_submits = 0;
	assert_int_equal(nelssa_pnm_submit(p, &c, 1, NULL), 1);
	assert_int_equal(fake.uring_submits, 1);
	assert_int_equal(nelssa_pnm_wait(p, &comp, 1, 1, -1), 1);
	assert_int_equal(nelssa_pnm_inflight(p), 0);
	nelssa_pnm_close(p);
}

/*
 * Random commands, most of them broken somewhere: the library submits a
 * command exactly when the driver would accept it.
 */
static void library_and_driver_agree(void **state)
{
	struct nelssa_pnm *p = open_fake(0);
	uint32_t dst = alloc(p, RC_LEN), src = alloc(p, 2 * RC_LEN);
	unsigned int accepted = 0, refused = 0;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	for (unsigned int n = 0; n < 20000; n++) {
		unsigned int op = tu_below(&rng, NPNM_OP_MAX + 2);
		struct npnm_cmd c = rc_base(op < NPNM_OP_MAX ? op : NPNM_OP_NOP, dst, src);
		unsigned int flips = 1 + tu_below(&rng, 3);
		struct npnm_completion comp;
		unsigned int seen = fake.cmds_seen;
		int want, got;

		if (op >= NPNM_OP_MAX)
			c.opcode = (uint16_t)(NPNM_OP_MAX + tu_below(&rng, 0x10000 - NPNM_OP_MAX));
		for (unsigned int f = 0; f < flips; f++) {
			/* Anywhere after the opcode, mostly in the operands and parameters. */
			size_t at = 2 + tu_below(&rng, sizeof(c) - 2);

			((uint8_t *)&c)[at] = (uint8_t)(tu_below(&rng, 4) ? tu_below(&rng, 4)
							    : tu_below(&rng, 256));
		}
		want = driver_refuses(&c) ? -EINVAL : 1;
		got = nelssa_pnm_submit(p, &c, 1, NULL);
		if (got != want)
			fail_msg("command %u (opcode %u): library %d, driver %d: %s", n, c.opcode,
				 got, want, nelssa_pnm_strerror());
		if (got == 1) {
			accepted++;
			assert_int_equal(fake.cmds_seen, seen + 1);
			assert_int_equal(nelssa_pnm_wait(p, &comp, 1, 1, -1), 1);
		} else {
			refused++;
			assert_int_equal(fake.cmds_seen, seen);
		}
	}
	assert_int_equal(fake.cmds_refused, 0);
	/* Both sides of the rules were exercised. */
	assert_true(accepted > 1000 && refused > 1000);
	nelssa_pnm_close(p);
}

/* A card without a carve-out: no pinnable memory, and nothing asked of the driver. */
static void pinnable_needs_a_carve_out(void **state)
{
	struct nelssa_pnm *p = open_fake(0);
	uint32_t h = 0;

	(void)state;
	assert_int_equal(nelssa_pnm_mem_alloc_flags(p, 4096, NELSSA_PNM_MEM_PINNABLE, &h, NULL),
			 -EOPNOTSUPP);
	assert_non_null(strstr(nelssa_pnm_strerror(), "no device-dax carve-out"));
	assert_int_equal(nelssa_pnm_mem_alloc_flags(p, 4096, 2, &h, NULL), -EINVAL);
	assert_non_null(strstr(nelssa_pnm_strerror(), "unknown allocation flags"));
	assert_int_equal(fake.allocs, 0);
	assert_int_equal(h, 0);
	/* Flags 0 is nelssa_pnm_mem_alloc(). */
	assert_int_equal(nelssa_pnm_mem_alloc_flags(p, 4096, 0, &h, NULL), 0);
	assert_int_equal(fake.dax_off[h], -1);
	nelssa_pnm_close(p);
}

static uint32_t pin(struct nelssa_pnm *p, uint64_t size, uint64_t *got)
{
	uint32_t h = 0;
	int ret = nelssa_pnm_mem_alloc_flags(p, size, NELSSA_PNM_MEM_PINNABLE, &h, got);

	if (ret)
		fail_msg("pinnable %llu bytes: %d %s", (unsigned long long)size, ret,
			 nelssa_pnm_strerror());
	return h;
}

/*
 * Pinnable regions on a carve-out: 2 MiB windows the library places, the
 * card zeroes, and the caller maps through the dax device.
 */
static void pinnable_windows(void **state)
{
	struct nelssa_pnm *p = open_fake(NPNM_CAP_DAX);
	uint64_t got = 0, size = 0;
	uint32_t a, b, c, h = 0;
	uint8_t *m, buf[64];

	(void)state;
	a = pin(p, 3 << 20, &got);
	assert_int_equal(got, 4 << 20);			/* the dax alignment */
	assert_int_equal(fake.dax_off[a] % DAX_ALIGN, 0);
	assert_int_equal(fake.fills, 1);		/* zeroed by the card */
	assert_int_equal(nelssa_pnm_mem_map(p, a, (void **)&m, &size), 0);
	assert_int_equal(size, 4 << 20);
	for (uint64_t i = 0; i < size; i++)
		if (m[i])
			fail_msg("byte %llu of a new window is %#x", (unsigned long long)i, m[i]);
	/* The mapping is the carve-out at the window, and the library's bulk path agrees. */
	memset(m + 12345, 0x5c, sizeof(buf));
	assert_int_equal(pread(fake.dax_mem, buf, sizeof(buf), fake.dax_off[a] + 12345),
			 sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0x5c);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(nelssa_pnm_mem_read(p, a, 12345, buf, sizeof(buf)), 0);
	assert_int_equal(buf[0], 0x5c);
	assert_int_equal(buf[sizeof(buf) - 1], 0x5c);

	/* 12 MiB left: 10 fit beside it, 12 more do not; nothing is leaked by the refusal. */
	b = pin(p, 10 << 20, NULL);
	assert_int_equal(nelssa_pnm_mem_alloc_flags(p, 4 << 20, NELSSA_PNM_MEM_PINNABLE, &h,
						    NULL), -ENOMEM);
	assert_non_null(strstr(nelssa_pnm_strerror(), "carve-out"));
	c = pin(p, 2 << 20, NULL);
	assert_int_equal(nelssa_pnm_mem_free(p, c), 0);

	/*
	 * Freed while mapped, the window's memory is not handed out again
	 * (the fake fails on an overlap) until the mapping goes.
	 */
	assert_int_equal(nelssa_pnm_mem_free(p, a), 0);
	assert_int_equal(nelssa_pnm_mem_alloc_flags(p, 4 << 20, NELSSA_PNM_MEM_PINNABLE, &h,
						    NULL), -ENOMEM);
	c = pin(p, 2 << 20, NULL);
	assert_int_equal(nelssa_pnm_mem_unmap(p, m), 0);
	h = pin(p, 4 << 20, NULL);
	assert_int_equal(fake.dax_off[h], 0);
	assert_int_equal(nelssa_pnm_mem_free(p, b), 0);
	assert_int_equal(nelssa_pnm_mem_free(p, c), 0);
	assert_int_equal(nelssa_pnm_mem_free(p, h), 0);
	/* Ordinary regions of the same card are untouched by all this. */
	h = alloc(p, 4096);
	assert_int_equal(fake.dax_off[h], -1);
	nelssa_pnm_close(p);
}

/* The carve-out is one context's: held elsewhere, it is -EBUSY and then free again. */
static void carve_out_taken_elsewhere(void **state)
{
	struct nelssa_pnm *p = open_fake(NPNM_CAP_DAX);
	int other = open(FAKE_DAX, O_RDWR | O_CLOEXEC);
	uint32_t h = 0;

	(void)state;
	assert_true(other >= 0);
	assert_int_equal(flock(other, LOCK_EX | LOCK_NB), 0);
	assert_int_equal(nelssa_pnm_mem_alloc_flags(p, 4096, NELSSA_PNM_MEM_PINNABLE, &h, NULL),
			 -EBUSY);
	assert_non_null(strstr(nelssa_pnm_strerror(), "another context's"));
	assert_int_equal(fake.allocs, 0);
	close(other);
	h = pin(p, 4096, NULL);
	/* Now this context holds it. */
	other = open(FAKE_DAX, O_RDWR | O_CLOEXEC);
	assert_true(other >= 0);
	assert_int_equal(flock(other, LOCK_EX | LOCK_NB), -1);
	assert_int_equal(errno, EWOULDBLOCK);
	nelssa_pnm_close(p);
	assert_int_equal(flock(other, LOCK_EX | LOCK_NB), 0);
	close(other);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pinnable_needs_a_carve_out),
		cmocka_unit_test(pinnable_windows),
		cmocka_unit_test(carve_out_taken_elsewhere),
		cmocka_unit_test(refused_on_the_ioctl_path),
		cmocka_unit_test(refused_on_the_uring_path),
		cmocka_unit_test(library_and_driver_agree),
	};

	unsetenv("NELSSA_KDEV_IOCTL");
	tu_init("pnm_kdev");
	return cmocka_run_group_tests_name("pnm_kdev", tests, NULL, NULL);
}
