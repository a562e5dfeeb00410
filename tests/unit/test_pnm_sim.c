// SPDX-License-Identifier: MIT
/*
 * PNM User Library: names and options, the Memory API's bounds and
 * per-context isolation, the Command API's submission checks, waiting,
 * event fd and exactly-once completion under concurrent threads, and
 * SPARSE_ATTN end to end against float64.
 *
 * Runs on the embedded sim backend by default; with NELSSA_TEST_DEV set
 * to /dev/nelssa_pnmN (the QEMU rig does this) the same tests run on the
 * kernel backend, skipping what only sim offers (its options, compute on
 * a mock device).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <sys/uio.h>
#include <unistd.h>

#include <nelssa/log.h>
#include <nelssa/pnm.h>

#include "fwfixture.h"
#include "rulecases.h"

static const char *DEV = "sim:7,mem=96M,cores=2";

static int is_sim(void)
{
	return !strncmp(DEV, "sim:", 4);
}

/*
 * Keep commands in flight until the test lets them go.  On the kernel
 * driver (mock or PCI card) that is the driver's test hold in debugfs:
 * commands stay queued, deterministically.  The in-process sim device has
 * no hold; there commands are made slow by their size (16 MiB fills).
 */
static void slow_device(int on)
{
	const char *name = strrchr(DEV, '/');
	char path[256];
	FILE *f;

	if (is_sim())
		return;
	snprintf(path, sizeof(path), "/sys/kernel/debug/nelssa_pnm/%s/hold", name ? name + 1 : DEV);
	f = fopen(path, "w");
	if (!f)
		fail_msg("cannot open %s: %s (is debugfs mounted?)", path, strerror(errno));
	fputs(on ? "1" : "0", f);
	assert_int_equal(fclose(f), 0);
}

static struct nelssa_pnm *open_dev(const char *name)
{
	struct nelssa_pnm *p = NULL;
	int ret = nelssa_pnm_open(name, &p);

	if (ret)
		fail_msg("open %s: %d %s", name, ret, nelssa_pnm_strerror());
	return p;
}

static uint32_t alloc(struct nelssa_pnm *p, uint64_t size)
{
	uint32_t h = 0;

	assert_int_equal(nelssa_pnm_mem_alloc(p, size, &h, NULL), 0);
	assert_true(h != 0);
	return h;
}

static struct npnm_cmd fill_cmd(uint32_t h, uint64_t off, uint64_t len, uint8_t byte)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_FILL;
	c.op[NPNM_FILL_DST] = (struct npnm_operand){ h, 0, off, len };
	c.p.fill.pattern = byte;
	c.p.fill.width = 1;
	return c;
}

static void bad_names(void **state)
{
	static const struct {
		const char *name;
		int err;
	} bad[] = {
		{ "", -EINVAL }, { "sim:", -EINVAL }, { "sim:x", -EINVAL }, { "sim:300", -EINVAL },
		{ "sim:1,mem=1", -EINVAL }, { "sim:1,mem=12Q", -EINVAL }, { "sim:1,cores=0", -EINVAL },
		{ "sim:1,cores=999", -EINVAL }, { "sim:1,bogus=1", -EINVAL }, { "sim:1,mem", -EINVAL },
		{ "sim:1,isa=sse9", -EINVAL }, { "gpu0", -EINVAL }, { "/dev/nelssa_pnm99", -ENOENT },
		{ "sim:1,cpus=x", -EINVAL }, { "sim:1,cpus=3-1", -EINVAL }, { "sim:1,cpus=0-", -EINVAL },
		{ "sim:1,cpus=5000", -EINVAL }, { "sim:1,cpus=1023", -EINVAL },	/* not ours */
		{ "sim:1,kv_stride=1", -EINVAL }, { "sim:1,kv_stride=", -EINVAL },
	};
	struct nelssa_pnm *p;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = NULL;
		if (nelssa_pnm_open(bad[i].name, &p) != bad[i].err)
			fail_msg("'%s' did not fail with %d", bad[i].name, bad[i].err);
		assert_null(p);
		assert_true(strlen(nelssa_pnm_strerror()) > 0);	/* a reason in words */
	}
}

struct log_seen {
	int calls;
	char msg[256];
};

static void log_into(void *ctx, int level, const char *source, const char *msg)
{
	struct log_seen *s = ctx;

	if (level == NELSSA_LOG_ERR && !strcmp(source, "pnm")) {
		s->calls++;
		snprintf(s->msg, sizeof(s->msg), "%s", msg);
	}
}

/* A failing call hands its words to the installed log function too. */
static void errors_reach_the_log_fn(void **state)
{
	struct log_seen seen = { 0 };
	struct nelssa_pnm *p = NULL;

	(void)state;
	nelssa_set_log_fn(log_into, &seen);
	assert_int_equal(-EINVAL, nelssa_pnm_open("sim:1,bogus=1", &p));
	nelssa_set_log_fn(NULL, NULL);
	assert_int_equal(1, seen.calls);
	assert_string_equal(nelssa_pnm_strerror(), seen.msg);
	assert_int_equal(-EINVAL, nelssa_pnm_open("sim:1,bogus=1", &p));
	assert_int_equal(1, seen.calls);	/* removed: nothing more */
}

