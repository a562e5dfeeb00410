// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: PCI backend
 *
 * Drives a PNM card through the interface of
 * Documentation/device-interface.rst.  For development it binds to QEMU's
 * ivshmem-doorbell device (1af4:1110), but only when device memory starts
 * with the NELSSA header that nelssa-devemu writes: never to an unrelated
 * ivshmem device.
 *
 * Submission copies the resolved descriptor into the next SQ slot with a
 * cookie naming the command (slot index and generation), publishes the
 * tail and rings the doorbell.  The MSI-X vector's threaded handler walks
 * the CQ; a cookie the driver never issued means the device cannot be
 * trusted, and fails it.  A heartbeat monitor fails the device when the
 * firmware stops ticking and completes what it held with
 * NPNM_ST_DEVICE_ERROR.  Reset is a handshake: the driver asks, the
 * firmware drops everything, zeroes the rings and bumps its reset epoch.
 * A failed card is reset automatically as soon as its firmware ticks again;
 * administrators can also reset through sysfs.
 *
 * A command in the backlog (no ring slot yet) can be taken back; one in
 * the ring cannot, so when it misses its deadline its slot stays
 * quarantined until the card completes it or is reset.  Removal (unbind,
 * hot-unplug) aborts everything the backend holds; contexts still open see
 * -ENXIO and keep the core's structure until they close.
 */
#include <linux/delay.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include "nelssa_pnm_devif.h"

#include "cxl_range.h"
#include "npnm.h"
#include "npnm_rules.h"

/* Heartbeat silence after which the firmware is declared dead. */
#define NPNM_PCI_HB_TIMEOUT	(2 * HZ)
#define NPNM_PCI_HB_PERIOD	(HZ / 10)

/* The backend's per-command tail (npnm_kcmd_priv()). */
struct npnm_pci_cmd {
	struct list_head be_node;	/* backlog, or a list being completed */
	struct npnm_kcmd *kc;
	bool in_backlog;
};

static struct npnm_pci_cmd *pci_cmd(struct npnm_kcmd *kc)
{
	return npnm_kcmd_priv(kc);
}

struct npnm_pci {
	struct npnm_device *ndev;
	struct pci_dev *pdev;
	void __iomem *regs;
	phys_addr_t mem_phys;
	struct npnm_devif_hdr *hdr;
	struct npnm_devif_sqe *sq;
	struct npnm_devif_cqe *cq;
	u32 sq_entries, cq_entries;
	spinlock_t lock;		/* rings, slots, backlog */
	struct list_head backlog;	/* commands waiting for a slot */
	struct npnm_kcmd **slots;	/* by cookie slot */
	u32 *gen;			/* generation per slot */
	u32 *free;			/* stack of free slots */
	u32 nfree;
	struct delayed_work hb_work;
	u64 last_hb;
	unsigned long last_hb_change;
	bool dead;			/* failed: no more ring traffic */
};

static u32 rd32(const __le32 *p)
{
	return le32_to_cpu(READ_ONCE(*p));
}

static void doorbell(struct npnm_pci *pp)
{
	/* Peer 0 (the firmware), vector 0. */
	writel(NPNM_DEVIF_FW_PEER << 16, pp->regs + NPNM_DEVIF_REG_DOORBELL);
}

/* Push queued commands while there are free slots and SQ room; lock held. */
static bool push_locked(struct npnm_pci *pp)
{
	bool rang = false;

	lockdep_assert_held(&pp->lock);
	while (!pp->dead && !list_empty(&pp->backlog) && pp->nfree) {
		u32 tail = le32_to_cpu(pp->hdr->sq_tail);
		struct npnm_devif_sqe *e;
		struct npnm_pci_cmd *pc;
		struct npnm_kcmd *kc;
		u32 slot;

		if (tail - rd32(&pp->hdr->sq_head) >= pp->sq_entries)
			break;
		pc = list_first_entry(&pp->backlog, struct npnm_pci_cmd, be_node);
		list_del_init(&pc->be_node);
		pc->in_backlog = false;
		kc = pc->kc;
		slot = pp->free[--pp->nfree];
		pp->slots[slot] = kc;
		pp->gen[slot]++;
		e = &pp->sq[tail & (pp->sq_entries - 1)];
		memcpy(&e->cmd, &kc->desc, sizeof(e->cmd));
		e->cookie = cpu_to_le64(((u64)pp->gen[slot] << 32) | slot);
		memset(e->reserved, 0, sizeof(e->reserved));
		/* The entry before the index that publishes it. */
		smp_store_release(&pp->hdr->sq_tail, cpu_to_le32(tail + 1));
		/* In the ring: the card owns it now, and it can no longer be taken back. */
		npnm_cmd_started(kc);
		rang = true;
	}
	return rang;
}

