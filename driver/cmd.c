// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: command path
 *
 * npnm_cmd_submit() checks a descriptor against the submitting context --
 * header reserved fields, every operand's region and bounds -- copies it
 * with operands translated to device offsets, and hands it to the backend.
 * The device sees no handle and nothing outside the context's regions.
 *
 * A command completes exactly once: npnm_cmd_complete() lets the first
 * caller (backend, watchdog or abort) win through an atomic flag.  The
 * regions it uses stay referenced until the backend lets go of the
 * command too, so a command the watchdog expired can never reach memory
 * that was freed and handed out again.
 */
#include <linux/jiffies.h>
#include <linux/mm.h>
#include <linux/slab.h>

#include "npnm.h"

static void kcmd_release(struct kref *ref)
{
	struct npnm_kcmd *kc = container_of(ref, struct npnm_kcmd, ref);
	unsigned int i;

	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (kc->regions[i])
			npnm_region_put(kc->regions[i]);
	kfree(kc);
}

void npnm_kcmd_put(struct npnm_kcmd *kc)
{
	kref_put(&kc->ref, kcmd_release);
}

static int resolve(struct npnm_context *ctx, struct npnm_kcmd *kc)
{
	struct npnm_cmd *c = &kc->desc;
	unsigned int i;

	if (c->flags || c->reserved[0] || c->reserved[1])
		return -EINVAL;
	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		struct npnm_operand *op = &c->op[i];
		struct npnm_region *r;

		if (!op->handle) {
			if (op->flags || op->offset || op->len)
				return -EINVAL;
			continue;
		}
		if (op->flags)
			return -EINVAL;
		r = npnm_region_get(ctx, op->handle);
		if (!r)
			return -EINVAL;
		kc->regions[i] = r;
		if (op->offset > r->size || op->len > r->size - op->offset)
			return -EINVAL;
		op->offset += r->dev_off;
	}
	return 0;
}

int npnm_cmd_submit(struct npnm_context *ctx, const struct npnm_cmd *uc,
		    enum npnm_kcmd_kind kind, struct io_uring_cmd *ioucmd,
		    struct npnm_kcmd **out)
{
	struct npnm_device *ndev = ctx->ndev;
	unsigned long timeout;
	struct npnm_kcmd *kc;
	unsigned int i;
	int ret;

	kc = kzalloc(sizeof(*kc), GFP_KERNEL);
	if (!kc)
		return -ENOMEM;
	kref_init(&kc->ref);
	INIT_LIST_HEAD(&kc->cq_node);
	init_completion(&kc->sync_done);
	kc->ctx = ctx;
	kc->kind = kind;
	kc->desc = *uc;

	mutex_lock(&ctx->lock);
	ret = resolve(ctx, kc);
	if (!ret && ctx->inflight >= NPNM_MAX_INFLIGHT)
		ret = -EAGAIN;
	if (!ret && READ_ONCE(ndev->state) != NPNM_STATE_LIVE)
		ret = -EIO;
	if (ret) {
		mutex_unlock(&ctx->lock);
		npnm_kcmd_put(kc);
		return ret;
	}
	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (kc->regions[i])
			kc->regions[i]->busy++;
	ctx->inflight++;
	kc->comp.seqno = ctx->next_seqno++;
	kc->comp.user_tag = uc->user_tag;
	mutex_unlock(&ctx->lock);

	timeout = msecs_to_jiffies(uc->timeout_ms ? uc->timeout_ms : READ_ONCE(npnm_timeout_ms));
	kc->deadline = jiffies + timeout;
	kc->t_start = ktime_get();
	kref_get(&kc->ref);		/* the backend's reference */
	spin_lock(&ndev->lock);
	list_add_tail(&kc->node, &ndev->inflight);
	spin_unlock(&ndev->lock);
	atomic64_inc(&ndev->submitted);
	mod_delayed_work(system_wq, &ndev->watchdog, min_t(unsigned long, timeout, HZ) + 1);
	*out = kc;			/* the caller's (completion path) reference */
	if (ioucmd) {
		/* Wired up before the backend can possibly complete it. */
		kc->ioucmd = ioucmd;
		npnm_uring_attach(ioucmd, kc);
	}
	ndev->ops->submit(ndev, kc);
	return 0;
}

static s32 status_result(u32 status)
{
	switch (status) {
	case NPNM_ST_OK:
		return 0;
	case NPNM_ST_TIMEOUT:
		return -ETIMEDOUT;
	case NPNM_ST_ABORTED:
		return -ECANCELED;
	default:
		return -EIO;
	}
}

