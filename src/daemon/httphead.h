/* The front door's check of a request head (request line and header lines
 * up to the empty line) before libmicrohttpd parses it.
 *
 * Why a check of our own in front of the library: libmicrohttpd 0.9.75
 * takes the first of two Authorization headers, accepts a request with both
 * Content-Length and Transfer-Encoding, answers "Content-Length: -1" with
 * its status line and headers written twice, and offers no hook between
 * reading the headers and acting on them.  This is not a second HTTP
 * parser: it only finds where the head ends and refuses what would make the
 * library and the client disagree about the framing; libmicrohttpd still
 * parses every request it is given.
 *
 * Rules (each refusal names what is wrong):
 *   - bytes: no NUL, no CR that is not followed by LF, no other control
 *     character than HTAB in the head (lines end with LF or CRLF, as
 *     libmicrohttpd reads them);
 *   - request line: METHOD SP TARGET SP HTTP/1.1 (HTTP/1.0: 505, streamed
 *     answers need chunked encoding); a target longer than max_target: 414;
 *   - header lines: NAME ":" VALUE with NAME a token, no folded lines;
 *   - Content-Length: one, 1 to 19 decimal digits; Transfer-Encoding: one,
 *     "chunked"; not both; Host and Authorization: at most one each;
 *   - the head, empty line included, at most max_head bytes: else 431.
 *
 * Empty lines before the request line are skipped, as libmicrohttpd does.
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