static void npnm_pci_submit(struct npnm_device *ndev, struct npnm_kcmd *kc)
{
	struct npnm_pci *pp = ndev->priv;
	bool rang;

	pci_cmd(kc)->kc = kc;
	spin_lock(&pp->lock);
	list_add_tail(&pci_cmd(kc)->be_node, &pp->backlog);
	pci_cmd(kc)->in_backlog = true;
	rang = push_locked(pp);
	spin_unlock(&pp->lock);
	if (rang)
		doorbell(pp);
}

static bool npnm_pci_cancel(struct npnm_device *ndev, struct npnm_kcmd *kc)
{
	struct npnm_pci *pp = ndev->priv;
	struct npnm_pci_cmd *pc = pci_cmd(kc);
	bool dropped;

	spin_lock(&pp->lock);
	dropped = pc->in_backlog;
	if (dropped) {
		list_del_init(&pc->be_node);
		pc->in_backlog = false;
	}
	spin_unlock(&pp->lock);
	if (dropped)
		npnm_cmd_release(kc);	/* the backend's reference; the caller holds one */
	return dropped;
}

/* Take every command the backend holds, to complete them outside the lock. */
static void take_all_locked(struct npnm_pci *pp, struct list_head *out)
{
	struct npnm_pci_cmd *pc;
	u32 i;

	lockdep_assert_held(&pp->lock);
	list_for_each_entry(pc, &pp->backlog, be_node)
		pc->in_backlog = false;
	for (i = 0; i < pp->cq_entries; i++) {
		if (pp->slots[i]) {
			list_add_tail(&pci_cmd(pp->slots[i])->be_node, out);
			pp->slots[i] = NULL;
			pp->free[pp->nfree++] = i;
		}
	}
	list_splice_tail_init(&pp->backlog, out);
}

static void complete_list(struct list_head *list, u32 status)
{
	struct npnm_pci_cmd *pc, *tmp;

	list_for_each_entry_safe(pc, tmp, list, be_node) {
		struct npnm_kcmd *kc = pc->kc;

		list_del_init(&pc->be_node);
		npnm_cmd_complete(kc, status, 0);
		npnm_cmd_release(kc);	/* the backend's reference */
	}
}

static void npnm_pci_fail(struct npnm_pci *pp, const char *why)
{
	LIST_HEAD(held);

	spin_lock(&pp->lock);
	if (pp->dead) {
		spin_unlock(&pp->lock);
		return;
	}
	pp->dead = true;
	take_all_locked(pp, &held);
	spin_unlock(&pp->lock);
	npnm_device_fail(pp->ndev, why);
	complete_list(&held, NPNM_ST_DEVICE_ERROR);
}

/* Walk the CQ; called from the IRQ thread and the heartbeat monitor. */
static void npnm_pci_reap(struct npnm_pci *pp)
{
	bool rang;

	for (;;) {
		struct npnm_kcmd *kc = NULL;
		u32 head, status, detail, slot, gen;
		struct npnm_devif_cqe *e;
		u64 cookie;

		spin_lock(&pp->lock);
		head = le32_to_cpu(pp->hdr->cq_head);
		/* Acquire: the entry is read only after the tail that publishes it. */
		if (pp->dead || head == le32_to_cpu(smp_load_acquire(&pp->hdr->cq_tail))) {
			spin_unlock(&pp->lock);
			break;
		}
		e = &pp->cq[head & (pp->cq_entries - 1)];
		cookie = le64_to_cpu(e->cookie);
		status = le32_to_cpu(e->status);
		detail = le32_to_cpu(e->detail);
		slot = lower_32_bits(cookie);
		gen = upper_32_bits(cookie);
		if (slot < pp->cq_entries && pp->slots[slot] && pp->gen[slot] == gen) {
			kc = pp->slots[slot];
			pp->slots[slot] = NULL;
			pp->free[pp->nfree++] = slot;
		}
		/* Release: the entry is read before the firmware may reuse it. */
		smp_store_release(&pp->hdr->cq_head, cpu_to_le32(head + 1));
		rang = push_locked(pp);
		spin_unlock(&pp->lock);
		if (rang)
			doorbell(pp);
		if (!kc) {
			npnm_pci_fail(pp, "completion for a command never submitted");
			break;
		}
		npnm_cmd_complete(kc, status, detail);
		npnm_cmd_release(kc);
	}
}

