/* Oracles shared by the egress parsers' fuzz targets (fuzz_dns.c,
 * fuzz_tls.c, fuzz_http.c): a name a parser hands out is always a clean
 * host name, as src/net/wire.h promises. */
#ifndef SANDLOT_FUZZ_NET_CHECK_H
#define SANDLOT_FUZZ_NET_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "net/wire.h"

static inline void check(int ok)
{
	if (!ok)
		abort();
}

static inline void check_name(const char *name)
{
	size_t n = strnlen(name, SL_NAME_MAX + 1);
	check(n >= 1 && n <= SL_NAME_MAX);
	check(name[0] != '.' && name[n - 1] != '.');
	size_t label = 0;
	int digits_only = 1;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (c == '.') {
			check(label > 0);
			label = 0;
			continue;
		}
		check((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_');
		if (c < '0' || c > '9')
			digits_only = 0;
		check(++label <= 63);
	}
	check(!digits_only);
	/* Normalising a clean name changes nothing. */
	char again[SL_NAME_MAX + 1];
	check(sl_name_normalize(name, n, again) == SL_NAME_OK && strcmp(again, name) == 0);
}

#endif
