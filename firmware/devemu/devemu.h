/* SPDX-License-Identifier: MIT */
/* nelssa-devemu: the emulated PNM card behind QEMU's ivshmem-doorbell. */
#ifndef NELSSA_DEVEMU_H
#define NELSSA_DEVEMU_H

#include <endian.h>
#include <stdint.h>

#include "nelssa_pnm_devif.h"	/* driver/: the interface the driver speaks */

#define DEVEMU_VECTORS 1	/* per peer: vector 0 */
#define DEVEMU_GUEST_PEER 1

/* Fault injection, for the driver's error paths. */
struct devemu_faults {
	uint64_t stall_nth;		/* never complete the Nth command (1-based) */
	uint64_t corrupt_nth;		/* garble the cookie of the Nth completion */
	uint64_t heartbeat_stop_ms;	/* stop the heartbeat this long after start */
	uint64_t hang_nth;		/* at the Nth command: heartbeat and service stop */
	uint64_t restart_after_hang_ms;	/* then exit, to be restarted, after this long */
};

/* Exit status of a firmware that hung on purpose and wants a restart. */
#define DEVEMU_EXIT_RESTART 3

struct devemu {
	uint64_t mem_size;
	unsigned int cores;
	unsigned int sq_entries, cq_entries;
	int shm_fd;
	int fw_efd[DEVEMU_VECTORS];	/* the guest rings these (doorbell) */
	int guest_efd[DEVEMU_VECTORS];	/* we write these (MSI-X in the guest) */
	struct devemu_faults faults;
	int verbose;
};

int devemu_listen(const char *path);
int devemu_greet(int client, const struct devemu *d);

/* The firmware worker: runs until SIGTERM, returns an exit status. */
int devemu_firmware(const struct devemu *d);

#endif /* NELSSA_DEVEMU_H */