static irqreturn_t npnm_pci_irq(int irq, void *data)
{
	npnm_pci_reap(data);
	return IRQ_HANDLED;
}

static void npnm_pci_hb_fn(struct work_struct *work)
{
	struct npnm_pci *pp = container_of(to_delayed_work(work), struct npnm_pci, hb_work);
	u64 hb = le64_to_cpu(READ_ONCE(pp->hdr->heartbeat));

	if (hb != pp->last_hb) {
		pp->last_hb = hb;
		pp->last_hb_change = jiffies;
		/* A failed card whose firmware is alive again (ticking, ready) is reset. */
		if (READ_ONCE(pp->ndev->state) == NPNM_STATE_FAILED &&
		    rd32(&pp->hdr->fw_state) == NPNM_FW_READY &&
		    !npnm_device_reset(pp->ndev, true))
			dev_info(&pp->ndev->dev, "recovered by an automatic reset\n");
	} else if (!pp->dead && time_after(jiffies, pp->last_hb_change + NPNM_PCI_HB_TIMEOUT)) {
		npnm_pci_fail(pp, "firmware heartbeat lost");
	}
	/* Also a safety net for an interrupt lost before MSI-X was on. */
	npnm_pci_reap(pp);
	schedule_delayed_work(&pp->hb_work, NPNM_PCI_HB_PERIOD);
}

/*
 * The reset handshake: ask, wait for the firmware to bump its reset epoch
 * with its rings zeroed, then drop whatever the old rings still held.
 */
static int npnm_pci_reset(struct npnm_device *ndev)
{
	struct npnm_pci *pp = ndev->priv;
	u32 epoch = rd32(&pp->hdr->reset_epoch);
	unsigned long deadline = jiffies + 5 * HZ;
	u32 req = (epoch + 1) & 0xffffff;
	LIST_HEAD(held);

	/*
	 * The request is numbered after the epoch the firmware will reach, so
	 * it differs from the one served last, also across a re-probe; never
	 * 0, which is what a plain NPNM_DRV_RESET means.
	 */
	WRITE_ONCE(pp->hdr->driver_state, cpu_to_le32(NPNM_DRV_RESET_REQ(req ? req : 1)));
	doorbell(pp);
	while (rd32(&pp->hdr->reset_epoch) == epoch ||
	       rd32(&pp->hdr->fw_state) != NPNM_FW_READY) {
		if (time_after(jiffies, deadline)) {
			dev_err(&pp->pdev->dev, "firmware did not answer the reset\n");
			return -ETIMEDOUT;
		}
		msleep(20);
	}
	spin_lock(&pp->lock);
	take_all_locked(pp, &held);
	pp->dead = false;
	pp->last_hb = le64_to_cpu(READ_ONCE(pp->hdr->heartbeat));
	pp->last_hb_change = jiffies;
	/* Release: the zeroed rings are ours before the firmware sees us back. */
	smp_store_release(&pp->hdr->driver_state, cpu_to_le32(NPNM_DRV_ATTACHED));
	spin_unlock(&pp->lock);
	/* The core completed them all before; only the references remain. */
	complete_list(&held, NPNM_ST_ABORTED);
	return 0;
}

static unsigned long npnm_pci_pfn(struct npnm_device *ndev, u64 off)
{
	struct npnm_pci *pp = ndev->priv;

	return (unsigned long)((pp->mem_phys + off) >> PAGE_SHIFT);
}

