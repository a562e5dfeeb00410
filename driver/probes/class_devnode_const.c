// SPDX-License-Identifier: GPL-2.0-only
/* Probe: class devnode callbacks take a const struct device (Linux 6.2 and later). */
#include <linux/device.h>

static char *npnm_devnode(const struct device *dev, umode_t *mode)
{
	return NULL;
}

struct class npnm_probe_class = {
	.name = "npnm_probe",
	.devnode = npnm_devnode,
};
