// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: ioctls
 *
 * Every call copies exactly the structure its number encodes, rejects
 * non-zero flags/pad/reserved fields with -EINVAL before acting, and
 * answers an unknown number with -ENOTTY.  The numbers are also the
 * io_uring cmd_op values.
 *
 * -EFAULT never loses work: a call whose argument is not writable fails
 * before it acts (SUBMIT, EXEC), and WAIT consumes completions only when it
 * could write them and their count.  A read-only open may only query
 * (GET_INFO); the rest needs the file open for writing (-EBADF).  On a
 * removed device every call but WAIT fails with -ENXIO; WAIT still
 * returns the completions of the commands the removal aborted.
 */
#include <linux/fs.h>
#include <linux/ktime.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "npnm.h"

static bool zeroed(const void *p, size_t n)
{
	return !memchr_inv(p, 0, n);
}

static int ioc_get_info(struct npnm_context *ctx, void __user *arg)
{
	struct npnm_device *ndev = ctx->ndev;
	struct npnm_info info = {
		.abi_version = NPNM_ABI_VERSION,
		.caps = READ_ONCE(ndev->caps),
		.opcodes = ndev->opcodes,
		.fw_version = ndev->fw_version,
		.mem_size = READ_ONCE(ndev->mem_avail),
		.mem_align = PAGE_SIZE,
		.nr_cores = ndev->nr_cores,
		.max_batch = NPNM_MAX_BATCH,
		.max_inflight = NPNM_MAX_INFLIGHT,
		.kv_dtypes = ndev->kv_dtypes,
		.max_head_dim = ndev->max_head_dim,
		.max_group = ndev->max_group,
		.attn_flags = ndev->attn_flags,
	};

	return copy_to_user(arg, &info, sizeof(info)) ? -EFAULT : 0;
}

static int ioc_mem_alloc(struct npnm_context *ctx, void __user *arg)
{
	struct npnm_mem_alloc ma;
	int ret;

	if (copy_from_user(&ma, arg, sizeof(ma)))
		return -EFAULT;
	if ((ma.flags & ~NPNM_MEM_F_DAX) || ma.reserved ||
	    (!(ma.flags & NPNM_MEM_F_DAX) && ma.dax_offset))
		return -EINVAL;
	ret = npnm_mem_alloc(ctx, &ma);
	if (ret)
		return ret;
	if (copy_to_user(arg, &ma, sizeof(ma))) {
		npnm_mem_free(ctx, ma.handle);
		return -EFAULT;
	}
	return 0;
}

static int ioc_mem_free(struct npnm_context *ctx, void __user *arg)
{
	struct npnm_mem_free mf;

	if (copy_from_user(&mf, arg, sizeof(mf)))
		return -EFAULT;
	if (mf.flags || mf.reserved)
		return -EINVAL;
	return npnm_mem_free(ctx, mf.handle);
}

static int ioc_submit(struct npnm_context *ctx, void __user *arg)
{
	struct npnm_cmd __user *ucmds;
	struct npnm_submit s;
	struct npnm_cmd c;
	int ret = 0;
	u32 i;

	if (copy_from_user(&s, arg, sizeof(s)))
		return -EFAULT;
	if (s.flags || !zeroed(s.reserved, sizeof(s.reserved)) || !s.nr_cmds ||
	    s.nr_cmds > NPNM_MAX_BATCH)
		return -EINVAL;
	/* Where the counts go must be writable before anything is queued. */
	if (copy_to_user(arg, &s, sizeof(s)))
		return -EFAULT;
	ucmds = u64_to_user_ptr(s.cmds_ptr);
	s.nr_submitted = 0;
	s.error = 0;
	for (i = 0; i < s.nr_cmds; i++) {
		u64 seqno;

		if (copy_from_user(&c, &ucmds[i], sizeof(c))) {
			ret = -EFAULT;
			break;
		}
		/* Not the command: another thread's WAIT may already have freed it. */
		ret = npnm_cmd_submit(ctx, &c, NPNM_KCMD_QUEUED, NULL, NULL, &seqno);
		if (ret)
			break;
		if (!i)
			s.seqno = seqno;
		s.nr_submitted++;
	}
	s.error = ret;
	/*
	 * The counts are written even when a command was rejected.  This can
	 * fail only if another thread unmapped the argument meanwhile; the
	 * accepted commands still complete and are reaped as usual.
	 */
	if (copy_to_user(arg, &s, sizeof(s)))
		return -EFAULT;
	return ret;
}

/*
 * Take up to @max completions, at least @min: all or nothing, so a failed
 * copy-out can put every one of them back in order.
 */
static u32 reap(struct npnm_context *ctx, struct list_head *out, u32 max)
{
	u32 n = 0;

	spin_lock(&ctx->cq_lock);
	while (n < max && !list_empty(&ctx->cq)) {
		list_move_tail(ctx->cq.next, out);
		ctx->cq_len--;
		n++;
	}
	spin_unlock(&ctx->cq_lock);
	return n;
}

