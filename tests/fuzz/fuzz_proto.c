/* Fuzz entry point for the protocol codec (src/common/proto.c).
 *
 * The input is treated as bytes arriving on the connection.  They go
 * through an sl_reader twice — once via sl_reader_space/commit in chunks
 * (the path the real readers take), once via sl_reader_feed — and every
 * record of every frame is decoded with every typed accessor.  Besides the
 * sanitizers, a few oracles abort on a wrong answer:
 *   - both reader paths yield the same frames, and the same final verdict;
 *   - each frame re-encoded with sl_msg equals the bytes it was read from;
 *   - the records that decode re-encode to the same payload bytes;
 *   - an accessor that succeeds was given exactly the right length;
 *   - the reader never holds more than one maximal frame.
 * Its seeds (corpus/proto) are written by `fuzz-proto-replay --write-seeds
 * DIR` from the encoder, fuzz_write_seeds() below.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"
#include "fuzz.h"

#define FRAME_MAX ((size_t)SANDLOT_PROTO_HEADER + SANDLOT_PROTO_MAX_PAYLOAD)

static void check(int ok)
{
	if (!ok)
		abort();
}

static void decode_records(const uint8_t *payload, size_t len)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, 0);
	sl_rec_iter_init(&it, payload, len);
	size_t used = 0;
	int rc;
	while ((rc = sl_rec_next(&it, &r)) == 1) {
		check(r.val >= payload && r.val + r.len <= payload + len);
		uint8_t u8;
		uint32_t u32;
		int32_t i32;
		uint64_t u64;
		int64_t i64;
		check((sl_rec_u8(&r, &u8) == 0) == (r.len == 1));
		check((sl_rec_u32(&r, &u32) == 0) == (r.len == 4));
		check((sl_rec_i32(&r, &i32) == 0) == (r.len == 4));
		check((sl_rec_u64(&r, &u64) == 0) == (r.len == 8));
		check((sl_rec_i64(&r, &i64) == 0) == (r.len == 8));
		if (r.len == 4)
			check((uint32_t)i32 == u32);
		if (r.len == 8)
			check((uint64_t)i64 == u64);
		errno = 0;
		char *s = sl_rec_str(&r);
		if (s) {
			check(strlen(s) == r.len && memcmp(s, r.val, r.len) == 0);
			free(s);
		} else {
			check(errno == EPROTO && memchr(r.val, 0, r.len) != NULL);
		}
		sl_msg_put_bytes(&m, r.tag, r.val, r.len);
		used += 6 + (size_t)r.len;
	}
	check(rc == 0 ? used == len : used < len);
	check(sl_msg_finish(&m) == 0);
	check(m.len - SANDLOT_PROTO_HEADER == used &&
	      memcmp(m.buf + SANDLOT_PROTO_HEADER, payload, used) == 0);
	sl_msg_free(&m);
}

/* Check one frame popped at stream offset *pos against the input. */
static void on_frame(const uint8_t *data, size_t size, size_t *pos,
		     const struct sl_frame_header *h, const uint8_t *payload)
{
	check(*pos + SANDLOT_PROTO_HEADER + h->length <= size);
	check(h->length <= SANDLOT_PROTO_MAX_PAYLOAD && sl_msg_known(h->type));
	struct sl_msg m;
	sl_msg_begin(&m, h->type, h->flags, h->stream);
	sl_msg_put_raw(&m, payload, h->length);
	check(sl_msg_finish(&m) == 0);
	check(m.len == SANDLOT_PROTO_HEADER + h->length && memcmp(m.buf, data + *pos, m.len) == 0);
	sl_msg_free(&m);
	decode_records(payload, h->length);
	*pos += SANDLOT_PROTO_HEADER + h->length;
}

