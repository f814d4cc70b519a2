/* Fuzz entry point for the parser of sandboxes' hosts (E2B's getHost:
 * PORT-SANDBOXID.DOMAIN in a Host header, src/daemon/e2b_auth.c), which
 * every request's Host goes through before its credentials are checked,
 * and for the check of the keys that open such a host.
 *
 * The input is a Host value (the first byte chooses the domain it is
 * matched against).  Besides the sanitizers, oracles abort on a wrong
 * answer:
 *   - 0 (not a sandbox host) leaves the output empty; 1 gives either a
 *     reason (bad) with port 0 and no id, or a port from 1 to 65535 and an
 *     id of lower-case letters, digits and '-', the same that the host's
 *     label holds after its first '-';
 *   - the answer does not depend on the case of the domain's letters in
 *     the host, nor on a ":PORT" suffix;
 *   - the keys' check never opens a host with no token configured, nor
 *     with a key that is neither the token nor that sandbox's own.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/e2b.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static const char *const domains[] = { "localhost", "sandboxes.example.com", "a", "e2b.app" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *domain = domains[data[0] % 4];
	size_t len = size - 1;
	/* A copy of exactly len bytes: reads past it are caught. */
	char *host = malloc(len ? len : 1);
	if (!host)
		return 0;
	memcpy(host, data + 1, len);
	struct e2b_host h;
	int r = e2b_host_parse(host, len, domain, &h);
	check(r == 0 || r == 1);
	if (r == 0) {
		check(!h.bad && h.port == 0 && h.id[0] == '\0');
	} else if (h.bad) {
		check(h.port == 0 && h.id[0] == '\0');
	} else {
		check(h.port >= 1 && h.port <= 65535);
		size_t il = strlen(h.id);
		check(il > 0 && il < sizeof(h.id));
		const char *dash = memchr(host, '-', len);
		check(dash && dash + 1 + il <= host + len);
		for (size_t i = 0; i < il; i++) {
			char c = dash[1 + i];
			char lc = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
			check(h.id[i] == lc && ((lc >= 'a' && lc <= 'z') || (lc >= '0' && lc <= '9') ||
						lc == '-'));
		}
	}
	/* The same host upper-cased, and with a port added (when it has none). */
	char *up = malloc(len + 8);
	if (up) {
		for (size_t i = 0; i < len; i++)
			up[i] = host[i] >= 'a' && host[i] <= 'z' ? (char)(host[i] - 'a' + 'A') : host[i];
		struct e2b_host u;
		int ur = e2b_host_parse(up, len, domain, &u);
		check(ur == r && u.port == h.port && !u.bad == !h.bad && strcmp(u.id, h.id) == 0);
		if (!memchr(host, ':', len)) {
			memcpy(up, host, len);
			memcpy(up + len, ":8765", 5);
			int pr = e2b_host_parse(up, len + 5, domain, &u);
			check(pr == r && u.port == h.port && strcmp(u.id, h.id) == 0);
		}
		free(up);
	}
	/* The keys: the host as the key, in every header. */
	struct e2b_keys k = { host, len, host, len, NULL, 0, "/", 1, host, len };
	check(!e2b_host_key_ok(NULL, host, len, &k, h.id));
	check(!e2b_host_key_ok("", host, len, &k, h.id));
	static const char tok[] = "fuzz-token-0123456789";
	static const char bearer[] = "Bearer fuzz-token-0123456789";
	int same = (len == strlen(tok) && memcmp(host, tok, len) == 0) ||
		   (len == strlen(bearer) && memcmp(host, bearer, len) == 0);
	if (e2b_host_key_ok(tok, host, len, &k, h.id)) {
		char scoped[E2B_ACCESS_TOKEN_LEN + 1];
		e2b_access_token(tok, h.id, strlen(h.id), scoped);
		check(same || (h.id[0] && len == strlen(scoped) && memcmp(host, scoped, len) == 0));
	}
	free(host);
	return 0;
}
