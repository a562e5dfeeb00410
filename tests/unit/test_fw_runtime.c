// SPDX-License-Identifier: MIT
/*
 * The Device Runtime: exactly-once completion under concurrent submitters
 * and helping waiters, batches split across executors, what a waiting
 * thread may run itself, cancellation and shutdown.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nelssa/fw.h>

#include "fwfixture.h"

#define MAXCMD 20000

struct tally {
	atomic_uint seen[MAXCMD];
	atomic_uint status[MAXCMD];
	atomic_uint total;
	atomic_uint aborted;
	atomic_ullong ns;
};

static void on_complete(void *owner, uint64_t cookie, const struct nfw_result *res)
{
	struct tally *t = owner;

	atomic_fetch_add(&t->seen[cookie], 1);
	atomic_store(&t->status[cookie], res->status);
	if (res->status == NPNM_ST_ABORTED)
		atomic_fetch_add(&t->aborted, 1);
	atomic_fetch_add(&t->ns, res->device_ns);
	atomic_fetch_add(&t->total, 1);
}

static void wait_total(struct tally *t, unsigned int n)
{
	while (atomic_load(&t->total) < n)
		sched_yield();
}

static struct nfw_runtime *make_rt(struct nfw_mem *m, unsigned int cores)
{
	struct nfw_runtime_config cfg = {
		.mem = *m, .cores = cores, .isa = NFW_ISA_AUTO, .spin_ns = 20000,
		.complete = on_complete,
	};
	struct nfw_runtime *rt = NULL;

	assert_int_equal(nfw_runtime_create(&cfg, &rt), 0);
	return rt;
}

struct submitter {
	struct nfw_runtime *rt;
	struct tally *t;
	unsigned int first, count;
};

/* Mixed traffic: NOPs, small FILLs and invalid opcodes. */
static void cmd_for(unsigned int i, struct npnm_cmd *c)
{
	memset(c, 0, sizeof(*c));
	switch (i % 3) {
	case 0:
		c->opcode = NPNM_OP_NOP;
		break;
	case 1:
		c->opcode = NPNM_OP_FILL;
		c->op[0] = (struct npnm_operand){ 1, 0, (i % 64) * 256, 256 };
		c->p.fill.width = 1;
		c->p.fill.pattern = i & 0xff;
		break;
	default:
		c->opcode = 0x4242;
		break;
	}
}

static uint32_t expected(unsigned int i)
{
	return i % 3 == 2 ? NPNM_ST_BAD_OPCODE : NPNM_ST_OK;
}

static void *submit_thread(void *arg)
{
	struct submitter *s = arg;
	struct npnm_cmd c;

	for (unsigned int i = s->first; i < s->first + s->count; i++) {
		cmd_for(i, &c);
		if (nfw_runtime_submit(s->rt, &c, s->t, i))
			abort();
	}
	return NULL;
}

struct helper {
	struct nfw_runtime *rt;
	struct tally *t;
	unsigned int until, ran;
};

/* A waiter that runs what it can until every command has completed. */
static void *help_thread(void *arg)
{
	struct helper *h = arg;

	while (atomic_load(&h->t->total) < h->until)
		if (nfw_runtime_help(h->rt))
			h->ran++;
		else
			sched_yield();
	return NULL;
}

