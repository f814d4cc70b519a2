/* Fuzz entry point for the port proxy's answer parser (src/daemon/answer.c):
 * bytes that a server inside a sandbox -- untrusted -- sends back through
 * the proxy.
 *
 * The first input byte picks the request method (bit 0: HEAD) and the way
 * the rest is cut into reads; the rest is the server's byte stream, then
 * its EOF.  It is parsed twice, whole and in pieces, the way proxy.c does
 * (head first, then resume for the body, raw bytes left over fed first).
 * Besides the sanitizers, oracles abort on a wrong answer:
 *   - both parses agree on success, status, length, headers, the decoded
 *     body and whether the answer ended or switched protocols;
 *   - the head never holds more than ANSWER_HEAD_MAX bytes or
 *     ANSWER_MAX_HEADERS headers, each header's name and value lie inside
 *     it, and the decoded body is never longer than the input;
 *   - an answer to HEAD, a 101, a 204 and a 304 have no body.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/answer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t *cur_data;
static size_t cur_size;

/* A wrong answer: say where, show the input (for the corpus), abort. */
#define check(ok) check_at((ok), __LINE__)
static void check_at(int ok, int line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz-answer: check at line %d failed for this input (hex):\n", line);
	for (size_t i = 0; i < cur_size; i++)
		fprintf(stderr, "%02x", cur_data[i]);
	fputc('\n', stderr);
	abort();
}

struct outcome {
	int ok, head_done, msg_done, upgraded;
	unsigned status, nhdrs;
	uint64_t length;
	char *head;
	size_t head_len;
	char *body;
	size_t body_len;
};

/* One read's worth of bytes through the parser, as proxy.c does. */
static int feed_piece(struct answer *a, const uint8_t *p, size_t n)
{
	if (answer_feed(a, (const char *)p, n) < 0)
		return -1;
	/* After the head, go on with what was left over (the body's start). */
	while (a->head_done && !a->msg_done && !answer_upgraded(a) &&
	       HTTP_PARSER_ERRNO(&a->parser) == HPE_PAUSED) {
		answer_resume(a);
		if (!a->raw_len)
			break;
		char *r = a->raw;
		size_t len = a->raw_len, off = a->raw_off;
		a->raw = NULL;
		a->raw_len = a->raw_off = 0;
		int rc = answer_feed(a, r + off, len);
		free(r);
		if (rc < 0)
			return -1;
	}
	return 0;
}

static void run(const uint8_t *d, size_t n, int head_req, unsigned cut, struct outcome *o)
{
	struct answer a;
	answer_init(&a, head_req);
	o->ok = 1;
	size_t at = 0;
	uint32_t x = cut * 2654435761u + 1;
	while (at < n && o->ok) {
		size_t piece = n - at;
		if (cut) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			piece = 1 + x % (cut * 7 + 1);
			if (piece > n - at)
				piece = n - at;
		}
		if (feed_piece(&a, d + at, piece) < 0)
			o->ok = 0;
		at += piece;
		if (a.msg_done || answer_upgraded(&a))
			break;
	}
	if (o->ok && !a.msg_done && !answer_upgraded(&a) && feed_piece(&a, NULL, 0) < 0)
		o->ok = 0; /* the server's EOF */
	o->head_done = a.head_done;
	o->msg_done = a.msg_done;
	o->upgraded = answer_upgraded(&a);
	o->status = a.status;
	o->length = a.length;
	o->nhdrs = a.nhdrs;
	check(a.hlen <= ANSWER_HEAD_MAX && a.nhdrs <= ANSWER_MAX_HEADERS);
	for (unsigned i = 0; i < a.nhdrs; i++) {
		check(a.hdrs[i].name <= a.hlen && a.hdrs[i].value <= a.hlen);
		check(strlen(answer_header_name(&a, i)) + a.hdrs[i].name <= a.hlen);
		check(strlen(answer_header_value(&a, i)) <= a.hlen);
	}
	o->head = a.head_done && a.hlen ? malloc(a.hlen) : NULL;
	o->head_len = o->head ? a.hlen : 0;
	if (o->head)
		memcpy(o->head, a.hbuf, a.hlen);
	o->body = a.body;
	o->body_len = a.body_len;
	a.body = NULL;
	check(o->body_len <= n);
	if (a.head_done && (head_req || a.status == 101 || a.status == 204 || a.status == 304))
		check(o->body_len == 0);
	answer_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	cur_data = data;
	cur_size = size;
	int head_req = data[0] & 1;
	unsigned cut = 1 + (data[0] >> 1) % 16;
	struct outcome whole = { 0 }, pieces = { 0 };
	run(data + 1, size - 1, head_req, 0, &whole);
	run(data + 1, size - 1, head_req, cut, &pieces);
	check(whole.ok == pieces.ok);
	if (whole.ok) {
		check(whole.head_done == pieces.head_done && whole.msg_done == pieces.msg_done);
		check(whole.upgraded == pieces.upgraded && whole.status == pieces.status);
		check(whole.length == pieces.length && whole.nhdrs == pieces.nhdrs);
		check(whole.head_len == pieces.head_len &&
		      (!whole.head_len || !memcmp(whole.head, pieces.head, whole.head_len)));
		check(whole.body_len == pieces.body_len &&
		      (!whole.body_len || !memcmp(whole.body, pieces.body, whole.body_len)));
	}
	free(whole.head);
	free(whole.body);
	free(pieces.head);
	free(pieces.body);
	return 0;
}
