// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: mock backend
 *
 * An in-kernel PNM device, in the spirit of null_blk and cxl_test: device
 * memory is vmalloc()ed kernel memory, and memory-class commands (NOP,
 * FILL, COPY, KV_WRITE) run on a workqueue whose concurrency plays the
 * device's cores.  Compute commands complete with NPNM_ST_UNSUPPORTED: the
 * firmware that runs them lives on the real card (PCI backend).
 *
 * Tests hold commands deterministically, never by racing a delay: the
 * core's debugfs ``hold`` keeps commands queued (they can still be taken
 * back); the module parameter mock_hold = 1 makes the mock start each
 * command as it is submitted, as a device with a free core for it would,
 * and hold it running until 0 lets it finish.  Starting at submission
 * rather than when the workqueue gets to it means a short deadline always
 * finds a held command running (quarantined), never still queued, however
 * slow the machine.  mock_delay_us adds a delay before each command runs.
 */
#include <linux/delay.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/vmalloc.h>

#include "npnm.h"
#include "npnm_kv_apply.h"
#include "npnm_rules.h"

static unsigned int mock_cores = 2;
module_param(mock_cores, uint, 0444);
MODULE_PARM_DESC(mock_cores, "worker concurrency of each mock device (1-64, default 2)");

static bool mock_kv_stride = true;
module_param(mock_kv_stride, bool, 0444);
MODULE_PARM_DESC(mock_kv_stride,
		 "take kv_stride in KV_WRITE (default true; false: as firmware before 1.2)");

static unsigned int mock_delay_us;
module_param(mock_delay_us, uint, 0644);
MODULE_PARM_DESC(mock_delay_us, "delay before a mock command runs, in microseconds (default 0)");

static unsigned int mock_hold;
static DECLARE_WAIT_QUEUE_HEAD(mock_gate);

static int mock_hold_set(const char *val, const struct kernel_param *kp)
{
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v > 1)
		return -EINVAL;
	WRITE_ONCE(mock_hold, v);
	wake_up_all(&mock_gate);
	return 0;
}

static const struct kernel_param_ops mock_hold_ops = {
	.set = mock_hold_set,
	.get = param_get_uint,
};
module_param_cb(mock_hold, &mock_hold_ops, &mock_hold, 0644);
MODULE_PARM_DESC(mock_hold,
		 "test control: 1 holds started commands running until 0 (default 0)");

#define NPNM_MOCK_MAX_HEAD_DIM 256

struct npnm_mock {
	struct workqueue_struct *wq;
	spinlock_t lock;	/* every command's state */
	bool dying;
};

/**
 * enum mock_cmd_state - where a mock command is.
 * @MOCK_NEW: not handed to the mock yet.
 * @MOCK_QUEUED: accepted, not started: can be taken back.
 * @MOCK_RUNNING: started; it runs to the end.
 * @MOCK_DROPPED: taken back (cancel, reset, removal): it never runs.
 */
enum mock_cmd_state {
	MOCK_NEW,
	MOCK_QUEUED,
	MOCK_RUNNING,
	MOCK_DROPPED,
};

/* The mock's per-command tail (npnm_kcmd_priv()). */
struct npnm_mock_cmd {
	struct work_struct work;
	enum mock_cmd_state state;
	struct npnm_kcmd *kc;
	bool started;		/* started at submission (mock_hold) */
};

static u32 mock_fill(struct npnm_device *ndev, const struct npnm_cmd *c)
{
	const struct npnm_fill_params *f = &c->p.fill;
	u8 *dst = ndev->mem + c->op[NPNM_FILL_DST].offset;
	u64 len = c->op[NPNM_FILL_DST].len, i;

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
	if (c->op[NPNM_COPY_DST].len != c->op[NPNM_COPY_SRC].len)
		return NPNM_ST_BAD_PARAM;
	memmove(ndev->mem + c->op[NPNM_COPY_DST].offset, ndev->mem + c->op[NPNM_COPY_SRC].offset,
		c->op[NPNM_COPY_DST].len);
	return NPNM_ST_OK;
}

/*
 * KV_WRITE, with the firmware's rules (npnm_kv_write_geom() and
 * firmware/kern_kv.c) for the 16-bit types: the whole store at capacity
 * inside the destination, rows and table entries inside the capacities,
 * and scatter indices read once and checked where used.
 */
