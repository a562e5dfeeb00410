// SPDX-License-Identifier: MIT
/*
 * nelssa-devemu: the emulated NELSSA PNM card, for QEMU's ivshmem-doorbell.
 *
 * It is the ivshmem server (Debian ships none): it creates the card's
 * device memory (a shared-memory file, power-of-two size) and the
 * doorbell/interrupt eventfds, and hands them to QEMU.  The firmware runs
 * in a child process, so that it can be restarted -- by SIGUSR1 or by the
 * --restart-after fault -- while the server keeps the memory and eventfds
 * QEMU holds.  SIGINT/SIGTERM stop everything and remove the socket.
 *
 *   nelssa-devemu --socket PATH [--mem SIZE] [--cores N] [--shm PATH]
 *                 [--stall-nth N] [--corrupt-nth N] [--heartbeat-stop-ms MS]
 *                 [--restart-after-ms MS] [--hang-nth N [--restart-after-hang-ms MS]]
 *                 [--verbose]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nelssa/util.h>

#include "devemu.h"

static volatile sig_atomic_t quit, restart;

static void on_quit(int sig)
{
	(void)sig;
	quit = 1;
}

static void on_usr1(int sig)
{
	(void)sig;
	restart = 1;
}

static void usage(FILE *f)
{
	fputs("usage: nelssa-devemu --socket PATH [options]\n"
	      "  --socket PATH          ivshmem server socket for QEMU's ivshmem-doorbell chardev\n"
	      "  --mem SIZE             device memory, a power of two (default 64M; K, M, G)\n"
	      "  --cores N              firmware executor threads (default 1)\n"
	      "  --shm PATH             keep device memory in this file (default: anonymous)\n"
	      "  --stall-nth N          fault: never complete the Nth command\n"
	      "  --corrupt-nth N        fault: corrupt the cookie of the Nth completion\n"
	      "  --heartbeat-stop-ms MS fault: stop the heartbeat MS after start\n"
	      "  --restart-after-ms MS  fault: restart the firmware MS after start (also SIGUSR1)\n"
	      "  --hang-nth N           fault: at the Nth command the firmware dies (no heartbeat)\n"
	      "  --restart-after-hang-ms MS  ... and is restarted MS later\n"
	      "  --verbose              log protocol and resets\n", f);
}

static pid_t start_firmware(const struct devemu *d)
{
	pid_t pid = fork();

	if (pid == 0) {
		signal(SIGUSR1, SIG_DFL);
		_exit(devemu_firmware(d));
	}
	return pid;
}

static void stop_firmware(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' }, { "mem", required_argument, NULL, 'm' },
		{ "cores", required_argument, NULL, 'c' }, { "shm", required_argument, NULL, 'f' },
		{ "stall-nth", required_argument, NULL, 'S' },
		{ "corrupt-nth", required_argument, NULL, 'C' },
		{ "heartbeat-stop-ms", required_argument, NULL, 'H' },
		{ "restart-after-ms", required_argument, NULL, 'R' },
		{ "hang-nth", required_argument, NULL, 'N' },
		{ "restart-after-hang-ms", required_argument, NULL, 'A' },
		{ "verbose", no_argument, NULL, 'v' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct devemu d = { .mem_size = 64u << 20, .cores = 1, .sq_entries = 256, .cq_entries = 512 };
	const char *sock_path = NULL, *shm_path = NULL;
	uint64_t restart_ms = 0, t0;
	struct sigaction sa = { .sa_handler = on_quit };
	int sock, client = -1, c;
	pid_t fw;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': sock_path = optarg; break;
		case 'm':
			if (nelssa_parse_size(optarg, &d.mem_size) || d.mem_size < (4u << 20) ||
			    (d.mem_size & (d.mem_size - 1))) {
				fprintf(stderr, "nelssa-devemu: --mem %s: need a power of two >= 4M\n",
					optarg);
				return 2;
			}
			break;
		case 'c': d.cores = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'f': shm_path = optarg; break;
		case 'S': d.faults.stall_nth = strtoull(optarg, NULL, 0); break;
		case 'C': d.faults.corrupt_nth = strtoull(optarg, NULL, 0); break;
		case 'H': d.faults.heartbeat_stop_ms = strtoull(optarg, NULL, 0); break;
		case 'R': restart_ms = strtoull(optarg, NULL, 0); break;
		case 'N': d.faults.hang_nth = strtoull(optarg, NULL, 0); break;
		case 'A': d.faults.restart_after_hang_ms = strtoull(optarg, NULL, 0); break;
		case 'v': d.verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!sock_path || optind != argc || !d.cores || d.cores > 64) {
		usage(stderr);
		return 2;
	}

	d.shm_fd = shm_path ? open(shm_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) :
			      memfd_create("nelssa-devemu", MFD_CLOEXEC);
	if (d.shm_fd < 0 || ftruncate(d.shm_fd, (off_t)d.mem_size)) {
		perror("nelssa-devemu: device memory");
		return 1;
	}
	for (unsigned int v = 0; v < DEVEMU_VECTORS; v++) {
		d.fw_efd[v] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		d.guest_efd[v] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (d.fw_efd[v] < 0 || d.guest_efd[v] < 0) {
			perror("nelssa-devemu: eventfd");
			return 1;
		}
	}
	sock = devemu_listen(sock_path);
	if (sock < 0) {
		fprintf(stderr, "nelssa-devemu: %s: %s\n", sock_path, strerror(-sock));
		return 1;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* The header is in place before QEMU can connect. */
	fw = start_firmware(&d);
	t0 = (uint64_t)time(NULL) * 1000;
	while (!quit) {
		struct pollfd p = { .fd = client < 0 ? sock : client, .events = POLLIN };
		struct timespec ts;
		uint64_t now;

		if (poll(&p, 1, 50) > 0) {
			if (client < 0) {
				client = accept4(sock, NULL, NULL, SOCK_CLOEXEC);
				if (client >= 0 && devemu_greet(client, &d)) {
					perror("nelssa-devemu: greeting QEMU");
					close(client);
					client = -1;
				} else if (client >= 0 && d.verbose) {
					fprintf(stderr, "nelssa-devemu: QEMU connected\n");
				}
			} else {
				char buf[64];

				if (read(client, buf, sizeof(buf)) <= 0) {	/* QEMU went away */
					close(client);
					client = -1;
				}
			}
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
		if (restart_ms && now - t0 >= restart_ms) {
			restart_ms = 0;
			restart = 1;
		}
		if (restart || waitpid(fw, NULL, WNOHANG) == fw) {
			restart = 0;
			stop_firmware(fw);
			if (d.verbose)
				fprintf(stderr, "nelssa-devemu: firmware restarted\n");
			d.faults = (struct devemu_faults){ 0 };	/* the new one is healthy */
			fw = start_firmware(&d);
		}
	}
	stop_firmware(fw);
	if (client >= 0)
		close(client);
	close(sock);
	unlink(sock_path);
	return 0;
}
