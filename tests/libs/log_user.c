// SPDX-License-Identifier: MIT
/*
 * One log hook for every library: a program on libnelssa-client installs
 * it once, then makes libnelssa (a bad device name) and libnelssa-client
 * (a connection refused: nothing listens on port 1) report.  Prints each message's source; the
 * libraries' test wants both.
 */
#include <stdio.h>
#include <string.h>

#include <nelssa/client.h>
#include <nelssa/log.h>
#include <nelssa/pnm.h>

static int seen;

static void hook(void *ctx, int level, const char *source, const char *msg)
{
	(void)msg;
	if (ctx != &seen || level != NELSSA_LOG_ERR)
		return;
	seen++;
	printf("logged %s\n", source);
}

int main(void)
{
	struct nelssa_client_opts o = { 0 };
	struct nelssa_client *c = NULL;
	struct nelssa_pnm *pnm;

	nelssa_set_log_fn(hook, &seen);
	if (nelssa_pnm_open("/nonexistent/device", &pnm) == 0)
		return 1;
	o.host = "127.0.0.1";
	o.port = 1;
	o.timeout_ms = 2000;
	o.name = "log_user";
	if (nelssa_client_connect(&o, &c) == 0)
		return 1;
	nelssa_client_close(c);
	return seen == 2 ? 0 : 1;
}
