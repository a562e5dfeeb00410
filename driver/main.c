// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm: driver for NELSSA processing-near-memory (PNM) devices.
 *
 * DOC: devices and module parameters
 *
 * Each device is a character device in class nelssa_pnm, node
 * /dev/nelssa_pnm<N> with mode 0600 (a udev rule may widen it to a group).
 * The hardware-independent core (contexts, regions, validation, the
 * command path, the watchdog) sits on a backend: the PCI backend for cards
 * (and QEMU's ivshmem-doorbell with nelssa-devemu), and the in-kernel mock,
 * which creates @mock_devices devices of @mock_mem_mb MiB each.
 *
 * Two clocks guard commands.  Each command's own deadline (its timeout_ms,
 * else @timeout_ms), counted from submission, fails that command only.
 * The device watchdog (@watchdog_ms, root only) fails the whole device when
 * one command has been *running on it* longer than that.  Quotas
 * (@ctx_max_regions, @ctx_max_bytes, @uid_max_regions, @uid_max_bytes) bound
 * what one context and one uid may hold on a device; all of them can be
 * changed at run time in /sys/module/nelssa_pnm/parameters/.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/idr.h>
#include <linux/pci.h>

#include "npnm.h"
#include "compat.h"

static unsigned int mock_devices = 1;
module_param(mock_devices, uint, 0444);
MODULE_PARM_DESC(mock_devices, "number of in-kernel mock PNM devices (0-16, default 1)");

static unsigned int mock_mem_mb = 64;
module_param(mock_mem_mb, uint, 0444);
MODULE_PARM_DESC(mock_mem_mb, "device memory of each mock device in MiB (1-4096, default 64)");

static bool pci = true;
module_param(pci, bool, 0444);
MODULE_PARM_DESC(pci, "bind PNM cards on PCI (default true; false: mock devices only)");

unsigned int npnm_timeout_ms = 5000;
module_param_named(timeout_ms, npnm_timeout_ms, uint, 0644);
MODULE_PARM_DESC(timeout_ms,
		 "deadline of a command that sets none, ms from submission (default 5000)");

static struct class npnm_class;
static bool npnm_class_registered;

/* Under the lock that removal marks the device gone with, so no work outlives it. */
static int npnm_kick_watchdog(struct device *dev, void *unused)
{
	struct npnm_device *ndev = npnm_dev_of(dev);

	spin_lock(&ndev->lock);
	if (ndev->state != NPNM_STATE_GONE)
		mod_delayed_work(system_wq, &ndev->watchdog, 0);
	spin_unlock(&ndev->lock);
	return 0;
}

/* A new watchdog applies at once: every device re-evaluates what it holds. */
static int npnm_watchdog_ms_set(const char *val, const struct kernel_param *kp)
{
	int ret = param_set_uint(val, kp);

	if (!ret && READ_ONCE(npnm_class_registered))
		class_for_each_device(&npnm_class, NULL, NULL, npnm_kick_watchdog);
	return ret;
}

static const struct kernel_param_ops npnm_watchdog_ms_ops = {
	.set = npnm_watchdog_ms_set,
	.get = param_get_uint,
};

unsigned int npnm_watchdog_ms = 10000;
module_param_cb(watchdog_ms, &npnm_watchdog_ms_ops, &npnm_watchdog_ms, 0644);
MODULE_PARM_DESC(watchdog_ms,
		 "a device running one command longer than this (ms) is failed; 0: never (default 10000)");

unsigned int npnm_ctx_max_regions = 1024;
module_param_named(ctx_max_regions, npnm_ctx_max_regions, uint, 0644);
MODULE_PARM_DESC(ctx_max_regions, "regions one context may hold, 0: no limit (default 1024)");

unsigned long long npnm_ctx_max_bytes;
module_param_named(ctx_max_bytes, npnm_ctx_max_bytes, ullong, 0644);
MODULE_PARM_DESC(ctx_max_bytes, "device memory one context may hold, 0: no limit (default 0)");

unsigned int npnm_uid_max_regions;
module_param_named(uid_max_regions, npnm_uid_max_regions, uint, 0644);
MODULE_PARM_DESC(uid_max_regions,
		 "regions one uid may hold on one device, 0: no limit (default 0)");

unsigned long long npnm_uid_max_bytes;
module_param_named(uid_max_bytes, npnm_uid_max_bytes, ullong, 0644);
MODULE_PARM_DESC(uid_max_bytes,
		 "device memory one uid may hold on one device, 0: no limit (default 0)");

#define NPNM_MAX_DEVICES 16

static struct npnm_device *devices[NPNM_MAX_DEVICES];
static dev_t npnm_devt;
static DEFINE_IDA(npnm_ida);

/* Device numbers: the mocks first, then PCI devices as they probe. */
int npnm_id_alloc(void)
{
	return ida_alloc_max(&npnm_ida, NPNM_MAX_DEVICES - 1, GFP_KERNEL);
}

void npnm_id_free(int id)
{
	ida_free(&npnm_ida, id);
}

/* Never world-accessible; udev may hand the node to a group. */
static char *npnm_devnode(NPNM_DEVNODE_CONST struct device *dev, umode_t *mode)
{
	if (mode)
		*mode = 0600;
	return NULL;
}

static struct class npnm_class = {
	.name = "nelssa_pnm",
	.devnode = npnm_devnode,
	.dev_groups = npnm_groups,
};

/*
 * The last reference is gone: no context, no region, no command is left,
 * so every byte went back to the pool.
 */
