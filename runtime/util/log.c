// SPDX-License-Identifier: MIT
/* The libraries' log hook (<nelssa/log.h>) and their version. */
#include <pthread.h>

#include <nelssa/log.h>
#include <nelssa/util.h>
#include <nelssa/version.h>

#ifndef NELSSA_VERSION_STRING
#error "NELSSA_VERSION_STRING is the meson project version; meson defines it"
#endif

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static nelssa_log_fn log_fn;
static void *log_ctx;

void nelssa_set_log_fn(nelssa_log_fn fn, void *ctx)
{
	pthread_mutex_lock(&log_lock);
	log_fn = fn;
	log_ctx = ctx;
	pthread_mutex_unlock(&log_lock);
}

void nelssa_log(int level, const char *source, const char *msg)
{
	nelssa_log_fn fn;
	void *ctx;

	/* Read the pair together; call outside the lock, which may block. */
	pthread_mutex_lock(&log_lock);
	fn = log_fn;
	ctx = log_ctx;
	pthread_mutex_unlock(&log_lock);
	if (fn)
		fn(ctx, level, source, msg);
}

const char *nelssa_version(void)
{
	return NELSSA_VERSION_STRING;
}
