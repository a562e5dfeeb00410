// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: device-dax carve-out
 *
 * With @dax_mb set, the top @dax_mb MiB of each PCI card's memory are not
 * the region allocator's: they are exported through the kernel's dax bus
 * as one static device-dax instance, /dev/daxX.0.  device_dax backs it
 * with struct pages (memremap_pages(), MEMORY_DEVICE_GENERIC), so a
 * mapping of it can be pinned -- registered for RDMA, used for O_DIRECT --
 * where a region mapped through the card's own node (raw page frames)
 * cannot; and ``daxctl reconfigure-device --mode=system-ram`` hands it to
 * kmem, which onlines it as System RAM of @dax_node (default: the card's
 * node).
 *
 * The dax core wants its region's parent to be a device bound to a driver
 * and probing, and keeps the region in that device's driver data, as
 * hmem's platform devices have it: so each carve-out is a platform device
 * "nelssa_pnm_dax.X" below the card's class device, bound to this module's
 * driver of that name, with daxX.0 and the region's attributes
 * (dax_region/) below it.  X is a memregion id, the id space CXL and HMEM
 * regions share.
 *
 * The carve-out has an iomem resource of its own, named after the card,
 * under the card's memory window; device_dax's and kmem's requests nest
 * inside it.  Contexts can name part of it in commands through a DAX
 * window (NPNM_MEM_F_DAX): a region over carve-out memory that is neither
 * allocated nor zeroed.  Windows and System RAM exclude each other: a
 * window is refused while any of the carve-out is online, and onlining is
 * refused (the memory notifier says no) while a window exists.
 *
 * Removal (hot-unplug, unbind, rmmod) takes the dax device down before
 * the card's memory goes: in System RAM mode the memory is offlined first
 * (its pages migrated away) and kmem then removes it; the dax device is
 * killed, which revokes its mappings (SIGBUS), and device_dax's release
 * waits until nothing holds a page of it any more -- an RDMA registration
 * keeps the removal waiting until it is dropped, so no struct page outlives
 * the memory behind it.  A reset does not touch the carve-out.
 *
 * The dax bus's region API is exported by 6.1 but declared only in the
 * private drivers/dax/bus.h; scripts/kernel-probe.sh copies it from the
 * matching linux-source into kdax/.  Without it (a DKMS build on a machine
 * without linux-source) the driver builds without the export and says so.
 */
#include <linux/device.h>
#include <linux/ioport.h>
#include <linux/memory.h>
#include <linux/memory_hotplug.h>
#include <linux/memregion.h>
#include <linux/memremap.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/numa.h>
#include <linux/platform_device.h>
#include <linux/sysfs.h>

#include "npnm.h"
#include "compat.h"

#if NPNM_HAVE_DAX_BUS
#include "kdax/bus.h"
#endif

static unsigned int dax_mb;
module_param(dax_mb, uint, 0444);
MODULE_PARM_DESC(dax_mb,
		 "MiB at the top of each card's memory exported as a device-dax instance, a multiple of 2 (default 0: none)");

static int dax_node = NUMA_NO_NODE;
module_param(dax_node, int, 0444);
MODULE_PARM_DESC(dax_node, "NUMA node of the carve-out's memory (default -1: the card's node)");

/*
 * Card memory a previous binding left online as System RAM (its offlining
 * failed at removal) is still the kernel's: the card must not be used
 * again until a reboot.  Online memory comes in whole sections.
 */
bool npnm_dax_mem_in_use(phys_addr_t base, u64 len)
{
	unsigned long pfn = PHYS_PFN(base), end = PHYS_PFN(base + len);

	for (pfn = ALIGN_DOWN(pfn, PAGES_PER_SECTION); pfn < end; pfn += PAGES_PER_SECTION)
		if (pfn_to_online_page(pfn))
			return true;
	return false;
}

#if NPNM_HAVE_DAX_BUS

