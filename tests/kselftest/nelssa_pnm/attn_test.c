// SPDX-License-Identifier: GPL-2.0-only
/*
 * SPARSE_ATTN through the whole kernel path on PCI devices: a Llama-like
 * layer (8 KV heads, GQA group 4, head dim 128, bf16 KV) with fresh random
 * data each run, KV placed head-wise across the devices in NPNM_ATTN_DEVS
 * (head h on device h % n), submitted through the ioctl on some devices and
 * io_uring on the others, every output compared with float64 attention
 * computed here.  Once with binary32 products and once with
 * NPNM_ATTN_F_BF16_DOTS, whose reference rounds the queries to bf16.
 */
#define _GNU_SOURCE
#include <liburing.h>
#include <math.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "kselftest_harness.h"
#include "npnm_test.h"

#define HEADS 8
#define G 4
#define D 128
#define TOKENS 1024
#define CLUSTER 16
#define NCL (TOKENS / CLUSTER)
#define NSEL 13
#define MAXDEV 4
/* fp32 accumulation over 208 tokens errs near 1e-6; a bug errs near 1. */
#define TOL 0.0001
/*
 * P.V's bf16 weights, each within 2^-8 relative (RNE, 8 significant
 * bits), move o by at most 2^-8 max|v| (|v| <= 2); twice that for margin.
 */
#define TOL_BF16_O (TOL + 2.0 * 2.0 / 256.0)
/* The two-token case: fp32 rounding of one exp and one divide, and the flag's effect. */
#define TOL_EXACT 0.0000004f
#define BF16_EFFECT 0.0002f

static __u64 rng_state;

