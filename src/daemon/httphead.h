/* The front door's check of a request head (request line and header lines
 * up to the empty line) before libmicrohttpd parses it.
 *
 * Why a check in front of the library: libmicrohttpd 0.9.75 takes the first
 * of two Authorization headers, accepts a request with both Content-Length
 * and Transfer-Encoding, answers "Content-Length: -1" with its status line
 * and headers written twice, and offers no hook between reading the headers
 * and acting on them.  The head is parsed with http-parser (httphead.c);
 * this only decides whether libmicrohttpd may have it, and libmicrohttpd
 * then parses every request it is given itself.
 *
 * Refused (each refusal names what is wrong):
 *   - bytes: NUL, a CR not followed by LF, another control character than
 *     HTAB;
 *   - a malformed request line, an unknown method, a version other than
 *     HTTP/1.1 (HTTP/1.0: 505, streamed answers need chunked encoding); a
 *     target longer than max_target: 414;
 *   - malformed header lines, whitespace before a colon, folded lines;
 *   - Content-Length not decimal digits, twice, or with Transfer-Encoding;
 *     Transfer-Encoding other than "chunked", or twice; Host,
 *     Authorization, X-API-KEY, X-Access-Token, E2B-Traffic-Access-Token or
 *     E2b-Sandbox-Id (E2B's credentials) twice;
 *   - the head, empty line included, longer than max_head: 431.
 *
 * Pure function of its input (fuzzed: tests/fuzz/fuzz_httphead.c).
 */
#ifndef SANDLOT_DAEMON_HTTPHEAD_H
#define SANDLOT_DAEMON_HTTPHEAD_H

#include <stddef.h>
#include <stdint.h>

enum { HTTPHEAD_ERROR = -1, HTTPHEAD_INCOMPLETE = 0, HTTPHEAD_OK = 1 };

struct httphead {
	size_t head_len;          /* OK: bytes through the empty line */
	/* OK: the request */
	const char *target;       /* into the buffer, not NUL-terminated */
	size_t target_len;
	const char *auth;         /* Authorization value without surrounding
	                           * whitespace, or NULL */
	size_t auth_len;
	const char *api_key;      /* X-API-KEY and X-Access-Token values (the
	                           * E2B-compatible API's key headers), or NULL */
	size_t api_key_len;
	const char *access_token;
	size_t access_token_len;
	const char *sandbox_id;   /* E2b-Sandbox-Id, or NULL */
	size_t sandbox_id_len;
	const char *traffic_token; /* E2B-Traffic-Access-Token, or NULL */
	size_t traffic_token_len;
	const char *host;         /* Host (a sandbox's host names its port:
	                           * e2b.h), or NULL */
	size_t host_len;
	int chunked;
	int has_length;
	uint64_t content_length;
	/* ERROR: the answer */
	int status;               /* 400, 414, 431, 505 */
	const char *code;         /* "bad_request", "uri_too_long", ... */
	char message[160];
};

/* Check the head at the start of buf[0, len).  HTTPHEAD_OK with `out`
 * filled, HTTPHEAD_INCOMPLETE when more bytes are needed (and len is
 * below max_head), or HTTPHEAD_ERROR with out->status, code, message.  An
 * error found in a head's first bytes is reported at once, complete or
 * not. */
int httphead_check(const char *buf, size_t len, size_t max_head, size_t max_target,
		   struct httphead *out);

#endif
