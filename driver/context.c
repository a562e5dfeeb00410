// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: contexts, regions and mmap
 *
 * Each open() is a context.  Regions are carved from the device's pool and
 * named by handles that only ever grow within the context, so a stale
 * handle never names a newer region.  A region is mapped at the fake
 * offset handle * NPNM_MMAP_STRIDE: shared mappings only, never
 * executable, never inherited over fork (VM_IO makes the kernel refuse
 * MADV_DOFORK), faulted in page by page so that a reset, a device failure
 * or a removal can revoke every mapping at once.  Revoking bumps the
 * device's epoch: a region allocated before it is stale, and so is every
 * mapping of it, old or new (SIGBUS on access, -ESTALE from mmap and
 * commands); only MEM_FREE still takes it.  The memory returns to the
 * pool when the handle, every mapping and every command using it are gone.
 *
 * A DAX window (NPNM_MEM_F_DAX) is a region over part of the device-dax
 * carve-out (dax.c) instead of pool memory: not zeroed, shared with the
 * carve-out's other users, counted as a region but not in bytes by the
 * quotas; otherwise a region like any other (handles, mappings, staleness).
 *
 * A read-only open may query the device and nothing else: allocating
 * device memory and running commands need the file open for writing.
 *
 * Quotas: a context may hold npnm_ctx_max_regions regions of
 * npnm_ctx_max_bytes bytes, a uid npnm_uid_max_regions regions of
 * npnm_uid_max_bytes bytes on each device (0: no limit); a region counts
 * until its memory is back in the pool.  Over a quota, MEM_ALLOC fails with
 * -EDQUOT.
 */
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "npnm.h"

static unsigned long uid_key(kuid_t uid)
{
	return from_kuid(&init_user_ns, uid);
}

/*
 * Charge a new region to its uid, or refuse: -EDQUOT.  The entry is
 * allocated outside the xarray's lock and dropped when the uid holds
 * nothing any more.
 */
static int uid_charge(struct npnm_device *ndev, kuid_t uid, u64 size)
{
	unsigned int max_regions = READ_ONCE(npnm_uid_max_regions);
	u64 max_bytes = READ_ONCE(npnm_uid_max_bytes);
	struct npnm_usage *u, *fresh = kzalloc(sizeof(*fresh), GFP_KERNEL);
	int ret = 0;

	if (!fresh)
		return -ENOMEM;
	xa_lock(&ndev->usage);
	u = xa_load(&ndev->usage, uid_key(uid));
	if (!u) {
		u = fresh;
		fresh = NULL;
		ret = xa_err(__xa_store(&ndev->usage, uid_key(uid), u, GFP_ATOMIC));
		if (ret) {
			fresh = u;
			goto out;
		}
	}
	if ((max_regions && u->regions >= max_regions) ||
	    (max_bytes && (size > max_bytes || u->bytes > max_bytes - size))) {
		ret = -EDQUOT;
		if (!u->regions) {
			__xa_erase(&ndev->usage, uid_key(uid));
			fresh = u;
		}
		goto out;
	}
	u->regions++;
	u->bytes += size;
out:
	xa_unlock(&ndev->usage);
	kfree(fresh);
	return ret;
}

static void uid_uncharge(struct npnm_device *ndev, kuid_t uid, u64 size)
{
	struct npnm_usage *u;

	xa_lock(&ndev->usage);
	u = xa_load(&ndev->usage, uid_key(uid));
	if (!WARN_ON_ONCE(!u)) {
		u->regions--;
		u->bytes -= size;
		if (!u->regions)
			__xa_erase(&ndev->usage, uid_key(uid));
		else
			u = NULL;
	}
	xa_unlock(&ndev->usage);
	kfree(u);
}

/* Bytes a region counts against the quotas: a DAX window takes none from the pool. */
static u64 charged(const struct npnm_region *r)
{
	return r->dax ? 0 : r->size;
}

static void region_release(struct kref *ref)
{
	struct npnm_region *r = container_of(ref, struct npnm_region, ref);
	struct npnm_context *ctx = r->ctx;

	if (r->dax)
		npnm_dax_window_put(ctx->ndev);
	else
		gen_pool_free(ctx->ndev->pool, r->dev_off, r->size);
	uid_uncharge(ctx->ndev, ctx->uid, charged(r));
	atomic_dec(&ctx->nr_regions);
	atomic64_sub(charged(r), &ctx->bytes);
	kfree(r);
}

void npnm_region_put(struct npnm_region *r)
{
	kref_put(&r->ref, region_release);
}

