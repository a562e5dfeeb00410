/* SPDX-License-Identifier: MIT */
/* The numeric core of libnelssa: half conversion, attention, LSE merge. */
#ifndef NELSSA_NUMERIC_H
#define NELSSA_NUMERIC_H

#include <nelssa/half.h>
#include <nelssa/attention.h>
#include <nelssa/lse.h>

#endif /* NELSSA_NUMERIC_H */
