/* SPDX-License-Identifier: MIT */
/*
 * The version of the NELSSA libraries a program runs against.  What a
 * release may change is stated in Documentation/libraries.rst: a minor
 * release adds (functions, flags, fields in reserved space), it never
 * changes or removes what exists; a major release may, and changes the
 * sonames.
 */
#ifndef NELSSA_VERSION_H
#define NELSSA_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

/**
 * nelssa_version() - the running libraries' version.
 *
 * Return: "MAJOR.MINOR.PATCH", static storage.
 */
const char *nelssa_version(void);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_VERSION_H */