static const struct npnm_backend_ops npnm_pci_ops = {
	.name = "pci",
	.cmd_size = sizeof(struct npnm_pci_cmd),
	.submit = npnm_pci_submit,
	.cancel = npnm_pci_cancel,
	.reset = npnm_pci_reset,
	.pfn = npnm_pci_pfn,
};

/* Is this a NELSSA card?  Checks everything before trusting any field. */
static int npnm_pci_check_hdr(struct pci_dev *pdev, const struct npnm_devif_hdr *h, u64 len)
{
	u32 sqe = le32_to_cpu(h->sq_entries), cqe = le32_to_cpu(h->cq_entries);
	u64 heap = le64_to_cpu(h->heap_off), heap_len = le64_to_cpu(h->heap_size);
	u64 sq = le64_to_cpu(h->sq_off), cq = le64_to_cpu(h->cq_off);

	if (le32_to_cpu(h->magic) != NPNM_DEVIF_MAGIC)
		return -ENODEV;		/* not ours: stay away */
	if (le16_to_cpu(h->version) != NPNM_DEVIF_VERSION) {
		dev_err(&pdev->dev, "device interface version %u, driver speaks %u\n",
			le16_to_cpu(h->version), NPNM_DEVIF_VERSION);
		return -ENODEV;
	}
	if (le64_to_cpu(h->mem_size) != len || !is_power_of_2(sqe) || !is_power_of_2(cqe) ||
	    cqe < sqe || sq + (u64)sqe * sizeof(struct npnm_devif_sqe) > heap ||
	    cq + (u64)cqe * sizeof(struct npnm_devif_cqe) > heap || heap > len ||
	    heap_len > len - heap || !PAGE_ALIGNED(heap) || !heap_len) {
		dev_err(&pdev->dev, "inconsistent device header\n");
		return -EINVAL;
	}
	return 0;
}

/*
 * The device-memory window: range 1 of the CXL device DVSEC on a
 * memory-capable CXL card, else the memory BAR.  A CXL card whose memory is
 * not active yet is refused rather than silently served from a BAR.
 */
static int npnm_pci_mem_window(struct pci_dev *pdev, phys_addr_t *base, u64 *len)
{
	u16 dvsec = pci_find_dvsec_capability(pdev, NPNM_CXL_DVSEC_VENDOR,
					      NPNM_CXL_DVSEC_DEVICE);
	u32 size_hi, size_lo, base_hi, base_lo;
	u64 b, s;
	u16 cap;
	int ret;

	if (dvsec && !pci_read_config_word(pdev, dvsec + NPNM_CXL_DVSEC_CAP, &cap) &&
	    (cap & NPNM_CXL_CAP_MEM)) {
		pci_read_config_dword(pdev, dvsec + NPNM_CXL_RANGE_SIZE_HI(0), &size_hi);
		pci_read_config_dword(pdev, dvsec + NPNM_CXL_RANGE_SIZE_LO(0), &size_lo);
		pci_read_config_dword(pdev, dvsec + NPNM_CXL_RANGE_BASE_HI(0), &base_hi);
		pci_read_config_dword(pdev, dvsec + NPNM_CXL_RANGE_BASE_LO(0), &base_lo);
		ret = npnm_cxl_decode_range(size_hi, size_lo, base_hi, base_lo, &b, &s);
		if (ret) {
			dev_err(&pdev->dev, "CXL memory range 1 not usable (%d)\n", ret);
			return ret;
		}
		*base = b;
		*len = s;
		return 0;
	}
	*len = pci_resource_len(pdev, NPNM_DEVIF_MEM_BAR);
	if (!*len || !(pci_resource_flags(pdev, NPNM_DEVIF_MEM_BAR) & IORESOURCE_MEM))
		return -ENODEV;
	*base = pci_resource_start(pdev, NPNM_DEVIF_MEM_BAR);
	return 0;
}

/*
 * The carve-out, once the device is registered (the dax region hangs below
 * its class device); when the export fails, the allocator gets it back.
 */
