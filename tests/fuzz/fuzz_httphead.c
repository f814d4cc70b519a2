/* Fuzz entry point for the front door's request-head check
 * (src/daemon/httphead.c), which sees the bytes of every unauthenticated
 * client before anything else does.
 *
 * Besides the sanitizers, oracles abort on a wrong answer:
 *   - the result is OK, INCOMPLETE or ERROR, and an error has a status of
 *     400, 414, 431 or 505, a code and a message;
 *   - OK: the head ends with LF inside the buffer and within the limit,
 *     holds no NUL, the target and the Host, Authorization, X-API-KEY,
 *     X-Access-Token, E2b-Sandbox-Id and E2B-Traffic-Access-Token values
 *     point inside it,
 *     Content-Length and chunked are not both set; the head alone (no byte
 *     after it) gives the same answer, so what follows the head never
 *     changes how it is read;
 *   - INCOMPLETE: the buffer is below the limit, and one byte less is
 *     INCOMPLETE too (a head cannot end in a prefix of an unended one);
 *     the prefixes of a good head are INCOMPLETE too (a head sent in
 *     pieces is judged whole, not by a cut header).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/httphead.h"
#include "fuzz.h"

#define MAX_HEAD 2048
#define MAX_TARGET 512

static void check(int ok)
{
	if (!ok)
		abort();
}

static int inside(const char *p, size_t n, const char *buf, size_t len)
{
	return p >= buf && p + n <= buf + len;
}

/* buf[0, cut) of a good head: incomplete. */
static void check_prefix(const char *buf, size_t cut)
{
	char *p = malloc(cut ? cut : 1);
	if (!p)
		return;
	memcpy(p, buf, cut);
	struct httphead h;
	check(httphead_check(p, cut, MAX_HEAD, MAX_TARGET, &h) == HTTPHEAD_INCOMPLETE);
	free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes: reads past it are caught. */
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	struct httphead h;
	int r = httphead_check(buf, size, MAX_HEAD, MAX_TARGET, &h);
	check(r == HTTPHEAD_OK || r == HTTPHEAD_INCOMPLETE || r == HTTPHEAD_ERROR);
	if (r == HTTPHEAD_ERROR) {
		check(h.status == 400 || h.status == 414 || h.status == 431 || h.status == 505);
		check(h.code && h.code[0]);
		check(memchr(h.message, 0, sizeof(h.message)) && h.message[0]);
	} else if (r == HTTPHEAD_OK) {
		check(h.head_len > 0 && h.head_len <= size && h.head_len <= MAX_HEAD);
		check(buf[h.head_len - 1] == '\n');
		check(!memchr(buf, 0, h.head_len));
		check(h.target && h.target_len > 0 && h.target_len <= MAX_TARGET);
		check(inside(h.target, h.target_len, buf, h.head_len));
		check(!h.auth || inside(h.auth, h.auth_len, buf, h.head_len));
		check(!h.api_key || inside(h.api_key, h.api_key_len, buf, h.head_len));
		check(!h.access_token || inside(h.access_token, h.access_token_len, buf, h.head_len));
		check(!h.sandbox_id || inside(h.sandbox_id, h.sandbox_id_len, buf, h.head_len));
		check(!h.traffic_token || inside(h.traffic_token, h.traffic_token_len, buf, h.head_len));
		check(!h.host || inside(h.host, h.host_len, buf, h.head_len));
		check(!(h.has_length && h.chunked));
		struct httphead again;
		check(httphead_check(buf, h.head_len, MAX_HEAD, MAX_TARGET, &again) == HTTPHEAD_OK);
		check(again.head_len == h.head_len && again.target == h.target &&
		      again.target_len == h.target_len && again.chunked == h.chunked &&
		      again.has_length == h.has_length &&
		      again.content_length == h.content_length && again.auth == h.auth);
		/* Every prefix of a good head is incomplete, never refused (a
		 * client may send it in pieces): the last 48, and the half. */
		for (size_t cut = h.head_len > 48 ? h.head_len - 48 : 0; cut < h.head_len; cut++)
			check_prefix(buf, cut);
		check_prefix(buf, h.head_len / 2);
	} else {
		check(size < MAX_HEAD);
		if (size > 0) {
			struct httphead shorter;
			check(httphead_check(buf, size - 1, MAX_HEAD, MAX_TARGET, &shorter) ==
			      HTTPHEAD_INCOMPLETE);
		}
	}
	free(buf);
	return 0;
}

/* Structure-aware inputs for the replay driver: request heads assembled
 * from the pieces the check cares about (methods, versions, the framing
 * and credential headers, their repetitions, odd separators and line
 * ends), so that most reach the header checks instead of failing on the
 * first byte. */
static const char *const methods[] = { "GET", "POST", "PUT", "DELETE", "HEAD", "PATCH",
				       "OPTIONS", "BREW", "get", "" };
static const char *const targets[] = { "/v1/health", "/e2b/v2/sandboxes", "/v1/sandboxes/sb-1/files?path=a%00b",
				       "*", "http://x/", "/a b", "", "/%zz" };
static const char *const versions[] = { "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ",
					"http/1.1", "" };
static const char *const names[] = { "Content-Length", "Transfer-Encoding", "Host",
				     "Authorization", "content-length", "X-Other", "X-API-KEY",
				     "x-access-token", "E2b-Sandbox-Id", "E2B-Traffic-Access-Token",
				     "Content-Length ", "Expect", "" };
static const char *const values[] = { "0", "-1", "12", "18446744073709551616", " 5 ",
				      "chunked", "gzip, chunked", "Bearer t0ken", "x\tz",
				      "", "1,1" };
static const char *const ends[] = { "\r\n", "\n", "\r", "\r\n " };

#define PICK(a) (a)[rng() % (sizeof(a) / sizeof((a)[0]))]

static size_t put(uint8_t *buf, size_t n, size_t max, const char *s)
{
	size_t l = strlen(s);
	if (n + l > max)
		l = max - n;
	memcpy(buf + n, s, l);
	return n + l;
}

size_t fuzz_generate(uint64_t (*rng)(void), uint8_t *buf, size_t max)
{
	size_t n = 0;
	n = put(buf, n, max, PICK(methods));
	n = put(buf, n, max, " ");
	n = put(buf, n, max, PICK(targets));
	n = put(buf, n, max, " ");
	n = put(buf, n, max, PICK(versions));
	n = put(buf, n, max, rng() % 8 ? "\r\n" : PICK(ends));
	unsigned headers = (unsigned)(rng() % 6);
	for (unsigned i = 0; i < headers; i++) {
		n = put(buf, n, max, PICK(names));
		n = put(buf, n, max, rng() % 8 ? ": " : ":");
		n = put(buf, n, max, PICK(values));
		n = put(buf, n, max, rng() % 8 ? "\r\n" : PICK(ends));
	}
	if (rng() % 4)
		n = put(buf, n, max, "\r\n");
	if (rng() % 4 == 0)
		n = put(buf, n, max, "body bytes");
	return n;
}
