/* The answer of a server behind the port proxy, parsed (proxy.c): status,
 * headers and the decoded body, from bytes read off the connection into
 * the sandbox -- untrusted bytes, so this part is kept apart from the
 * daemon and has a fuzz entry point (tests/fuzz/fuzz_answer.c).
 *
 * http-parser (libhttp-parser) does the parsing; this collects what it
 * reports, with limits: at most ANSWER_HEAD_MAX bytes of header names and
 * values and ANSWER_MAX_HEADERS headers.  1xx answers other than 101 are
 * skipped (the final answer follows them).  When the head of the final
 * answer is complete the parser pauses, so that the caller can look at the
 * head before the body is decoded: bytes given after that point stay in
 * raw (for the body, or after a 101 for the new protocol) until
 * answer_resume().
 */
#ifndef SANDLOT_DAEMON_ANSWER_H
#define SANDLOT_DAEMON_ANSWER_H

#include <http_parser.h>
#include <stddef.h>
#include <stdint.h>

#define ANSWER_HEAD_MAX (64u * 1024)
#define ANSWER_MAX_HEADERS 128
#define ANSWER_NO_LENGTH UINT64_MAX

struct answer {
	http_parser parser;
	int head_req;                 /* an answer to HEAD: no body */
	int head_done, msg_done, too_big, in_value;
	unsigned status;
	uint64_t length;              /* Content-Length, or ANSWER_NO_LENGTH (chunked, or
	                               * to the close); 0 for 204 and 304 */
	char *hbuf;                   /* "name\0value\0name\0value\0..." */
	size_t hlen, hcap;
	struct {
		size_t name, value;   /* offsets into hbuf; value 0: empty */
	} hdrs[ANSWER_MAX_HEADERS];
	unsigned nhdrs;
	/* Bytes given but not parsed (see above). */
	char *raw;
	size_t raw_off, raw_len;
	/* Decoded body bytes not taken yet: into out (out_len of out_cap)
	 * when set, else into body. */
	char *out;
	size_t out_len, out_cap;
	char *body;
	size_t body_off, body_len, body_cap;
};

void answer_init(struct answer *a, int head_req);
void answer_free(struct answer *a);
/* Parse len bytes (len 0: the server's EOF).  0, or -1 if this is not an
 * HTTP/1.x answer, or goes past the limits (too_big), or memory ran out. */
int answer_feed(struct answer *a, const char *data, size_t len);
/* After the head: go on to the body. */
void answer_resume(struct answer *a);
/* Whether the server switched protocols (101 with Upgrade). */
int answer_upgraded(const struct answer *a);
const char *answer_header_name(const struct answer *a, unsigned i);
const char *answer_header_value(const struct answer *a, unsigned i);

#endif
