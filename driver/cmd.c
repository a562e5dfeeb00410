// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: command path
 *
 * npnm_cmd_submit() checks a descriptor against the submitting context --
 * the opcode's rules (npnm_rules.h: operands used, parameter bytes,
 * reserved fields), every operand's region and bounds -- copies it with
 * operands translated to device offsets, and hands it to the backend.  The
 * device sees no handle and nothing outside the context's regions, and
 * never a command the rules refuse.
 *
 * A command completes exactly once: npnm_cmd_complete() lets the first
 * caller (backend, deadline, abort or device failure) win through an
 * atomic flag.  The context and the regions it uses stay referenced until
 * the backend lets go of the command too (npnm_cmd_release()), so a
 * command that completed early can never reach memory that was freed and
 * handed out again.
 */
#include <linux/fdtable.h>
#include <linux/jiffies.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/slab.h>

#include "npnm.h"
#include "npnm_rules.h"

static void kcmd_release(struct kref *ref)
{
	struct npnm_kcmd *kc = container_of(ref, struct npnm_kcmd, ref);
	struct npnm_context *ctx = kc->ctx;
	unsigned int i;

	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (kc->regions[i])
			npnm_region_put(kc->regions[i]);
	kfree(kc);
	npnm_ctx_put(ctx);
}

void npnm_kcmd_put(struct npnm_kcmd *kc)
{
	kref_put(&kc->ref, kcmd_release);
}

/* Operands to device offsets; ctx->lock held, so busy counts are exact. */
static int resolve(struct npnm_context *ctx, struct npnm_kcmd *kc)
{
	struct npnm_cmd *c = &kc->desc;
	u32 epoch = READ_ONCE(ctx->ndev->epoch);
	unsigned int i;

	lockdep_assert_held(&ctx->lock);
	/* An unknown opcode goes on: the device answers NPNM_ST_BAD_OPCODE. */
	if (npnm_rules_submit_errno(npnm_rules_check(c)))
		return -EINVAL;
	/* A flag the rules know but this device does not report would fail on it. */
	if (c->opcode == NPNM_OP_SPARSE_ATTN && (c->p.attn.flags & ~ctx->ndev->attn_flags))
		return -EOPNOTSUPP;
	/* Older firmware reads a stride as a reserved word and fails the command. */
	if (npnm_rules_kv_stride(c) && !(ctx->ndev->caps & NPNM_CAP_KV_STRIDE))
		return -EOPNOTSUPP;
	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++) {
		struct npnm_operand *op = &c->op[i];
		struct npnm_region *r;

		if (!op->handle)
			continue;	/* an unused slot: the rules saw it is all zero */
		r = npnm_region_get(ctx, op->handle);
		if (!r)
			return -EINVAL;
		kc->regions[i] = r;
		if (r->epoch != epoch)
			return -ESTALE;
		if (op->offset > r->size || op->len > r->size - op->offset)
			return -EINVAL;
		op->offset += r->dev_off;
	}
	return 0;
}

/* Run the watchdog at @when unless it already runs earlier; ndev->lock held. */
static void watchdog_arm(struct npnm_device *ndev, unsigned long when)
{
	unsigned long now = jiffies;

	lockdep_assert_held(&ndev->lock);
	if (ndev->state == NPNM_STATE_GONE)
		return;
	if (ndev->wd_armed && !time_before(when, ndev->wd_when))
		return;
	ndev->wd_armed = true;
	ndev->wd_when = when;
	mod_delayed_work(system_wq, &ndev->watchdog, time_after(when, now) ? when - now : 0);
}

/**
 * npnm_cmd_submit() - check, resolve and start one command.
 * @ctx: the submitting context.
 * @uc: the descriptor as the user gave it (a kernel copy).
 * @kind: where its completion goes.
 * @ioucmd: the io_uring command of an NPNM_KCMD_URING command, else NULL.
 * @out: NPNM_KCMD_SYNC only: the command, with the caller's reference (what
 *	it waits on and then puts); NULL otherwise.  A queued command's
 *	reference belongs to the completion queue -- another thread's WAIT
 *	may free it before this returns -- so it is never handed out.
 * @seqno: if not NULL, the command's sequence number.
 *
 * Return: 0, or -errno with nothing queued.
 */