/* A referenced region of @ctx, or NULL. */
struct npnm_region *npnm_region_get(struct npnm_context *ctx, u32 handle)
{
	struct npnm_region *r;

	lockdep_assert_held(&ctx->lock);
	r = handle ? xa_load(&ctx->regions, handle) : NULL;
	if (r)
		kref_get(&r->ref);
	return r;
}

/* The context's own quota; ctx->lock held so two allocations cannot both pass. */
static int ctx_quota_ok(struct npnm_context *ctx, u64 size)
{
	unsigned int max_regions = READ_ONCE(npnm_ctx_max_regions);
	u64 max_bytes = READ_ONCE(npnm_ctx_max_bytes);
	u64 bytes = atomic64_read(&ctx->bytes);

	lockdep_assert_held(&ctx->lock);
	if (max_regions && atomic_read(&ctx->nr_regions) >= max_regions)
		return -EDQUOT;
	if (max_bytes && (size > max_bytes || bytes > max_bytes - size))
		return -EDQUOT;
	return 0;
}

/*
 * Memory for a new region: from the pool, zeroed, or -- a DAX window --
 * part of the device-dax carve-out as it is.  Inside the device's SRCU
 * section, not gone.
 */
static int region_place(struct npnm_device *ndev, struct npnm_region *r, u64 dax_offset)
{
	if (r->dax)
		return npnm_dax_window_get(ndev, dax_offset, r->size, &r->dev_off);
	r->dev_off = gen_pool_alloc(ndev->pool, r->size);
	if (!r->dev_off)
		return -ENOMEM;
	/* Never hand out a previous owner's data. */
	memset(ndev->mem + r->dev_off, 0, r->size);
	return 0;
}

int npnm_mem_alloc(struct npnm_context *ctx, struct npnm_mem_alloc *ma)
{
	struct npnm_device *ndev = ctx->ndev;
	struct npnm_region *r;
	int ret, idx;

	if (!ma->size)
		return -EINVAL;
	if (ma->size > ndev->mem_size)
		return (ma->flags & NPNM_MEM_F_DAX) ? -EINVAL : -ENOMEM;
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	kref_init(&r->ref);
	r->ctx = ctx;
	r->size = PAGE_ALIGN(ma->size);
	r->dax = ma->flags & NPNM_MEM_F_DAX;
	atomic_set(&r->busy, 0);

	mutex_lock(&ctx->lock);
	ret = ctx_quota_ok(ctx, charged(r));
	if (!ret)
		ret = uid_charge(ndev, ctx->uid, charged(r));
	if (ret) {
		mutex_unlock(&ctx->lock);
		kfree(r);
		return ret;
	}
	atomic_inc(&ctx->nr_regions);
	atomic64_add(charged(r), &ctx->bytes);

	idx = srcu_read_lock(&ndev->srcu);
	spin_lock(&ndev->lock);
	ret = ndev->state == NPNM_STATE_GONE ? -ENXIO : 0;
	r->epoch = ndev->epoch;
	spin_unlock(&ndev->lock);
	if (!ret)
		ret = region_place(ndev, r, ma->dax_offset);
	srcu_read_unlock(&ndev->srcu, idx);
	if (ret) {
		uid_uncharge(ndev, ctx->uid, charged(r));
		atomic_dec(&ctx->nr_regions);
		atomic64_sub(charged(r), &ctx->bytes);
		mutex_unlock(&ctx->lock);
		kfree(r);
		return ret;
	}

	r->handle = ctx->next_handle;
	ret = xa_insert(&ctx->regions, r->handle, r, GFP_KERNEL);
	if (!ret)
		ctx->next_handle++;
	mutex_unlock(&ctx->lock);
	if (ret) {
		npnm_region_put(r);
		return ret == -EBUSY ? -ENOSPC : ret;
	}
	ma->handle = r->handle;
	ma->alloc_size = r->size;
	ma->mmap_offset = (u64)r->handle * NPNM_MMAP_STRIDE;
	return 0;
}

int npnm_mem_free(struct npnm_context *ctx, u32 handle)
{
	struct npnm_region *r;

	mutex_lock(&ctx->lock);
	r = handle ? xa_load(&ctx->regions, handle) : NULL;
	if (!r) {
		mutex_unlock(&ctx->lock);
		return -EINVAL;
	}
	/* Submission raises busy under this lock, so the test is exact. */
	if (atomic_read(&r->busy)) {
		mutex_unlock(&ctx->lock);
		return -EBUSY;
	}
	xa_erase(&ctx->regions, handle);
	r->handle = 0;
	mutex_unlock(&ctx->lock);
	npnm_region_put(r);	/* the handle's reference */
	return 0;
}

