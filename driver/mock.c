// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: mock backend
 *
 * An in-kernel PNM device, in the spirit of null_blk and cxl_test: device
 * memory is vmalloc()ed kernel memory, and memory-class commands (NOP,
 * FILL, COPY, KV_WRITE) run on a workqueue whose concurrency plays the device's
 * cores, after a configurable delay that exercises asynchronous completion
 * and the watchdog.  Compute commands complete with NPNM_ST_UNSUPPORTED:
 * the firmware that runs them lives on the real card (PCI backend).
 */
#include <linux/delay.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/vmalloc.h>

#include "npnm.h"

static unsigned int mock_cores = 2;
module_param(mock_cores, uint, 0444);
MODULE_PARM_DESC(mock_cores, "worker concurrency of each mock device (1-64, default 2)");

static unsigned int mock_delay_us;
module_param(mock_delay_us, uint, 0644);
MODULE_PARM_DESC(mock_delay_us, "delay before a mock command runs, in microseconds (default 0)");

#define NPNM_MOCK_MAX_HEAD_DIM 256

struct npnm_mock {
	struct workqueue_struct *wq;
};

static bool zero_bytes(const void *p, size_t n)
{
	return !memchr_inv(p, 0, n);
}

/* Operand slots: used ones present, unused ones all zero (as the firmware). */
static u32 mock_check_common(const struct npnm_cmd *c, unsigned int used, size_t param_bytes)
{
	unsigned int i;

	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		bool in_use = used & BIT(i);

		if (!in_use && !zero_bytes(&c->op[i], sizeof(c->op[i])))
			return NPNM_ST_BAD_RESERVED;
		if (in_use && !c->op[i].handle)
			return NPNM_ST_BAD_OPERAND;
	}
	if (!zero_bytes((const u8 *)&c->p + param_bytes, sizeof(c->p) - param_bytes))
		return NPNM_ST_BAD_RESERVED;
	return NPNM_ST_OK;
}

static u32 mock_fill(struct npnm_device *ndev, const struct npnm_cmd *c)
{
	const struct npnm_fill_params *f = &c->p.fill;
	u8 *dst = ndev->mem + c->op[NPNM_FILL_DST].offset;
	u64 len = c->op[NPNM_FILL_DST].len, i;
	u32 st = mock_check_common(c, BIT(NPNM_FILL_DST), sizeof(*f));

	if (st)
		return st;
	if (f->pad)
		return NPNM_ST_BAD_RESERVED;
	if (f->width != 1 && f->width != 2 && f->width != 4 && f->width != 8)
		return NPNM_ST_BAD_PARAM;
	if ((f->width < 8 && (f->pattern >> (8 * f->width))) || len % f->width)
		return NPNM_ST_BAD_PARAM;
	if (f->width == 1) {
		memset(dst, (int)f->pattern, len);
		return NPNM_ST_OK;
	}
	for (i = 0; i < len; i++)
		dst[i] = (u8)(f->pattern >> (8 * (i % f->width)));
	return NPNM_ST_OK;
}

static u32 mock_copy(struct npnm_device *ndev, const struct npnm_cmd *c)
{
	u32 st = mock_check_common(c, BIT(NPNM_COPY_DST) | BIT(NPNM_COPY_SRC), 0);

	if (st)
		return st;
	if (c->op[NPNM_COPY_DST].len != c->op[NPNM_COPY_SRC].len)
		return NPNM_ST_BAD_PARAM;
	memmove(ndev->mem + c->op[NPNM_COPY_DST].offset, ndev->mem + c->op[NPNM_COPY_SRC].offset,
		c->op[NPNM_COPY_DST].len);
	return NPNM_ST_OK;
}

/*
 * KV_WRITE, with the firmware's rules (firmware/kern_kv.c): the whole store
 * at capacity inside the destination, rows and table entries inside the
 * capacities, and scatter indices read once and checked where used.
 */
