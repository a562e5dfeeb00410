/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/**
 * DOC: CXL device memory ranges
 *
 * A CXL type-2 card advertises its device-attached memory in the "DVSEC for
 * CXL Devices" (CXL 2.0 section 8.1.3): up to two ranges, each four config
 * dwords.  Bits 31:28 of the low dwords hold address bits 31:28, so ranges
 * come in 256 MiB units; bit 0 of size-low says the size is valid and bit 1
 * that the memory is active (usable).  Kept free of kernel-only headers so
 * the decoding is unit-tested in userspace as well.
 */
#ifndef _NPNM_CXL_RANGE_H
#define _NPNM_CXL_RANGE_H

#include <linux/errno.h>
#include <linux/types.h>

#define NPNM_CXL_DVSEC_VENDOR		0x1e98
#define NPNM_CXL_DVSEC_DEVICE		0
#define NPNM_CXL_DVSEC_CAP		0x0a
#define NPNM_CXL_CAP_MEM		0x0004
#define NPNM_CXL_RANGE_SIZE_HI(i)	(0x18 + (i) * 0x10)
#define NPNM_CXL_RANGE_SIZE_LO(i)	(0x1c + (i) * 0x10)
#define NPNM_CXL_RANGE_BASE_HI(i)	(0x20 + (i) * 0x10)
#define NPNM_CXL_RANGE_BASE_LO(i)	(0x24 + (i) * 0x10)
#define NPNM_CXL_MEM_INFO_VALID		0x00000001u
#define NPNM_CXL_MEM_ACTIVE		0x00000002u
#define NPNM_CXL_RANGE_LO_MASK		0xf0000000u

/**
 * npnm_cxl_decode_range() - turn one DVSEC range's registers into a window
 * @size_hi: Range Size High.
 * @size_lo: Range Size Low (valid and active bits included).
 * @base_hi: Range Base High.
 * @base_lo: Range Base Low.
 * @base: the window's host physical start, on success.
 * @size: the window's length in bytes, on success.
 *
 * Return: 0; -ENXIO when the size is not valid yet or the memory is not
 * active (firmware has not brought it up); -EINVAL for an empty range or
 * one that wraps the address space.
 */
static inline int npnm_cxl_decode_range(__u32 size_hi, __u32 size_lo, __u32 base_hi,
					__u32 base_lo, __u64 *base, __u64 *size)
{
	__u64 b = (__u64)base_hi << 32 | (base_lo & NPNM_CXL_RANGE_LO_MASK);
	__u64 s = (__u64)size_hi << 32 | (size_lo & NPNM_CXL_RANGE_LO_MASK);

	if (!(size_lo & NPNM_CXL_MEM_INFO_VALID) || !(size_lo & NPNM_CXL_MEM_ACTIVE))
		return -ENXIO;
	if (!s || b + s < b)
		return -EINVAL;
	*base = b;
	*size = s;
	return 0;
}

#endif /* _NPNM_CXL_RANGE_H */