static void unreap(struct npnm_context *ctx, struct list_head *list, u32 n)
{
	spin_lock(&ctx->cq_lock);
	list_splice(list, &ctx->cq);
	ctx->cq_len += n;
	spin_unlock(&ctx->cq_lock);
}

static bool cq_has(struct npnm_context *ctx, u32 min)
{
	return READ_ONCE(ctx->cq_len) >= min;
}

static int ioc_wait(struct npnm_context *ctx, void __user *arg)
{
	struct npnm_completion __user *ucomp;
	struct npnm_kcmd *kc, *tmp;
	struct npnm_wait w;
	LIST_HEAD(got);
	int ret = 0;
	u32 n, i;

	if (copy_from_user(&w, arg, sizeof(w)))
		return -EFAULT;
	if (w.flags || !zeroed(w.reserved, sizeof(w.reserved)) || !w.max_comps ||
	    w.min_comps > w.max_comps)
		return -EINVAL;
	ucomp = u64_to_user_ptr(w.comps_ptr);

	if (w.min_comps && w.timeout_ns) {
		long left;

		if (w.timeout_ns < 0) {
			left = wait_event_interruptible(ctx->cq_wait, cq_has(ctx, w.min_comps));
		} else {
			s64 ns = w.timeout_ns - ktime_get_ns();

			left = ns <= 0 ? 0 : wait_event_interruptible_timeout(ctx->cq_wait,
					cq_has(ctx, w.min_comps), nsecs_to_jiffies(ns) + 1);
		}
		if (left == -ERESTARTSYS)
			ret = -EINTR;
	}

	n = reap(ctx, &got, w.max_comps);
	w.nr_comps = n;
	i = 0;
	list_for_each_entry(kc, &got, cq_node) {
		if (copy_to_user(&ucomp[i++], &kc->comp, sizeof(kc->comp)))
			goto fault;
	}
	if (copy_to_user(arg, &w, sizeof(w)))
		goto fault;
	list_for_each_entry_safe(kc, tmp, &got, cq_node) {
		list_del_init(&kc->cq_node);
		npnm_kcmd_put(kc);
	}
	if (n)
		return 0;
	if (ret)
		return ret;
	return w.min_comps ? -ETIMEDOUT : 0;

fault:
	/* Nothing delivered: every completion goes back, in order. */
	unreap(ctx, &got, n);
	return -EFAULT;
}

static int ioc_exec(struct npnm_context *ctx, void __user *arg)
{
	struct npnm_kcmd *kc;
	struct npnm_exec ex;
	struct npnm_cmd c;
	int ret;

	if (copy_from_user(&ex, arg, sizeof(ex)))
		return -EFAULT;
	if (ex.flags || ex.status)
		return -EINVAL;
	/* The status goes back here: writable before the command runs. */
	if (copy_to_user(arg, &ex, sizeof(ex)))
		return -EFAULT;
	if (copy_from_user(&c, u64_to_user_ptr(ex.cmd_ptr), sizeof(c)))
		return -EFAULT;
	ret = npnm_cmd_submit(ctx, &c, NPNM_KCMD_SYNC, NULL, &kc, NULL);
	if (ret)
		return ret;
	/* Killed: the command still completes; only the answer is lost. */
	if (wait_for_completion_killable(&kc->sync_done)) {
		npnm_kcmd_put(kc);
		return -EINTR;
	}
	ex.status = kc->comp.status;
	ret = kc->comp.result;
	npnm_kcmd_put(kc);
	if (copy_to_user(arg, &ex, sizeof(ex)))
		return -EFAULT;
	return ret;
}

long npnm_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct npnm_context *ctx = filp->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case NPNM_IOC_GET_INFO:
	case NPNM_IOC_MEM_ALLOC:
	case NPNM_IOC_MEM_FREE:
	case NPNM_IOC_SUBMIT:
	case NPNM_IOC_EXEC:
		if (READ_ONCE(ctx->ndev->state) == NPNM_STATE_GONE)
			return -ENXIO;
		if (cmd != NPNM_IOC_GET_INFO && !ctx->writable)
			return -EBADF;
		break;
	case NPNM_IOC_WAIT:
		break;
	default:
		return -ENOTTY;
	}

	switch (cmd) {
	case NPNM_IOC_GET_INFO:
		return ioc_get_info(ctx, uarg);
	case NPNM_IOC_MEM_ALLOC:
		return ioc_mem_alloc(ctx, uarg);
	case NPNM_IOC_MEM_FREE:
		return ioc_mem_free(ctx, uarg);
	case NPNM_IOC_SUBMIT:
		return ioc_submit(ctx, uarg);
	case NPNM_IOC_WAIT:
		return ioc_wait(ctx, uarg);
	case NPNM_IOC_EXEC:
		return ioc_exec(ctx, uarg);
	default:
		return -ENOTTY;
	}
}
