// SPDX-License-Identifier: GPL-2.0-only
/*
 * Probe: the dax bus's region API (alloc_dax_region(), devm_create_dev_dax())
 * as in 6.1, declared by drivers/dax/bus.h, which kernel-probe.sh copies
 * into kdax/ from the matching linux-source; and a kernel that can back
 * device memory with struct pages and offline it again.
 */
#include <linux/memory_hotplug.h>
#include <linux/memremap.h>

#include "kdax/bus.h"

#if !IS_ENABLED(CONFIG_DEV_DAX) || !IS_ENABLED(CONFIG_ZONE_DEVICE) || \
	!IS_ENABLED(CONFIG_MEMORY_HOTREMOVE)
#error "no device-dax, ZONE_DEVICE or memory hot-remove in this kernel"
#endif

struct dev_dax *npnm_probe(struct device *parent, struct range *range, struct dev_pagemap *pgmap);
struct dev_dax *npnm_probe(struct device *parent, struct range *range, struct dev_pagemap *pgmap)
{
	struct dax_region *region = alloc_dax_region(parent, 0, range, 0, PMD_SIZE,
						     IORESOURCE_DAX_STATIC);
	struct dev_dax_data data = {
		.dax_region = region,
		.pgmap = pgmap,
		.size = range_len(range),
		.id = 0,
	};
	struct dev_dax *dev_dax = devm_create_dev_dax(&data);

	dax_region_put(region);
	if (!IS_ERR(dev_dax))
		offline_and_remove_memory(range->start, range_len(range));
	return dev_dax;
}
