// SPDX-License-Identifier: MIT
/*
 * Run-time choice of the SPARSE_ATTN implementation.  Vector kernels are
 * compiled only for the architecture they target (meson defines
 * NFW_HAVE_*), and used only when the CPU reports the instructions.
 */
#include <string.h>

#include "fw_internal.h"

static const char *const names[] = {
	[NFW_ISA_AUTO] = "auto",
	[NFW_ISA_SCALAR] = "scalar",
	[NFW_ISA_AVX2] = "avx2",
	[NFW_ISA_AVX512] = "avx512",
	[NFW_ISA_NEON] = "neon",
	[NFW_ISA_AVX512_BF16] = "avx512-bf16",
};

const char *nfw_isa_name(enum nfw_isa isa)
{
	return (unsigned int)isa < sizeof(names) / sizeof(names[0]) ? names[isa] : "unknown";
}

int nfw_isa_parse(const char *name)
{
	for (unsigned int i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i]))
			return (int)i;
	return -1;
}

#ifdef NFW_HAVE_NEON_BF16
#include <sys/auxv.h>

/* Armv8.6 BF16 (BFDOT): optional before Armv8.6; Neoverse V1/V2 have it. */
static int has_bf16_dot(void)
{
#ifdef HWCAP2_BF16
	return !!(getauxval(AT_HWCAP2) & HWCAP2_BF16);
#else
	return !!(getauxval(AT_HWCAP2) & (1ul << 14));	/* the arm64 uapi's bit */
#endif
}
#endif

#if defined(NFW_HAVE_AVX2) || defined(NFW_HAVE_AVX512_BF16)
#include <cpuid.h>
#endif

#ifdef NFW_HAVE_AVX512_BF16
/*
 * AVX512_BF16 (VDPBF16PS): CPUID.(EAX=7,ECX=1):EAX bit 5.  The kernel is
 * built with AVX512BW too (its 16-bit unpacks); every CPU with the former
 * has the latter (Cooper Lake, Sapphire Rapids, Zen 4), but both are
 * asked.
 */
static int has_avx512_bf16(void)
{
	unsigned int a, b, c, d;

	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}

/* CPUID traps to the hypervisor in a VM: asked once. */
static int avx512_bf16(void)
{
	static int known = -1;

	if (known < 0)
		known = has_avx512_bf16();
	return known;
}
#endif

#ifdef NFW_HAVE_AVX2

/* CPUID.1:ECX bit 29; Clang's __builtin_cpu_supports() does not know "f16c". */
static int has_f16c(void)
{
	unsigned int a, b, c, d;

	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

int nfw_isa_supported(enum nfw_isa isa)
{
	switch (isa) {
	case NFW_ISA_AUTO:
	case NFW_ISA_SCALAR:
		return 1;
#ifdef NFW_HAVE_AVX2
	case NFW_ISA_AVX2:
		/* F16C: the E4M3 load path; every AVX2 CPU has it. */
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
#endif
#ifdef NFW_HAVE_AVX512
	case NFW_ISA_AVX512:
		return __builtin_cpu_supports("avx512f");
#endif
#ifdef NFW_HAVE_NEON
	case NFW_ISA_NEON:
		return 1;	/* Advanced SIMD is baseline on AArch64 */
#endif
#ifdef NFW_HAVE_AVX512_BF16
	case NFW_ISA_AVX512_BF16:
		return avx512_bf16();
#endif
	default:
		return 0;
	}
}

enum nfw_isa nfw_isa_resolve(enum nfw_isa isa)
{
	/* AVX512_BF16 differs from AVX-512 only where it is faster: bf16 dots. */
	static const enum nfw_isa best[] = { NFW_ISA_AVX512_BF16, NFW_ISA_AVX512, NFW_ISA_AVX2,
					     NFW_ISA_NEON };

	if (isa != NFW_ISA_AUTO)
		return isa;
	for (unsigned int i = 0; i < sizeof(best) / sizeof(best[0]); i++)
		if (nfw_isa_supported(best[i]))
			return best[i];
	return NFW_ISA_SCALAR;
}

nfw_attn_item_fn nfw_attn_kernel(enum nfw_isa isa, uint32_t head_dim, uint32_t flags)
{
#ifdef NFW_HAVE_NEON_BF16
	if (isa == NFW_ISA_NEON && !(head_dim % 8) && (flags & NPNM_ATTN_F_BF16_DOTS) &&
	    has_bf16_dot())
		return nfw_attn_item_neon_bf16;
#endif
	(void)flags;	/* where no bf16 build was made */
	switch (isa) {
#ifdef NFW_HAVE_AVX512_BF16
	case NFW_ISA_AVX512_BF16:
		if (!(head_dim % 32) && (flags & NPNM_ATTN_F_BF16_DOTS))
			return nfw_attn_item_avx512_bf16;
		/* Every other item as AVX-512 runs it. */
		__attribute__((fallthrough));
#endif
#ifdef NFW_HAVE_AVX512
	case NFW_ISA_AVX512:
		return head_dim % 32 ? nfw_attn_item_scalar : nfw_attn_item_avx512;
#endif
#ifdef NFW_HAVE_AVX2
	case NFW_ISA_AVX2:
		return head_dim % 16 ? nfw_attn_item_scalar : nfw_attn_item_avx2;
#endif
#ifdef NFW_HAVE_NEON
	case NFW_ISA_NEON:
		return head_dim % 8 ? nfw_attn_item_scalar : nfw_attn_item_neon;
#endif
	default:
		return nfw_attn_item_scalar;
	}
}