static void npnm_vm_open(struct vm_area_struct *vma)
{
	struct npnm_region *r = vma->vm_private_data;

	kref_get(&r->ref);
}

static void npnm_vm_close(struct vm_area_struct *vma)
{
	npnm_region_put(vma->vm_private_data);
}

/*
 * Inside the device's SRCU section, so a revoke (epoch bump, then
 * synchronize_srcu(), then unmap) removes whatever this inserts.
 */
static vm_fault_t npnm_vm_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct npnm_region *r = vma->vm_private_data;
	struct npnm_device *ndev = r->ctx->ndev;
	u64 off = ((u64)vmf->pgoff % (NPNM_MMAP_STRIDE >> PAGE_SHIFT)) << PAGE_SHIFT;
	vm_fault_t ret = VM_FAULT_SIGBUS;
	struct page *page;
	int idx;

	idx = srcu_read_lock(&ndev->srcu);
	if (READ_ONCE(ndev->state) == NPNM_STATE_GONE || READ_ONCE(ndev->epoch) != r->epoch ||
	    off >= r->size)
		goto out;
	if (ndev->ops->pfn) {
		ret = vmf_insert_pfn(vma, vmf->address, ndev->ops->pfn(ndev, r->dev_off + off));
		goto out;
	}
	page = vmalloc_to_page(ndev->mem + r->dev_off + off);
	if (!page)
		goto out;
	ret = vmf_insert_pfn(vma, vmf->address, page_to_pfn(page));
out:
	srcu_read_unlock(&ndev->srcu, idx);
	return ret;
}

static const struct vm_operations_struct npnm_vm_ops = {
	.open = npnm_vm_open,
	.close = npnm_vm_close,
	.fault = npnm_vm_fault,
};

static int npnm_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct npnm_context *ctx = filp->private_data;
	struct npnm_device *ndev = ctx->ndev;
	const u64 stride = NPNM_MMAP_STRIDE >> PAGE_SHIFT;
	u64 handle = vma->vm_pgoff / stride;
	u64 first = (vma->vm_pgoff % stride) << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;
	struct npnm_region *r;

	if (!ctx->writable)
		return -EACCES;
	/* VM_MAYSHARE: VM_SHARED is cleared for shared read-only mappings of O_RDONLY files. */
	if (!(vma->vm_flags & VM_MAYSHARE) || (vma->vm_flags & VM_EXEC) || handle > U32_MAX)
		return -EINVAL;
	if (READ_ONCE(ndev->state) == NPNM_STATE_GONE)
		return -ENXIO;
	mutex_lock(&ctx->lock);
	r = npnm_region_get(ctx, (u32)handle);
	mutex_unlock(&ctx->lock);
	if (!r)
		return -EINVAL;
	if (r->epoch != READ_ONCE(ndev->epoch)) {
		npnm_region_put(r);
		return -ESTALE;
	}
	if (first > r->size || len > r->size - first) {
		npnm_region_put(r);
		return -EINVAL;
	}
	/*
	 * Device memory, faulted in as raw page frames: never executable,
	 * never grown by mremap, not in core dumps, not inherited over fork --
	 * and VM_IO makes madvise(MADV_DOFORK) fail instead of undoing that.
	 */
	vma->vm_flags &= ~VM_MAYEXEC;
	vma->vm_flags |= VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP | VM_IO | VM_PFNMAP;
	vma->vm_private_data = r;	/* the mapping's reference */
	vma->vm_ops = &npnm_vm_ops;
	return 0;
}

/*
 * Revoke every user mapping of the device's memory: bump the epoch so that
 * no fault maps it again, wait for faults that read the old one, then zap.
 */
void npnm_revoke_mappings(struct npnm_device *ndev)
{
	struct npnm_context *ctx;

	spin_lock(&ndev->lock);
	ndev->epoch++;
	spin_unlock(&ndev->lock);
	synchronize_srcu(&ndev->srcu);
	mutex_lock(&ndev->ctx_lock);
	list_for_each_entry(ctx, &ndev->contexts, node)
		unmap_mapping_range(ctx->mapping, 0, 0, 1);
	mutex_unlock(&ndev->ctx_lock);
}

