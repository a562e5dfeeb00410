// SPDX-License-Identifier: MIT
/*
 * Finds bytes in a card's device-dax carve-out the way a command sees the
 * card's memory (tier T3, tests/qemu/t3-rdma.sh): a DAX window over the
 * whole carve-out (NPNM_MEM_F_DAX), each chunk of it copied by the card
 * (NPNM_OP_COPY) into an ordinary region and read from there -- never
 * through /dev/daxX.Y, which is how the bytes were written.  Raw uapi, so
 * that neither the library's carve-out bookkeeping nor its flock (the
 * daemon holds it) is involved.
 *
 * usage: carve_out_find /dev/nelssa_pnmN HEX
 * Prints "found at OFFSET" (byte offset in the carve-out) and exits 0, or
 * says what it did not find and exits 1; 2 on a usage or device error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/nelssa_pnm.h>

#define CHUNK (1u << 20)

static int die(const char *what)
{
	fprintf(stderr, "carve_out_find: %s: %s\n", what, strerror(errno));
	return 2;
}

static int parse_hex(const char *hex, uint8_t *out, size_t max, size_t *len)
{
	size_t n = strlen(hex);

	if (!n || n % 2 || n / 2 > max)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned int b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return -1;
		out[i] = (uint8_t)b;
	}
	*len = n / 2;
	return 0;
}

int main(int argc, char **argv)
{
	struct npnm_mem_alloc win = { .flags = NPNM_MEM_F_DAX }, buf = { .size = CHUNK };
	struct npnm_info info = { 0 };
	uint8_t pat[4096], *map;
	size_t plen;
	char path[128];
	unsigned long long dax_size = 0;
	FILE *f;
	int fd;

	if (argc != 3 || parse_hex(argv[2], pat, sizeof(pat), &plen)) {
		fprintf(stderr, "usage: carve_out_find /dev/nelssa_pnmN HEX (at most %zu bytes)\n",
			sizeof(pat));
		return 2;
	}
	fd = open(argv[1], O_RDWR | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, NPNM_IOC_GET_INFO, &info))
		return die(argv[1]);
	if (!(info.caps & NPNM_CAP_DAX)) {
		fprintf(stderr, "carve_out_find: %s has no device-dax carve-out\n", argv[1]);
		return 2;
	}
	snprintf(path, sizeof(path), "/sys/class/nelssa_pnm/%s/dax_size",
		 strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1]);
	f = fopen(path, "r");
	if (!f || fscanf(f, "%llu", &dax_size) != 1 || !dax_size)
		return die(path);
	fclose(f);
	win.size = dax_size;
	if (ioctl(fd, NPNM_IOC_MEM_ALLOC, &win) || ioctl(fd, NPNM_IOC_MEM_ALLOC, &buf))
		return die("NPNM_IOC_MEM_ALLOC");
	map = mmap(NULL, CHUNK, PROT_READ, MAP_SHARED, fd, (off_t)buf.mmap_offset);
	if (map == MAP_FAILED)
		return die("mmap");
	/* Chunks overlap by the pattern's length, so one across a boundary is found too. */
	for (uint64_t off = 0; off < dax_size; off += CHUNK - plen) {
		uint64_t len = dax_size - off < CHUNK ? dax_size - off : CHUNK;
		struct npnm_cmd c = { .opcode = NPNM_OP_COPY };
		struct npnm_exec ex = { .cmd_ptr = (uintptr_t)&c };

		c.op[NPNM_COPY_DST] = (struct npnm_operand){ .handle = buf.handle, .len = len };
		c.op[NPNM_COPY_SRC] = (struct npnm_operand){ .handle = win.handle, .offset = off,
							     .len = len };
		if (ioctl(fd, NPNM_IOC_EXEC, &ex))
			return die("NPNM_OP_COPY");
		for (uint64_t i = 0; i + plen <= len; i++) {
			if (map[i] == pat[0] && !memcmp(map + i, pat, plen)) {
				printf("found at %llu\n", (unsigned long long)(off + i));
				return 0;
			}
		}
		if (len < CHUNK)
			break;
	}
	printf("not found: %zu bytes in %llu bytes of carve-out\n", plen, dax_size);
	return 1;
}
