// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm: driver for NELSSA processing-near-memory (PNM) devices.
 *
 * DOC: devices and module parameters
 *
 * Each device is a character device in class nelssa_pnm, node
 * /dev/nelssa_pnm<N> with mode 0600 (a udev rule may widen it to a group).
 * The hardware-independent core (contexts, regions, validation, the
 * command path, the watchdog) sits on a backend.  This version ships the
 * in-kernel mock backend, which creates @mock_devices devices of
 * @mock_mem_mb MiB each; a PCI backend for the real card follows.
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
MODULE_PARM_DESC(timeout_ms, "default command timeout in ms before the watchdog expires it (default 5000)");

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

int npnm_device_register(struct npnm_device *ndev)
{
	dev_t devt = MKDEV(MAJOR(npnm_devt), ndev->id);
	int ret;

	snprintf(ndev->name, sizeof(ndev->name), "nelssa_pnm%d", ndev->id);
	spin_lock_init(&ndev->lock);
	INIT_LIST_HEAD(&ndev->inflight);
	mutex_init(&ndev->ctx_lock);
	INIT_LIST_HEAD(&ndev->contexts);
	INIT_DELAYED_WORK(&ndev->watchdog, npnm_watchdog_fn);
	ndev->state = NPNM_STATE_LIVE;
	cdev_init(&ndev->cdev, &npnm_fops);
	ndev->cdev.owner = THIS_MODULE;
	ret = cdev_add(&ndev->cdev, devt, 1);
	if (ret)
		return ret;
	/* Attributes come with the class: in place before the uevent. */
	ndev->dev = device_create(&npnm_class, NULL, devt, ndev, "%s", ndev->name);
	if (IS_ERR(ndev->dev)) {
		cdev_del(&ndev->cdev);
		return PTR_ERR(ndev->dev);
	}
	npnm_debugfs_add(ndev);
	return 0;
}

void npnm_device_unregister(struct npnm_device *ndev)
{
	npnm_debugfs_remove(ndev);
	device_destroy(&npnm_class, ndev->dev->devt);
	cdev_del(&ndev->cdev);
	cancel_delayed_work_sync(&ndev->watchdog);
}

static void npnm_remove_all(void)
{
	int i;

	for (i = NPNM_MAX_DEVICES - 1; i >= 0; i--) {
		if (!devices[i])
			continue;
		npnm_device_unregister(devices[i]);
		npnm_id_free(devices[i]->id);
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
	ret = alloc_chrdev_region(&npnm_devt, 0, NPNM_MAX_DEVICES, "nelssa_pnm");
	if (ret)
		return ret;
	ret = class_register(&npnm_class);
	if (ret) {
		unregister_chrdev_region(npnm_devt, NPNM_MAX_DEVICES);
		return ret;
	}
	for (i = 0; i < mock_devices; i++) {
		int id = npnm_id_alloc();

		ret = id < 0 ? id : npnm_mock_create(id, (u64)mock_mem_mb << 20, &devices[i]);
		if (ret) {
			if (id >= 0)
				npnm_id_free(id);
			goto err;
		}
		ret = npnm_device_register(devices[i]);
		if (ret) {
			npnm_id_free(id);
			npnm_mock_destroy(devices[i]);
			devices[i] = NULL;
			goto err;
		}
	}
	if (pci) {
		ret = pci_register_driver(&npnm_pci_driver);
		if (ret)
			goto err;
	}
	return 0;

err:
	npnm_remove_all();
	class_unregister(&npnm_class);
	unregister_chrdev_region(npnm_devt, NPNM_MAX_DEVICES);
	return ret;
}

static void __exit npnm_exit(void)
{
	if (pci)
		pci_unregister_driver(&npnm_pci_driver);
	npnm_remove_all();
	class_unregister(&npnm_class);
	unregister_chrdev_region(npnm_devt, NPNM_MAX_DEVICES);
}

module_init(npnm_init);
module_exit(npnm_exit);

MODULE_DESCRIPTION("NELSSA processing-near-memory (PNM) device driver");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1.0");