/* Pop every complete frame.  Returns -1 once the reader is broken. */
static int drain(struct sl_reader *r, const uint8_t *data, size_t size, size_t *pos, size_t *n)
{
	struct sl_frame_header h;
	const uint8_t *payload;
	int rc;
	while ((rc = sl_reader_next(r, &h, &payload)) == 1) {
		on_frame(data, size, pos, &h, payload);
		(*n)++;
	}
	check(r->cap <= FRAME_MAX);
	if (rc < 0) {
		check(errno == EPROTO && r->broken);
		return -1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sl_frame_header h;
	if (size >= SANDLOT_PROTO_HEADER && sl_header_decode(data, &h) == 0)
		check(h.length <= SANDLOT_PROTO_MAX_PAYLOAD);
	decode_records(data, size);

	/* Path 1: space/commit with chunk sizes drawn from the input. */
	struct sl_reader r;
	sl_reader_init(&r);
	size_t off = 0, pos1 = 0, n1 = 0;
	int broken1 = 0;
	uint32_t seed = (uint32_t)size * 2654435761u;
	while (off < size && !broken1) {
		size_t avail;
		uint8_t *sp = sl_reader_space(&r, &avail);
		check(sp != NULL && avail > 0);
		seed = seed * 1103515245u + 12345u + data[off];
		size_t n = 1 + (seed >> 16) % 97;
		if (n > avail)
			n = avail;
		if (n > size - off)
			n = size - off;
		memcpy(sp, data + off, n);
		sl_reader_commit(&r, n);
		off += n;
		broken1 = drain(&r, data, size, &pos1, &n1) < 0;
	}
	sl_reader_free(&r);

	/* Path 2: feed in bigger chunks; ENOBUFS only when it cannot fit. */
	sl_reader_init(&r);
	size_t pos2 = 0, n2 = 0;
	int broken2 = 0;
	off = 0;
	while (off < size && !broken2) {
		size_t n = size - off < 4093 ? size - off : 4093;
		if (sl_reader_feed(&r, data + off, n) < 0) {
			check(errno == ENOBUFS && r.len + n > FRAME_MAX);
			n = FRAME_MAX - r.len;
			check(sl_reader_feed(&r, data + off, n) == 0);
		}
		off += n;
		broken2 = drain(&r, data, size, &pos2, &n2) < 0;
	}
	sl_reader_free(&r);

	check(n1 == n2 && pos1 == pos2 && broken1 == broken2);
	return 0;
}

/* --- replay driver hooks (tests/fuzz/fuzz.h) ------------------------------- */

struct blob {
	uint8_t *p;
	size_t n;
};

static void seed_append(struct blob *b, struct sl_msg *m)
{
	if (sl_msg_finish(m) < 0)
		abort();
	b->p = realloc(b->p, b->n + m->len);
	memcpy(b->p + b->n, m->buf, m->len);
	b->n += m->len;
	sl_msg_free(m);
}

static int seed_write(const char *dir, const char *name, struct blob *b)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(b->p, 1, b->n, f) != b->n || fclose(f) != 0) {
		fprintf(stderr, "write %s: %s\n", path, strerror(errno));
		return -1;
	}
	free(b->p);
	b->p = NULL;
	b->n = 0;
	return 0;
}