static void exactly_once_stress(void **state)
{
	enum { THREADS = 6, PER = 3000, HELPERS = 2 };
	struct nfw_mem m = { tu_alloc(1 << 16), 1 << 16 };
	struct tally *t = tu_alloc(sizeof(*t));
	struct submitter s[THREADS];
	struct helper h[HELPERS];
	pthread_t th[THREADS], hth[HELPERS];
	struct nfw_runtime *rt;

	(void)state;
	rt = make_rt(&m, 3);
	/* Waiters taking short commands off the queue race the executors for them. */
	for (int i = 0; i < HELPERS; i++) {
		h[i] = (struct helper){ rt, t, THREADS * PER, 0 };
		assert_int_equal(pthread_create(&hth[i], NULL, help_thread, &h[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		s[i] = (struct submitter){ rt, t, (unsigned int)i * PER, PER };
		assert_int_equal(pthread_create(&th[i], NULL, submit_thread, &s[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	wait_total(t, THREADS * PER);
	for (int i = 0; i < HELPERS; i++)
		pthread_join(hth[i], NULL);
	nfw_runtime_destroy(rt);
	for (unsigned int i = 0; i < THREADS * PER; i++) {
		if (atomic_load(&t->seen[i]) != 1)
			fail_msg("command %u completed %u times", i, atomic_load(&t->seen[i]));
		assert_int_equal(atomic_load(&t->status[i]), expected(i));
	}
	assert_int_equal(atomic_load(&t->total), THREADS * PER);
	free(t);
	free(m.base);
}

/* One SPARSE_ATTN batch spread over 1, 2 and 3 executors: same answers. */
static void split_batches(void **state)
{
	struct tu_rng rng;
	struct fx f;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fx_init(&f, 32ull << 20, 128, 4, NPNM_DTYPE_BF16);
	for (int i = 0; i < 7; i++)
		fx_add_item(&f, &rng, 500 + tu_below(&rng, 2000), 32, 200);
	fx_finish(&f);
	for (unsigned int cores = 1; cores <= 3; cores++) {
		struct tally *t = tu_alloc(sizeof(*t));
		struct nfw_runtime *rt = make_rt(&f.mem, cores);
		char what[32];

		memset(f.mem.base + f.cmd.op[NPNM_ATTN_OUT].offset, 0, f.out_used);
		assert_int_equal(nfw_runtime_submit(rt, &f.cmd, t, 0), 0);
		wait_total(t, 1);
		nfw_runtime_destroy(rt);
		assert_int_equal(atomic_load(&t->seen[0]), 1);
		assert_int_equal(atomic_load(&t->status[0]), NPNM_ST_OK);
		assert_true(atomic_load(&t->ns) > 0);
		for (uint32_t i = 0; i < f.nr_items; i++) {
			snprintf(what, sizeof(what), "%u cores item %u", cores, i);
			assert_int_equal(fx_check(&f, i, what), 0);
		}
		free(t);
	}
	fx_free(&f);
}

/* A bad batch is refused as a whole even when it would be split. */
static void split_batch_invalid(void **state)
{
	struct tu_rng rng;
	struct fx f;
	struct tally *t = tu_alloc(sizeof(*t));
	struct nfw_runtime *rt;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fx_init(&f, 16ull << 20, 64, 4, NPNM_DTYPE_BF16);
	for (int i = 0; i < 4; i++)
		fx_add_item(&f, &rng, 300, 8, 300);
	fx_finish(&f);
	((struct npnm_attn_item *)f.mem.base)[3].reserved = 1;
	rt = make_rt(&f.mem, 2);
	assert_int_equal(nfw_runtime_submit(rt, &f.cmd, t, 0), 0);
	wait_total(t, 1);
	nfw_runtime_destroy(rt);
	assert_int_equal(atomic_load(&t->status[0]), NPNM_ST_BAD_RESERVED);
	free(t);
	fx_free(&f);
}

/*
 * Cancel and destroy with a deep queue of slow commands: every command
 * still completes exactly once, either run or ABORTED.
 */
static void cancel_and_destroy(void **state)
{
	enum { N = 400 };
	struct nfw_mem m = { tu_alloc(8 << 20), 8 << 20 };
	struct tally *mine = tu_alloc(sizeof(*mine)), *other = tu_alloc(sizeof(*other));
	struct nfw_runtime *rt;
	struct npnm_cmd c;
	unsigned int cancelled;

	(void)state;
	rt = make_rt(&m, 1);
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_FILL;
	c.op[0] = (struct npnm_operand){ 1, 0, 0, 8 << 20 };	/* ~1 ms each */
	c.p.fill.width = 1;
	for (unsigned int i = 0; i < N; i++) {
		assert_int_equal(nfw_runtime_submit(rt, &c, mine, i), 0);
		assert_int_equal(nfw_runtime_submit(rt, &c, other, i), 0);
	}
	cancelled = nfw_runtime_cancel(rt, mine);
	assert_true(cancelled > 0);
	wait_total(mine, N);
	assert_int_equal(atomic_load(&mine->aborted), cancelled);
	/* Destroying aborts what is still queued for the other owner. */
	nfw_runtime_destroy(rt);
	assert_int_equal(atomic_load(&other->total), N);
	for (unsigned int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&mine->seen[i]), 1);
		assert_int_equal(atomic_load(&other->seen[i]), 1);
	}
	free(mine);
	free(other);
	free(m.base);
}

/*
 * Completions of the gate's owner block until the test opens the gate of
 * their cookie: an executor (or a helper) held at a known point.
 */
static struct tally gate_owner;
static sem_t gate[8], gate_entered;
static pthread_t completer[8];

static void on_complete_gated(void *owner, uint64_t cookie, const struct nfw_result *res)
{
	completer[cookie % 8] = pthread_self();
	if (owner == &gate_owner) {
		sem_post(&gate_entered);
		sem_wait(&gate[cookie % 8]);
	}
	on_complete(owner, cookie, res);
}

static void gates_init(void)
{
	memset(&gate_owner, 0, sizeof(gate_owner));
	for (int i = 0; i < 8; i++)
		assert_int_equal(sem_init(&gate[i], 0, 0), 0);
	assert_int_equal(sem_init(&gate_entered, 0, 0), 0);
}

/* One executor, no spin, completions through the gates. */
static struct nfw_runtime *make_gated_rt(struct nfw_mem *m)
{
	struct nfw_runtime_config cfg = {
		.mem = *m, .cores = 1, .isa = NFW_ISA_AUTO, .complete = on_complete_gated,
	};
	struct nfw_runtime *rt = NULL;

	assert_int_equal(nfw_runtime_create(&cfg, &rt), 0);
	return rt;
}

static void gates_destroy(void)
{
	for (int i = 0; i < 8; i++)
		sem_destroy(&gate[i]);
	sem_destroy(&gate_entered);
}

/*
 * What a waiting thread may run: with the only executor held inside a
 * completion, nfw_runtime_help() runs a short command at the head of the
 * queue on the calling thread (completing it there, once), refuses a
 * long one -- and a short one queued behind it, which must not overtake
 * -- and an empty queue; once the executor is free it runs the rest.
 */
static void help_runs_short_commands(void **state)
{
	struct nfw_mem m = { tu_alloc(1 << 16), 1 << 16 };
	struct tally *t = tu_alloc(sizeof(*t));
	struct nfw_runtime *rt;
	struct npnm_cmd nop = { .opcode = NPNM_OP_NOP }, c;
	const pthread_t self = pthread_self();

	(void)state;
	gates_init();
	rt = make_gated_rt(&m);
	assert_false(nfw_runtime_help(rt));		/* nothing queued */
	/* Hold the executor: a NOP the test's thread does not help with. */
	assert_int_equal(nfw_runtime_submit(rt, &nop, &gate_owner, 0), 0);
	assert_int_equal(sem_wait(&gate_entered), 0);
	assert_false(nfw_runtime_help(rt));

	/* Short: a NOP, a FILL and a COPY of exactly 4 KiB, a bad FILL. */
	assert_int_equal(nfw_runtime_submit(rt, &nop, t, 1), 0);
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_FILL;
	c.op[0] = (struct npnm_operand){ 1, 0, 0, 4096 };
	c.p.fill.width = 1;
	c.p.fill.pattern = 0x5a;
	assert_int_equal(nfw_runtime_submit(rt, &c, t, 2), 0);
	c.p.fill.width = 3;
	assert_int_equal(nfw_runtime_submit(rt, &c, t, 3), 0);
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_COPY;
	c.op[0] = (struct npnm_operand){ 1, 0, 8192, 4096 };
	c.op[1] = (struct npnm_operand){ 1, 0, 0, 4096 };
	assert_int_equal(nfw_runtime_submit(rt, &c, t, 4), 0);
	for (int i = 0; i < 4; i++)
		assert_true(nfw_runtime_help(rt));
	assert_false(nfw_runtime_help(rt));
	assert_int_equal(atomic_load(&t->total), 4);
	for (unsigned int i = 1; i <= 4; i++) {
		assert_int_equal(atomic_load(&t->seen[i]), 1);
		assert_true(pthread_equal(completer[i], self));
	}
	assert_int_equal(atomic_load(&t->status[3]), NPNM_ST_BAD_PARAM);
	assert_int_equal(atomic_load(&t->status[4]), NPNM_ST_OK);
	for (unsigned int i = 0; i < 4096; i++)
		assert_int_equal(m.base[8192 + i], 0x5a);

	/* Long: a 4 KiB + 1 FILL; the NOP behind it waits for the executor. */
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_FILL;
	c.op[0] = (struct npnm_operand){ 1, 0, 0, 4097 };
	c.p.fill.width = 1;
	assert_int_equal(nfw_runtime_submit(rt, &c, t, 5), 0);
	assert_int_equal(nfw_runtime_submit(rt, &nop, t, 6), 0);
	assert_false(nfw_runtime_help(rt));
	assert_int_equal(atomic_load(&t->total), 4);

	sem_post(&gate[0]);
	wait_total(t, 6);
	nfw_runtime_destroy(rt);
	for (unsigned int i = 5; i <= 6; i++) {
		assert_int_equal(atomic_load(&t->seen[i]), 1);
		assert_int_equal(atomic_load(&t->status[i]), NPNM_ST_OK);
		assert_false(pthread_equal(completer[i], self));
	}
	assert_int_equal(atomic_load(&gate_owner.total), 1);
	gates_destroy();
	free(t);
	free(m.base);
}

struct destroyer {
	struct nfw_runtime *rt;
	unsigned int done_at_return;	/* the gate owner's completions then */
	bool helped;
};

static void *help_once(void *arg)
{
	struct destroyer *x = arg;

	x->helped = nfw_runtime_help(x->rt);
	return NULL;
}

static void *destroy_thread(void *arg)
{
	struct destroyer *x = arg;

	nfw_runtime_destroy(x->rt);
	x->done_at_return = atomic_load(&gate_owner.total);
	return NULL;
}

/*
 * Destroy waits for a command a helper took, as for one an executor
 * runs: with the executor and a helper each held inside a completion,
 * destroy has returned only once both completions are in.  (A destroy
 * that did not wait is caught when it returns before the helper's gate
 * opens -- often, not always; a correct one always passes.)
 */
static void destroy_waits_for_helpers(void **state)
{
	struct nfw_mem m = { tu_alloc(1 << 16), 1 << 16 };
	struct npnm_cmd nop = { .opcode = NPNM_OP_NOP };
	struct destroyer x = { 0 };
	pthread_t helper, destroyer;

	(void)state;
	gates_init();
	x.rt = make_gated_rt(&m);
	assert_int_equal(nfw_runtime_submit(x.rt, &nop, &gate_owner, 0), 0);
	assert_int_equal(sem_wait(&gate_entered), 0);		/* the executor, held */
	assert_int_equal(nfw_runtime_submit(x.rt, &nop, &gate_owner, 1), 0);
	assert_int_equal(pthread_create(&helper, NULL, help_once, &x), 0);
	assert_int_equal(sem_wait(&gate_entered), 0);		/* the helper, held */
	assert_int_equal(pthread_create(&destroyer, NULL, destroy_thread, &x), 0);
	sem_post(&gate[0]);
	sem_post(&gate[1]);
	pthread_join(helper, NULL);
	pthread_join(destroyer, NULL);
	assert_true(x.helped);
	assert_int_equal(x.done_at_return, 2);
	assert_int_equal(atomic_load(&gate_owner.seen[0]), 1);
	assert_int_equal(atomic_load(&gate_owner.seen[1]), 1);
	gates_destroy();
	free(m.base);
}

static void bad_config(void **state)
{
	struct nfw_mem m = { tu_alloc(4096), 4096 };
	struct nfw_runtime_config cfg = { .mem = m, .cores = 0, .complete = on_complete };
	struct nfw_runtime *rt;

	(void)state;
	assert_int_equal(nfw_runtime_create(&cfg, &rt), -EINVAL);
	cfg.cores = 1;
	cfg.complete = NULL;
	assert_int_equal(nfw_runtime_create(&cfg, &rt), -EINVAL);
	cfg.complete = on_complete;
	for (int isa = NFW_ISA_AVX2; isa < NFW_ISA_COUNT; isa++) {
		cfg.isa = (enum nfw_isa)isa;
		if (!nfw_isa_supported(cfg.isa))
			assert_int_equal(nfw_runtime_create(&cfg, &rt), -EOPNOTSUPP);
	}
	free(m.base);
}

static atomic_int seen_cpu_mask;

static void on_complete_cpu(void *owner, uint64_t cookie, const struct nfw_result *res)
{
	int cpu = sched_getcpu();

	atomic_fetch_or(&seen_cpu_mask, cpu >= 0 && cpu < 31 ? 1 << cpu : 1 << 31);
	on_complete(owner, cookie, res);
}

/*
 * Three executors pinned to one CPU run every command there; a CPU this
 * process may not use is refused at creation.
 */
static void pinned_executors(void **state)
{
	struct nfw_mem m = { tu_alloc(1 << 20), 1 << 20 };
	struct nfw_runtime_config cfg = {
		.mem = m, .cores = 3, .isa = NFW_ISA_AUTO, .complete = on_complete_cpu,
	};
	struct tally *t = tu_alloc(sizeof(*t));
	struct nfw_runtime *rt = NULL;
	cpu_set_t allowed;
	int cpu = -1;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	for (int c = 0; c < 31 && cpu < 0; c++)
		if (CPU_ISSET(c, &allowed))
			cpu = c;
	if (cpu < 0)
		skip();
	cfg.cpu_first = (unsigned int)cpu;
	cfg.cpu_count = 1;
	assert_int_equal(nfw_runtime_create(&cfg, &rt), 0);
	for (uint64_t i = 0; i < 200; i++) {
		struct npnm_cmd c = { .opcode = NPNM_OP_NOP };

		assert_int_equal(nfw_runtime_submit(rt, &c, t, i), 0);
	}
	wait_total(t, 200);
	nfw_runtime_destroy(rt);
	for (unsigned int i = 0; i < 200; i++)
		assert_int_equal(atomic_load(&t->status[i]), NPNM_ST_OK);
	assert_int_equal(atomic_load(&seen_cpu_mask), 1 << cpu);
	for (unsigned int c = 0; c < CPU_SETSIZE; c++)
		if (!CPU_ISSET(c, &allowed)) {
			cfg.cpu_first = c;
			assert_int_equal(nfw_runtime_create(&cfg, &rt), -EINVAL);
			break;
		}
	cfg.cpu_first = CPU_SETSIZE - 1;
	cfg.cpu_count = 2;	/* runs past the end of any CPU set */
	assert_int_equal(nfw_runtime_create(&cfg, &rt), -EINVAL);
	free(t);
	free(m.base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exactly_once_stress),
		cmocka_unit_test(split_batches),
		cmocka_unit_test(split_batch_invalid),
		cmocka_unit_test(cancel_and_destroy),
		cmocka_unit_test(help_runs_short_commands),
		cmocka_unit_test(destroy_waits_for_helpers),
		cmocka_unit_test(bad_config),
		cmocka_unit_test(pinned_executors),
	};

	tu_init("fw_runtime");
	return cmocka_run_group_tests_name("fw_runtime", tests, NULL, NULL);
}
