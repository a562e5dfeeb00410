// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: sysfs
 *
 * One value per file under /sys/class/nelssa_pnm/nelssa_pnm<N>/, documented in
 * Documentation/ABI/testing/sysfs-driver-nelssa_pnm.  Writing "reset" to
 * state (root only) brings a device back: every command it holds completes
 * NPNM_ST_ABORTED and every region allocated before becomes stale.
 */
#include <linux/device.h>
#include <linux/sysfs.h>

#include "npnm.h"

static struct npnm_device *to_ndev(struct device *dev)
{
	return npnm_dev_of(dev);
}

static ssize_t mem_total_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n", READ_ONCE(to_ndev(dev)->mem_avail));
}
static DEVICE_ATTR_RO(mem_total);

static ssize_t mem_used_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct npnm_device *ndev = to_ndev(dev);

	return sysfs_emit(buf, "%zu\n", gen_pool_size(ndev->pool) - gen_pool_avail(ndev->pool));
}
static DEVICE_ATTR_RO(mem_used);

static ssize_t nr_cores_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", to_ndev(dev)->nr_cores);
}
static DEVICE_ATTR_RO(nr_cores);

static ssize_t backend_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%s\n", to_ndev(dev)->ops->name);
}
static DEVICE_ATTR_RO(backend);

static ssize_t fw_version_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	u32 v = to_ndev(dev)->fw_version;

	if (!v)
		return sysfs_emit(buf, "none\n");	/* the mock runs no firmware */
	return sysfs_emit(buf, "%u.%u\n", v >> 16, v & 0xffff);
}
static DEVICE_ATTR_RO(fw_version);

static ssize_t state_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	static const char * const names[] = {
		[NPNM_STATE_LIVE] = "live",
		[NPNM_STATE_FAILED] = "failed",
		[NPNM_STATE_RESETTING] = "resetting",
		[NPNM_STATE_GONE] = "removed",
	};

	return sysfs_emit(buf, "%s\n", names[READ_ONCE(to_ndev(dev)->state)]);
}

static ssize_t state_store(struct device *dev, struct device_attribute *attr, const char *buf,
			   size_t count)
{
	int ret;

	if (!sysfs_streq(buf, "reset"))
		return -EINVAL;
	ret = npnm_device_reset(to_ndev(dev), false);
	return ret ? ret : count;
}
static DEVICE_ATTR_RW(state);

static ssize_t stat_emit(atomic64_t *v, char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(v));
}

static ssize_t submitted_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return stat_emit(&to_ndev(dev)->submitted, buf);
}
static DEVICE_ATTR_RO(submitted);

static ssize_t completed_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return stat_emit(&to_ndev(dev)->completed, buf);
}
static DEVICE_ATTR_RO(completed);

static ssize_t failed_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return stat_emit(&to_ndev(dev)->failed, buf);
}
static DEVICE_ATTR_RO(failed);

static ssize_t timeouts_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return stat_emit(&to_ndev(dev)->timeouts, buf);
}
static DEVICE_ATTR_RO(timeouts);

static ssize_t aborted_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return stat_emit(&to_ndev(dev)->aborted, buf);
}
static DEVICE_ATTR_RO(aborted);

static ssize_t quarantined_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", npnm_quarantined(to_ndev(dev)));
}
static DEVICE_ATTR_RO(quarantined);

static ssize_t resets_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return stat_emit(&to_ndev(dev)->resets, buf);
}
static DEVICE_ATTR_RO(resets);

static struct attribute *npnm_attrs[] = {
	&dev_attr_mem_total.attr,
	&dev_attr_mem_used.attr,
	&dev_attr_nr_cores.attr,
	&dev_attr_backend.attr,
	&dev_attr_fw_version.attr,
	&dev_attr_state.attr,
	NULL,
};

static const struct attribute_group npnm_group = {
	.attrs = npnm_attrs,
};

static struct attribute *npnm_stat_attrs[] = {
	&dev_attr_submitted.attr,
	&dev_attr_completed.attr,
	&dev_attr_failed.attr,
	&dev_attr_timeouts.attr,
	&dev_attr_aborted.attr,
	&dev_attr_quarantined.attr,
	&dev_attr_resets.attr,
	NULL,
};

static const struct attribute_group npnm_stat_group = {
	.name = "stats",
	.attrs = npnm_stat_attrs,
};

const struct attribute_group *npnm_groups[] = {
	&npnm_group,
	&npnm_stat_group,
	&npnm_dax_group,
	NULL,
};