static void npnm_dev_release(struct device *dev)
{
	struct npnm_device *ndev = npnm_dev_of(dev);

	if (ndev->pool)
		gen_pool_destroy(ndev->pool);
	xa_destroy(&ndev->usage);
	cleanup_srcu_struct(&ndev->srcu);
	if (ndev->id >= 0)
		npnm_id_free(ndev->id);
	kfree(ndev);
}

/**
 * npnm_device_init() - first half of setting up a device.
 * @ndev: zeroed, kmalloc()ed; from here on freed only by put_device().
 * @parent: the bus device, or NULL.
 *
 * The backend fills in its fields between this and npnm_device_register().
 * Return: 0, or -errno with @ndev already freed.
 */
int npnm_device_init(struct npnm_device *ndev, struct device *parent)
{
	int ret = init_srcu_struct(&ndev->srcu);

	if (ret) {
		kfree(ndev);
		return ret;
	}
	spin_lock_init(&ndev->lock);
	INIT_LIST_HEAD(&ndev->inflight);
	INIT_LIST_HEAD(&ndev->held);
	mutex_init(&ndev->reset_lock);
	mutex_init(&ndev->ctx_lock);
	INIT_LIST_HEAD(&ndev->contexts);
	xa_init(&ndev->usage);
	INIT_DELAYED_WORK(&ndev->watchdog, npnm_watchdog_fn);
	ndev->state = NPNM_STATE_LIVE;
	ndev->epoch = 1;
	ndev->progress = jiffies;
	ndev->id = -1;
	npnm_dax_init_dev(ndev);
	device_initialize(&ndev->dev);
	ndev->dev.class = &npnm_class;
	ndev->dev.parent = parent;
	ndev->dev.release = npnm_dev_release;
	cdev_init(&ndev->cdev, &npnm_fops);
	ndev->cdev.owner = THIS_MODULE;
	return 0;
}

/* Takes a device number; on failure the caller still puts the device. */
int npnm_device_register(struct npnm_device *ndev)
{
	int ret;

	ndev->id = npnm_id_alloc();
	if (ndev->id < 0)
		return ndev->id;
	snprintf(ndev->name, sizeof(ndev->name), "nelssa_pnm%d", ndev->id);
	ndev->dev.devt = MKDEV(MAJOR(npnm_devt), ndev->id);
	ret = dev_set_name(&ndev->dev, "%s", ndev->name);
	if (ret)
		return ret;
	/* Attributes come with the class: in place before the uevent. */
	ret = cdev_device_add(&ndev->cdev, &ndev->dev);
	if (ret)
		return ret;
	npnm_debugfs_add(ndev);
	return 0;
}

/*
 * Removal: no new opens, no backend call or device-memory access from
 * here on, every mapping revoked.  The backend then aborts what it holds
 * and drops its reference; open contexts keep the structure until they
 * close, and see -ENXIO.
 */
void npnm_device_unregister(struct npnm_device *ndev)
{
	npnm_debugfs_remove(ndev);
	cdev_device_del(&ndev->cdev, &ndev->dev);
	mutex_lock(&ndev->reset_lock);
	spin_lock(&ndev->lock);
	ndev->state = NPNM_STATE_GONE;
	spin_unlock(&ndev->lock);
	mutex_unlock(&ndev->reset_lock);
	synchronize_srcu(&ndev->srcu);
	npnm_revoke_mappings(ndev);
	cancel_delayed_work_sync(&ndev->watchdog);
	npnm_device_abort_all(ndev, NPNM_ST_ABORTED);
	npnm_release_held(ndev);
}

static void npnm_remove_all(void)
{
	int i;

	for (i = NPNM_MAX_DEVICES - 1; i >= 0; i--) {
		if (!devices[i])
			continue;
		npnm_mock_destroy(devices[i]);
		devices[i] = NULL;
	}
	npnm_debugfs_exit();
}

static int __init npnm_init(void)
{
	unsigned int i;
	int ret;

	if (mock_devices > NPNM_MAX_DEVICES || !mock_mem_mb || mock_mem_mb > 4096) {
		pr_err("nelssa_pnm: mock_devices must be 0-%d and mock_mem_mb 1-4096\n",
		       NPNM_MAX_DEVICES);
		return -EINVAL;
	}
	ret = npnm_dax_init();
	if (ret)
		return ret;
	ret = alloc_chrdev_region(&npnm_devt, 0, NPNM_MAX_DEVICES, "nelssa_pnm");
	if (ret)
		goto err_dax;
	ret = class_register(&npnm_class);
	if (ret) {
		unregister_chrdev_region(npnm_devt, NPNM_MAX_DEVICES);
		goto err_dax;
	}
	WRITE_ONCE(npnm_class_registered, true);
	for (i = 0; i < mock_devices; i++) {
		ret = npnm_mock_create(i, (u64)mock_mem_mb << 20, &devices[i]);
		if (ret)
			goto err;
	}
	if (pci) {
		ret = pci_register_driver(&npnm_pci_driver);
		if (ret)
			goto err;
	}
	return 0;

err:
	npnm_remove_all();
	WRITE_ONCE(npnm_class_registered, false);
	class_unregister(&npnm_class);
	unregister_chrdev_region(npnm_devt, NPNM_MAX_DEVICES);
err_dax:
	npnm_dax_exit();
	return ret;
}

static void __exit npnm_exit(void)
{
	if (pci)
		pci_unregister_driver(&npnm_pci_driver);
	npnm_remove_all();
	WRITE_ONCE(npnm_class_registered, false);
	class_unregister(&npnm_class);
	unregister_chrdev_region(npnm_devt, NPNM_MAX_DEVICES);
	npnm_dax_exit();
}

module_init(npnm_init);
module_exit(npnm_exit);

MODULE_DESCRIPTION("NELSSA processing-near-memory (PNM) device driver");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1.0");
