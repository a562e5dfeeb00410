// SPDX-License-Identifier: MIT
/*
 * A card's device-dax carve-out, as the kdev backend places pinnable
 * regions in it (NELSSA_PNM_MEM_PINNABLE, Documentation/pnm-library.rst).
 *
 * The driver only names windows on the carve-out (NPNM_MEM_F_DAX): it
 * never allocates there, because the carve-out is memory any member of
 * the nelssa group can map through /dev/daxX.Y.  So this context keeps
 * the carve-out's allocator, and takes the dax device for its own with an
 * exclusive flock(): a second context -- of this process or another --
 * that wants pinnable memory on the same card gets -EBUSY, never a window
 * on memory someone else's extent allocator handed out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "kdev_dax.h"

/* A sysfs attribute of one line, without its newline: 0 or -errno. */
static int read_attr(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

static int read_u64(const char *path, uint64_t *v)
{
	char buf[32], *end;
	int ret = read_attr(path, buf, sizeof(buf));

	if (ret)
		return ret;
	errno = 0;
	*v = strtoull(buf, &end, 0);
	return errno || end == buf ? -EINVAL : 0;
}

int kdev_dax_open(struct kdev_dax *d, int card_fd, const char *card)
{
	char path[128], name[sizeof(d->name)];
	struct stat st;
	uint64_t size;
	int ret;

	if (fstat(card_fd, &st))
		return npnm_priv_error(-errno, "%s: fstat: %s", card, strerror(errno));
	snprintf(path, sizeof(path), "/sys/dev/char/%u:%u/dax_device", major(st.st_rdev),
		 minor(st.st_rdev));
	ret = read_attr(path, name, sizeof(name));
	if (ret || strncmp(name, "dax", 3))
		return npnm_priv_error(-EOPNOTSUPP, "%s has no device-dax carve-out (%s)", card,
				       ret ? "the driver predates it" : name);
	snprintf(path, sizeof(path), "/sys/dev/char/%u:%u/dax_size", major(st.st_rdev),
		 minor(st.st_rdev));
	ret = read_u64(path, &size);
	if (ret || !size)
		return npnm_priv_error(-EOPNOTSUPP, "%s: cannot read the carve-out's size", card);
	/* device_dax maps only in multiples of its alignment (2 MiB here). */
	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/align", name);
	if (read_u64(path, &d->align) || !d->align || (d->align & (d->align - 1)))
		d->align = 2u << 20;
	snprintf(path, sizeof(path), "/dev/%s", name);
	d->fd = open(path, O_RDWR | O_CLOEXEC);
	if (d->fd < 0)
		return npnm_priv_error(-errno, "%s: cannot open its carve-out %s: %s", card, path,
				       strerror(errno));
	if (flock(d->fd, LOCK_EX | LOCK_NB)) {
		ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(d->fd);
		d->fd = -1;
		return npnm_priv_error(ret, "%s: its carve-out %s is another context's", card,
				       path);
	}
	/* The allocator never hands out its first granule: offsets here are one granule up. */
	ret = nelssa_extent_init(&d->alloc, size + d->align, d->align);
	if (ret) {
		close(d->fd);
		d->fd = -1;
		return npnm_priv_error(ret, "out of memory");
	}
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->size = size;
	return 0;
}

void kdev_dax_close(struct kdev_dax *d)
{
	if (d->fd < 0)
		return;
	nelssa_extent_fini(&d->alloc);
	close(d->fd);	/* drops the flock */
	d->fd = -1;
}

int kdev_dax_get(struct kdev_dax *d, uint64_t size, uint64_t *len, uint64_t *off)
{
	if (size > d->size)
		return -ENOMEM;
	*len = (size + d->align - 1) & ~(d->align - 1);
	if (nelssa_extent_get(&d->alloc, *len, off))
		return -ENOMEM;
	*off -= d->align;
	return 0;
}

void kdev_dax_put(struct kdev_dax *d, uint64_t off, uint64_t len)
{
	nelssa_extent_put(&d->alloc, off + d->align, len);
}
