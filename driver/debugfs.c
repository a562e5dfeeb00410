// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: debugfs
 *
 * /sys/kernel/debug/nelssa_pnm/nelssa_pnm<N>/:
 *
 * - ``inflight``: one line per command the backend holds: sequence number,
 *   opcode, age in ms, ms left before its deadline, whether the device has
 *   started it and whether it is quarantined (completed, still held);
 * - ``contexts``: one line per open context: regions, commands in flight,
 *   completions waiting to be reaped.
 *
 * - ``hold`` (root, write 1 or 0): a test control.  While 1, commands are
 *   accepted but kept from the backend: they stay queued (and can be taken
 *   back by a deadline, a close or a reset) until 0 releases them.  Tests
 *   use it to hold commands in flight deterministically.
 *
 * For people debugging and testing the driver; not an ABI.
 */
#include <linux/debugfs.h>
#include <linux/jiffies.h>
#include <linux/seq_file.h>

#include "npnm.h"

static struct dentry *npnm_debugfs_root;

static int inflight_show(struct seq_file *m, void *unused)
{
	struct npnm_device *ndev = m->private;
	struct npnm_kcmd *kc;
	ktime_t now = ktime_get();

	seq_puts(m, "seqno opcode age_ms left_ms started quarantined\n");
	spin_lock(&ndev->lock);
	list_for_each_entry(kc, &ndev->inflight, node)
		seq_printf(m, "%llu %u %lld %ld %d %d\n", kc->comp.seqno, kc->desc.opcode,
			   ktime_ms_delta(now, kc->t_submit),
			   (long)jiffies_to_msecs(kc->deadline - jiffies), kc->started != 0,
			   atomic_read(&kc->done));
	spin_unlock(&ndev->lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(inflight);

static int contexts_show(struct seq_file *m, void *unused)
{
	struct npnm_device *ndev = m->private;
	struct npnm_context *ctx;

	seq_puts(m, "regions inflight completions_waiting\n");
	mutex_lock(&ndev->ctx_lock);
	list_for_each_entry(ctx, &ndev->contexts, node) {
		struct npnm_region *r;
		unsigned long h, nr = 0;
		u32 inflight, nc;

		mutex_lock(&ctx->lock);
		xa_for_each(&ctx->regions, h, r)
			nr++;
		mutex_unlock(&ctx->lock);
		spin_lock(&ctx->cq_lock);
		inflight = ctx->inflight;
		nc = ctx->cq_len;
		spin_unlock(&ctx->cq_lock);
		seq_printf(m, "%lu %u %u\n", nr, inflight, nc);
	}
	mutex_unlock(&ndev->ctx_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(contexts);

static int hold_get(void *data, u64 *val)
{
	struct npnm_device *ndev = data;

	*val = READ_ONCE(ndev->hold);
	return 0;
}

static int hold_set(void *data, u64 val)
{
	if (val > 1)
		return -EINVAL;
	npnm_hold_set(data, val);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(hold_fops, hold_get, hold_set, "%llu\n");

void npnm_debugfs_add(struct npnm_device *ndev)
{
	if (!npnm_debugfs_root)
		npnm_debugfs_root = debugfs_create_dir("nelssa_pnm", NULL);
	ndev->debugfs = debugfs_create_dir(ndev->name, npnm_debugfs_root);
	debugfs_create_file("inflight", 0400, ndev->debugfs, ndev, &inflight_fops);
	debugfs_create_file("contexts", 0400, ndev->debugfs, ndev, &contexts_fops);
	debugfs_create_file_unsafe("hold", 0600, ndev->debugfs, ndev, &hold_fops);
}

void npnm_debugfs_remove(struct npnm_device *ndev)
{
	debugfs_remove_recursive(ndev->debugfs);
}

void npnm_debugfs_exit(void)
{
	debugfs_remove_recursive(npnm_debugfs_root);
	npnm_debugfs_root = NULL;
}