static void npnm_pci_dax(struct npnm_device *ndev)
{
	int ret;

	if (!ndev->dax.size)
		return;
	ret = npnm_dax_add(ndev);
	if (!ret)
		return;
	dev_warn(&ndev->dev, "no device-dax export (%d): %llu MiB back to the allocator\n", ret,
		 ndev->dax.size >> 20);
	if (!gen_pool_add(ndev->pool, ndev->dax.off, ndev->dax.size, NUMA_NO_NODE))
		WRITE_ONCE(ndev->mem_avail, ndev->mem_avail + ndev->dax.size);
	ndev->dax.size = 0;
}

static int npnm_pci_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct npnm_device *ndev;
	struct npnm_pci *pp;
	u64 mem_len;
	int ret, irq, i;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	pp = devm_kzalloc(&pdev->dev, sizeof(*pp), GFP_KERNEL);
	if (!pp)
		return -ENOMEM;
	ret = npnm_pci_mem_window(pdev, &pp->mem_phys, &mem_len);
	if (ret)
		return ret;
	if (npnm_dax_mem_in_use(pp->mem_phys, mem_len)) {
		dev_err(&pdev->dev, "card memory is still online as System RAM: not until a reboot\n");
		return -EBUSY;
	}
	/* Card memory is coherent memory: a write-back mapping. */
	pp->hdr = devm_memremap(&pdev->dev, pp->mem_phys, mem_len, MEMREMAP_WB);
	if (IS_ERR(pp->hdr))
		return PTR_ERR(pp->hdr);
	ret = npnm_pci_check_hdr(pdev, pp->hdr, mem_len);
	if (ret)
		return ret;
	pp->regs = pcim_iomap(pdev, NPNM_DEVIF_REGS_BAR, 0);
	if (!pp->regs)
		return -ENOMEM;

	pp->pdev = pdev;
	pp->sq_entries = le32_to_cpu(pp->hdr->sq_entries);
	pp->cq_entries = le32_to_cpu(pp->hdr->cq_entries);
	pp->sq = (void *)pp->hdr + le64_to_cpu(pp->hdr->sq_off);
	pp->cq = (void *)pp->hdr + le64_to_cpu(pp->hdr->cq_off);
	spin_lock_init(&pp->lock);
	INIT_LIST_HEAD(&pp->backlog);
	INIT_DELAYED_WORK(&pp->hb_work, npnm_pci_hb_fn);
	pp->slots = devm_kcalloc(&pdev->dev, pp->cq_entries, sizeof(*pp->slots), GFP_KERNEL);
	pp->gen = devm_kcalloc(&pdev->dev, pp->cq_entries, sizeof(*pp->gen), GFP_KERNEL);
	pp->free = devm_kcalloc(&pdev->dev, pp->cq_entries, sizeof(*pp->free), GFP_KERNEL);
	if (!pp->slots || !pp->gen || !pp->free)
		return -ENOMEM;
	for (i = 0; i < pp->cq_entries; i++)
		pp->free[pp->nfree++] = pp->cq_entries - 1 - i;

	/*
	 * The core's structure is reference counted, not devm: contexts may
	 * outlive the binding.  From here on it goes with put_device().
	 */
	ndev = kzalloc(sizeof(*ndev), GFP_KERNEL);
	if (!ndev)
		return -ENOMEM;
	ret = npnm_device_init(ndev, &pdev->dev);
	if (ret)
		return ret;
	pp->ndev = ndev;
	ndev->ops = &npnm_pci_ops;
	ndev->priv = pp;
	ndev->mem = pp->hdr;
	ndev->mem_size = mem_len;
	ndev->mem_avail = le64_to_cpu(pp->hdr->heap_size);
	ndev->nr_cores = le32_to_cpu(pp->hdr->nr_cores);
	ndev->fw_version = le32_to_cpu(pp->hdr->fw_version);
	ndev->opcodes = le64_to_cpu(pp->hdr->opcodes);
	ndev->kv_dtypes = le32_to_cpu(pp->hdr->kv_dtypes);
	ndev->max_head_dim = le16_to_cpu(pp->hdr->max_head_dim);
	ndev->max_group = le16_to_cpu(pp->hdr->max_group);
	ndev->attn_flags = le32_to_cpu(pp->hdr->attn_flags) & NPNM_RULES_ATTN_FLAGS;
	ndev->caps = NPNM_CAP_MMAP | NPNM_CAP_URING_CMD | NPNM_CAP_CQE32_STATUS |
		     NPNM_CAP_COMPUTE | NPNM_CAP_KV_SCATTER;
	/* Interface 1.2 gave the reserved words their kv_stride meaning. */
	if (ndev->fw_version >= ((1U << 16) | 2))
		ndev->caps |= NPNM_CAP_KV_STRIDE;
	/* The top of the heap may go to device-dax instead (dax.c). */
	npnm_dax_carve(ndev, pp->mem_phys, le64_to_cpu(pp->hdr->heap_off), &ndev->mem_avail);
	ret = -ENOMEM;
	ndev->pool = gen_pool_create(PAGE_SHIFT, NUMA_NO_NODE);
	if (!ndev->pool)
		goto err_put;
	ret = gen_pool_add(ndev->pool, le64_to_cpu(pp->hdr->heap_off), ndev->mem_avail,
			   NUMA_NO_NODE);
	if (ret)
		goto err_put;

	/* MSI-X messages are memory writes by the device: it must be a master. */
	pci_set_master(pdev);
	ret = pci_alloc_irq_vectors(pdev, 1, 1, PCI_IRQ_MSIX);
	if (ret < 0)
		goto err_put;
	irq = pci_irq_vector(pdev, 0);
	ret = request_threaded_irq(irq, NULL, npnm_pci_irq, IRQF_ONESHOT, "nelssa_pnm", pp);
	if (ret)
		goto err_vectors;
	/* Rings in a known state whatever a previous driver left behind. */
	ret = npnm_pci_reset(ndev);
	if (ret)
		goto err_irq;
	ret = npnm_device_register(ndev);
	if (ret)
		goto err_irq;
	pci_set_drvdata(pdev, pp);
	schedule_delayed_work(&pp->hb_work, NPNM_PCI_HB_PERIOD);
	npnm_pci_dax(ndev);
	dev_info(&pdev->dev, "%s: %llu MiB, %u cores, firmware %u.%u\n", ndev->name,
		 ndev->mem_avail >> 20, ndev->nr_cores, ndev->fw_version >> 16,
		 ndev->fw_version & 0xffff);
	return 0;