static void shared_device_and_options(void **state)
{
	struct nelssa_pnm *a, *b, *c = NULL;
	struct npnm_info ia, ib;

	(void)state;
	if (!is_sim())
		skip();
	a = open_dev("sim:3,mem=8M,cores=2");
	b = open_dev("sim:3");		/* no options: joins the same device */
	assert_int_equal(nelssa_pnm_open("sim:3,cores=1", &c), -EBUSY);
	assert_int_equal(nelssa_pnm_info(a, &ia), 0);
	assert_int_equal(nelssa_pnm_info(b, &ib), 0);
	assert_int_equal(ia.nr_cores, 2);
	assert_int_equal(ib.nr_cores, 2);
	assert_int_equal(ia.mem_size, ib.mem_size);
	assert_int_equal(ia.abi_version, NPNM_ABI_VERSION);
	assert_true(ia.mem_size >= (8u << 20) - 4096 && ia.mem_size < (8u << 20));
	assert_int_equal(ia.mem_align, 4096);
	assert_int_equal(ia.opcodes, 0x3f);
	assert_true(ia.caps & NPNM_CAP_COMPUTE);
	assert_int_equal(ia.kv_dtypes, (1u << NPNM_DTYPE_BF16) | (1u << NPNM_DTYPE_FP16) |
					 (1u << NPNM_DTYPE_FP8_E4M3) | (1u << NPNM_DTYPE_INT8));
	assert_string_equal(nelssa_pnm_backend(a), "sim");
	nelssa_pnm_close(a);
	nelssa_pnm_close(b);
	/* The last close destroyed it: new options are accepted now. */
	c = open_dev("sim:3,cores=1");
	nelssa_pnm_close(c);
}