static u32 mock_kv_check(struct npnm_device *ndev, const struct npnm_cmd *c, u64 *src_idx)
{
	const struct npnm_kv_write_params *p = &c->p.kv_write;
	const struct npnm_operand *src = &c->op[NPNM_KV_SRC], *dst = &c->op[NPNM_KV_DST];
	u64 row = (u64)p->head_dim * 2, src_table = 2 * row * p->nr_tokens, src_len;
	const struct npnm_cluster *table;
	u32 st, i;

	st = mock_check_common(c, BIT(NPNM_KV_SRC) | BIT(NPNM_KV_DST), sizeof(*p));
	if (st)
		return st;
	if (p->pad || (p->flags & ~NPNM_KV_F_SCATTER))
		return NPNM_ST_BAD_RESERVED;
	if ((p->kv_dtype != NPNM_DTYPE_BF16 && p->kv_dtype != NPNM_DTYPE_FP16) ||
	    !p->head_dim || p->head_dim > NPNM_MOCK_MAX_HEAD_DIM)
		return NPNM_ST_BAD_PARAM;
	*src_idx = src_table + (u64)p->nr_clusters * sizeof(*table);
	src_len = *src_idx + ((p->flags & NPNM_KV_F_SCATTER) ? 4ULL * p->nr_tokens : 0);
	if (src_len > src->len ||
	    p->k_off > dst->len || row * p->max_tokens > dst->len - p->k_off ||
	    p->v_off > dst->len || row * p->max_tokens > dst->len - p->v_off ||
	    p->table_off > dst->len ||
	    (u64)p->max_clusters * sizeof(*table) > dst->len - p->table_off)
		return NPNM_ST_BAD_OPERAND;
	if ((dst->offset + p->k_off) % 2 || (dst->offset + p->v_off) % 2 ||
	    (dst->offset + p->table_off) % 4 || src->offset % 4 || src_table % 4)
		return NPNM_ST_BAD_PARAM;
	if (!(p->flags & NPNM_KV_F_SCATTER) && (u64)p->first_token + p->nr_tokens > p->max_tokens)
		return NPNM_ST_BAD_PARAM;
	if ((u64)p->first_cluster + p->nr_clusters > p->max_clusters)
		return NPNM_ST_BAD_PARAM;
	if (p->flags & NPNM_KV_F_SCATTER) {
		const u32 *idx = ndev->mem + src->offset + *src_idx;

		for (i = 0; i < p->nr_tokens; i++)
			if (READ_ONCE(idx[i]) >= p->max_tokens)
				return NPNM_ST_BAD_PARAM;
	}
	table = ndev->mem + src->offset + src_table;
	for (i = 0; i < p->nr_clusters; i++) {
		u32 first = READ_ONCE(table[i].first), count = READ_ONCE(table[i].count);

		if (first > p->max_tokens || count > p->max_tokens - first)
			return NPNM_ST_BAD_CLUSTER;
	}
	return NPNM_ST_OK;
}

static u32 mock_kv_write(struct npnm_device *ndev, const struct npnm_cmd *c)
{
	const struct npnm_kv_write_params *p = &c->p.kv_write;
	u8 *src = ndev->mem + c->op[NPNM_KV_SRC].offset;
	u8 *dst = ndev->mem + c->op[NPNM_KV_DST].offset;
	u64 row = (u64)p->head_dim * 2, src_idx;
	u32 st = mock_kv_check(ndev, c, &src_idx), i;

	if (st)
		return st;
	if (p->flags & NPNM_KV_F_SCATTER) {
		const u32 *idx = (const u32 *)(src + src_idx);

		for (i = 0; i < p->nr_tokens; i++) {
			u64 to = READ_ONCE(idx[i]);

			/* Rewritten by the host since the check: skip, never overflow. */
			if (to >= p->max_tokens)
				continue;
			memcpy(dst + p->k_off + to * row, src + i * row, row);
			memcpy(dst + p->v_off + to * row, src + (p->nr_tokens + i) * row, row);
		}
	} else {
		memmove(dst + p->k_off + p->first_token * row, src, row * p->nr_tokens);
		memmove(dst + p->v_off + p->first_token * row, src + row * p->nr_tokens,
			row * p->nr_tokens);
	}
	memmove(dst + p->table_off + (u64)p->first_cluster * sizeof(struct npnm_cluster),
		src + 2 * row * p->nr_tokens,
		(u64)p->nr_clusters * sizeof(struct npnm_cluster));
	return NPNM_ST_OK;
}