void npnm_cmd_complete(struct npnm_kcmd *kc, u32 status, u32 detail)
{
	struct npnm_context *ctx = kc->ctx;
	struct npnm_device *ndev = ctx->ndev;
	unsigned int i;

	if (atomic_xchg(&kc->done, 1))
		return;
	spin_lock(&ndev->lock);
	list_del_init(&kc->node);
	spin_unlock(&ndev->lock);
	kc->comp.status = status;
	kc->comp.result = status_result(status);
	kc->comp.detail = detail;
	kc->comp.device_ns = ktime_to_ns(ktime_sub(ktime_get(), kc->t_start));
	atomic64_inc(&ndev->completed);
	if (status != NPNM_ST_OK)
		atomic64_inc(&ndev->failed);

	mutex_lock(&ctx->lock);
	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (kc->regions[i])
			kc->regions[i]->busy--;
	if (kc->kind == NPNM_KCMD_QUEUED)
		list_add_tail(&kc->cq_node, &ctx->cq);
	ctx->inflight--;
	mutex_unlock(&ctx->lock);
	if (kc->kind == NPNM_KCMD_SYNC)
		complete(&kc->sync_done);
	else if (kc->kind == NPNM_KCMD_URING)
		npnm_uring_complete(kc);
	wake_up_all(&ctx->cq_wait);
}

/*
 * DOC: watchdog
 *
 * Runs while commands are in flight.  A command past its deadline
 * completes with NPNM_ST_TIMEOUT (-ETIMEDOUT) and marks the device
 * failed: new commands get -EIO until a reset (sysfs "reset").
 */
void npnm_watchdog_fn(struct work_struct *work)
{
	struct npnm_device *ndev = container_of(to_delayed_work(work), struct npnm_device,
						 watchdog);
	struct npnm_kcmd *expired[16], *kc;
	unsigned int n, i;
	bool more;

	do {
		n = 0;
		spin_lock(&ndev->lock);
		list_for_each_entry(kc, &ndev->inflight, node) {
			if (!time_after(jiffies, kc->deadline))
				continue;
			kref_get(&kc->ref);
			expired[n++] = kc;
			if (n == ARRAY_SIZE(expired))
				break;
		}
		if (n)
			ndev->state = NPNM_STATE_FAILED;
		more = !list_empty(&ndev->inflight);
		spin_unlock(&ndev->lock);
		for (i = 0; i < n; i++) {
			dev_warn(ndev->dev, "command %llu timed out; device failed\n",
				 expired[i]->comp.seqno);
			atomic64_inc(&ndev->timeouts);
			npnm_cmd_complete(expired[i], NPNM_ST_TIMEOUT, 0);
			npnm_kcmd_put(expired[i]);
		}
	} while (n == ARRAY_SIZE(expired));
	if (more)
		mod_delayed_work(system_wq, &ndev->watchdog, HZ / 10);
}

/* Revoke every user mapping of the device's memory; ctx_lock held. */
static void revoke_mappings(struct npnm_device *ndev)
{
	struct npnm_context *ctx;

	list_for_each_entry(ctx, &ndev->contexts, node) {
		struct npnm_region *r;
		unsigned long h;

		mutex_lock(&ctx->lock);
		xa_for_each(&ctx->regions, h, r)
			WRITE_ONCE(r->revoked, true);
		mutex_unlock(&ctx->lock);
		unmap_mapping_range(ctx->mapping, 0, 0, 1);
	}
}

/*
 * The device cannot be trusted any more (heartbeat lost, bad completion):
 * refuse new commands and revoke every mapping.  The backend completes
 * what it still holds.
 */
void npnm_device_fail(struct npnm_device *ndev, const char *why)
{
	spin_lock(&ndev->lock);
	ndev->state = NPNM_STATE_FAILED;
	spin_unlock(&ndev->lock);
	dev_err(ndev->dev, "device failed: %s\n", why);
	mutex_lock(&ndev->ctx_lock);
	revoke_mappings(ndev);
	mutex_unlock(&ndev->ctx_lock);
}

int npnm_device_reset(struct npnm_device *ndev)
{
	bool busy;
	int ret;

	mutex_lock(&ndev->ctx_lock);
	spin_lock(&ndev->lock);
	busy = !list_empty(&ndev->inflight);
	spin_unlock(&ndev->lock);
	if (busy) {
		mutex_unlock(&ndev->ctx_lock);
		return -EBUSY;
	}
	/* Revoke every mapping: the device's memory is not trusted any more. */
	revoke_mappings(ndev);
	ret = ndev->ops->reset ? ndev->ops->reset(ndev) : 0;
	if (!ret) {
		WRITE_ONCE(ndev->state, NPNM_STATE_LIVE);
		atomic64_inc(&ndev->resets);
	}
	mutex_unlock(&ndev->ctx_lock);
	dev_info(ndev->dev, "reset %s\n", ret ? "failed" : "done");
	return ret;
}