/* The carve-out's /dev/daxX.0 comes from device_dax, even without udev. */
MODULE_SOFTDEP("post: device_dax");

/* Carve-outs the memory notifier watches. */
static LIST_HEAD(npnm_dax_list);
static DEFINE_MUTEX(npnm_dax_list_lock);

/**
 * npnm_dax_carve() - take the carve-out from the top of a card's heap.
 * @ndev: the device, not registered yet.
 * @phys: host physical address of device memory offset 0.
 * @heap_off: offset of the heap, the memory the allocator may hand out.
 * @heap_size: its size; reduced by the carve-out.
 *
 * The carve-out stays out of the allocator from here on; npnm_dax_add()
 * exports it once the device is registered.
 */
void npnm_dax_carve(struct npnm_device *ndev, phys_addr_t phys, u64 heap_off, u64 *heap_size)
{
	struct npnm_dax *dax = &ndev->dax;
	u64 size = (u64)dax_mb << 20;
	struct device *parent = ndev->dev.parent;
	int nid = dax_node;
	u64 off;

	if (!size)
		return;
	off = heap_off + *heap_size - size;
	if (size >= *heap_size) {
		dev_info(parent, "no device-dax carve-out: %u MiB leave no memory to the allocator\n",
			 dax_mb);
		return;
	}
	if (!IS_ALIGNED(phys + off, PMD_SIZE) || !IS_ALIGNED(size, PMD_SIZE)) {
		dev_warn(parent, "no device-dax carve-out: %#llx + %llu MiB is not 2 MiB aligned\n",
			 (u64)phys + off, size >> 20);
		return;
	}
	if (nid == NUMA_NO_NODE)
		nid = dev_to_node(parent);
	if (nid == NUMA_NO_NODE)
		nid = memory_add_physaddr_to_nid(phys + off);
	if (nid < 0 || nid >= MAX_NUMNODES || !node_possible(nid)) {
		dev_warn(parent, "no device-dax carve-out: NUMA node %d is not possible\n", nid);
		return;
	}
	dax->off = off;
	dax->size = size;
	dax->phys = phys + off;
	dax->node = nid;
	*heap_size -= size;
}

/*
 * The dax device, from the probe of the carve-out's platform device: the
 * dax core needs its parent locked and bound, and unwinds everything with
 * the parent's devres when it is unbound.
 */
static int npnm_dax_probe(struct platform_device *pdev)
{
	struct npnm_dax *dax = &npnm_dev_of(pdev->dev.parent)->dax;
	struct range range = { .start = dax->phys, .end = dax->phys + dax->size - 1 };
	struct dev_pagemap pgmap = { .range = range, .nr_range = 1 };
	struct dax_region *region;
	struct dev_dax_data data;
	struct dev_dax *dev_dax;

	region = alloc_dax_region(&pdev->dev, pdev->id, &range, dax->node, PMD_SIZE,
				  IORESOURCE_DAX_STATIC);
	if (!region)
		return -ENOMEM;
	data = (struct dev_dax_data) {
		.dax_region = region,
		.pgmap = &pgmap,
		.size = dax->size,
		.id = 0,
	};
	dev_dax = devm_create_dev_dax(&data);
	/* The device, if any, holds the region from here on. */
	dax_region_put(region);
	if (IS_ERR(dev_dax))
		return PTR_ERR(dev_dax);
	mutex_lock(&dax->lock);
	snprintf(dax->name, sizeof(dax->name), "dax%d.0", pdev->id);
	mutex_unlock(&dax->lock);
	return 0;
}

/* Bound and unbound by the card's driver only, never through sysfs. */
static struct platform_driver npnm_dax_driver = {
	.probe = npnm_dax_probe,
	.driver = {
		.name = "nelssa_pnm_dax",
		.suppress_bind_attrs = true,
	},
};

/**
 * npnm_dax_add() - export the carve-out as a device-dax instance.
 * @ndev: a registered device with a carve-out.
 *
 * Return: 0, or -errno with nothing exported (the caller gives the memory
 * back to the allocator).
 */
