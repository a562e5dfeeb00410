// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: contexts, regions and mmap
 *
 * Each open() is a context.  Regions are carved from the device's pool and
 * named by handles that only ever grow within the context, so a stale
 * handle never names a newer region.  A region is mapped at the fake
 * offset handle * NPNM_MMAP_STRIDE, shared mappings only, faulted in page
 * by page so that a reset can revoke every mapping with
 * unmap_mapping_range(); the memory returns to the pool when the handle,
 * every mapping and every command using it are gone.
 */
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "npnm.h"

static void region_release(struct kref *ref)
{
	struct npnm_region *r = container_of(ref, struct npnm_region, ref);

	gen_pool_free(r->ndev->pool, r->dev_off, r->size);
	kfree(r);
}

void npnm_region_put(struct npnm_region *r)
{
	kref_put(&r->ref, region_release);
}

/* A referenced region of @ctx, or NULL.  Caller holds ctx->lock. */
struct npnm_region *npnm_region_get(struct npnm_context *ctx, u32 handle)
{
	struct npnm_region *r = handle ? xa_load(&ctx->regions, handle) : NULL;

	if (r)
		kref_get(&r->ref);
	return r;
}

int npnm_mem_alloc(struct npnm_context *ctx, struct npnm_mem_alloc *ma)
{
	struct npnm_device *ndev = ctx->ndev;
	struct npnm_region *r;
	int ret;

	if (!ma->size || ma->size > ndev->mem_size)
		return ma->size ? -ENOMEM : -EINVAL;
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	kref_init(&r->ref);
	r->ndev = ndev;
	r->size = PAGE_ALIGN(ma->size);
	r->dev_off = gen_pool_alloc(ndev->pool, r->size);
	if (!r->dev_off) {
		kfree(r);
		return -ENOMEM;
	}
	/* Never hand out a previous owner's data. */
	memset(ndev->mem + r->dev_off, 0, r->size);

	mutex_lock(&ctx->lock);
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
	if (r->busy) {
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

static vm_fault_t npnm_vm_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct npnm_region *r = vma->vm_private_data;
	u64 off = ((u64)vmf->pgoff % (NPNM_MMAP_STRIDE >> PAGE_SHIFT)) << PAGE_SHIFT;
	struct page *page;

	if (READ_ONCE(r->revoked) || off >= r->size)
		return VM_FAULT_SIGBUS;
	if (r->ndev->ops->pfn)
		return vmf_insert_pfn(vma, vmf->address,
				      r->ndev->ops->pfn(r->ndev, r->dev_off + off));
	page = vmalloc_to_page(r->ndev->mem + r->dev_off + off);
	if (!page)
		return VM_FAULT_SIGBUS;
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct npnm_vm_ops = {
	.open = npnm_vm_open,
	.close = npnm_vm_close,
	.fault = npnm_vm_fault,
};

static int npnm_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct npnm_context *ctx = filp->private_data;
	const u64 stride = NPNM_MMAP_STRIDE >> PAGE_SHIFT;
	u64 handle = vma->vm_pgoff / stride;
	u64 first = (vma->vm_pgoff % stride) << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;
	struct npnm_region *r;

	if (!(vma->vm_flags & VM_SHARED) || handle > U32_MAX)
		return -EINVAL;
	mutex_lock(&ctx->lock);
	r = npnm_region_get(ctx, (u32)handle);
	mutex_unlock(&ctx->lock);
	if (!r)
		return -EINVAL;
	if (first > r->size || len > r->size - first) {
		npnm_region_put(r);
		return -EINVAL;
	}
	/* Not inherited over fork, never grown by mremap, not in core dumps. */
	vma->vm_flags |= VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP;
	if (r->ndev->ops->pfn)
		vma->vm_flags |= VM_PFNMAP | VM_IO;	/* BAR memory has no struct page */
	vma->vm_private_data = r;	/* the mapping's reference */
	vma->vm_ops = &npnm_vm_ops;
	return 0;
}

static int npnm_open(struct inode *inode, struct file *filp)
{
	struct npnm_device *ndev = container_of(inode->i_cdev, struct npnm_device, cdev);
	struct npnm_context *ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);

	if (!ctx)
		return -ENOMEM;
	ctx->ndev = ndev;
	mutex_init(&ctx->lock);
	xa_init(&ctx->regions);
	ctx->next_handle = 1;
	ctx->next_seqno = 1;
	INIT_LIST_HEAD(&ctx->cq);
	init_waitqueue_head(&ctx->cq_wait);
	ctx->mapping = filp->f_mapping;
	mutex_lock(&ndev->ctx_lock);
	list_add_tail(&ctx->node, &ndev->contexts);
	mutex_unlock(&ndev->ctx_lock);
	filp->private_data = ctx;
	return nonseekable_open(inode, filp);
}

static int npnm_release(struct inode *inode, struct file *filp)
{
	struct npnm_context *ctx = filp->private_data;
	struct npnm_device *ndev = ctx->ndev;
	struct npnm_kcmd *kc, *tmp;
	struct npnm_region *r;
	unsigned long handle;

	/*
	 * Commands still running finish (or the watchdog expires them,
	 * bounding the wait); their completions are dropped.
	 */
	wait_event(ctx->cq_wait, READ_ONCE(ctx->inflight) == 0);
	list_for_each_entry_safe(kc, tmp, &ctx->cq, cq_node) {
		list_del(&kc->cq_node);
		npnm_kcmd_put(kc);
	}
	xa_for_each(&ctx->regions, handle, r) {
		xa_erase(&ctx->regions, handle);
		npnm_region_put(r);
	}
	xa_destroy(&ctx->regions);
	mutex_lock(&ndev->ctx_lock);
	list_del(&ctx->node);
	mutex_unlock(&ndev->ctx_lock);
	kfree(ctx);
	return 0;
}

/* Readable while NPNM_IOC_WAIT would return completions at once. */
static __poll_t npnm_poll(struct file *filp, poll_table *wait)
{
	struct npnm_context *ctx = filp->private_data;

	poll_wait(filp, &ctx->cq_wait, wait);
	return list_empty_careful(&ctx->cq) ? 0 : EPOLLIN | EPOLLRDNORM;
}

const struct file_operations npnm_fops = {
	.owner = THIS_MODULE,
	.open = npnm_open,
	.release = npnm_release,
	.mmap = npnm_mmap,
	.poll = npnm_poll,
	.unlocked_ioctl = npnm_ioctl,
	.uring_cmd = npnm_uring_cmd,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = no_llseek,
};