static u32 mock_kv_check(struct npnm_device *ndev, const struct npnm_cmd *c,
			 struct npnm_kv_write_geom *g)
{
	const struct npnm_kv_write_params *p = &c->p.kv_write;
	const u8 *src = ndev->mem + c->op[NPNM_KV_SRC].offset;
	const struct npnm_cluster *table;
	u32 st, i;

	if (!npnm_kv_elem_bytes(p->kv_dtype))
		return NPNM_ST_BAD_PARAM;
	st = npnm_kv_write_geom(c, NPNM_MOCK_MAX_HEAD_DIM, g);
	if (st)
		return st;
	if (p->flags & NPNM_KV_F_SCATTER) {
		const u32 *idx = (const u32 *)(src + g->src_index);

		for (i = 0; i < p->nr_tokens; i++)
			if (READ_ONCE(idx[i]) >= p->max_tokens)
				return NPNM_ST_BAD_PARAM;
	}
	table = (const struct npnm_cluster *)(src + g->src_table);
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
	u8 *dst = ndev->mem + c->op[NPNM_KV_DST].offset;
	struct npnm_kv_write_geom g;
	u32 st = mock_kv_check(ndev, c, &g);

	if (st)
		return st;
	/* The firmware's copy, to the byte (npnm_kv_apply.h). */
	npnm_kv_write_apply(p, &g, ndev->mem + c->op[NPNM_KV_SRC].offset, dst + p->k_off,
			    dst + p->v_off, dst + p->table_off);
	return NPNM_ST_OK;
}

/* Where the command is: true once it may run, false if it was dropped. */
static bool mock_advance(struct npnm_mock *m, struct npnm_mock_cmd *mc, enum mock_cmd_state to)
{
	bool ok;

	spin_lock(&m->lock);
	ok = mc->state != MOCK_DROPPED && !m->dying;
	if (ok)
		mc->state = to;
	spin_unlock(&m->lock);
	return ok;
}

static bool gate_open(struct npnm_mock *m)
{
	return !READ_ONCE(mock_hold) || READ_ONCE(m->dying);
}

static u32 mock_run(struct npnm_device *ndev, const struct npnm_cmd *c)
{
	/* As a card's firmware does: the shared rules again, on its own copy. */
	u32 st = npnm_rules_check(c);

	if (st)
		return st;
	switch (c->opcode) {
	case NPNM_OP_NOP:
		return NPNM_ST_OK;
	case NPNM_OP_FILL:
		return mock_fill(ndev, c);
	case NPNM_OP_COPY:
		return mock_copy(ndev, c);
	case NPNM_OP_KV_WRITE:
		return mock_kv_write(ndev, c);
	case NPNM_OP_SPARSE_ATTN:
	case NPNM_OP_SELFTEST:
		return NPNM_ST_UNSUPPORTED;
	default:
		return NPNM_ST_BAD_OPCODE;
	}
}

static void mock_work(struct work_struct *work)
{
	struct npnm_mock_cmd *mc = container_of(work, struct npnm_mock_cmd, work);
	struct npnm_kcmd *kc = mc->kc;
	struct npnm_device *ndev = npnm_kcmd_dev(kc);
	struct npnm_mock *m = ndev->priv;
	unsigned int delay = READ_ONCE(mock_delay_us);

	if (!mc->started) {
		if (!mock_advance(m, mc, MOCK_RUNNING))
			goto out;
		npnm_cmd_started(kc);
	}
	if (delay)
		fsleep(delay);
	/* TASK_IDLE: a test may hold it for long; that is not a hung task. */
	wait_event_idle(mock_gate, gate_open(m));
	/* Completed meanwhile (deadline, failure, reset): leave memory alone. */
	if (!atomic_read(&kc->done) && !READ_ONCE(m->dying))
		npnm_cmd_complete(kc, mock_run(ndev, &kc->desc), 0);
out:
	npnm_cmd_release(kc);	/* the backend's reference */
}

static void mock_submit(struct npnm_device *ndev, struct npnm_kcmd *kc)
{
	struct npnm_mock_cmd *mc = npnm_kcmd_priv(kc);
	struct npnm_mock *m = ndev->priv;

	mc->kc = kc;
	mc->started = READ_ONCE(mock_hold);
	INIT_WORK(&mc->work, mock_work);
	spin_lock(&m->lock);
	mc->state = mc->started ? MOCK_RUNNING : MOCK_QUEUED;
	spin_unlock(&m->lock);
	if (mc->started)
		npnm_cmd_started(kc);
	queue_work(m->wq, &mc->work);
}

