/* SPDX-License-Identifier: MIT */
/*
 * Where the NELSSA libraries' error messages go.  Every call still returns
 * 0 or a negative errno and keeps its words for nelssa_pnm_strerror() /
 * nelssa_client_error(); a program that wants them in its own log (a
 * serving engine's logger, syslog, a test's capture) installs a function
 * here instead of polling those strings -- libcxl's cxl_set_log_fn() in
 * spirit.
 */
#ifndef NELSSA_LOG_H
#define NELSSA_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

/* Levels, syslog's numbers. */
#define NELSSA_LOG_ERR 3
#define NELSSA_LOG_WARNING 4
#define NELSSA_LOG_INFO 6
#define NELSSA_LOG_DEBUG 7

/**
 * typedef nelssa_log_fn - receives one message.
 * @ctx: what was given to nelssa_set_log_fn().
 * @level: NELSSA_LOG_*.
 * @source: the part that speaks: "pnm" (PNM User Library), "client"
 *	(nelssad client).
 * @msg: the message, without a trailing newline; valid during the call.
 *
 * Called on the thread that failed, possibly several at once: it must be
 * thread-safe, and must not call back into the library.
 */
typedef void (*nelssa_log_fn)(void *ctx, int level, const char *source, const char *msg);

/**
 * nelssa_set_log_fn() - send the libraries' messages to @fn.
 * @fn: the function; NULL (the default) sends them nowhere.
 * @ctx: passed to every call of @fn.
 *
 * Process-wide; takes effect for messages that start after it returns.
 */
void nelssa_set_log_fn(nelssa_log_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_LOG_H */