int npnm_cmd_submit(struct npnm_context *ctx, const struct npnm_cmd *uc,
		    enum npnm_kcmd_kind kind, struct io_uring_cmd *ioucmd,
		    struct npnm_kcmd **out, u64 *seqno)
{
	struct npnm_device *ndev = ctx->ndev;
	const struct npnm_backend_ops *ops;
	unsigned long timeout;
	struct npnm_kcmd *kc;
	unsigned int i;
	int ret, idx;
	bool held;

	if (!ctx->writable)
		return -EBADF;
	/* The device's state first: it says more than any one operand. */
	switch (READ_ONCE(ndev->state)) {
	case NPNM_STATE_LIVE:
		break;
	case NPNM_STATE_GONE:
		return -ENXIO;
	default:
		return -EIO;
	}
	idx = srcu_read_lock(&ndev->srcu);
	ops = ndev->ops;
	kc = kzalloc(struct_size(kc, priv, DIV_ROUND_UP(ops->cmd_size, sizeof(u64))),
		     GFP_KERNEL);
	if (!kc) {
		srcu_read_unlock(&ndev->srcu, idx);
		return -ENOMEM;
	}
	kref_init(&kc->ref);
	INIT_LIST_HEAD(&kc->node);
	INIT_LIST_HEAD(&kc->ctx_node);
	INIT_LIST_HEAD(&kc->held_node);
	INIT_LIST_HEAD(&kc->cq_node);
	init_completion(&kc->sync_done);
	kref_get(&ctx->ref);
	kc->ctx = ctx;
	kc->kind = kind;
	kc->desc = *uc;
	kc->owner = current->files;

	mutex_lock(&ctx->lock);
	ret = resolve(ctx, kc);
	if (ret) {
		mutex_unlock(&ctx->lock);
		goto err;
	}
	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (kc->regions[i])
			atomic_inc(&kc->regions[i]->busy);
	mutex_unlock(&ctx->lock);

	timeout = msecs_to_jiffies(uc->timeout_ms ? uc->timeout_ms : READ_ONCE(npnm_timeout_ms));
	kc->t_submit = ktime_get();
	kc->deadline = jiffies + timeout;
	kc->comp.user_tag = uc->user_tag;
	if (ioucmd) {
		/* Wired up before any list makes it visible to a completer. */
		kc->ioucmd = ioucmd;
		npnm_uring_attach(ioucmd, kc);
	}
	spin_lock(&ctx->cq_lock);
	if (ctx->inflight + ctx->cq_len >= NPNM_MAX_INFLIGHT) {
		spin_unlock(&ctx->cq_lock);
		ret = -EAGAIN;
		goto err_busy;
	}
	kc->comp.seqno = ctx->next_seqno++;
	if (seqno)
		*seqno = kc->comp.seqno;
	list_add_tail(&kc->ctx_node, &ctx->cmds);
	ctx->inflight++;
	spin_unlock(&ctx->cq_lock);

	/* Checked where a failure or a reset would see the command. */
	spin_lock(&ndev->lock);
	if (ndev->state != NPNM_STATE_LIVE) {
		ret = ndev->state == NPNM_STATE_GONE ? -ENXIO : -EIO;
		spin_unlock(&ndev->lock);
		spin_lock(&ctx->cq_lock);
		list_del_init(&kc->ctx_node);
		ctx->inflight--;
		spin_unlock(&ctx->cq_lock);
		goto err_busy;
	}
	kref_get(&kc->ref);		/* the backend's reference */
	list_add_tail(&kc->node, &ndev->inflight);
	if (ndev->hold)
		list_add_tail(&kc->held_node, &ndev->held);
	watchdog_arm(ndev, kc->deadline);
	held = ndev->hold;
	spin_unlock(&ndev->lock);
	atomic64_inc(&ndev->submitted);
	if (out)
		*out = kc;		/* the caller's (completion path) reference */
	if (!held)
		ops->submit(ndev, kc);
	srcu_read_unlock(&ndev->srcu, idx);
	return 0;

err_busy:
	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (kc->regions[i])
			atomic_dec(&kc->regions[i]->busy);
err:
	srcu_read_unlock(&ndev->srcu, idx);
	npnm_kcmd_put(kc);
	return ret;
}