static __u64 rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static float frand(void)
{
	return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

/* bf16, round to nearest even (inputs are finite). */
static __u16 to_bf16(float f)
{
	__u32 u;

	memcpy(&u, &f, 4);
	return (__u16)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static double from_bf16(__u16 h)
{
	__u32 u = (__u32)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

#define KV_BYTES (2ULL * TOKENS * D * 2 + NCL * 8)
#define IN_STRIDE 4096ULL
#define OUT_STRIDE 4096ULL
#define REGION (4ULL << 20)
#define KV_OFF 4096ULL
#define ALIGN_4K(x) (((x) + 4095) & ~4095ULL)
#define IN_OFF ALIGN_4K(KV_OFF + (HEADS / 2 + 1) * KV_BYTES)
#define OUT_OFF (IN_OFF + (HEADS / 2 + 1) * IN_STRIDE)

/* The layer: big enough to keep off the stack. */
static float q[HEADS][G][D];
static __u16 k[HEADS][TOKENS][D], v[HEADS][TOKENS][D];
static __u32 sel[HEADS][NSEL];

static void make_layer(void)
{
	for (int h = 0; h < HEADS; h++) {
		__u32 start = (__u32)(rnd() % NCL);

		for (int r = 0; r < G; r++)
			for (int i = 0; i < D; i++)
				q[h][r][i] = frand();
		for (int t = 0; t < TOKENS; t++)
			for (int i = 0; i < D; i++) {
				k[h][t][i] = to_bf16(frand());
				v[h][t][i] = to_bf16(frand());
			}
		/* Distinct ids: a stride coprime to NCL. */
		for (int s = 0; s < NSEL; s++)
			sel[h][s] = (start + 5 * (__u32)s) % NCL;
	}
}

/* Item @n of a device holds head @h; returns the SPARSE_ATTN item. */
static struct npnm_attn_item place_head(__u8 *m, int n, int h)
{
	__u64 ko = n * KV_BYTES, io = n * IN_STRIDE, oo = n * OUT_STRIDE;
	struct npnm_cluster *t = (struct npnm_cluster *)(m + KV_OFF + ko + 2ULL * TOKENS * D * 2);

	memcpy(m + KV_OFF + ko, k[h], sizeof(k[h]));
	memcpy(m + KV_OFF + ko + TOKENS * D * 2, v[h], sizeof(v[h]));
	for (int c = 0; c < NCL; c++)
		t[c] = (struct npnm_cluster){ c * CLUSTER, CLUSTER };
	memcpy(m + IN_OFF + io, q[h], sizeof(q[h]));
	memcpy(m + IN_OFF + io + G * D * 4, sel[h], sizeof(sel[h]));
	return (struct npnm_attn_item){
		.k_off = ko, .v_off = ko + TOKENS * D * 2, .table_off = ko + 2ULL * TOKENS * D * 2,
		.q_off = io, .sel_off = io + G * D * 4, .o_off = oo, .lse_off = oo + G * D * 4,
		.nr_tokens = TOKENS, .nr_clusters = NCL, .nr_sel = NSEL,
	};
}

static struct npnm_cmd attn_cmd(__u32 handle, int nr_items, __u32 flags)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_SPARSE_ATTN;
	c.op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ handle, 0, 0, KV_OFF };
	c.op[NPNM_ATTN_KV] = (struct npnm_operand){ handle, 0, KV_OFF, IN_OFF - KV_OFF };
	c.op[NPNM_ATTN_IN] = (struct npnm_operand){ handle, 0, IN_OFF, OUT_OFF - IN_OFF };
	c.op[NPNM_ATTN_OUT] = (struct npnm_operand){ handle, 0, OUT_OFF, REGION - OUT_OFF };
	c.p.attn = (struct npnm_sparse_attn_params){
		.nr_items = nr_items, .head_dim = D, .group = G, .kv_dtype = NPNM_DTYPE_BF16,
		.flags = flags,
	};
	return c;
}

/* One command through io_uring; its CQE's result. */
static int exec_uring(int fd, const struct npnm_cmd *c, __u32 *status)
{
	struct npnm_exec ex = { .cmd_ptr = (uintptr_t)c };
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	struct io_uring ring;
	int ret;

	if (io_uring_queue_init(4, &ring, IORING_SETUP_CQE32))
		return -ENOMEM;
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_read(sqe, fd, NULL, 0, 0);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->cmd_op = NPNM_IOC_EXEC;
	memcpy(sqe->cmd, &ex, sizeof(ex));
	ret = io_uring_submit(&ring) == 1 ? io_uring_wait_cqe(&ring, &cqe) : -EIO;
	if (!ret) {
		ret = cqe->res;
		*status = NPNM_RES2_STATUS(cqe->big_cqe[0]);
		io_uring_cqe_seen(&ring, cqe);
	}
	io_uring_queue_exit(&ring);
	return ret;
}

/*
 * float64 attention of head @h, row @r over the selected clusters, the
 * queries rounded to bf16 where @flags asks; the largest error of @o
 * (fp32 [D]) and of @lse.
 */
static void reference(int h, int r, __u32 flags, const float *o, float lse, double *err_o,
		      double *err_l)
{
	const double scale = 1.0 / sqrt((double)D);
	double mx = -INFINITY, sum = 0.0, ref[D] = { 0 }, logit[NSEL * CLUSTER];
	int n = 0;

	for (int s = 0; s < NSEL; s++)
		for (int j = 0; j < CLUSTER; j++, n++) {
			const __u16 *kt = k[h][sel[h][s] * CLUSTER + j];
			double acc = 0.0;

			for (int i = 0; i < D; i++) {
				double qi = flags ? from_bf16(to_bf16(q[h][r][i])) : q[h][r][i];

				acc += qi * from_bf16(kt[i]);
			}
			logit[n] = acc * scale;
			mx = fmax(mx, logit[n]);
		}
	n = 0;
	for (int s = 0; s < NSEL; s++)
		for (int j = 0; j < CLUSTER; j++, n++) {
			const __u16 *vt = v[h][sel[h][s] * CLUSTER + j];
			double p = exp(logit[n] - mx);

			sum += p;
			for (int i = 0; i < D; i++)
				ref[i] += p * from_bf16(vt[i]);
		}
	*err_o = 0.0;
	for (int i = 0; i < D; i++)
		*err_o = fmax(*err_o, fabs(o[i] - ref[i] / sum));
	*err_l = fabs(lse - (mx + log(sum))) / (1.0 + fabs(mx));
}

/* The layer over the devices in NPNM_ATTN_DEVS, SPARSE_ATTN with @flags. */
static void layer(struct __test_metadata *_metadata, __u32 flags)
{
	const char *env = getenv("NPNM_ATTN_DEVS");
	char list[256], *save = NULL, *tok;
	struct npnm_mem_alloc ma[MAXDEV];
	int fds[MAXDEV], ndev = 0;
	__u8 *maps[MAXDEV];

	if (!env)
		SKIP(return, "NPNM_ATTN_DEVS not set");
	ASSERT_EQ(sizeof(rng_state), getrandom(&rng_state, sizeof(rng_state), 0));
	rng_state |= 1;
	TH_LOG("seed %#llx", (unsigned long long)rng_state);
	snprintf(list, sizeof(list), "%s", env);
	for (tok = strtok_r(list, ":", &save); tok && ndev < MAXDEV;
	     tok = strtok_r(NULL, ":", &save), ndev++) {
		fds[ndev] = open(tok, O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, fds[ndev]);
		ASSERT_EQ(0, npnm_alloc(fds[ndev], REGION, &ma[ndev]));
		maps[ndev] = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fds[ndev],
				  ma[ndev].mmap_offset);
		ASSERT_NE(MAP_FAILED, maps[ndev]);
	}
	ASSERT_LE(2, ndev);
	for (int dv = 0; dv < ndev; dv++) {
		struct npnm_info info;

		ASSERT_EQ(0, npnm_ioctl(fds[dv], NPNM_IOC_GET_INFO, &info));
		if (flags & ~info.attn_flags)
			SKIP(return, "a device does not take attention flags %#x", flags);
	}
	make_layer();

	for (int dv = 0; dv < ndev; dv++) {
		struct npnm_attn_item *items = (struct npnm_attn_item *)maps[dv];
		struct npnm_cmd c;
		__u32 status = 0;
		int n = 0;

		/* Head-wise placement: head h lives on device h % ndev. */
		for (int h = dv; h < HEADS; h += ndev, n++)
			items[n] = place_head(maps[dv], n, h);
		c = attn_cmd(ma[dv].handle, n, flags);
		/* Even devices through the ioctl, odd ones through io_uring. */
		ASSERT_EQ(0, dv % 2 == 0 ? npnm_exec(fds[dv], &c, &status) :
					   exec_uring(fds[dv], &c, &status));
		EXPECT_EQ(NPNM_ST_OK, status);
		n = 0;
		for (int h = dv; h < HEADS; h += ndev, n++) {
			const float *o = (const float *)(maps[dv] + OUT_OFF + n * OUT_STRIDE);

			for (int r = 0; r < G; r++) {
				double err_o, err_l;

				reference(h, r, flags, o + r * D, o[G * D + r], &err_o, &err_l);
				EXPECT_GT(flags ? TOL_BF16_O : TOL, err_o);
				EXPECT_GT(TOL, err_l);
			}
		}
	}
	for (int dv = 0; dv < ndev; dv++) {
		munmap(maps[dv], REGION);
		close(fds[dv]);
	}
}