int npnm_dax_add(struct npnm_device *ndev)
{
	struct npnm_dax *dax = &ndev->dax;
	struct platform_device *pdev;
	int ret, id;

	if (region_intersects(dax->phys, dax->size, IORESOURCE_SYSTEM_RAM, IORES_DESC_NONE) !=
	    REGION_DISJOINT)
		return -EBUSY;
	dax->res = (struct resource) {
		.name = ndev->name,
		.start = dax->phys,
		.end = dax->phys + dax->size - 1,
		.flags = IORESOURCE_MEM,
		.desc = IORES_DESC_NONE,
	};
	ret = insert_resource(&iomem_resource, &dax->res);
	if (ret)
		return ret;
	id = memregion_alloc(GFP_KERNEL);
	if (id < 0) {
		ret = id;
		goto err_res;
	}
	ret = -ENOMEM;
	pdev = platform_device_alloc(npnm_dax_driver.driver.name, id);
	if (!pdev)
		goto err_id;
	pdev->dev.parent = &ndev->dev;
	ret = platform_device_add(pdev);
	if (ret) {
		platform_device_put(pdev);
		goto err_id;
	}
	/* The probe ran (synchronously) and named the dax device, or failed. */
	if (!dax->name[0]) {
		platform_device_unregister(pdev);
		ret = -ENXIO;
		goto err_id;
	}
	mutex_lock(&dax->lock);
	dax->pdev = pdev;
	dax->region_id = id;
	mutex_unlock(&dax->lock);
	mutex_lock(&npnm_dax_list_lock);
	list_add_tail(&dax->node_list, &npnm_dax_list);
	mutex_unlock(&npnm_dax_list_lock);
	WRITE_ONCE(ndev->caps, ndev->caps | NPNM_CAP_DAX);
	dev_info(&ndev->dev, "%s: %llu MiB at offset %#llx (%pr), node %d\n", dax->name,
		 dax->size >> 20, dax->off, &dax->res, dax->node);
	return 0;

err_id:
	memregion_free(id);
err_res:
	remove_resource(&dax->res);
	return ret;
}

/*
 * kmem removes its memory only when every block of it is offline, and
 * otherwise leaves it online for good ("cannot be hotremoved until the
 * next reboot") -- on a card that is going away.  offline_and_remove_memory()
 * is the only offlining 6.1 exports to modules, and it removes as well; so
 * the blocks come back, offline, for kmem's own removal to take.  The
 * notifier refuses to online them meanwhile (@dying).
 */
static int npnm_dax_offline(struct npnm_device *ndev)
{
	struct npnm_dax *dax = &ndev->dax;
	u64 block = memory_block_size_bytes();
	u64 start = ALIGN(dax->phys, block), end = ALIGN_DOWN(dax->phys + dax->size, block);
	int ret;

	if (start >= end)
		return 0;
	dev_info(&ndev->dev, "%s: offlining its System RAM before the card goes\n", dax->name);
	ret = offline_and_remove_memory(start, end - start);
	if (ret) {
		dev_crit(&ndev->dev,
			 "%s: System RAM could not be offlined (%d): it stays in use until reboot and the card must not be physically removed\n",
			 dax->name, ret);
		return ret;
	}
	ret = add_memory_driver_managed(dax->node, start, end - start, "System RAM (kmem)",
					MHP_NONE);
	if (ret)
		dev_crit(&ndev->dev, "%s: cannot hand the offline memory back to kmem (%d)\n",
			 dax->name, ret);
	return ret;
}

/**
 * npnm_dax_remove() - take the dax device down before the card's memory.
 * @ndev: the device; a no-op without an exported carve-out.
 *
 * Revokes every mapping of the dax device and waits until no page of it
 * is referenced; offlines it first when it is System RAM.
 */
