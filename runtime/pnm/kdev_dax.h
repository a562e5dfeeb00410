/* SPDX-License-Identifier: MIT */
/* The kdev backend's hold on a card's device-dax carve-out (kdev_dax.c). */
#ifndef NELSSA_KDEV_DAX_H
#define NELSSA_KDEV_DAX_H

#include <stdint.h>

#include "pnm_internal.h"

struct kdev_dax {
	int fd;			/* /dev/daxX.Y, flock()ed; -1: not taken */
	char name[32];		/* "daxX.Y" */
	uint64_t size, align;
	struct nelssa_extent_alloc alloc;
};

/*
 * Takes the carve-out of the card open as @card_fd (named @card in
 * errors): finds its dax device in sysfs, opens and locks it.  0, or
 * -EOPNOTSUPP (no carve-out), -EBUSY (another context holds it), -errno,
 * with words in nelssa_pnm_strerror().
 */
int kdev_dax_open(struct kdev_dax *d, int card_fd, const char *card);
void kdev_dax_close(struct kdev_dax *d);

/* @size bytes, rounded up to the dax alignment in @len, at @off: 0 or -ENOMEM. */
int kdev_dax_get(struct kdev_dax *d, uint64_t size, uint64_t *len, uint64_t *off);
void kdev_dax_put(struct kdev_dax *d, uint64_t off, uint64_t len);

#endif /* NELSSA_KDEV_DAX_H */
