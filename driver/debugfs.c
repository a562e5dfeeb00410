// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: debugfs
 *
 * /sys/kernel/debug/nelssa_pnm/nelssa_pnm<N>/:
 *
 * - ``inflight``: one line per command the backend holds: sequence number,
 *   opcode, age in ms and ms left before the watchdog expires it;
 * - ``contexts``: one line per open context: regions, commands in flight,
 *   completions waiting to be reaped.
 *
 * For people debugging the driver; not an ABI.
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

	seq_puts(m, "seqno opcode age_ms left_ms\n");
	spin_lock(&ndev->lock);
	list_for_each_entry(kc, &ndev->inflight, node)
		seq_printf(m, "%llu %u %lld %ld\n", kc->comp.seqno, kc->desc.opcode,
			   ktime_ms_delta(now, kc->t_start),
			   (long)jiffies_to_msecs(kc->deadline - jiffies));
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
		struct list_head *pos;
		unsigned long h, nr = 0, nc = 0;

		mutex_lock(&ctx->lock);
		xa_for_each(&ctx->regions, h, r)
			nr++;
		list_for_each(pos, &ctx->cq)
			nc++;
		seq_printf(m, "%lu %u %lu\n", nr, ctx->inflight, nc);
		mutex_unlock(&ctx->lock);
	}
	mutex_unlock(&ndev->ctx_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(contexts);

void npnm_debugfs_add(struct npnm_device *ndev)
{
	if (!npnm_debugfs_root)
		npnm_debugfs_root = debugfs_create_dir("nelssa_pnm", NULL);
	ndev->debugfs = debugfs_create_dir(ndev->name, npnm_debugfs_root);
	debugfs_create_file("inflight", 0400, ndev->debugfs, ndev, &inflight_fops);
	debugfs_create_file("contexts", 0400, ndev->debugfs, ndev, &contexts_fops);
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
