// SPDX-License-Identifier: MIT
/*
 * File descriptors.  At start the daemon raises its soft RLIMIT_NOFILE to
 * the hard limit and warns when that is below what its limits need
 * (ND_FDS_*: each control connection, UCX's endpoints for it, each device,
 * UCX and the daemon themselves).  It keeps one descriptor in reserve
 * (/dev/null): out of descriptors, a listener can still take a waiting
 * connection with it, tell the client why, close it and take the reserve
 * again -- so the backlog drains and clients hear a refusal instead of
 * hanging, and the daemon is never a process that looks healthy and serves
 * no one.
 *
 * accept(2) is interposed for UCX.  UCX 1.13's TCP transport accepts its
 * peers' connections in uct_tcp_iface_connect_handler()
 * (src/uct/tcp/tcp_iface.c), and when accept() fails with anything but
 * EAGAIN or EINTR it closes its listening socket for good:
 *
 *	status = ucs_socket_accept(iface->listen_fd, ...);
 *	if (status != UCS_OK) {
 *		if (status != UCS_ERR_NO_PROGRESS)
 *			ucs_close_fd(&iface->listen_fd);
 *		return;
 *	}
 *
 * One moment out of descriptors (a client opening a thousand endpoints to
 * the worker, tests/daemon/ep_flood.c) and no new client could ever reach
 * the daemon's worker over TCP again ("Destination is unreachable"), though
 * the control port still answered.  UCX offers no hook on the endpoints a
 * peer opens to a worker address and no limit on them.  So the daemon
 * defines accept() itself (UCX's is the only call of it in the process;
 * the daemon's own listener uses accept4()): out of descriptors, it refuses
 * the waiting connection through the reserve, as above -- the client's
 * endpoint fails -- and tells UCX EAGAIN, which keeps its listener.  The
 * executable exports the symbol (daemon/meson.build), so the dynamic
 * linker binds UCX's calls to it.
 *
 * It also gives each socket it accepts a descriptor number not used for a
 * long while.  UCX 1.13 queues an event its async thread could not deliver
 * at once (the worker was busy) by the descriptor's number and replays it
 * later to whatever handler that number has then (ucs/async/async.c,
 * __ucs_async_poll_missed(); upstream filters stale ones since 2faf305a18,
 * 2026).  A connection request rejected and closed, its number taken at
 * once by the next one accepted, and a write event of the old socket went
 * to the new one's connection manager before it was ready: an assertion
 * (tcp_sockcm_ep.c:416) -- a flood of connection requests killed the
 * daemon.  Numbers handed out in turn from the upper half of the limit
 * come back only after hundreds of accepts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nelssad.h"

/* Descriptors the limits need (Documentation/tools/nelssad.rst, LIMITS). */
/*
 * Each connection: its socket and ND_EPS_PER_CONN endpoints, each a UCX
 * connection-manager socket and, over TCP, up to two lanes (measured: a
 * client with one endpoint holds 4 of the daemon's descriptors, with two 7).
 */
#define ND_FDS_PER_EP 3
#define ND_FDS_PER_CONN (1 + ND_EPS_PER_CONN * ND_FDS_PER_EP)
#define ND_FDS_PER_DEVICE 2	/* the device and its event fd */
#define ND_FDS_BASE 64		/* UCX (epoll, event fds, listeners), the daemon, the reserve */

static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;
static int reserve = -1;
static struct nelssad *the_nd;		/* for accept()'s log lines */
static unsigned long ucx_refused;	/* with reserve_lock */
static time_t ucx_logged;
static int fd_lo, fd_hi, fd_next;	/* accept()'s turn of numbers, with reserve_lock */