static void alloc_free_rules(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	uint32_t h, h2, seen[64];
	uint64_t got;
	uint8_t buf[8192];

	(void)state;
	assert_int_equal(nelssa_pnm_mem_alloc(p, 0, &h, NULL), -EINVAL);
	assert_int_equal(nelssa_pnm_mem_alloc(p, 1ull << 40, &h, NULL), -ENOMEM);
	assert_int_equal(nelssa_pnm_mem_alloc(p, 100, &h, &got), 0);
	assert_int_equal(got, 4096);	/* rounded to the alignment */
	assert_int_equal(nelssa_pnm_mem_free(p, h), 0);
	assert_int_equal(nelssa_pnm_mem_free(p, h), -EINVAL);	/* double free */
	assert_int_equal(nelssa_pnm_mem_free(p, 9999), -EINVAL);
	/* Handles are unique and never reused within a context. */
	for (int i = 0; i < 64; i++) {
		seen[i] = alloc(p, 4096);
		for (int j = 0; j < i; j++)
			assert_true(seen[j] != seen[i]);
		assert_true(seen[i] != h);
	}
	for (int i = 0; i < 64; i++)
		assert_int_equal(nelssa_pnm_mem_free(p, seen[i]), 0);
	/* A freed region's memory comes back zeroed. */
	h = alloc(p, 8192);
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(nelssa_pnm_mem_write(p, h, 0, buf, sizeof(buf)), 0);
	assert_int_equal(nelssa_pnm_mem_free(p, h), 0);
	h2 = alloc(p, 8192);
	assert_int_equal(nelssa_pnm_mem_read(p, h2, 0, buf, sizeof(buf)), 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
	/* Fill the device, then everything is usable again after frees. */
	{
		uint32_t hs[64];
		struct npnm_info info;
		int n = 0, fit;

		assert_int_equal(nelssa_pnm_info(p, &info), 0);
		fit = (int)(info.mem_size / (4u << 20));	/* less h2's 8 KiB */
		while (n < 64 && !nelssa_pnm_mem_alloc(p, 4u << 20, &hs[n], NULL))
			n++;
		assert_true(n >= fit - 1 && n <= fit);
		assert_int_equal(nelssa_pnm_mem_alloc(p, 4u << 20, &h, NULL), -ENOMEM);
		while (n)
			assert_int_equal(nelssa_pnm_mem_free(p, hs[--n]), 0);
		/* Freed extents coalesce: one region of most of the device fits. */
		assert_int_equal(nelssa_pnm_mem_alloc(p, (uint64_t)(fit - 1) * (4u << 20), &h, NULL), 0);
	}
	nelssa_pnm_close(p);
}

static void bulk_bounds(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	uint32_t h = alloc(p, 4096);
	uint8_t buf[4097] = { 0 };

	(void)state;
	assert_int_equal(nelssa_pnm_mem_write(p, h, 0, buf, 4096), 0);
	assert_int_equal(nelssa_pnm_mem_write(p, h, 4095, buf, 1), 0);
	assert_int_equal(nelssa_pnm_mem_write(p, h, 4096, buf, 0), 0);
	assert_int_equal(nelssa_pnm_mem_write(p, h, 0, buf, 4097), -EINVAL);
	assert_int_equal(nelssa_pnm_mem_write(p, h, 4096, buf, 1), -EINVAL);
	assert_int_equal(nelssa_pnm_mem_write(p, h, UINT64_MAX, buf, 2), -EINVAL);
	assert_int_equal(nelssa_pnm_mem_read(p, h, 1, buf, 4096), -EINVAL);
	assert_int_equal(nelssa_pnm_mem_read(p, h + 1, 0, buf, 1), -EINVAL);
	nelssa_pnm_close(p);
}

/* Two contexts on one device: neither can name or see the other's memory. */
static void isolation(void **state)
{
	struct nelssa_pnm *a = open_dev(DEV), *b = open_dev(DEV);
	uint32_t ha = alloc(a, 4096), hb, hb2;
	struct npnm_cmd c = fill_cmd(ha, 0, 4096, 0x11);
	uint8_t buf[4096];

	(void)state;
	assert_int_equal(nelssa_pnm_mem_write(a, ha, 0, "secret", 6), 0);
	/* b has no region yet: a's handle means nothing to it. */
	assert_int_equal(nelssa_pnm_mem_read(b, ha, 0, buf, 6), -EINVAL);
	assert_int_equal(nelssa_pnm_submit(b, &c, 1, NULL), -EINVAL);
	{
		void *m = &m;

		assert_int_equal(nelssa_pnm_mem_map(b, ha, &m, NULL), -EINVAL);
		assert_true(m == (void *)&m);	/* untouched */
		assert_int_equal(nelssa_pnm_mem_map(a, ha, NULL, NULL), -EINVAL);
	}
	assert_int_equal(nelssa_pnm_mem_free(b, ha), -EINVAL);
	/* Handle numbers are per context: b's first handle may equal a's... */
	hb = alloc(b, 4096);
	hb2 = alloc(b, 4096);
	(void)hb2;
	/* ...but always names b's own, zeroed memory. */
	assert_int_equal(nelssa_pnm_mem_read(b, hb, 0, buf, sizeof(buf)), 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
	c = fill_cmd(hb, 0, 4096, 0x22);
	assert_int_equal(nelssa_pnm_exec(b, &c, NULL), 0);
	assert_int_equal(nelssa_pnm_mem_read(a, ha, 0, buf, 6), 0);
	assert_memory_equal(buf, "secret", 6);
	/* Closing b frees b's memory only. */
	nelssa_pnm_close(b);
	assert_int_equal(nelssa_pnm_mem_read(a, ha, 0, buf, 6), 0);
	assert_memory_equal(buf, "secret", 6);
	nelssa_pnm_close(a);
}

static void map_rules(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	uint32_t h = alloc(p, 8192);
	uint64_t size = 0;
	uint8_t *m, buf[4];
	struct npnm_cmd c = fill_cmd(h, 4096, 4096, 0x7c);

	(void)state;
	{
		void *v = NULL;

		assert_int_equal(nelssa_pnm_mem_map(p, h, &v, &size), 0);
		m = v;
	}
	assert_non_null(m);
	assert_int_equal(size, 8192);
	memcpy(m, "abcd", 4);
	assert_int_equal(nelssa_pnm_mem_read(p, h, 0, buf, 4), 0);
	assert_memory_equal(buf, "abcd", 4);
	assert_int_equal(nelssa_pnm_exec(p, &c, NULL), 0);
	assert_int_equal(m[4096], 0x7c);	/* device writes show through */
	/* Freed while mapped: the handle is gone, the mapping still works. */
	assert_int_equal(nelssa_pnm_mem_free(p, h), 0);
	assert_int_equal(nelssa_pnm_mem_read(p, h, 0, buf, 4), -EINVAL);
	m[8191] = 1;
	assert_int_equal(nelssa_pnm_mem_unmap(p, m), 0);
	assert_int_equal(nelssa_pnm_mem_unmap(p, m), -EINVAL);
	assert_int_equal(nelssa_pnm_mem_unmap(p, buf), -EINVAL);
	nelssa_pnm_close(p);
}

static void submit_checks(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	uint32_t h = alloc(p, 4096);
	struct npnm_cmd c[3];
	struct npnm_completion comp;
	uint64_t seq = 0;

	(void)state;
	c[0] = fill_cmd(h, 0, 4096, 1);
	c[0].reserved[1] = 1;
	assert_int_equal(nelssa_pnm_submit(p, c, 1, NULL), -EINVAL);
	c[0] = fill_cmd(h, 0, 4096, 1);
	c[0].flags = 1;
	assert_int_equal(nelssa_pnm_submit(p, c, 1, NULL), -EINVAL);
	c[0] = fill_cmd(h, 0, 4096, 1);
	c[0].op[2].len = 8;				/* unused slot not zero */
	assert_int_equal(nelssa_pnm_submit(p, c, 1, NULL), -EINVAL);
	c[0] = fill_cmd(h, 1, 4096, 1);			/* past the region */
	assert_int_equal(nelssa_pnm_submit(p, c, 1, NULL), -EINVAL);
	c[0] = fill_cmd(h, 0, 4096, 1);
	c[0].op[0].flags = 2;
	assert_int_equal(nelssa_pnm_submit(p, c, 1, NULL), -EINVAL);
	/* A batch stops at its first bad command; the ones before run. */
	c[0] = fill_cmd(h, 0, 2048, 1);
	c[1] = fill_cmd(h + 5, 0, 2048, 1);
	c[2] = fill_cmd(h, 2048, 2048, 1);
	assert_int_equal(nelssa_pnm_submit(p, c, 3, &seq), 1);
	assert_int_equal(nelssa_pnm_wait(p, &comp, 1, 1, -1), 1);
	assert_int_equal(comp.seqno, seq);
	assert_int_equal(comp.result, 0);
	/* What the device refuses completes with a status, not an error. */
	memset(c, 0, sizeof(c[0]));
	c[0].opcode = 99;
	c[0].user_tag = 0xfeed;
	assert_int_equal(nelssa_pnm_submit(p, c, 1, &seq), 1);
	assert_int_equal(nelssa_pnm_wait(p, &comp, 1, 1, -1), 1);
	assert_int_equal(comp.status, NPNM_ST_BAD_OPCODE);
	assert_int_equal(comp.result, -EIO);
	assert_int_equal(comp.user_tag, 0xfeed);
	assert_int_equal(nelssa_pnm_exec(p, c, &comp), -EIO);
	assert_string_equal(nelssa_pnm_status_str(comp.status), "unknown opcode");
	nelssa_pnm_close(p);
}

/*
 * What the driver refuses at submission the library refuses too, before
 * the device sees it: every command of rulecases.h -- each opcode broken
 * in one way the command rules forbid -- fails submit and exec with
 * -EINVAL and words naming what is wrong, nothing completes, and the
 * region the commands would write stays zero.  Unbroken, the same
 * commands are accepted.
 */
static void submit_refuses_what_the_rules_refuse(void **state)
{
	static struct rule_case cases[1024];
	struct nelssa_pnm *p = open_dev(DEV);
	uint32_t dst = alloc(p, RC_LEN), src = alloc(p, RC_LEN);
	struct npnm_completion comp[4];
	static uint8_t buf[RC_LEN];
	struct npnm_cmd c;
	size_t n;

	(void)state;
	memset(buf, 0x77, sizeof(buf));
	assert_int_equal(nelssa_pnm_mem_write(p, src, 0, buf, sizeof(buf)), 0);
	n = rule_cases(dst, src, cases, sizeof(cases) / sizeof(cases[0]));
	assert_true(n > 300 && n < sizeof(cases) / sizeof(cases[0]));
	for (size_t i = 0; i < n; i++) {
		if (nelssa_pnm_submit(p, &cases[i].cmd, 1, NULL) != -EINVAL)
			fail_msg("%s: submit did not fail with -EINVAL", cases[i].what);
		if (!strstr(nelssa_pnm_strerror(), cases[i].says))
			fail_msg("%s: '%s' does not say '%s'", cases[i].what, nelssa_pnm_strerror(),
				 cases[i].says);
		if (nelssa_pnm_exec(p, &cases[i].cmd, comp) != -EINVAL)
			fail_msg("%s: exec did not fail with -EINVAL", cases[i].what);
		if (!strstr(nelssa_pnm_strerror(), cases[i].says))
			fail_msg("%s: exec: '%s' does not say '%s'", cases[i].what,
				 nelssa_pnm_strerror(), cases[i].says);
	}
	/* The device never ran one. */
	assert_int_equal(nelssa_pnm_inflight(p), 0);
	assert_int_equal(nelssa_pnm_poll(p, comp, 4), 0);
	assert_int_equal(nelssa_pnm_mem_read(p, dst, 0, buf, sizeof(buf)), 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		if (buf[i])
			fail_msg("byte %zu of the destination written", i);
	/* Unbroken, they are accepted: NOP and FILL run, the rest reach the device. */
	for (unsigned int op = 0; op < NPNM_OP_MAX; op++) {
		c = rc_base(op, dst, src);
		assert_int_equal(nelssa_pnm_submit(p, &c, 1, NULL), 1);
		assert_int_equal(nelssa_pnm_wait(p, comp, 1, 1, -1), 1);
		assert_int_equal(comp[0].user_tag, c.user_tag);
		if (op == NPNM_OP_NOP || op == NPNM_OP_FILL)
			assert_int_equal(comp[0].status, NPNM_ST_OK);
	}
	c = rc_base(NPNM_OP_FILL, dst, src);
	assert_int_equal(nelssa_pnm_exec(p, &c, comp), 0);
	assert_int_equal(nelssa_pnm_mem_read(p, dst, 0, buf, sizeof(buf)), 0);
	assert_int_equal(buf[0], 0x5a);
	assert_int_equal(buf[RC_LEN - 1], 0x5a);
	/* An unknown opcode with its slots in order is the device's to refuse. */
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_MAX;
	c.op[2] = (struct npnm_operand){ src, 0, 0, 64 };
	assert_int_equal(nelssa_pnm_exec(p, &c, comp), -EIO);
	assert_int_equal(comp[0].status, NPNM_ST_BAD_OPCODE);
	nelssa_pnm_close(p);
}

/* Bytes of the region slow commands fill: all a 16 MiB mock can spare. */
static uint64_t slow_bytes(void)
{
	return is_sim() ? 16u << 20 : 4u << 20;
}

/* Slow commands: FILLs of a large region, held on the kernel driver. */
static int submit_slow(struct nelssa_pnm *p, uint32_t h, int n)
{
	slow_device(1);
	for (int i = 0; i < n; i++) {
		struct npnm_cmd c = fill_cmd(h, 0, slow_bytes(), (uint8_t)i);

		if (nelssa_pnm_submit(p, &c, 1, NULL) != 1)
			return -1;
	}
	return 0;
}

static void busy_region_and_timeouts(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	uint32_t h = alloc(p, slow_bytes());
	struct npnm_completion comp[16];
	int n = 8, got = 0, ret;

	(void)state;
	assert_int_equal(nelssa_pnm_poll(p, comp, 16), 0);
	assert_int_equal(nelssa_pnm_wait(p, comp, 1, 16, -1), -EAGAIN);	/* nothing to wait for */
	assert_int_equal(submit_slow(p, h, n), 0);
	assert_int_equal(nelssa_pnm_mem_free(p, h), -EBUSY);
	/* A 1 ns timeout returns what is there, or -ETIMEDOUT when nothing is. */
	ret = nelssa_pnm_wait(p, comp, 8, 16, 1);
	if (!is_sim())
		assert_int_equal(ret, -ETIMEDOUT);	/* held: nothing can be there */
	assert_true(ret == -ETIMEDOUT || (ret >= 1 && ret <= (n < 16 ? n : 16)));
	got = ret > 0 ? ret : 0;
	slow_device(0);
	while (got < n) {
		ret = nelssa_pnm_wait(p, comp, 1, 16, 5000000000ll);
		if (ret <= 0)
			fail_msg("wait: %d (%s) after %d", ret, nelssa_pnm_strerror(), got);
		got += ret;
	}
	assert_int_equal(nelssa_pnm_inflight(p), 0);
	assert_int_equal(nelssa_pnm_mem_free(p, h), 0);
	nelssa_pnm_close(p);
}

static void event_fd(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	uint32_t h = alloc(p, 4096);
	struct pollfd pfd = { .fd = nelssa_pnm_event_fd(p), .events = POLLIN };
	struct npnm_cmd c = fill_cmd(h, 0, 4096, 3);
	struct npnm_completion comp[4];

	(void)state;
	assert_true(pfd.fd >= 0);
	assert_int_equal(poll(&pfd, 1, 0), 0);			/* nothing pending */
	assert_int_equal(nelssa_pnm_submit(p, &c, 1, NULL), 1);
	assert_int_equal(nelssa_pnm_submit(p, &c, 1, NULL), 1);
	assert_int_equal(poll(&pfd, 1, 5000), 1);		/* completions arrive */
	assert_true(pfd.revents & POLLIN);
	{
		int got = 0;

		while (got < 2) {
			int r = nelssa_pnm_wait(p, comp, 1, 4, -1);

			assert_true(r > 0);
			got += r;
		}
	}
	assert_int_equal(poll(&pfd, 1, 0), 0);			/* drained: quiet again */
	assert_int_equal(nelssa_pnm_poll(p, comp, 4), 0);
	assert_int_equal(poll(&pfd, 1, 0), 0);			/* an empty poll: still quiet */
	/*
	 * Signalled again after a drain; with one of two reaped, the other
	 * makes it readable (at once if it had completed, else when it does).
	 */
	assert_int_equal(nelssa_pnm_submit(p, &c, 1, NULL), 1);
	assert_int_equal(nelssa_pnm_submit(p, &c, 1, NULL), 1);
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	assert_int_equal(nelssa_pnm_wait(p, comp, 1, 1, -1), 1);
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	assert_int_equal(nelssa_pnm_poll(p, comp, 4), 1);
	assert_int_equal(poll(&pfd, 1, 0), 0);
	assert_int_equal(nelssa_pnm_inflight(p), 0);
	nelssa_pnm_close(p);
}

/* exec() waits for its own command and leaves queued completions alone. */
static void exec_keeps_async(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	uint32_t h = alloc(p, 4096);
	struct npnm_cmd c = fill_cmd(h, 0, 4096, 9);
	struct npnm_completion comp[8];
	int got = 0;

	(void)state;
	for (int i = 0; i < 5; i++) {
		c.user_tag = (uint64_t)i;
		assert_int_equal(nelssa_pnm_submit(p, &c, 1, NULL), 1);
	}
	c.user_tag = 100;
	assert_int_equal(nelssa_pnm_exec(p, &c, comp), 0);
	assert_int_equal(comp[0].user_tag, 100);
	while (got < 5) {
		int r = nelssa_pnm_wait(p, comp + got, 1, (uint32_t)(8 - got), -1);

		assert_true(r > 0);
		got += r;
	}
	for (int i = 0; i < 5; i++)
		assert_true(comp[i].user_tag < 5);
	assert_int_equal(nelssa_pnm_poll(p, comp, 8), 0);
	nelssa_pnm_close(p);
}

/*
 * A waiting thread runs short commands at the head of the device's queue
 * itself, whichever context queued them (sim only; spin_us=0 makes it
 * try at once): every completion still reaches its own context's queue,
 * once, with its own tag, and the work is done.  A 4 KiB + 1 fill is
 * left to the executors and completes as well.  Which thread runs a
 * command is not observable here; test_fw_runtime holds the executor
 * and checks that (help_runs_short_commands).
 */
static void waiters_run_short_commands(void **state)
{
	struct nelssa_pnm *a, *b;
	struct npnm_completion comp[8];
	struct npnm_cmd c;
	uint32_t ha, hb;
	uint8_t *ma;
	unsigned int seen = 0;

	(void)state;
	if (!is_sim())
		skip();
	a = open_dev("sim:4,mem=8M,cores=1,spin_us=0");
	b = open_dev("sim:4");
	ha = alloc(a, 16384);
	hb = alloc(b, 4096);
	assert_int_equal(nelssa_pnm_mem_map(a, ha, (void **)&ma, NULL), 0);
	for (int round = 0; round < 200; round++) {
		for (uint64_t i = 0; i < 3; i++) {
			c = fill_cmd(ha, i * 4096, i == 2 ? 4097 : 4096, (uint8_t)(round + i));
			c.user_tag = i;
			assert_int_equal(nelssa_pnm_submit(a, &c, 1, NULL), 1);
		}
		memset(&c, 0, sizeof(c));
		c.opcode = NPNM_OP_NOP;
		c.user_tag = 77;
		assert_int_equal(nelssa_pnm_submit(b, &c, 1, NULL), 1);
		c = fill_cmd(hb, 0, 4096, 5);
		c.user_tag = 78;
		assert_int_equal(nelssa_pnm_exec(b, &c, comp), 0);
		assert_int_equal(comp[0].user_tag, 78);
		assert_int_equal(nelssa_pnm_wait(b, comp, 1, 8, -1), 1);
		assert_int_equal(comp[0].user_tag, 77);
		assert_int_equal(comp[0].result, 0);
		for (int got = 0; got < 3;) {
			int r = nelssa_pnm_wait(a, comp, 1, 8, -1);

			assert_true(r > 0);
			for (int i = 0; i < r; i++) {
				assert_true(comp[i].user_tag < 3);
				assert_int_equal(comp[i].result, 0);
				seen |= 1u << comp[i].user_tag;
			}
			got += r;
		}
		assert_int_equal(seen, 7);
		seen = 0;
		assert_int_equal(nelssa_pnm_poll(a, comp, 8), 0);
		assert_int_equal(nelssa_pnm_poll(b, comp, 8), 0);
		for (uint32_t i = 0; i < 3; i++)
			assert_int_equal(ma[i * 4096 + 100], (uint8_t)(round + i));
		assert_int_equal(ma[2 * 4096 + 4096], (uint8_t)(round + 2));
	}
	nelssa_pnm_close(a);
	nelssa_pnm_close(b);
}

/*
 * Submitters and reapers on separate threads, batches of 1..16: every
 * command's completion is seen exactly once, with its own tag and seqno.
 */
enum { SUBMITTERS = 4, REAPERS = 2, PER = 2500, TOTAL = SUBMITTERS * PER };

struct stress {
	struct nelssa_pnm *p;
	uint32_t h;
	atomic_uint seen[TOTAL];
	atomic_uint reaped;
	atomic_ullong seqsum;
	int id;
};

static void *stress_submit(void *arg)
{
	struct stress *s = arg;
	int id = __atomic_fetch_add(&s->id, 1, __ATOMIC_RELAXED);
	struct npnm_cmd c[16];
	unsigned int i = 0;

	while (i < PER) {
		unsigned int n = 1 + (i * 7 + (unsigned int)id) % 16, done = 0;

		if (n > PER - i)
			n = PER - i;
		for (unsigned int j = 0; j < n; j++) {
			c[j] = fill_cmd(s->h, (uint64_t)(id * 16 + j) * 64, 64, (uint8_t)j);
			if ((i + j) % 5 == 0)
				c[j].opcode = NPNM_OP_NOP, memset(&c[j].op, 0, sizeof(c[j].op)),
				memset(&c[j].p, 0, sizeof(c[j].p));
			c[j].user_tag = (uint64_t)id * PER + i + j;
		}
		while (done < n) {
			int r = nelssa_pnm_submit(s->p, c + done, n - done, NULL);

			if (r == -EAGAIN) {
				sched_yield();
				continue;
			}
			if (r <= 0)
				abort();
			done += (unsigned int)r;
		}
		i += n;
	}
	return NULL;
}

static void *stress_reap(void *arg)
{
	struct stress *s = arg;
	struct npnm_completion comp[32];

	while (atomic_load(&s->reaped) < TOTAL) {
		int r = nelssa_pnm_wait(s->p, comp, 1, 32, 2000000);

		for (int i = 0; i < r; i++) {
			if (comp[i].result || comp[i].user_tag >= TOTAL)
				abort();
			atomic_fetch_add(&s->seen[comp[i].user_tag], 1);
			atomic_fetch_add(&s->seqsum, comp[i].seqno);
		}
		if (r > 0)
			atomic_fetch_add(&s->reaped, (unsigned int)r);
	}
	return NULL;
}

static void stress_exactly_once(void **state)
{
	struct stress *s = tu_alloc(sizeof(*s));
	pthread_t t[SUBMITTERS + REAPERS];

	(void)state;
	s->p = open_dev(DEV);
	s->h = alloc(s->p, 4096);
	for (int i = 0; i < SUBMITTERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, stress_submit, s), 0);
	for (int i = 0; i < REAPERS; i++)
		assert_int_equal(pthread_create(&t[SUBMITTERS + i], NULL, stress_reap, s), 0);
	for (int i = 0; i < SUBMITTERS + REAPERS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(atomic_load(&s->reaped), TOTAL);
	for (int i = 0; i < TOTAL; i++)
		if (atomic_load(&s->seen[i]) != 1)
			fail_msg("tag %d seen %u times", i, atomic_load(&s->seen[i]));
	/* Sequence numbers are 1..TOTAL, each once. */
	assert_int_equal(atomic_load(&s->seqsum), (unsigned long long)TOTAL * (TOTAL + 1) / 2);
	nelssa_pnm_close(s->p);
	free(s);
}

/* Closing with commands queued aborts them and returns promptly. */
static void close_with_inflight(void **state)
{
	struct nelssa_pnm *p = open_dev(is_sim() ? "sim:8,mem=64M,cores=1" : DEV);
	uint32_t h = alloc(p, slow_bytes());

	(void)state;
	assert_int_equal(submit_slow(p, h, is_sim() ? 200 : 20), 0);
	assert_true(nelssa_pnm_inflight(p) > 0);
	nelssa_pnm_close(p);
	slow_device(0);
}

/* SPARSE_ATTN through the library, with data laid out by the fixture. */
/* One region of @p holds the fixture's whole memory, which the command's operands name. */
static uint32_t load_fx(struct nelssa_pnm *p, struct fx *f)
{
	const uint32_t h = alloc(p, f->mem.size);

	assert_int_equal(nelssa_pnm_mem_write(p, h, 0, f->mem.base, f->mem.size), 0);
	for (int i = 0; i < 4; i++)
		f->cmd.op[i].handle = h;
	return h;
}

/*
 * kv_stride=off: a sim device as a card with firmware before 1.2 -- no
 * NPNM_CAP_KV_STRIDE, and a strided SPARSE_ATTN refused at submission with
 * -EOPNOTSUPP and words, as the driver refuses it; the same command on a
 * device with the capability runs and matches float64.
 */
static void kv_stride_off(void **state)
{
	struct nelssa_pnm *old, *now, *c = NULL;
	struct npnm_completion comp;
	struct npnm_info info;
	struct tu_rng rng;
	struct fx f;
	uint32_t h;

	(void)state;
	old = open_dev("sim:9,mem=16M,cores=1,kv_stride=off");
	now = open_dev("sim:10,mem=16M,cores=1,kv_stride=on");
	assert_int_equal(nelssa_pnm_open("sim:9,kv_stride=on", &c), -EBUSY);
	assert_int_equal(nelssa_pnm_info(old, &info), 0);
	assert_false(info.caps & NPNM_CAP_KV_STRIDE);
	assert_int_equal(info.fw_version, 1u << 16 | 1u);	/* firmware 1.1 */
	assert_int_equal(nelssa_pnm_info(now, &info), 0);
	assert_true(info.caps & NPNM_CAP_KV_STRIDE);
	tu_rng_for(&rng, __func__, 0);
	/* Device memory: the KV, then 4 MiB of inputs and 1 MiB of outputs. */
	fx_init(&f, 8ull << 20, 64, 2, NPNM_DTYPE_BF16);
	f.kv_stride = 2 * 16 * 64 * 2;		/* K and V blocks adjacent */
	fx_add_item(&f, &rng, 700, 31, 300);
	fx_finish(&f);
	assert_int_equal(f.cmd.p.attn.kv_stride, f.kv_stride);
	load_fx(old, &f);
	assert_int_equal(nelssa_pnm_exec(old, &f.cmd, &comp), -EOPNOTSUPP);
	assert_non_null(strstr(nelssa_pnm_strerror(), "kv_stride=off"));
	h = load_fx(now, &f);
	assert_int_equal(nelssa_pnm_exec(now, &f.cmd, &comp), 0);
	assert_int_equal(comp.status, NPNM_ST_OK);
	assert_int_equal(nelssa_pnm_mem_read(now, h, 0, f.mem.base, f.mem.size), 0);
	assert_int_equal(fx_check(&f, 0, "strided item"), 0);
	fx_free(&f);
	nelssa_pnm_close(old);
	nelssa_pnm_close(now);
}

static void sparse_attn_end_to_end(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	struct npnm_completion comp;
	struct npnm_info info;
	struct tu_rng rng;
	struct fx f;
	uint32_t h;
	char what[32];

	(void)state;
	assert_int_equal(nelssa_pnm_info(p, &info), 0);
	if (!(info.caps & NPNM_CAP_COMPUTE)) {
		nelssa_pnm_close(p);
		skip();		/* the in-kernel mock runs no compute kernels */
	}
	tu_rng_for(&rng, __func__, 0);
	/* 6 items of up to 5000 tokens: 15 MiB of KV, plus inputs and outputs. */
	fx_init(&f, 24ull << 20, 128, 4, NPNM_DTYPE_BF16);
	for (int i = 0; i < 6; i++)
		fx_add_item(&f, &rng, 2000 + tu_below(&rng, 3000), 32, 40);
	fx_finish(&f);
	h = load_fx(p, &f);
	assert_int_equal(nelssa_pnm_exec(p, &f.cmd, &comp), 0);
	assert_int_equal(comp.status, NPNM_ST_OK);
	/* NPNM_IOC_EXEC carries no device time: only sim reports it from exec. */
	if (is_sim())
		assert_true(comp.device_ns > 0);
	assert_int_equal(nelssa_pnm_mem_read(p, h, 0, f.mem.base, f.mem.size), 0);
	for (uint32_t i = 0; i < f.nr_items; i++) {
		snprintf(what, sizeof(what), "pnm item %u", i);
		assert_int_equal(fx_check(&f, i, what), 0);
	}
	/* SELFTEST through the library too. */
	{
		struct npnm_cmd c;

		memset(&c, 0, sizeof(c));
		c.opcode = NPNM_OP_SELFTEST;
		assert_int_equal(nelssa_pnm_exec(p, &c, &comp), 0);
		assert_int_equal(comp.detail, 0);
	}
	fx_free(&f);
	nelssa_pnm_close(p);
}

/*
 * Whether the kernel can pin the pages at @addr: process_vm_readv() takes
 * them with pin_user_pages_remote(), the pinning an RDMA registration does
 * too (which adds FOLL_LONGTERM; T3 registers for real).  io_uring's fixed
 * buffers would not do here: they refuse any file mapping but shmem's.
 * A kernel without CROSS_MEMORY_ATTACH (the rig's trimmed debug one) has
 * no process_vm_readv(); vmsplice() takes the pages with
 * get_user_pages(), which refuses a raw page-frame mapping (VM_PFNMAP)
 * for the same reason pinning does -- no struct page to hold.
 */
static int kernel_pins(void *addr, size_t len)
{
	static uint8_t copy[64 << 10];
	struct iovec local = { copy, sizeof(copy) < len ? sizeof(copy) : len };
	struct iovec remote = { addr, local.iov_len };
	ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
	int pfd[2];

	if (n >= 0 || errno != ENOSYS)
		return n == (ssize_t)local.iov_len;
	/* One page: a pipe holds at least that much without blocking. */
	remote.iov_len = 4096;
	assert_int_equal(pipe2(pfd, O_NONBLOCK), 0);
	n = vmsplice(pfd[1], &remote, 1, 0);
	close(pfd[0]);
	close(pfd[1]);
	if (n < 0 && errno != EFAULT)
		fail_msg("vmsplice: %s", strerror(errno));
	return n == (ssize_t)remote.iov_len;
}

/*
 * NELSSA_PNM_MEM_PINNABLE: host memory on sim; on a card, its device-dax
 * carve-out, which the kernel pins where it cannot pin the card's own
 * mappings (raw page frames), zeroed, and a region commands can use.
 */
static void pinnable_memory(void **state)
{
	struct nelssa_pnm *p = open_dev(DEV);
	const size_t len = 2u << 20;
	struct npnm_completion comp;
	struct npnm_info info;
	struct npnm_cmd c;
	uint32_t h, pinned = 0;
	uint64_t got = 0;
	uint8_t *m, buf[256];
	int ret;

	(void)state;
	assert_int_equal(nelssa_pnm_info(p, &info), 0);
	h = alloc(p, len);
	assert_int_equal(nelssa_pnm_mem_map(p, h, (void **)&m, NULL), 0);
	assert_int_equal(kernel_pins(m, len), is_sim());
	assert_int_equal(nelssa_pnm_mem_unmap(p, m), 0);
	assert_int_equal(nelssa_pnm_mem_alloc_flags(p, len, 1u << 7, &pinned, NULL), -EINVAL);
	ret = nelssa_pnm_mem_alloc_flags(p, len, NELSSA_PNM_MEM_PINNABLE, &pinned, &got);
	if (!is_sim() && !(info.caps & NPNM_CAP_DAX)) {
		assert_int_equal(ret, -EOPNOTSUPP);
		assert_non_null(strstr(nelssa_pnm_strerror(), "carve-out"));
		nelssa_pnm_close(p);
		return;
	}
	if (ret)
		fail_msg("pinnable region: %d %s", ret, nelssa_pnm_strerror());
	assert_int_equal(got, len);
	assert_int_equal(nelssa_pnm_mem_map(p, pinned, (void **)&m, NULL), 0);
	for (size_t i = 0; i < len; i++)
		if (m[i])
			fail_msg("byte %zu of a new pinnable region is %#x", i, m[i]);
	assert_int_equal(kernel_pins(m, len), 1);
	/* Commands see what the mapping wrote, and the mapping what commands wrote. */
	memset(m + 4096, 0x3c, sizeof(buf));
	c = fill_cmd(h, 0, 4096, 0);
	c.opcode = NPNM_OP_COPY;
	c.op[0] = (struct npnm_operand){ h, 0, 0, sizeof(buf) };
	c.op[1] = (struct npnm_operand){ pinned, 0, 4096, sizeof(buf) };
	memset(&c.p, 0, sizeof(c.p));
	assert_int_equal(nelssa_pnm_exec(p, &c, &comp), 0);
	assert_int_equal(comp.result, 0);
	assert_int_equal(nelssa_pnm_mem_read(p, h, 0, buf, sizeof(buf)), 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0x3c);
	c = fill_cmd(pinned, len - 4096, 4096, 0x7e);
	assert_int_equal(nelssa_pnm_exec(p, &c, &comp), 0);
	assert_int_equal(comp.result, 0);
	assert_int_equal(m[len - 1], 0x7e);
	assert_int_equal(nelssa_pnm_mem_unmap(p, m), 0);
	assert_int_equal(nelssa_pnm_mem_free(p, pinned), 0);
	assert_int_equal(nelssa_pnm_mem_free(p, h), 0);
	nelssa_pnm_close(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pinnable_memory),
		cmocka_unit_test(bad_names),
		cmocka_unit_test(errors_reach_the_log_fn),
		cmocka_unit_test(shared_device_and_options),
		cmocka_unit_test(alloc_free_rules),
		cmocka_unit_test(bulk_bounds),
		cmocka_unit_test(isolation),
		cmocka_unit_test(map_rules),
		cmocka_unit_test(submit_checks),
		cmocka_unit_test(submit_refuses_what_the_rules_refuse),
		cmocka_unit_test(busy_region_and_timeouts),
		cmocka_unit_test(event_fd),
		cmocka_unit_test(exec_keeps_async),
		cmocka_unit_test(waiters_run_short_commands),
		cmocka_unit_test(stress_exactly_once),
		cmocka_unit_test(close_with_inflight),
		cmocka_unit_test(sparse_attn_end_to_end),
		cmocka_unit_test(kv_stride_off),
	};

	if (getenv("NELSSA_TEST_DEV"))
		DEV = getenv("NELSSA_TEST_DEV");
	/* NELSSA_TEST_ONLY=name: one test (the rig runs pinnable_memory on its dax card). */
	if (getenv("NELSSA_TEST_ONLY"))
		cmocka_set_test_filter(getenv("NELSSA_TEST_ONLY"));
	tu_init(is_sim() ? "pnm_sim" : "pnm_kdev");
	return cmocka_run_group_tests_name("pnm_sim", tests, NULL, NULL);
}
