// SPDX-License-Identifier: GPL-2.0-only
/* Probe: <linux/io_uring/cmd.h> exists (Linux 6.7 and later). */
#include <linux/io_uring/cmd.h>
