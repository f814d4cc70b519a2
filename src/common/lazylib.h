/* A shared library loaded on first use.
 *
 * libsandlot links libnftables (egress rules) and c-ares (the egress
 * resolver) only for sandboxes with egress, but a program linked against
 * them pays for loading them — and the five libraries libnftables pulls in
 * (libmnl, libnftnl, libxtables, libgmp) — at every start, before main:
 * most of the difference between `sandlot --version` and /bin/true.  So
 * they are dlopen()ed by the first caller that needs them instead.
 */
#ifndef SANDLOT_COMMON_LAZYLIB_H
#define SANDLOT_COMMON_LAZYLIB_H

#include <pthread.h>
#include <stddef.h>

#include "common/error.h"

/* One symbol to look up: its name and where to store its address (the
 * address of a function pointer, cast: the POSIX dlsym idiom). */
struct sandlot_lazysym {
	const char *name;
	void **slot;
};

struct sandlot_lazylib {
	const char *soname;  /* what dlopen is given, e.g. "libnftables.so.1" */
	const char *purpose; /* for errors: "load the egress nftables rules" */
	const struct sandlot_lazysym *syms;
	size_t nsyms;
	/* private */
	pthread_mutex_t lock;
	int state; /* 0 not tried, 1 loaded, -1 failed (msg says why) */
	char msg[300];
};

#define SANDLOT_LAZYLIB(so, why, table)                                                       \
	{ .soname = (so), .purpose = (why), .syms = (table),                                 \
	  .nsyms = sizeof(table) / sizeof((table)[0]), .lock = PTHREAD_MUTEX_INITIALIZER }

/* Load l's library and fill every symbol's slot, once per process: 0 when
 * they are all there (now or from an earlier call), else -1 with an error
 * naming the library and what could not be done without it — the same
 * error on every later call (nothing is retried, and no slot is filled
 * unless all are).  Thread-safe; the library is never unloaded. */
int sandlot__lazylib_load(struct sandlot_lazylib *l, sandlot_error_t **err);

#endif
