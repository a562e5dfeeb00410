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
 * A failed card is reset automatically as soon as its firmware ticks again
 * and nothing is in flight; administrators can also reset through sysfs.
 */
#include <linux/delay.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include <linux/nelssa_pnm_devif.h>

#include "cxl_range.h"
#include "npnm.h"

/* Heartbeat silence after which the firmware is declared dead. */
#define NPNM_PCI_HB_TIMEOUT	(2 * HZ)
#define NPNM_PCI_HB_PERIOD	(HZ / 10)

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

	while (!pp->dead && !list_empty(&pp->backlog) && pp->nfree) {
		u32 tail = le32_to_cpu(pp->hdr->sq_tail);
		struct npnm_devif_sqe *e;
		struct npnm_kcmd *kc;
		u32 slot;

		if (tail - rd32(&pp->hdr->sq_head) >= pp->sq_entries)
			break;
		kc = list_first_entry(&pp->backlog, struct npnm_kcmd, be_node);
		list_del_init(&kc->be_node);
		slot = pp->free[--pp->nfree];
		pp->slots[slot] = kc;
		pp->gen[slot]++;
		e = &pp->sq[tail & (pp->sq_entries - 1)];
		memcpy(&e->cmd, &kc->desc, sizeof(e->cmd));
		e->cookie = cpu_to_le64(((u64)pp->gen[slot] << 32) | slot);
		memset(e->reserved, 0, sizeof(e->reserved));
		/* The entry before the index that publishes it. */
		smp_store_release(&pp->hdr->sq_tail, cpu_to_le32(tail + 1));
		rang = true;
	}
	return rang;
}

static void npnm_pci_submit(struct npnm_device *ndev, struct npnm_kcmd *kc)
{
	struct npnm_pci *pp = ndev->priv;
	bool rang;

	spin_lock(&pp->lock);
	list_add_tail(&kc->be_node, &pp->backlog);
	rang = push_locked(pp);
	spin_unlock(&pp->lock);
	if (rang)
		doorbell(pp);
}

/* Take every command the backend holds, to complete them outside the lock. */
static void take_all_locked(struct npnm_pci *pp, struct list_head *out)
{
	u32 i;

	for (i = 0; i < pp->cq_entries; i++) {
		if (pp->slots[i]) {
			list_add_tail(&pp->slots[i]->be_node, out);
			pp->slots[i] = NULL;
			pp->free[pp->nfree++] = i;
		}
	}
	list_splice_tail_init(&pp->backlog, out);
}

