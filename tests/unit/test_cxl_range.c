// SPDX-License-Identifier: MIT
/*
 * The driver's decoding of CXL DVSEC memory ranges (driver/cxl_range.h),
 * against register values worked out by hand from the CXL 2.0 layout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "cxl_range.h"

#define VA (NPNM_CXL_MEM_INFO_VALID | NPNM_CXL_MEM_ACTIVE)

static void one_gib_above_ten_gib(void **state)
{
	__u64 base = 0, size = 0;

	(void)state;
	/* Base 0x2_8000_0000; the low 28 bits of base-low are reserved. */
	assert_int_equal(0, npnm_cxl_decode_range(0, 0x40000000u | VA, 0x2, 0x80000fffu,
						  &base, &size));
	assert_int_equal(0x280000000ull, base);
	assert_int_equal(1ull << 30, size);
}

static void size_uses_both_dwords(void **state)
{
	__u64 base = 0, size = 0;

	(void)state;
	/* 16 GiB + 256 MiB; flag and reserved bits never leak into it. */
	assert_int_equal(0, npnm_cxl_decode_range(4, 0x10000000u | 0x0ffffff0u | VA, 0, 0,
						  &base, &size));
	assert_int_equal(0, base);
	assert_int_equal(16ull * 1024 * 1024 * 1024 + 256ull * 1024 * 1024, size);
}

static void not_valid_or_not_active(void **state)
{
	__u64 base = 7, size = 9;

	(void)state;
	assert_int_equal(-ENXIO, npnm_cxl_decode_range(0, 0x40000000u | NPNM_CXL_MEM_ACTIVE,
						       1, 0, &base, &size));
	assert_int_equal(-ENXIO, npnm_cxl_decode_range(0, 0x40000000u | NPNM_CXL_MEM_INFO_VALID,
						       1, 0, &base, &size));
	/* Nothing written on failure. */
	assert_int_equal(7, base);
	assert_int_equal(9, size);
}

static void empty_range(void **state)
{
	__u64 base = 0, size = 0;

	(void)state;
	assert_int_equal(-EINVAL, npnm_cxl_decode_range(0, VA, 1, 0, &base, &size));
}

static void range_wraps(void **state)
{
	__u64 base = 0, size = 0;

	(void)state;
	/* 0xffff_ffff_f000_0000 + 512 MiB passes 2^64. */
	assert_int_equal(-EINVAL, npnm_cxl_decode_range(0, 0x20000000u | VA, 0xffffffffu,
							0xf0000000u, &base, &size));
	/* Ending exactly below 2^64 is fine. */
	assert_int_equal(0, npnm_cxl_decode_range(0, 0x10000000u | VA, 0xffffffffu,
						  0xe0000000u, &base, &size));
	assert_int_equal(0xffffffffe0000000ull, base);
}

static void register_offsets(void **state)
{
	(void)state;
	/* CXL 2.0 8.1.3: range 1 at 0x18..0x27, range 2 at 0x28..0x37. */
	assert_int_equal(0x18, NPNM_CXL_RANGE_SIZE_HI(0));
	assert_int_equal(0x24, NPNM_CXL_RANGE_BASE_LO(0));
	assert_int_equal(0x28, NPNM_CXL_RANGE_SIZE_HI(1));
	assert_int_equal(0x34, NPNM_CXL_RANGE_BASE_LO(1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_gib_above_ten_gib),
		cmocka_unit_test(size_uses_both_dwords),
		cmocka_unit_test(not_valid_or_not_active),
		cmocka_unit_test(empty_range),
		cmocka_unit_test(range_wraps),
		cmocka_unit_test(register_offsets),
	};

	return cmocka_run_group_tests_name("cxl_range", tests, NULL, NULL);
}
