/* Fuzz entry point for the TLS ClientHello SNI parser (src/net/wire.c),
 * the first bytes of every TCP connection a sandbox makes.  Oracles: a
 * name is clean; the answer only depends on the bytes up to the end of the
 * ClientHello, so once a prefix of the input gives an answer other than
 * "need more", every longer prefix gives the same one; nothing past the
 * limits is ever asked for. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net_check.h"


static uint8_t scratch[SL_TLS_MAX_HANDSHAKE];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[SL_NAME_MAX + 1];
	int full = sl_tls_sni(data, size, scratch, name);
	check(full >= SL_SNI_IP_LITERAL && full <= SL_SNI_FOUND);
	if (full == SL_SNI_FOUND)
		check_name(name);
	else
		check(name[0] == '\0');
	if (full == SL_SNI_NEED_MORE)
		check(size < SL_TLS_MAX_BUFFER + 5);
	/* Prefixes: sixteen cut points, always including the first byte. */
	char pname[SL_NAME_MAX + 1];
	int settled = 0;
	for (size_t k = 1; k <= 16 && size; k++) {
		size_t cut = size * k / 16;
		if (cut == 0)
			continue;
		int st = sl_tls_sni(data, cut, scratch, pname);
		if (settled)
			check(st == full);
		if (st != SL_SNI_NEED_MORE) {
			settled = 1;
			check(st == full);
			if (st == SL_SNI_FOUND)
				check(strcmp(pname, name) == 0);
		}
	}
	return 0;
}