TEST(head_wise_over_devices)
{
	layer(_metadata, 0);
}

TEST(head_wise_bf16_dots)
{
	layer(_metadata, NPNM_ATTN_F_BF16_DOTS);
}

/*
 * That the card applies the flag, not merely accepts it: two tokens, a zero
 * V row under logit 0 and a V row of ones under logit c = bf16(-0.3571),
 * so every output is w' / (1 + w) with w = e^c and w' its bf16 rounding --
 * 3.7e-4 relative from the w / (1 + w) of binary32 products.
 */
TEST(bf16_dots_round_the_weights)
{
	const char *env = getenv("NPNM_ATTN_DEVS");
	char dev[64], *colon;
	struct npnm_mem_alloc ma;
	struct npnm_attn_item *it;
	struct npnm_info info;
	struct npnm_cmd c;
	__u16 *kv;
	float *q, *o, cq, w, w16, want;
	__u32 status = 0;
	__u8 *m;
	int fd;

	if (!env)
		SKIP(return, "NPNM_ATTN_DEVS not set");
	snprintf(dev, sizeof(dev), "%s", env);
	colon = strchr(dev, ':');
	if (colon)
		*colon = 0;
	fd = open(dev, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, npnm_ioctl(fd, NPNM_IOC_GET_INFO, &info));
	if (!(info.attn_flags & NPNM_ATTN_F_BF16_DOTS))
		SKIP(return, "%s does not take bf16 dot products", dev);
	ASSERT_EQ(0, npnm_alloc(fd, REGION, &ma));
	m = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fd, ma.mmap_offset);
	ASSERT_NE(MAP_FAILED, m);
	memset(m, 0, REGION);
	kv = (__u16 *)(m + KV_OFF);	/* K rows 0, 1; V rows 0, 1; the table */
	kv[D] = to_bf16(1.0f);
	for (int i = 0; i < D; i++)
		kv[3 * D + i] = to_bf16(1.0f);
	((struct npnm_cluster *)(kv + 4 * D))[0] = (struct npnm_cluster){ 0, 2 };
	q = (float *)(m + IN_OFF);
	for (int r = 0; r < G; r++)
		for (int i = 0; i < D; i++)
			q[r * D + i] = i ? 0.25f : -0.3571f;
	/* The selection (cluster 0) is the zero word after the queries. */
	it = (struct npnm_attn_item *)m;
	*it = (struct npnm_attn_item){
		.k_off = 0, .v_off = 2 * D * 2, .table_off = 4 * D * 2, .q_off = 0,
		.sel_off = G * D * 4, .o_off = 0, .lse_off = G * D * 4, .nr_tokens = 2,
		.nr_clusters = 1, .nr_sel = 1,
	};
	c = attn_cmd(ma.handle, 1, NPNM_ATTN_F_BF16_DOTS);
	c.p.attn.scale_f32 = 0x3f800000;	/* 1.0 */
	ASSERT_EQ(0, npnm_exec(fd, &c, &status));
	ASSERT_EQ(NPNM_ST_OK, status);
	cq = (float)from_bf16(to_bf16(-0.3571f));
	w = expf(cq);
	w16 = (float)from_bf16(to_bf16(w));
	want = w16 / (1.0f + w);
	ASSERT_LT(BF16_EFFECT * want, fabsf(w / (1.0f + w) - want));
	o = (float *)(m + OUT_OFF);
	for (int r = 0; r < G; r++) {
		EXPECT_GT(TOL_EXACT, fabsf(o[G * D + r] - log1pf(w)));
		for (int i = 0; i < D; i++)
			EXPECT_GT(TOL_EXACT, fabsf(o[r * D + i] - want));
	}
	munmap(m, REGION);
	close(fd);
}

TEST_HARNESS_MAIN