int fuzz_write_seeds(const char *dir)
{
	struct blob b = { 0 };
	struct sl_msg m;
	int rc = 0;

	sl_msg_begin(&m, SL_MSG_HELLO, 0, 0);
	sl_msg_put_u32(&m, SL_TAG_VERSION, SANDLOT_PROTO_VERSION);
	seed_append(&b, &m);
	rc |= seed_write(dir, "hello", &b);

	sl_msg_begin(&m, SL_MSG_EXEC, 0, 1);
	sl_msg_put_str(&m, SL_TAG_ARG, "sh");
	sl_msg_put_str(&m, SL_TAG_ARG, "-c");
	sl_msg_put_str(&m, SL_TAG_ARG, "echo hi");
	sl_msg_put_str(&m, SL_TAG_ENV, "PATH=/usr/bin:/bin");
	sl_msg_put_str(&m, SL_TAG_CWD, "/home/user");
	sl_msg_put_u8(&m, SL_TAG_STDIN, 1);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_STDIN, SANDLOT_PROTO_FLAG_END, 1);
	sl_msg_put_raw(&m, "input\n", 6);
	seed_append(&b, &m);
	rc |= seed_write(dir, "exec-stdin", &b);

	sl_msg_begin(&m, SL_MSG_STARTED, 0, 1);
	sl_msg_put_u32(&m, SL_TAG_PID, 42);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_STDOUT, 0, 1);
	sl_msg_put_raw(&m, "hi\n", 3);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_STDOUT, SANDLOT_PROTO_FLAG_END, 1);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_STDERR, SANDLOT_PROTO_FLAG_END, 1);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_EXIT, 0, 1);
	sl_msg_put_u32(&m, SL_TAG_SIGNAL, 9);
	sl_msg_put_u8(&m, SL_TAG_CORE, 1);
	seed_append(&b, &m);
	rc |= seed_write(dir, "exec-output", &b);

	sl_msg_begin(&m, SL_MSG_FWRITE, 0, 2);
	sl_msg_put_str(&m, SL_TAG_PATH, "out/data.bin");
	sl_msg_put_u32(&m, SL_TAG_MODE, 0644);
	sl_msg_put_u32(&m, SL_TAG_FLAGS, 1);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_DATA, 0, 2);
	sl_msg_put_raw(&m, "\0\1\2\3binary\xff", 11);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_DATA, SANDLOT_PROTO_FLAG_END, 2);
	seed_append(&b, &m);
	rc |= seed_write(dir, "fwrite", &b);

	sl_msg_begin(&m, SL_MSG_ENTRIES, 0, 3);
	for (int i = 0; i < 3; i++) {
		sl_msg_put_str(&m, SL_TAG_NAME, i == 0 ? "a.txt" : i == 1 ? "dir" : "link");
		sl_msg_put_u8(&m, SL_TAG_FTYPE, (uint8_t)("fdl"[i]));
		sl_msg_put_u32(&m, SL_TAG_MODE, 0755);
		sl_msg_put_u64(&m, SL_TAG_SIZE, 4096);
		sl_msg_put_i64(&m, SL_TAG_MTIME_NS, 1700000000123456789ll);
	}
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_OK, 0, 3);
	seed_append(&b, &m);
	rc |= seed_write(dir, "list-entries", &b);

	sl_msg_begin(&m, SL_MSG_CHANGES, 0, 4);
	sl_msg_put_u8(&m, SL_TAG_KIND, 'c');
	sl_msg_put_str(&m, SL_TAG_PATH, "/home/user/new.txt");
	sl_msg_put_u8(&m, SL_TAG_FTYPE, 'f');
	sl_msg_put_u64(&m, SL_TAG_SIZE, 5);
	sl_msg_put_u8(&m, SL_TAG_KIND, 'd');
	sl_msg_put_str(&m, SL_TAG_PATH, "/home/user/old");
	sl_msg_put_u8(&m, SL_TAG_FTYPE, 'd');
	sl_msg_put_u64(&m, SL_TAG_SIZE, 0);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_OK, 0, 4);
	sl_msg_put_u8(&m, SL_TAG_TRUNCATED, 1);
	seed_append(&b, &m);
	rc |= seed_write(dir, "scan-changes", &b);

	sl_msg_begin(&m, SL_MSG_ERROR, 0, 5);
	sl_msg_put_u32(&m, SL_TAG_ERRNO, ENOENT);
	sl_msg_put_str(&m, SL_TAG_MESSAGE, "command not found: foo");
	seed_append(&b, &m);
	rc |= seed_write(dir, "error", &b);

	sl_msg_begin(&m, SL_MSG_PING, 0, 6);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_CREDIT, 0, 1);
	sl_msg_put_u32(&m, SL_TAG_CREDIT, 65536);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_KILL, 0, 1);
	sl_msg_put_u32(&m, SL_TAG_SIGNAL, 15);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_STAT, 0, 7);
	sl_msg_put_str(&m, SL_TAG_PATH, "x");
	sl_msg_put_bytes(&m, 999, "future", 6); /* unknown tag */
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_SHUTDOWN, 0, 0);
	seed_append(&b, &m);
	rc |= seed_write(dir, "control-mix", &b);

	sl_msg_begin(&m, SL_MSG_DETACH, 0, 2);
	seed_append(&b, &m);
	sl_msg_begin(&m, SL_MSG_ATTACH, 0, 3);
	sl_msg_put_u32(&m, SL_TAG_PID, 84);
	seed_append(&b, &m);
	rc |= seed_write(dir, "detach-attach", &b);

	/* Malformed: reserved bits, too long, unknown type, broken record,
	 * string with NUL, integer of the wrong size. */
	uint8_t h[SANDLOT_PROTO_HEADER];
	sl_header_encode(h, 0, SL_MSG_PING, 0, 1);
	h[7] = 0x80;
	b.p = malloc(sizeof(h));
	memcpy(b.p, h, sizeof(h));
	b.n = sizeof(h);
	rc |= seed_write(dir, "bad-reserved", &b);

	sl_header_encode(h, SANDLOT_PROTO_MAX_PAYLOAD + 1, SL_MSG_DATA, 0, 1);
	b.p = malloc(sizeof(h));
	memcpy(b.p, h, sizeof(h));
	b.n = sizeof(h);
	rc |= seed_write(dir, "bad-length", &b);

	sl_msg_begin(&m, SL_MSG_PING, 0, 1);
	seed_append(&b, &m);
	b.p[4] = 0x7f;
	rc |= seed_write(dir, "bad-type", &b);

	sl_msg_begin(&m, SL_MSG_FREAD, 0, 8);
	sl_msg_put_bytes(&m, SL_TAG_PATH, "a\0b", 3);
	sl_msg_put_u8(&m, SL_TAG_MODE, 1); /* u32 expected */
	sl_msg_put_raw(&m, "\x0b\x00\xff\xff", 4); /* a record cut short */
	seed_append(&b, &m);
	rc |= seed_write(dir, "bad-records", &b);
	return rc ? 1 : 0;
}

/* A run of frames whose headers mostly pass, with payloads whose record
 * lengths are often small. */
size_t fuzz_generate(uint64_t (*rng)(void), uint8_t *buf, size_t max)
{
	size_t n = 0;
	while (n + SANDLOT_PROTO_HEADER + 64 < max && rng() % 8) {
		uint32_t len = (uint32_t)(rng() % 64);
		static const uint8_t types[] = { 0x01, 0x03, 0x10, 0x17, 0x21, 0x25 };
		sl_header_encode(buf + n, len, types[rng() % sizeof(types)],
				 (uint8_t)(rng() % 16 == 0 ? 2 : rng() & 1), (uint32_t)rng());
		n += SANDLOT_PROTO_HEADER;
		for (uint32_t k = 0; k < len; k++)
			buf[n++] = (uint8_t)(k % 6 == 2 ? rng() % 12 : rng());
	}
	return n;
}