void nd_fd_setup(struct nelssad *nd)
{
	const unsigned long long need = ND_FDS_BASE + (unsigned long long)ND_FDS_PER_DEVICE *
					nd->n_dev + (unsigned long long)ND_FDS_PER_CONN *
					nd->cfg.max_conns;
	struct rlimit rl;
	unsigned long long was;
	char raised[48] = "";

	the_nd = nd;
	if (getrlimit(RLIMIT_NOFILE, &rl)) {
		nd_log(nd, "file descriptors: cannot read the limit: %s", strerror(errno));
		rl.rlim_cur = rl.rlim_max = 0;
	}
	was = rl.rlim_cur;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl)) {
			nd_log(nd, "file descriptors: cannot raise the limit to %llu: %s",
			       (unsigned long long)rl.rlim_max, strerror(errno));
			rl.rlim_cur = was;
		}
	}
	if (was != rl.rlim_cur)
		snprintf(raised, sizeof(raised), " (raised from %llu)", was);
	nd_log(nd, "file descriptors: limit %llu%s; the limits need about %llu (%u connections "
	       "x %u, %u devices x %u, %u more)", (unsigned long long)rl.rlim_cur, raised, need,
	       nd->cfg.max_conns, ND_FDS_PER_CONN, nd->n_dev, ND_FDS_PER_DEVICE, ND_FDS_BASE);
	/* The upper half of the descriptors, for UCX's accepted sockets in turn. */
	fd_hi = rl.rlim_cur > 1u << 20 ? 1 << 20 : (int)rl.rlim_cur;
	fd_lo = fd_next = fd_hi / 2;
	if (rl.rlim_cur && rl.rlim_cur < need)
		nd_log(nd, "warning: the file descriptor limit (%llu) is below the %llu the limits "
		       "need: raise LimitNOFILE or ulimit -n, or lower max-conns; beyond it, "
		       "connections are refused", (unsigned long long)rl.rlim_cur, need);
	pthread_mutex_lock(&reserve_lock);
	if (reserve < 0)
		reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pthread_mutex_unlock(&reserve_lock);
}

/*
 * Out of descriptors: takes the connection waiting on @listen_fd with
 * the reserve, sends it an ERROR saying @why (NULL: not our protocol,
 * nothing is said), closes it and takes the reserve again.  0 when one
 * was refused; -EAGAIN when none was waiting; -EMFILE when there is no
 * reserve (another thread took the last descriptor first).
 */
int nd_fd_refuse(struct nelssad *nd, int listen_fd, const char *why)
{
	int fd, err;

	(void)nd;
	pthread_mutex_lock(&reserve_lock);
	if (reserve < 0)
		reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (reserve < 0) {
		pthread_mutex_unlock(&reserve_lock);
		return -EMFILE;
	}
	close(reserve);
	fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	err = fd < 0 ? errno : 0;
	if (fd >= 0 && why)
		nd_conn_refuse(fd, -EMFILE, "%s", why);
	else if (fd >= 0)
		close(fd);
	reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pthread_mutex_unlock(&reserve_lock);
	if (fd >= 0)
		return 0;
	return err == EAGAIN || err == EWOULDBLOCK ? -EAGAIN : -EMFILE;
}

/*
 * @fd moved to the next number in turn (see above), or @fd itself when no
 * number of the turn is free.
 */
static int fresh_number(int fd)
{
	int moved = -1;

	pthread_mutex_lock(&reserve_lock);
	if (fd_hi > fd_lo) {
		moved = fcntl(fd, F_DUPFD, fd_next);
		if (moved < 0 || moved >= fd_hi) {
			if (moved >= 0)
				close(moved);
			moved = fcntl(fd, F_DUPFD, fd_lo);	/* wrap around */
		}
		if (moved >= fd_hi) {
			close(moved);
			moved = -1;
		}
		if (moved >= 0)
			fd_next = moved + 1 < fd_hi ? moved + 1 : fd_lo;
	}
	pthread_mutex_unlock(&reserve_lock);
	if (moved < 0)
		return fd;
	close(fd);
	return moved;
}

/* UCX's accept(2); see above.  Runs on UCX's async thread. */
int accept(int fd, struct sockaddr *addr, socklen_t *len);

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	int ret = accept4(fd, addr, len, 0);
	time_t now;

	if (ret >= 0)
		return fresh_number(ret);
	if (errno != EMFILE && errno != ENFILE)
		return ret;
	ret = nd_fd_refuse(the_nd, fd, NULL);
	if (ret == -EMFILE) {
		usleep(10000);	/* no reserve: do not spin UCX's thread on its listener */
	} else if (!ret) {
		pthread_mutex_lock(&reserve_lock);
		ucx_refused++;
		now = time(NULL);
		if (the_nd && now != ucx_logged) {
			ucx_logged = now;
			nd_log(the_nd, "out of file descriptors: a UCX connection refused "
			       "(%lu so far)", ucx_refused);
		}
		pthread_mutex_unlock(&reserve_lock);
	}
	errno = EAGAIN;		/* anything else and UCX closes its listener */
	return -1;
}