void npnm_dax_remove(struct npnm_device *ndev)
{
	struct npnm_dax *dax = &ndev->dax;
	bool online;

	if (dax->region_id < 0)
		return;
	mutex_lock(&dax->lock);
	dax->dying = true;
	online = dax->online_pages || dax->onlining;
	mutex_unlock(&dax->lock);
	if (online)
		npnm_dax_offline(ndev);
	/* Unbinding kills the dax device and waits for its pages (devres). */
	platform_device_unregister(dax->pdev);
	mutex_lock(&npnm_dax_list_lock);
	list_del(&dax->node_list);
	mutex_unlock(&npnm_dax_list_lock);
	remove_resource(&dax->res);
	memregion_free(dax->region_id);
	mutex_lock(&dax->lock);
	dax->region_id = -1;
	dax->pdev = NULL;
	dax->name[0] = 0;
	mutex_unlock(&dax->lock);
}

/**
 * npnm_dax_window_get() - take part of the carve-out for a DAX window.
 * @ndev: the device.
 * @off: offset in the carve-out, page aligned.
 * @size: bytes, page aligned.
 * @dev_off: out: the offset in device memory.
 *
 * Return: 0, -EOPNOTSUPP without a carve-out, -EINVAL outside it, -EBUSY
 * while any of it is System RAM, -ENXIO while the card goes.
 */
int npnm_dax_window_get(struct npnm_device *ndev, u64 off, u64 size, u64 *dev_off)
{
	struct npnm_dax *dax = &ndev->dax;
	int ret = 0;

	mutex_lock(&dax->lock);
	if (dax->dying)
		ret = -ENXIO;
	else if (dax->region_id < 0)
		ret = -EOPNOTSUPP;
	else if (!PAGE_ALIGNED(off) || !size || size > dax->size || off > dax->size - size)
		ret = -EINVAL;
	else if (dax->online_pages || dax->onlining)
		ret = -EBUSY;
	else
		dax->windows++;
	mutex_unlock(&dax->lock);
	if (!ret)
		*dev_off = dax->off + off;
	return ret;
}

void npnm_dax_window_put(struct npnm_device *ndev)
{
	struct npnm_dax *dax = &ndev->dax;

	mutex_lock(&dax->lock);
	dax->windows--;
	mutex_unlock(&dax->lock);
}

/*
 * Onlining and offlining are serialised by the memory hotplug lock, so
 * one flag follows an onlining from MEM_GOING_ONLINE to its end (a
 * notifier that refused still gets the MEM_CANCEL_ONLINE).
 */
static int npnm_dax_mem_notify(struct notifier_block *nb, unsigned long action, void *arg)
{
	const struct memory_notify *mn = arg;
	u64 start = PFN_PHYS(mn->start_pfn), end = start + PFN_PHYS(mn->nr_pages);
	struct npnm_dax *dax;
	int ret = NOTIFY_OK;

	mutex_lock(&npnm_dax_list_lock);
	list_for_each_entry(dax, &npnm_dax_list, node_list) {
		u64 lo = max_t(u64, start, dax->phys), hi = min_t(u64, end, dax->phys + dax->size);
		struct npnm_device *ndev = container_of(dax, struct npnm_device, dax);

		if (lo >= hi)
			continue;
		mutex_lock(&dax->lock);
		switch (action) {
		case MEM_GOING_ONLINE:
			if (dax->dying || dax->windows) {
				dev_info(&ndev->dev, "%s: not onlining %#llx-%#llx: %s\n",
					 dax->name, lo, hi - 1,
					 dax->dying ? "the card is going" : "DAX windows are open");
				ret = NOTIFY_BAD;
			} else {
				dax->onlining = true;
			}
			break;
		case MEM_ONLINE:
			dax->onlining = false;
			dax->online_pages += PHYS_PFN(hi - lo);
			break;
		case MEM_CANCEL_ONLINE:
			dax->onlining = false;
			break;
		case MEM_OFFLINE:
			dax->online_pages -= PHYS_PFN(hi - lo);
			break;
		}
		mutex_unlock(&dax->lock);
	}
	mutex_unlock(&npnm_dax_list_lock);
	return ret;
}

