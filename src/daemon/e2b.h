/* The E2B-compatible API: E2B's own SDKs (npm `e2b`, PyPI `e2b` and their
 * code-interpreter packages) pointed at sandlotd by E2B_API_URL and
 * E2B_SANDBOX_URL = http://HOST:PORT/e2b, with E2B_API_KEY = the daemon's
 * token.  docs/e2b.md says what is mapped and what is not.
 *
 * Everything is under the path prefix /e2b, on the same listeners as /v1:
 *
 *   control plane (e2b.c)   /e2b/sandboxes..., /e2b/v2/sandboxes...: create,
 *                           list, get, kill, timeout, pause, resume, connect,
 *                           on the domain layer (domain.h);
 *   in the sandbox          the SDK sends every envd and code-interpreter call
 *   (e2b_envd.h)            to the one sandbox URL with the headers
 *                           E2b-Sandbox-Id and E2b-Sandbox-Port (49983 envd,
 *                           49999 code interpreter);
 *   the rest                e2b_routes' last entry: E2B's error shape naming
 *                           the call that is not supported (501).
 *
 * Authentication.  On TCP the front door (gate.c) and the HTTP layer
 * (http.c) take, for paths under /e2b, the daemon's token in E2B's headers
 * as well as in "Authorization: Bearer": X-API-KEY (the control plane) or
 * X-Access-Token.  Create and connect answer a sandbox's own access token
 * as envdAccessToken and trafficAccessToken (e2b_access_token(): an HMAC
 * of the sandbox id under the daemon's token), which the SDKs send as
 * X-Access-Token (envd, runCode) or E2B-Traffic-Access-Token (the code
 * interpreter's contexts) on the calls made inside that sandbox: it is good for those calls only, with the
 * sandbox's id in E2b-Sandbox-Id, never for the control plane
 * (e2b_control_path()) or another sandbox.  The SDKs also send
 * "Authorization: Basic <user>:" on in-sandbox calls: the door ignores it
 * when a key header matches.
 *
 * Errors on /e2b paths have E2B's shape, {"code": <HTTP status>, "message":
 * "..."}: http_error() gives it for those paths (e2b_path()), and so does
 * the front door's refusal.
 */
#ifndef SANDLOT_DAEMON_E2B_H
#define SANDLOT_DAEMON_E2B_H

#include <stddef.h>

#include "daemon/http.h"

#define E2B_PREFIX "/e2b"
/* The envd version sandlotd reports (create, connect, get): the SDKs turn
 * features on by it (0.3.0 the stdin flag, 0.4.0 the default user, 0.5.2
 * closing stdin, 0.5.7 octet-stream uploads; 0.6.2 would make them send
 * file metadata headers, which are not kept). */
#define E2B_ENVD_VERSION "0.5.7"
#define E2B_ENVD_PORT 49983
#define E2B_INTERP_PORT 49999

/* The control plane and, last, the answer to every other /e2b path. */
extern const struct http_route e2b_routes[];

/* ---- e2b_auth.c: pure functions, for the front door and the HTTP layer ---- */

/* Whether the request target (path and query, not NUL-terminated, len
 * bytes) is under /e2b: "/e2b" itself, or "/e2b/", "/e2b?" onwards. */
int e2b_path(const char *target, size_t len);
/* Whether the target is under /e2b but not a call made inside a sandbox:
 * "/e2b" itself, or its first segment is one of E2B's control plane
 * ("sandboxes", "v2", "templates", ...). */
int e2b_control_path(const char *target, size_t len);

/* Sandbox id's access token under the daemon's token: "sbat_" and 64 hex
 * digits of HMAC-SHA256(token, "sandlot-e2b-access:" id), NUL-terminated. */
#define E2B_ACCESS_TOKEN_LEN (5 + 64)
void e2b_access_token(const char *token, const char *sandbox_id, size_t id_len,
		      char out[E2B_ACCESS_TOKEN_LEN + 1]);

/* A request's E2B credentials: header values and lengths (NULL when absent),
 * and its target (path and query). */
struct e2b_keys {
	const char *api_key;          /* X-API-KEY */
	size_t api_key_len;
	const char *access_token;     /* X-Access-Token */
	size_t access_token_len;
	const char *sandbox_id;       /* E2b-Sandbox-Id */
	size_t sandbox_id_len;
	const char *target;
	size_t target_len;
	const char *traffic_token;    /* E2B-Traffic-Access-Token (the code */
	size_t traffic_token_len;     /* interpreter SDKs' calls to contexts) */
};
/* Whether the request may in: X-API-KEY, X-Access-Token or
 * E2B-Traffic-Access-Token is the token, or one of the last two is the
 * access token of the sandbox in E2b-Sandbox-Id and the target is not the
 * control plane's.  Never with no token configured.
 * Constant time for given lengths. */
int e2b_key_ok(const char *token, const struct e2b_keys *k);

/* ---- sandbox hosts: what getHost(port) gives (e2b_auth.c, e2b_host) ----
 *
 * E2B's SDKs build a sandbox port's address as PORT-SANDBOXID.DOMAIN, with
 * DOMAIN the "domain" that create and connect answer (sandlotd's
 * --e2b-domain).  A request whose Host is such a name, on any listener,
 * is not the API's: it goes to that port of that sandbox (proxy.c), and
 * its path and query are the server's. */

/* A parsed Host header. */
struct e2b_host {
	unsigned port;                /* 1 to 65535; 0 when bad */
	char id[64];                  /* lower-cased; "" when bad */
	const char *bad;              /* NULL, or what is wrong with the name */
};
/* Whether host[0, len) (a Host header's value: NAME or NAME:PORT) names a
 * sandbox under domain (a host name without port, lower-case): NAME is
 * LABEL.DOMAIN, compared without regard to case, with an optional final
 * dot.  0: it does not (the request is the API's).  1: it does, and *out
 * says which port of which sandbox, or (out->bad) why LABEL is not
 * PORT-SANDBOXID with PORT from 1 to 65535 and SANDBOXID of letters, digits
 * and '-'.  Pure; fuzzed
 * (tests/fuzz/fuzz_e2b_host.c). */
int e2b_host_parse(const char *host, size_t len, const char *domain, struct e2b_host *out);
/* Whether a request to sandbox id's host may in: the daemon's token as
 * "Authorization: Bearer" (auth: the header's whole value), X-API-KEY,
 * X-Access-Token or E2B-Traffic-Access-Token, or id's access token in one
 * of the last two.  (A sandbox that allows public traffic needs none: the
 * caller asks.)  Never with no token configured.  Constant time for given
 * lengths. */
int e2b_host_key_ok(const char *token, const char *auth, size_t auth_len,
		    const struct e2b_keys *k, const char *id);

/* e2b.c.  Whether sandbox id was created through /e2b with
 * network.allowPublicTraffic true (its host needs no token); unknown: 0.
 * Takes the table's lock and the sandbox's: for the door too. */
struct daemon;
struct dsb;
int e2b_sandbox_public(struct daemon *d, const char *id);
/* Whether every port of s is reachable by its host (created through
 * /e2b), not only its exposed ones.  Takes s->lock. */
int e2b_sandbox_all_ports(struct dsb *s);

#endif
