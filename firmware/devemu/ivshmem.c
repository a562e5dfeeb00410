// SPDX-License-Identifier: MIT
/*
 * The ivshmem server side of nelssa-devemu.  QEMU's ivshmem-doorbell device
 * connects to a UNIX socket and expects (docs/specs/ivshmem-spec.txt):
 *
 *   1. the protocol version, 0;
 *   2. its own peer id;
 *   3. -1 with the shared-memory fd;
 *   4. for every other peer P: P once per vector, each with P's eventfd
 *      for that vector (how the guest rings P);
 *   5. its own id once per vector, each with its own eventfd (what QEMU
 *      turns into MSI-X interrupts).
 *
 * Every message is a little-endian int64, optionally with one fd, sent by
 * its own sendmsg() so the fd stays attached to its 8 bytes.  The firmware
 * is peer 0 and never connects; the guest is peer 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "devemu.h"

static int send_msg(int sock, int64_t value, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = &value, .iov_len = sizeof(value) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	value = (int64_t)htole64((uint64_t)value);
	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &msg, MSG_NOSIGNAL) == sizeof(value) ? 0 : -errno;
}

int devemu_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int sock;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	unlink(path);
	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	if (bind(sock, (struct sockaddr *)&sa, sizeof(sa)) || listen(sock, 4)) {
		int ret = -errno;

		close(sock);
		return ret;
	}
	return sock;
}

int devemu_greet(int client, const struct devemu *d)
{
	int ret;

	ret = send_msg(client, 0, -1);				/* protocol version */
	if (!ret)
		ret = send_msg(client, DEVEMU_GUEST_PEER, -1);	/* your id */
	if (!ret)
		ret = send_msg(client, -1, d->shm_fd);		/* device memory */
	for (unsigned int v = 0; v < DEVEMU_VECTORS && !ret; v++)
		ret = send_msg(client, NPNM_DEVIF_FW_PEER, d->fw_efd[v]);	/* peer 0 */
	for (unsigned int v = 0; v < DEVEMU_VECTORS && !ret; v++)
		ret = send_msg(client, DEVEMU_GUEST_PEER, d->guest_efd[v]);	/* yours */
	return ret;
}
