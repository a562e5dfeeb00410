// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm against mutated KV_WRITE commands: a valid write -- packed
 * and scattered, with a kv_stride where the device takes one, int8 where
 * it reads 8-bit types -- mutated one to three fields at a time
 * (parameters, operand offsets and lengths, strides, the source's table
 * entries and scatter indices; boundary values mostly) and executed.
 * Whatever the answer:
 *
 * - a command refused at submission or failed on the device writes
 *   nothing;
 * - a completed one writes only inside its destination operand;
 * - a region no operand names never changes.
 *
 * On the debug kernel KASAN watches the mock's accesses as well.  The seed
 * is printed; NPNM_FUZZ_SEED replays it.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <time.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

#define REG 65536u
#define D 64u
#define ROW (D * 2)
#define ITERS 1500

FIXTURE(fz) {
	int fd;
	struct npnm_mem_alloc src, dst, by;
	__u8 *s, *d, *b, *want, *zero, *pattern;
	struct npnm_info info;
	__u64 rng;
};

static __u64 next(__u64 *x)
{
	__u64 z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static __u8 *map(struct __test_metadata *_metadata, int fd, const struct npnm_mem_alloc *m)
{
	__u8 *p = mmap(NULL, REG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, m->mmap_offset);

	ASSERT_NE(MAP_FAILED, p);
	return p;
}

FIXTURE_SETUP(fz)
{
	const char *seed = getenv("NPNM_FUZZ_SEED");

	self->fd = open(NPNM_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, npnm_ioctl(self->fd, NPNM_IOC_GET_INFO, &self->info));
	ASSERT_EQ(0, npnm_alloc(self->fd, REG, &self->src));
	ASSERT_EQ(0, npnm_alloc(self->fd, REG, &self->dst));
	ASSERT_EQ(0, npnm_alloc(self->fd, REG, &self->by));
	self->s = map(_metadata, self->fd, &self->src);
	self->d = map(_metadata, self->fd, &self->dst);
	self->b = map(_metadata, self->fd, &self->by);
	self->want = malloc(REG);
	self->zero = calloc(1, REG);
	self->pattern = malloc(REG);
	ASSERT_NE(NULL, self->want);
	ASSERT_NE(NULL, self->zero);
	ASSERT_NE(NULL, self->pattern);
	memset(self->pattern, 0x5a, REG);
	self->rng = seed ? strtoull(seed, NULL, 0) : (__u64)time(NULL) * 2654435761ULL;
	TH_LOG("seed 0x%llx (replay: NPNM_FUZZ_SEED=0x%llx)", (unsigned long long)self->rng,
	       (unsigned long long)self->rng);
}

FIXTURE_TEARDOWN(fz)
{
	munmap(self->s, REG);
	munmap(self->d, REG);
	munmap(self->b, REG);
	free(self->want);
	free(self->zero);
	free(self->pattern);
	close(self->fd);
}

/* A value a careless or hostile host would write: boundaries mostly. */
static __u64 nasty(__u64 *rng, __u64 near)
{
	static const __u64 fixed[] = { 0, 1, 2, 63, 64, 65, 2048, 4096, 32768, REG - 1, REG,
				       REG + 1, 0x7fffffff, 0xffffffff, 0x100000000ULL, ~0ULL };

	switch (next(rng) % 4) {
	case 0:
		return fixed[next(rng) % ARRAY_SIZE(fixed)];
	case 1:
		return near + next(rng) % 129 - 64;
	case 2:
		return near ^ (1ULL << (next(rng) % 64));
	default:
		return next(rng) >> (next(rng) % 64);
	}
}

static void put(void *p, unsigned int size, __u64 v)
{
	for (unsigned int i = 0; i < size; i++)
		((__u8 *)p)[i] = (__u8)(v >> (8 * i));
}

static __u64 get(const void *p, unsigned int size)
{
	__u64 v = 0;

	for (unsigned int i = 0; i < size; i++)
		v |= (__u64)((const __u8 *)p)[i] << (8 * i);
	return v;
}

/*
 * The valid write of variant @k into @c and the source: 40 rows in 3
 * clusters of a store of 200 tokens; k 0 scattered, 1 with K and V
 * blocks adjacent, 2 int8 tiles (1088 bytes at head dim 64).
 */
static void base(struct _test_data_fz *self, int k, struct npnm_cmd *c)
{
	const struct npnm_cluster t[3] = { { 0, 10 }, { 10, 20 }, { 30, 10 } };
	const __u32 rows = k == 2 ? 3 * 1088 : 40 * ROW;
	struct npnm_kv_write_params *p = &c->p.kv_write;

	memset(c, 0, sizeof(*c));
	c->opcode = NPNM_OP_KV_WRITE;
	c->op[NPNM_KV_SRC] = (struct npnm_operand){ .handle = self->src.handle, .len = REG };
	c->op[NPNM_KV_DST] = (struct npnm_operand){ .handle = self->dst.handle, .len = REG };
	*p = (struct npnm_kv_write_params){
		.k_off = 0, .v_off = 16384, .table_off = 49152, .nr_tokens = 40,
		.nr_clusters = 3, .max_tokens = 200, .max_clusters = 64, .head_dim = D,
		.kv_dtype = k == 2 ? NPNM_DTYPE_INT8 : NPNM_DTYPE_BF16,
	};
	for (__u32 i = 0; i < 2 * rows; i++)
		self->s[i] = (__u8)(i * 13 + 1);
	memcpy(self->s + 2 * rows, t, sizeof(t));
	if (k == 0) {
		__u32 *idx = (__u32 *)(self->s + 2 * rows + sizeof(t));

		for (__u32 i = 0; i < 40; i++)
			idx[i] = (i * 7 + 3) % 40;
		p->flags = NPNM_KV_F_SCATTER;
	} else if (k == 1) {
		p->v_off = 16 * ROW;
		p->kv_stride = 2 * 16 * ROW;
		p->table_off = 13 * p->kv_stride;
	}
}

/* The source's bytes after its K and V rows: table entries, scatter indices. */
static __u32 source_tail(int k)
{
	return 2 * (k == 2 ? 3 * 1088 : 40 * ROW);
}

static void mutate(struct _test_data_fz *self, int k, struct npnm_cmd *c, char *what, size_t len)
{
	static const unsigned int sizes[] = { 1, 2, 4, 8 };
	unsigned int size = sizes[next(&self->rng) % 4], at;

	switch (next(&self->rng) % 5) {
	case 0:
		at = (unsigned int)(next(&self->rng) % (sizeof(c->p.kv_write) / size)) * size;
		put((__u8 *)&c->p + at, size, nasty(&self->rng, get((__u8 *)&c->p + at, size)));
		snprintf(what, len, "p byte %u (%u bytes)", at, size);
		break;
	case 1: {
		unsigned int slot = next(&self->rng) % 2, is_len = next(&self->rng) % 2;
		__u64 *f = is_len ? &c->op[slot].len : &c->op[slot].offset;

		*f = nasty(&self->rng, *f);
		snprintf(what, len, "operand %u %s", slot, is_len ? "len" : "offset");
		break;
	}
	case 2: {
		static const __u32 st[] = { 0, 64, 1984, 2048, 2080, 4096, 4160, 1u << 20,
					    0xffffffc0 };

		c->p.kv_write.kv_stride = st[next(&self->rng) % ARRAY_SIZE(st)];
		snprintf(what, len, "kv_stride %u", c->p.kv_write.kv_stride);
		break;
	}
	default:	/* the source's table entries and scatter indices */
		at = source_tail(k) + (unsigned int)(next(&self->rng) % 200) * 4 / size * size;
		put(self->s + at, size, nasty(&self->rng, get(self->s + at, size)));
		snprintf(what, len, "source byte %u (%u bytes)", at, size);
		break;
	}
}

TEST_F(fz, kv_write_mutations)
{
	__u32 accepted = 0, refused = 0;

	memset(self->b, 0x5a, REG);
	for (int i = 0; i < ITERS; i++) {
		int k = i % 3, n = 1 + (int)(next(&self->rng) % 3), ret;
		char what[3][48] = { "", "", "" };
		__u64 lo, hi;
		__u32 status = 0;
		struct npnm_cmd c;

		if (k == 2 && !(self->info.kv_dtypes & (1u << NPNM_DTYPE_INT8)))
			k = 0;
		base(self, k, &c);
		memset(self->d, 0, REG);
		for (int j = 0; j < n; j++)
			mutate(self, k, &c, what[j], sizeof(what[j]));
		memcpy(self->want, self->s, REG);
		ret = npnm_exec(self->fd, &c, &status);
		/* The source and the bystander never change. */
		ASSERT_EQ(0, memcmp(self->s, self->want, REG))
			TH_LOG("iteration %d (%s; %s; %s): the source changed", i, what[0],
			       what[1], what[2]);
		ASSERT_EQ(0, memcmp(self->b, self->pattern, REG))
			TH_LOG("iteration %d (%s; %s; %s): the bystander region changed", i,
			       what[0], what[1], what[2]);
		/*
		 * Written only inside the destination operand (which the driver
		 * checked lies in the region), and only when it completed.
		 */
		lo = ret ? REG : c.op[NPNM_KV_DST].offset;
		hi = ret ? REG : c.op[NPNM_KV_DST].offset + c.op[NPNM_KV_DST].len;
		/* The driver refuses an operand past its region; were it not to: */
		ASSERT_LE(hi, REG);
		ASSERT_EQ(0, memcmp(self->d, self->zero, lo))
			TH_LOG("iteration %d (%s; %s; %s) ret %d status %u: wrote below dst",
			       i, what[0], what[1], what[2], ret, status);
		ASSERT_EQ(0, memcmp(self->d + hi, self->zero, REG - hi))
			TH_LOG("iteration %d (%s; %s; %s) ret %d status %u: wrote past dst",
			       i, what[0], what[1], what[2], ret, status);
		if (ret)
			refused++;
		else
			accepted++;
	}
	TH_LOG("%u completed, %u refused or failed", accepted, refused);
	EXPECT_LT(0, accepted);
	EXPECT_LT(0, refused);
}

TEST_HARNESS_MAIN
