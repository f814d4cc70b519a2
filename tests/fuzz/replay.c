/* Replay driver for the protocol fuzz target, run in the unit suite where
 * libFuzzer is not available:
 *
 *   fuzz-proto-replay CORPUS_DIR       every file of the corpus, then 20000
 *                                      random and mutated inputs (fixed
 *                                      seed: the run is deterministic)
 *   fuzz-proto-replay --write-seeds DIR  (re)generate the seed corpus
 *
 * Output is TAP.  A wrong answer aborts inside the target (see
 * fuzz_proto.c), which fails the test.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RANDOM_INPUTS 20000
#define INPUT_MAX 8192

static uint64_t rng_state = 0x5eed5eed12345678ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

struct blob {
	uint8_t *p;
	size_t n;
};

static int read_file(const char *path, struct blob *b)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	b->p = NULL;
	b->n = 0;
	uint8_t buf[4096];
	size_t k;
	while ((k = fread(buf, 1, sizeof(buf), f)) > 0) {
		b->p = realloc(b->p, b->n + k);
		memcpy(b->p + b->n, buf, k);
		b->n += k;
	}
	int err = ferror(f);
	fclose(f);
	return err ? -1 : 0;
}

/* --- seeds --------------------------------------------------------------- */

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

static int write_seeds(const char *dir)
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

/* --- mutations ------------------------------------------------------------ */

static void mutate(struct blob *in, struct blob *other, struct blob *out)
{
	size_t n = in->n;
	out->p = malloc(INPUT_MAX + 64);
	if (n > INPUT_MAX)
		n = INPUT_MAX;
	memcpy(out->p, in->p, n);
	out->n = n;
	int rounds = 1 + (int)(rng() % 4);
	for (int i = 0; i < rounds; i++) {
		switch (rng() % 7) {
		case 0: /* flip a bit */
			if (out->n)
				out->p[rng() % out->n] ^= (uint8_t)(1u << (rng() % 8));
			break;
		case 1: /* set a byte to an interesting value */
			if (out->n) {
				static const uint8_t v[] = { 0, 1, 0x7f, 0x80, 0xff, 0x10, 0x21 };
				out->p[rng() % out->n] = v[rng() % sizeof(v)];
			}
			break;
		case 2: /* truncate */
			if (out->n)
				out->n = (size_t)(rng() % out->n);
			break;
		case 3: /* insert random bytes */
			if (out->n < INPUT_MAX) {
				size_t at = out->n ? (size_t)(rng() % (out->n + 1)) : 0;
				size_t k = 1 + (size_t)(rng() % 16);
				if (out->n + k > INPUT_MAX)
					k = INPUT_MAX - out->n;
				memmove(out->p + at + k, out->p + at, out->n - at);
				for (size_t j = 0; j < k; j++)
					out->p[at + j] = (uint8_t)rng();
				out->n += k;
			}
			break;
		case 4: /* splice in part of another input */
			if (other->n) {
				size_t from = (size_t)(rng() % other->n);
				size_t k = other->n - from;
				if (out->n + k > INPUT_MAX)
					k = INPUT_MAX - out->n;
				memcpy(out->p + out->n, other->p + from, k);
				out->n += k;
			}
			break;
		case 5: /* overwrite a 32-bit length with an edge value */
			if (out->n >= 4) {
				static const uint32_t v[] = { 0, 1, 5, 6, 0xffff, 0x100000, 0x100001,
							      0x7fffffff, 0xffffffff };
				uint32_t x = v[rng() % (sizeof(v) / sizeof(v[0]))];
				size_t at = (size_t)(rng() % (out->n - 3));
				memcpy(out->p + at, &x, 4);
			}
			break;
		default: /* duplicate a slice */
			if (out->n && out->n < INPUT_MAX / 2) {
				size_t from = (size_t)(rng() % out->n);
				size_t k = 1 + (size_t)(rng() % (out->n - from));
				memcpy(out->p + out->n, out->p + from, k);
				out->n += k;
			}
			break;
		}
	}
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--write-seeds"))
		return write_seeds(argv[2]);
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR | --write-seeds DIR\n", argv[0]);
		return 2;
	}

	/* Corpus, in name order so runs are reproducible. */
	DIR *d = opendir(argv[1]);
	if (!d) {
		printf("not ok 1 - corpus: %s: %s\n1..1\n", argv[1], strerror(errno));
		return 1;
	}
	char **names = NULL;
	size_t nn = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		names = realloc(names, (nn + 1) * sizeof(*names));
		names[nn++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, nn, sizeof(*names), cmp_names);
	struct blob *corpus = calloc(nn + 1, sizeof(*corpus));
	size_t nc = 0;
	for (size_t i = 0; i < nn; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", argv[1], names[i]);
		struct stat st;
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && read_file(path, &corpus[nc]) == 0) {
			LLVMFuzzerTestOneInput(corpus[nc].p, corpus[nc].n);
			nc++;
		}
		free(names[i]);
	}
	free(names);
	printf("%s 1 - corpus (%zu files)\n", nc ? "ok" : "not ok", nc);
	fflush(stdout);

	/* Random bytes, random valid-looking frames, and mutated corpus. */
	struct blob empty = { 0 };
	for (int i = 0; i < RANDOM_INPUTS; i++) {
		struct blob in;
		switch (i % 3) {
		case 0: {
			in.n = (size_t)(rng() % 512);
			in.p = malloc(in.n + 1);
			for (size_t k = 0; k < in.n; k++)
				in.p[k] = (uint8_t)rng();
			break;
		}
		case 1: {
			/* A run of frames with headers that mostly pass. */
			in.p = malloc(INPUT_MAX);
			in.n = 0;
			while (in.n + SANDLOT_PROTO_HEADER + 64 < INPUT_MAX && rng() % 8) {
				uint32_t len = (uint32_t)(rng() % 64);
				static const uint8_t types[] = { 0x01, 0x03, 0x10, 0x17, 0x21, 0x25 };
				sl_header_encode(in.p + in.n, len, types[rng() % sizeof(types)],
						 (uint8_t)(rng() % 16 == 0 ? 2 : rng() & 1),
						 (uint32_t)rng());
				in.n += SANDLOT_PROTO_HEADER;
				for (uint32_t k = 0; k < len; k++)
					in.p[in.n++] = (uint8_t)(k % 6 == 2 ? rng() % 12 : rng());
			}
			break;
		}
		default: {
			struct blob *src = nc ? &corpus[rng() % nc] : &empty;
			struct blob *other = nc ? &corpus[rng() % nc] : &empty;
			mutate(src, other, &in);
			break;
		}
		}
		LLVMFuzzerTestOneInput(in.p, in.n);
		free(in.p);
	}
	printf("ok 2 - random (%d inputs)\n1..2\n", RANDOM_INPUTS);
	for (size_t i = 0; i < nc; i++)
		free(corpus[i].p);
	free(corpus);
	return nc ? 0 : 1;
}
