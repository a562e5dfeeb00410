// SPDX-License-Identifier: GPL-2.0-only
/*
 * nelssa_pnm: driver for NELSSA processing-near-memory (PNM) devices.
 *
 * DOC: module parameters
 *
 * The hardware-independent core (contexts, regions, validation, the
 * command path, the watchdog) sits on a backend.  This version ships the
 * in-kernel mock backend, which creates @mock_devices devices of
 * @mock_mem_mb MiB each; a PCI backend for the real card follows.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>

#include "npnm.h"

static unsigned int mock_devices = 1;
module_param(mock_devices, uint, 0444);
MODULE_PARM_DESC(mock_devices, "number of in-kernel mock PNM devices (0-16, default 1)");

static unsigned int mock_mem_mb = 64;
module_param(mock_mem_mb, uint, 0444);
MODULE_PARM_DESC(mock_mem_mb, "device memory of each mock device in MiB (1-4096, default 64)");

unsigned int npnm_timeout_ms = 5000;
module_param_named(timeout_ms, npnm_timeout_ms, uint, 0644);
MODULE_PARM_DESC(timeout_ms, "default command timeout in ms before the watchdog expires it (default 5000)");

#define NPNM_MAX_DEVICES 16

static struct npnm_device *devices[NPNM_MAX_DEVICES];

int npnm_device_register(struct npnm_device *ndev)
{
	int ret;

	snprintf(ndev->name, sizeof(ndev->name), "nelssa_pnm%d", ndev->id);
	ndev->misc.minor = MISC_DYNAMIC_MINOR;
	ndev->misc.name = ndev->name;
	ndev->misc.fops = &npnm_fops;
	ndev->misc.groups = npnm_groups;
	ndev->misc.mode = 0600;
	spin_lock_init(&ndev->lock);
	INIT_LIST_HEAD(&ndev->inflight);
	mutex_init(&ndev->ctx_lock);
	INIT_LIST_HEAD(&ndev->contexts);
	INIT_DELAYED_WORK(&ndev->watchdog, npnm_watchdog_fn);
	ndev->state = NPNM_STATE_LIVE;
	ret = misc_register(&ndev->misc);
	if (!ret)
		npnm_debugfs_add(ndev);
	return ret;
}

void npnm_device_unregister(struct npnm_device *ndev)
{
	npnm_debugfs_remove(ndev);
	misc_deregister(&ndev->misc);
	cancel_delayed_work_sync(&ndev->watchdog);
}

static void npnm_remove_all(void)
{
	int i;

	for (i = NPNM_MAX_DEVICES - 1; i >= 0; i--) {
		if (!devices[i])
			continue;
		npnm_device_unregister(devices[i]);
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
	for (i = 0; i < mock_devices; i++) {
		ret = npnm_mock_create(i, (u64)mock_mem_mb << 20, &devices[i]);
		if (ret)
			goto err;
		ret = npnm_device_register(devices[i]);
		if (ret) {
			npnm_mock_destroy(devices[i]);
			devices[i] = NULL;
			goto err;
		}
	}
	return 0;

err:
	npnm_remove_all();
	return ret;
}

static void __exit npnm_exit(void)
{
	npnm_remove_all();
}

module_init(npnm_init);
module_exit(npnm_exit);

MODULE_DESCRIPTION("NELSSA processing-near-memory (PNM) device driver");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1.0");