err_irq:
	free_irq(irq, pp);
err_vectors:
	pci_free_irq_vectors(pdev);
err_put:
	put_device(&ndev->dev);
	return ret;
}

/*
 * Unbind or hot-unplug, possibly with contexts open, mappings live and
 * commands in flight: stop the monitor, take the dax device down while the
 * card's memory is still there, unregister (no new opens, no backend call,
 * mappings revoked), abort and drop everything the card holds, then let go
 * of the core's structure.
 */
static void npnm_pci_remove(struct pci_dev *pdev)
{
	struct npnm_pci *pp = pci_get_drvdata(pdev);
	struct npnm_device *ndev = pp->ndev;
	LIST_HEAD(held);

	cancel_delayed_work_sync(&pp->hb_work);
	npnm_dax_remove(ndev);
	npnm_device_unregister(ndev);	/* also completes what the card holds */
	spin_lock(&pp->lock);
	pp->dead = true;
	take_all_locked(pp, &held);
	spin_unlock(&pp->lock);
	complete_list(&held, NPNM_ST_ABORTED);
	WRITE_ONCE(pp->hdr->driver_state, cpu_to_le32(NPNM_DRV_DETACHED));
	free_irq(pci_irq_vector(pdev, 0), pp);
	pci_free_irq_vectors(pdev);
	put_device(&ndev->dev);
}

static const struct pci_device_id npnm_pci_ids[] = {
	{ PCI_DEVICE(NPNM_DEVIF_IVSHMEM_VENDOR, NPNM_DEVIF_IVSHMEM_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, npnm_pci_ids);

struct pci_driver npnm_pci_driver = {
	.name = "nelssa_pnm",
	.id_table = npnm_pci_ids,
	.probe = npnm_pci_probe,
	.remove = npnm_pci_remove,
};