static void mock_work(struct work_struct *work)
{
	struct npnm_kcmd *kc = container_of(work, struct npnm_kcmd, work);
	struct npnm_device *ndev = kc->ctx->ndev;
	unsigned int delay = READ_ONCE(mock_delay_us);
	u32 status;

	if (delay)
		fsleep(delay);
	/* Expired by the watchdog meanwhile: its memory must not be touched. */
	if (atomic_read(&kc->done)) {
		npnm_kcmd_put(kc);
		return;
	}
	switch (kc->desc.opcode) {
	case NPNM_OP_NOP:
		status = mock_check_common(&kc->desc, 0, 0);
		break;
	case NPNM_OP_FILL:
		status = mock_fill(ndev, &kc->desc);
		break;
	case NPNM_OP_COPY:
		status = mock_copy(ndev, &kc->desc);
		break;
	case NPNM_OP_KV_WRITE:
		status = mock_kv_write(ndev, &kc->desc);
		break;
	case NPNM_OP_SPARSE_ATTN:
	case NPNM_OP_SELFTEST:
		status = NPNM_ST_UNSUPPORTED;
		break;
	default:
		status = NPNM_ST_BAD_OPCODE;
		break;
	}
	npnm_cmd_complete(kc, status, 0);
	npnm_kcmd_put(kc);	/* the backend's reference */
}

static void mock_submit(struct npnm_device *ndev, struct npnm_kcmd *kc)
{
	struct npnm_mock *m = ndev->priv;

	INIT_WORK(&kc->work, mock_work);
	queue_work(m->wq, &kc->work);
}

static int mock_reset(struct npnm_device *ndev)
{
	struct npnm_mock *m = ndev->priv;

	/* Commands the watchdog expired may still sit in the queue: drain them. */
	flush_workqueue(m->wq);
	return 0;
}

static const struct npnm_backend_ops mock_ops = {
	.name = "mock",
	.submit = mock_submit,
	.reset = mock_reset,
};

int npnm_mock_create(int id, u64 mem_bytes, struct npnm_device **out)
{
	struct npnm_device *ndev;
	struct npnm_mock *m;
	int ret = -ENOMEM;

	if (!mock_cores || mock_cores > 64)
		return -EINVAL;
	ndev = kzalloc(sizeof(*ndev), GFP_KERNEL);
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!ndev || !m)
		goto err;
	ndev->id = id;
	ndev->ops = &mock_ops;
	ndev->priv = m;
	ndev->mem_size = mem_bytes;
	ndev->mem_avail = mem_bytes - PAGE_SIZE;
	ndev->nr_cores = mock_cores;
	ndev->opcodes = BIT_ULL(NPNM_OP_NOP) | BIT_ULL(NPNM_OP_FILL) | BIT_ULL(NPNM_OP_COPY) |
			BIT_ULL(NPNM_OP_KV_WRITE);
	ndev->caps = NPNM_CAP_MMAP | NPNM_CAP_URING_CMD | NPNM_CAP_CQE32_STATUS |
		     NPNM_CAP_KV_SCATTER;
	ndev->kv_dtypes = BIT(NPNM_DTYPE_BF16) | BIT(NPNM_DTYPE_FP16);
	ndev->max_head_dim = NPNM_MOCK_MAX_HEAD_DIM;
	ndev->mem = vzalloc(mem_bytes);
	if (!ndev->mem)
		goto err;
	/* Page-granular pool; the first page is kept back so 0 means "none". */
	ndev->pool = gen_pool_create(PAGE_SHIFT, NUMA_NO_NODE);
	if (!ndev->pool)
		goto err;
	ret = gen_pool_add(ndev->pool, PAGE_SIZE, mem_bytes - PAGE_SIZE, NUMA_NO_NODE);
	if (ret)
		goto err;
	ret = -ENOMEM;
	m->wq = alloc_workqueue("nelssa_pnm%d", WQ_UNBOUND, mock_cores, id);
	if (!m->wq)
		goto err;
	*out = ndev;
	return 0;

err:
	if (ndev && ndev->pool)
		gen_pool_destroy(ndev->pool);
	if (ndev)
		vfree(ndev->mem);
	kfree(m);
	kfree(ndev);
	return ret;
}

void npnm_mock_destroy(struct npnm_device *ndev)
{
	struct npnm_mock *m = ndev->priv;

	destroy_workqueue(m->wq);
	gen_pool_destroy(ndev->pool);
	vfree(ndev->mem);
	kfree(m);
	kfree(ndev);
}