static struct notifier_block npnm_dax_nb = {
	.notifier_call = npnm_dax_mem_notify,
};

int npnm_dax_init(void)
{
	int ret;

	if (dax_mb % 2) {
		pr_err("nelssa_pnm: dax_mb must be a multiple of 2\n");
		return -EINVAL;
	}
	ret = platform_driver_register(&npnm_dax_driver);
	if (ret)
		return ret;
	ret = register_memory_notifier(&npnm_dax_nb);
	if (ret)
		platform_driver_unregister(&npnm_dax_driver);
	return ret;
}

void npnm_dax_exit(void)
{
	unregister_memory_notifier(&npnm_dax_nb);
	platform_driver_unregister(&npnm_dax_driver);
}

static const char *npnm_dax_none = "none";

#else /* !NPNM_HAVE_DAX_BUS */

void npnm_dax_carve(struct npnm_device *ndev, phys_addr_t phys, u64 heap_off, u64 *heap_size)
{
}

int npnm_dax_add(struct npnm_device *ndev)
{
	return -EOPNOTSUPP;
}

void npnm_dax_remove(struct npnm_device *ndev)
{
}

int npnm_dax_window_get(struct npnm_device *ndev, u64 off, u64 size, u64 *dev_off)
{
	return -EOPNOTSUPP;
}

void npnm_dax_window_put(struct npnm_device *ndev)
{
}

int npnm_dax_init(void)
{
	pr_info("nelssa_pnm: built without the device-dax export (no linux-source matching the kernel at build time)%s\n",
		dax_mb ? ": dax_mb is ignored" : "");
	return 0;
}

void npnm_dax_exit(void)
{
}

static const char *npnm_dax_none = "unsupported";

#endif /* NPNM_HAVE_DAX_BUS */

void npnm_dax_init_dev(struct npnm_device *ndev)
{
	mutex_init(&ndev->dax.lock);
	ndev->dax.region_id = -1;
	ndev->dax.node = NUMA_NO_NODE;
	INIT_LIST_HEAD(&ndev->dax.node_list);
}

static ssize_t dax_device_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct npnm_dax *dax = &npnm_dev_of(dev)->dax;
	ssize_t n;

	mutex_lock(&dax->lock);
	n = sysfs_emit(buf, "%s\n", dax->name[0] ? dax->name : npnm_dax_none);
	mutex_unlock(&dax->lock);
	return n;
}
static DEVICE_ATTR_RO(dax_device);

static ssize_t dax_size_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct npnm_dax *dax = &npnm_dev_of(dev)->dax;

	return sysfs_emit(buf, "%llu\n", READ_ONCE(dax->region_id) >= 0 ? dax->size : 0);
}
static DEVICE_ATTR_RO(dax_size);

static ssize_t dax_offset_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct npnm_dax *dax = &npnm_dev_of(dev)->dax;

	return sysfs_emit(buf, "%llu\n", READ_ONCE(dax->region_id) >= 0 ? dax->off : 0);
}
static DEVICE_ATTR_RO(dax_offset);

static ssize_t dax_node_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct npnm_dax *dax = &npnm_dev_of(dev)->dax;

	return sysfs_emit(buf, "%d\n", READ_ONCE(dax->region_id) >= 0 ? dax->node : NUMA_NO_NODE);
}
static DEVICE_ATTR_RO(dax_node);

static struct attribute *npnm_dax_attrs[] = {
	&dev_attr_dax_device.attr,
	&dev_attr_dax_size.attr,
	&dev_attr_dax_offset.attr,
	&dev_attr_dax_node.attr,
	NULL,
};

const struct attribute_group npnm_dax_group = {
	.attrs = npnm_dax_attrs,
};