static bool mock_cancel(struct npnm_device *ndev, struct npnm_kcmd *kc)
{
	struct npnm_mock_cmd *mc = npnm_kcmd_priv(kc);
	struct npnm_mock *m = ndev->priv;
	bool dropped = false;

	spin_lock(&m->lock);
	if (mc->state == MOCK_QUEUED) {
		mc->state = MOCK_DROPPED;
		dropped = true;
	}
	spin_unlock(&m->lock);
	return dropped;
}

/* Every command was completed by the core: drop the held ones, drain. */
static int mock_reset(struct npnm_device *ndev)
{
	struct npnm_mock *m = ndev->priv;

	spin_lock(&m->lock);
	m->dying = true;
	spin_unlock(&m->lock);
	wake_up_all(&mock_gate);
	flush_workqueue(m->wq);
	spin_lock(&m->lock);
	m->dying = false;
	spin_unlock(&m->lock);
	return 0;
}

static const struct npnm_backend_ops mock_ops = {
	.name = "mock",
	.cmd_size = sizeof(struct npnm_mock_cmd),
	.submit = mock_submit,
	.cancel = mock_cancel,
	.reset = mock_reset,
};

int npnm_mock_create(int index, u64 mem_bytes, struct npnm_device **out)
{
	struct npnm_device *ndev;
	struct npnm_mock *m;
	int ret;

	if (!mock_cores || mock_cores > 64)
		return -EINVAL;
	ndev = kzalloc(sizeof(*ndev), GFP_KERNEL);
	if (!ndev)
		return -ENOMEM;
	ret = npnm_device_init(ndev, NULL);
	if (ret)
		return ret;
	ret = -ENOMEM;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		goto err_put;
	spin_lock_init(&m->lock);
	ndev->ops = &mock_ops;
	ndev->priv = m;
	ndev->mem_size = mem_bytes;
	ndev->mem_avail = mem_bytes - PAGE_SIZE;
	ndev->nr_cores = mock_cores;
	ndev->opcodes = BIT_ULL(NPNM_OP_NOP) | BIT_ULL(NPNM_OP_FILL) | BIT_ULL(NPNM_OP_COPY) |
			BIT_ULL(NPNM_OP_KV_WRITE);
	ndev->caps = NPNM_CAP_MMAP | NPNM_CAP_URING_CMD | NPNM_CAP_CQE32_STATUS |
		     NPNM_CAP_KV_SCATTER | (mock_kv_stride ? NPNM_CAP_KV_STRIDE : 0);
	ndev->kv_dtypes = BIT(NPNM_DTYPE_BF16) | BIT(NPNM_DTYPE_FP16);
	ndev->max_head_dim = NPNM_MOCK_MAX_HEAD_DIM;
	ndev->mem = vzalloc(mem_bytes);
	if (!ndev->mem)
		goto err_free;
	/* Page-granular pool; the first page is kept back so 0 means "none". */
	ndev->pool = gen_pool_create(PAGE_SHIFT, NUMA_NO_NODE);
	if (!ndev->pool)
		goto err_free;
	ret = gen_pool_add(ndev->pool, PAGE_SIZE, mem_bytes - PAGE_SIZE, NUMA_NO_NODE);
	if (ret)
		goto err_free;
	ret = -ENOMEM;
	m->wq = alloc_workqueue("nelssa_pnm_mock%d", WQ_UNBOUND, mock_cores, index);
	if (!m->wq)
		goto err_free;
	ret = npnm_device_register(ndev);
	if (ret)
		goto err_wq;
	*out = ndev;
	return 0;

err_wq:
	destroy_workqueue(m->wq);
err_free:
	vfree(ndev->mem);
	kfree(m);
err_put:
	put_device(&ndev->dev);	/* frees the pool and the structure */
	return ret;
}

/*
 * Removal: once unregistered nothing reaches the backend; the commands it
 * still holds complete NPNM_ST_ABORTED and drain, then its memory goes.
 * The structure itself stays while contexts are open.
 */
void npnm_mock_destroy(struct npnm_device *ndev)
{
	struct npnm_mock *m = ndev->priv;

	npnm_device_unregister(ndev);
	mock_reset(ndev);
	destroy_workqueue(m->wq);
	vfree(ndev->mem);
	ndev->mem = NULL;
	kfree(m);
	ndev->priv = NULL;
	put_device(&ndev->dev);
}