static int npnm_open(struct inode *inode, struct file *filp)
{
	struct npnm_device *ndev = container_of(inode->i_cdev, struct npnm_device, cdev);
	struct npnm_context *ctx;

	if (READ_ONCE(ndev->state) == NPNM_STATE_GONE)
		return -ENXIO;
	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
	if (!ctx)
		return -ENOMEM;
	kref_init(&ctx->ref);
	get_device(&ndev->dev);
	ctx->ndev = ndev;
	ctx->uid = filp->f_cred->euid;
	ctx->writable = filp->f_mode & FMODE_WRITE;
	mutex_init(&ctx->lock);
	xa_init(&ctx->regions);
	ctx->next_handle = 1;
	ctx->next_seqno = 1;
	spin_lock_init(&ctx->cq_lock);
	INIT_LIST_HEAD(&ctx->cq);
	INIT_LIST_HEAD(&ctx->cmds);
	init_waitqueue_head(&ctx->cq_wait);
	ctx->mapping = filp->f_mapping;
	mutex_lock(&ndev->ctx_lock);
	list_add_tail(&ctx->node, &ndev->contexts);
	mutex_unlock(&ndev->ctx_lock);
	filp->private_data = ctx;
	return nonseekable_open(inode, filp);
}

static void ctx_free(struct kref *ref)
{
	struct npnm_context *ctx = container_of(ref, struct npnm_context, ref);
	struct npnm_device *ndev = ctx->ndev;

	WARN_ON_ONCE(atomic_read(&ctx->nr_regions));
	xa_destroy(&ctx->regions);
	mutex_destroy(&ctx->lock);
	kfree(ctx);
	put_device(&ndev->dev);
}

void npnm_ctx_put(struct npnm_context *ctx)
{
	kref_put(&ctx->ref, ctx_free);
}

/*
 * close() of the last reference, or the process dying: commands the device
 * has not started are aborted (NPNM_ST_ABORTED); running ones finish on the
 * device, or time out, holding the context and their regions until then.
 * Nothing here waits for the device.
 */
static int npnm_release(struct inode *inode, struct file *filp)
{
	struct npnm_context *ctx = filp->private_data;
	struct npnm_device *ndev = ctx->ndev;
	struct npnm_kcmd *kc, *tmp;
	struct npnm_region *r;
	unsigned long handle;
	LIST_HEAD(reaped);

	spin_lock(&ctx->cq_lock);
	ctx->closed = true;
	list_splice_init(&ctx->cq, &reaped);
	ctx->cq_len = 0;
	spin_unlock(&ctx->cq_lock);
	list_for_each_entry_safe(kc, tmp, &reaped, cq_node) {
		list_del_init(&kc->cq_node);
		npnm_kcmd_put(kc);
	}
	npnm_cmd_abort_ctx(ctx, NULL);

	mutex_lock(&ctx->lock);
	xa_for_each(&ctx->regions, handle, r) {
		xa_erase(&ctx->regions, handle);
		r->handle = 0;
		npnm_region_put(r);
	}
	mutex_unlock(&ctx->lock);
	mutex_lock(&ndev->ctx_lock);
	list_del(&ctx->node);
	mutex_unlock(&ndev->ctx_lock);
	npnm_ctx_put(ctx);	/* the file's reference */
	return 0;
}

/*
 * Every close() of a descriptor calls this with the closing file table.
 * When that table's process is exiting, its commands that have not
 * started are aborted now -- io_uring ones included, whose requests would
 * otherwise keep the file (and the process's teardown) waiting for the
 * device.  Other processes sharing the file keep theirs.
 */
static int npnm_flush(struct file *filp, fl_owner_t id)
{
	if (current->flags & PF_EXITING)
		npnm_cmd_abort_ctx(filp->private_data, id);
	return 0;
}

/* Readable while NPNM_IOC_WAIT would return completions at once. */
static __poll_t npnm_poll(struct file *filp, poll_table *wait)
{
	struct npnm_context *ctx = filp->private_data;
	__poll_t mask = 0;

	poll_wait(filp, &ctx->cq_wait, wait);
	if (READ_ONCE(ctx->cq_len))
		mask |= EPOLLIN | EPOLLRDNORM;
	if (READ_ONCE(ctx->ndev->state) == NPNM_STATE_GONE)
		mask |= EPOLLHUP;
	return mask;
}

const struct file_operations npnm_fops = {
	.owner = THIS_MODULE,
	.open = npnm_open,
	.release = npnm_release,
	.flush = npnm_flush,
	.mmap = npnm_mmap,
	.poll = npnm_poll,
	.unlocked_ioctl = npnm_ioctl,
	.uring_cmd = npnm_uring_cmd,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = no_llseek,
};