/**
 * npnm_cmd_started() - the device began running @kc.
 * @kc: a command the backend holds.
 *
 * From here the device watchdog counts; before it the command could still
 * be taken back by &npnm_backend_ops.cancel.
 */
void npnm_cmd_started(struct npnm_kcmd *kc)
{
	struct npnm_device *ndev = npnm_kcmd_dev(kc);
	unsigned int wd = READ_ONCE(npnm_watchdog_ms);

	kc->t_start = ktime_get();
	spin_lock(&ndev->lock);
	kc->started = jiffies | 1;	/* never 0, which means "waiting" */
	if (wd)
		watchdog_arm(ndev, kc->started + msecs_to_jiffies(wd));
	spin_unlock(&ndev->lock);
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

/**
 * npnm_cmd_complete() - complete @kc, unless someone already did.
 * @kc: the command.
 * @status: enum npnm_status.
 * @detail: opcode-specific detail.
 *
 * Takes only spinlocks, so any path may complete a command.  The caller
 * keeps its own reference.
 */
void npnm_cmd_complete(struct npnm_kcmd *kc, u32 status, u32 detail)
{
	struct npnm_context *ctx = kc->ctx;
	struct npnm_device *ndev = ctx->ndev;
	bool drop = false;
	unsigned int i;

	if (atomic_xchg(&kc->done, 1))
		return;
	kc->comp.status = status;
	kc->comp.result = status_result(status);
	kc->comp.detail = detail;
	/* Time on the device; a command that never started spent none there. */
	if (READ_ONCE(kc->started))
		kc->comp.device_ns = ktime_to_ns(ktime_sub(ktime_get(), kc->t_start));
	atomic64_inc(&ndev->completed);
	if (status != NPNM_ST_OK)
		atomic64_inc(&ndev->failed);
	if (status == NPNM_ST_TIMEOUT)
		atomic64_inc(&ndev->timeouts);
	if (status == NPNM_ST_ABORTED)
		atomic64_inc(&ndev->aborted);
	for (i = 0; i < NPNM_CMD_MAX_OPERANDS; i++)
		if (kc->regions[i])
			atomic_dec(&kc->regions[i]->busy);

	spin_lock(&ctx->cq_lock);
	list_del_init(&kc->ctx_node);
	ctx->inflight--;
	if (kc->kind == NPNM_KCMD_QUEUED) {
		if (ctx->closed) {
			drop = true;	/* nobody will reap it */
		} else {
			list_add_tail(&kc->cq_node, &ctx->cq);
			ctx->cq_len++;
		}
	}
	/* Woken under the lock: the context cannot go before the waiters do. */
	wake_up_all(&ctx->cq_wait);
	spin_unlock(&ctx->cq_lock);
	if (kc->kind == NPNM_KCMD_SYNC)
		complete(&kc->sync_done);
	else if (kc->kind == NPNM_KCMD_URING)
		npnm_uring_complete(kc);
	if (drop)
		npnm_kcmd_put(kc);
}

/**
 * npnm_cmd_release() - the backend lets go of @kc.
 * @kc: the command; the backend's reference is dropped.
 */
void npnm_cmd_release(struct npnm_kcmd *kc)
{
	struct npnm_device *ndev = npnm_kcmd_dev(kc);

	spin_lock(&ndev->lock);
	list_del_init(&kc->node);
	if (kc->started)
		ndev->progress = jiffies;
	spin_unlock(&ndev->lock);
	npnm_kcmd_put(kc);
}

/* Commands completed while the device still holds them. */
u32 npnm_quarantined(struct npnm_device *ndev)
{
	struct npnm_kcmd *kc;
	u32 n = 0;

	spin_lock(&ndev->lock);
	list_for_each_entry(kc, &ndev->inflight, node)
		n += atomic_read(&kc->done) ? 1 : 0;
	spin_unlock(&ndev->lock);
	return n;
}

/*
 * Take back @kc if the device has not started it, completing it with
 * @status; a running one is left alone.  Caller holds a reference.
 */
static void cancel_one(struct npnm_kcmd *kc, u32 status)
{
	struct npnm_device *ndev = npnm_kcmd_dev(kc);
	bool dropped, held;
	int idx;

	spin_lock(&ndev->lock);
	held = !list_empty(&kc->held_node);
	list_del_init(&kc->held_node);
	spin_unlock(&ndev->lock);
	if (held) {
		npnm_cmd_complete(kc, status, 0);
		npnm_cmd_release(kc);	/* the backend never had it */
		return;
	}
	idx = srcu_read_lock(&ndev->srcu);
	dropped = READ_ONCE(ndev->state) != NPNM_STATE_GONE && ndev->ops->cancel(ndev, kc);
	srcu_read_unlock(&ndev->srcu, idx);
	if (dropped)
		npnm_cmd_complete(kc, status, 0);
}

/*
 * The oldest held command, off the held list; one at a time, under the lock
 * a deadline's cancel_one() takes too.  NULL when none is left.
 */
static struct npnm_kcmd *pop_held(struct npnm_device *ndev)
{
	struct npnm_kcmd *kc;

	spin_lock(&ndev->lock);
	kc = list_first_entry_or_null(&ndev->held, struct npnm_kcmd, held_node);
	if (kc)
		list_del_init(&kc->held_node);
	spin_unlock(&ndev->lock);
	return kc;
}

/**
 * npnm_hold_set() - the test hold: keep new commands from the backend.
 * @ndev: the device.
 * @hold: true to hold; false hands every held command to the backend.
 */
void npnm_hold_set(struct npnm_device *ndev, bool hold)
{
	int idx;

	spin_lock(&ndev->lock);
	ndev->hold = hold;
	spin_unlock(&ndev->lock);
	if (hold)
		return;
	idx = srcu_read_lock(&ndev->srcu);
	for (;;) {
		struct npnm_kcmd *kc = pop_held(ndev);

		if (!kc)
			break;
		if (READ_ONCE(ndev->state) == NPNM_STATE_GONE) {
			npnm_cmd_complete(kc, NPNM_ST_ABORTED, 0);
			npnm_cmd_release(kc);
		} else {
			ndev->ops->submit(ndev, kc);
		}
	}
	srcu_read_unlock(&ndev->srcu, idx);
}

/* Reset and removal: held commands are let go by the core itself. */
void npnm_release_held(struct npnm_device *ndev)
{
	for (;;) {
		struct npnm_kcmd *kc = pop_held(ndev);

		if (!kc)
			break;
		npnm_cmd_complete(kc, NPNM_ST_ABORTED, 0);
		npnm_cmd_release(kc);
	}
}

/**
 * npnm_cmd_abort_ctx() - abort the commands of @ctx the device has not started.
 * @ctx: the context.
 * @owner: only those submitted through this file table; NULL: all.
 *
 * They complete NPNM_ST_ABORTED.  Commands already running are left to
 * finish (or to their deadline); nothing here waits for the device.
 */
void npnm_cmd_abort_ctx(struct npnm_context *ctx, fl_owner_t owner)
{
	struct npnm_kcmd *kc, *batch[32];
	unsigned int n, i;
	u64 after = 0;

	/* In batches, each command once: by sequence number. */
	do {
		n = 0;
		spin_lock(&ctx->cq_lock);
		list_for_each_entry(kc, &ctx->cmds, ctx_node) {
			if (kc->comp.seqno <= after || (owner && kc->owner != owner))
				continue;
			kref_get(&kc->ref);
			batch[n++] = kc;
			after = kc->comp.seqno;
			if (n == ARRAY_SIZE(batch))
				break;
		}
		spin_unlock(&ctx->cq_lock);
		for (i = 0; i < n; i++) {
			cancel_one(batch[i], NPNM_ST_ABORTED);
			npnm_kcmd_put(batch[i]);
		}
	} while (n == ARRAY_SIZE(batch));
}

/**
 * npnm_device_abort_all() - complete every command @ndev holds.
 * @ndev: the device.
 * @status: their status (NPNM_ST_ABORTED, NPNM_ST_DEVICE_ERROR).
 *
 * They stay on the device's list until the backend lets go.
 */
void npnm_device_abort_all(struct npnm_device *ndev, u32 status)
{
	struct npnm_kcmd *kc, *batch[32];
	unsigned int n, i;

	do {
		n = 0;
		spin_lock(&ndev->lock);
		list_for_each_entry(kc, &ndev->inflight, node) {
			if (atomic_read(&kc->done))
				continue;
			kref_get(&kc->ref);
			batch[n++] = kc;
			if (n == ARRAY_SIZE(batch))
				break;
		}
		spin_unlock(&ndev->lock);
		for (i = 0; i < n; i++) {
			npnm_cmd_complete(batch[i], status, 0);
			npnm_kcmd_put(batch[i]);
		}
	} while (n == ARRAY_SIZE(batch));
}

/*
 * DOC: watchdog
 *
 * One delayed work per device, armed for the earliest moment anything can
 * expire -- a command's deadline, or a running command reaching the
 * device watchdog -- and re-armed only for an earlier one, so no stream of
 * submissions can postpone it.
 *
 * A command past its own deadline completes NPNM_ST_TIMEOUT (-ETIMEDOUT)
 * and is taken back from the device if it has not started; otherwise it
 * stays quarantined -- completed for the user, still held by the device --
 * until the device reports it.  Either way only that command fails.  A
 * device that holds a started command and has reported none for
 * npnm_watchdog_ms (the administrator's setting) is hung: it is failed, and
 * every command it holds completes NPNM_ST_DEVICE_ERROR.  Counting from the
 * last report rather than from each command's start keeps a deep ring of
 * commands on a slow but working card from looking hung.
 */
void npnm_watchdog_fn(struct work_struct *work)
{
	struct npnm_device *ndev = container_of(to_delayed_work(work), struct npnm_device,
						 watchdog);
	unsigned int wd = READ_ONCE(npnm_watchdog_ms);
	unsigned long now, next;
	u64 hung_at = 0;
	struct npnm_kcmd *kc, *expired[32];
	bool have_next, hung;
	unsigned int n, i;

	do {
		n = 0;
		hung = false;
		have_next = false;
		next = 0;
		now = jiffies;
		spin_lock(&ndev->lock);
		ndev->wd_armed = false;
		list_for_each_entry(kc, &ndev->inflight, node) {
			/* Hung: started, and nothing reported since for wd ms. */
			unsigned long since = time_after(ndev->progress, kc->started) ?
					      ndev->progress : kc->started;
			unsigned long hang = since + msecs_to_jiffies(wd);

			if (kc->started && wd && ndev->state == NPNM_STATE_LIVE) {
				if (!time_before(now, hang)) {
					hung = true;
					hung_at = kc->comp.seqno;
				} else if (!have_next || time_before(hang, next)) {
					next = hang;
					have_next = true;
				}
			}
			if (atomic_read(&kc->done))
				continue;
			if (time_before(now, kc->deadline)) {
				if (!have_next || time_before(kc->deadline, next)) {
					next = kc->deadline;
					have_next = true;
				}
				continue;
			}
			if (n < ARRAY_SIZE(expired)) {
				kref_get(&kc->ref);
				expired[n++] = kc;
			}
		}
		if (have_next && n < ARRAY_SIZE(expired))
			watchdog_arm(ndev, next);
		spin_unlock(&ndev->lock);

		for (i = 0; i < n; i++) {
			cancel_one(expired[i], NPNM_ST_TIMEOUT);
			/* Running: quarantined until the device reports it. */
			npnm_cmd_complete(expired[i], NPNM_ST_TIMEOUT, 0);
			npnm_kcmd_put(expired[i]);
		}
		if (hung) {
			dev_err(&ndev->dev, "command %llu ran longer than the %u ms watchdog\n",
				hung_at, wd);
			npnm_device_fail(ndev, "device watchdog");
		}
	} while (n == ARRAY_SIZE(expired));
}

/**
 * npnm_device_fail() - the device cannot be trusted any more.
 * @ndev: the device.
 * @why: for the log.
 *
 * Refuse new commands (-EIO), revoke every mapping (regions become stale)
 * and complete every command it holds with NPNM_ST_DEVICE_ERROR; the
 * backend lets go of them at the reset.
 */
void npnm_device_fail(struct npnm_device *ndev, const char *why)
{
	/*
	 * Under the reset lock: an automatic reset, which waits for a failed
	 * state, must not abort the commands before they get their error.
	 */
	mutex_lock(&ndev->reset_lock);
	spin_lock(&ndev->lock);
	if (ndev->state != NPNM_STATE_LIVE) {
		spin_unlock(&ndev->lock);
		mutex_unlock(&ndev->reset_lock);
		return;
	}
	ndev->state = NPNM_STATE_FAILED;
	spin_unlock(&ndev->lock);
	dev_err(&ndev->dev, "device failed: %s\n", why);
	/* Mappings first: whoever sees a completion sees them revoked. */
	npnm_revoke_mappings(ndev);
	npnm_device_abort_all(ndev, NPNM_ST_DEVICE_ERROR);
	mutex_unlock(&ndev->reset_lock);
}

/**
 * npnm_device_reset() - bring the device back.
 * @ndev: the device.
 * @only_if_failed: do nothing unless the device is failed (automatic
 *	recovery, which must not reset a device an administrator just reset).
 *
 * Every command it holds completes NPNM_ST_ABORTED (those already complete
 * keep their status), every mapping is revoked and every region allocated
 * before becomes stale; then the backend resets the hardware and lets go
 * of everything.
 *
 * Return: 0; 1 when @only_if_failed and the device is not failed (nothing
 * done); -ENXIO for a removed device; or the backend's error (the device
 * then stays failed).
 */
int npnm_device_reset(struct npnm_device *ndev, bool only_if_failed)
{
	enum npnm_state was;
	int ret;

	mutex_lock(&ndev->reset_lock);
	spin_lock(&ndev->lock);
	was = ndev->state;
	if (was == NPNM_STATE_GONE || (only_if_failed && was != NPNM_STATE_FAILED)) {
		spin_unlock(&ndev->lock);
		mutex_unlock(&ndev->reset_lock);
		return was == NPNM_STATE_GONE ? -ENXIO : 1;
	}
	ndev->state = NPNM_STATE_RESETTING;	/* no new commands meanwhile */
	spin_unlock(&ndev->lock);
	npnm_revoke_mappings(ndev);
	npnm_device_abort_all(ndev, NPNM_ST_ABORTED);
	npnm_release_held(ndev);
	ret = ndev->ops->reset ? ndev->ops->reset(ndev) : 0;
	spin_lock(&ndev->lock);
	ndev->state = ret ? NPNM_STATE_FAILED : NPNM_STATE_LIVE;
	spin_unlock(&ndev->lock);
	if (!ret)
		atomic64_inc(&ndev->resets);
	mutex_unlock(&ndev->reset_lock);
	dev_info(&ndev->dev, "reset %s\n", ret ? "failed" : "done");
	return ret;
}