static void complete_list(struct list_head *list, u32 status)
{
	struct npnm_kcmd *kc, *tmp;

	list_for_each_entry_safe(kc, tmp, list, be_node) {
		list_del_init(&kc->be_node);
		npnm_cmd_complete(kc, status, 0);
		npnm_kcmd_put(kc);	/* the backend's reference */
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
		npnm_kcmd_put(kc);
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
		/*
		 * A failed card whose firmware is alive again (ticking, ready)
		 * and holds nothing of ours is brought back by a reset.
		 */
		if (READ_ONCE(pp->ndev->state) == NPNM_STATE_FAILED &&
		    rd32(&pp->hdr->fw_state) == NPNM_FW_READY &&
		    !npnm_device_reset(pp->ndev))
			dev_info(pp->ndev->dev, "recovered by an automatic reset\n");
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
	LIST_HEAD(held);

	WRITE_ONCE(pp->hdr->driver_state, cpu_to_le32(NPNM_DRV_RESET));
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
	/* Already completed (watchdog) or failed: only references remain. */
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
	.submit = npnm_pci_submit,
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

static int npnm_pci_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct npnm_device *ndev;
	struct npnm_pci *pp;
	u64 mem_len;
	int ret, irq, i;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ndev = devm_kzalloc(&pdev->dev, sizeof(*ndev), GFP_KERNEL);
	pp = devm_kzalloc(&pdev->dev, sizeof(*pp), GFP_KERNEL);
	if (!ndev || !pp)
		return -ENOMEM;
	ret = npnm_pci_mem_window(pdev, &pp->mem_phys, &mem_len);
	if (ret)
		return ret;
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

	pp->ndev = ndev;
	pp->pdev = pdev;
	pp->sq_entries = le32_to_cpu(pp->hdr->sq_entries);
	pp->cq_entries = le32_to_cpu(pp->hdr->cq_entries);
	pp->sq = (void *)pp->hdr + le64_to_cpu(pp->hdr->sq_off);
	pp->cq = (void *)pp->hdr + le64_to_cpu(pp->hdr->cq_off);
	spin_lock_init(&pp->lock);
	INIT_LIST_HEAD(&pp->backlog);
	pp->slots = devm_kcalloc(&pdev->dev, pp->cq_entries, sizeof(*pp->slots), GFP_KERNEL);
	pp->gen = devm_kcalloc(&pdev->dev, pp->cq_entries, sizeof(*pp->gen), GFP_KERNEL);
	pp->free = devm_kcalloc(&pdev->dev, pp->cq_entries, sizeof(*pp->free), GFP_KERNEL);
	if (!pp->slots || !pp->gen || !pp->free)
		return -ENOMEM;
	for (i = 0; i < pp->cq_entries; i++)
		pp->free[pp->nfree++] = pp->cq_entries - 1 - i;

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
	ndev->caps = NPNM_CAP_MMAP | NPNM_CAP_URING_CMD | NPNM_CAP_CQE32_STATUS |
		     NPNM_CAP_COMPUTE | NPNM_CAP_KV_SCATTER;
	ndev->pool = devm_gen_pool_create(&pdev->dev, PAGE_SHIFT, NUMA_NO_NODE, NULL);
	if (IS_ERR(ndev->pool))
		return PTR_ERR(ndev->pool);
	ret = gen_pool_add(ndev->pool, le64_to_cpu(pp->hdr->heap_off), ndev->mem_avail,
			   NUMA_NO_NODE);
	if (ret)
		return ret;

	/* MSI-X messages are memory writes by the device: it must be a master. */
	pci_set_master(pdev);
	ret = pci_alloc_irq_vectors(pdev, 1, 1, PCI_IRQ_MSIX);
	if (ret < 0)
		return ret;
	irq = pci_irq_vector(pdev, 0);
	ret = request_threaded_irq(irq, NULL, npnm_pci_irq, IRQF_ONESHOT, "nelssa_pnm", pp);
	if (ret)
		goto err_vectors;
	/* Rings in a known state whatever a previous driver left behind. */
	ret = npnm_pci_reset(ndev);
	if (ret)
		goto err_irq;
	INIT_DELAYED_WORK(&pp->hb_work, npnm_pci_hb_fn);

	ndev->id = npnm_id_alloc();
	if (ndev->id < 0) {
		ret = ndev->id;
		goto err_irq;
	}
	ret = npnm_device_register(ndev);
	if (ret)
		goto err_id;
	pci_set_drvdata(pdev, pp);
	schedule_delayed_work(&pp->hb_work, NPNM_PCI_HB_PERIOD);
	dev_info(&pdev->dev, "%s: %llu MiB, %u cores, firmware %u.%u\n", ndev->name,
		 ndev->mem_avail >> 20, ndev->nr_cores, ndev->fw_version >> 16,
		 ndev->fw_version & 0xffff);
	return 0;

err_id:
	npnm_id_free(ndev->id);
err_irq:
	free_irq(irq, pp);
err_vectors:
	pci_free_irq_vectors(pdev);
	return ret;
}

static void npnm_pci_remove(struct pci_dev *pdev)
{
	struct npnm_pci *pp = pci_get_drvdata(pdev);
	LIST_HEAD(held);

	cancel_delayed_work_sync(&pp->hb_work);
	npnm_device_unregister(pp->ndev);	/* no new opens; contexts hold the module */
	spin_lock(&pp->lock);
	pp->dead = true;
	take_all_locked(pp, &held);
	spin_unlock(&pp->lock);
	complete_list(&held, NPNM_ST_ABORTED);
	WRITE_ONCE(pp->hdr->driver_state, cpu_to_le32(NPNM_DRV_DETACHED));
	free_irq(pci_irq_vector(pdev, 0), pp);
	pci_free_irq_vectors(pdev);
	npnm_id_free(pp->ndev->id);
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
	/* Contexts point at the device: it goes only with the module. */
	.driver.suppress_bind_attrs = true,
};
