/* The replay driver: runs a fuzz target (tests/fuzz/fuzz_NAME.c) where
 * libFuzzer is not available, in every test run (the unit suite):
 *
 *   fuzz-NAME-replay [--inputs N] CORPUS_DIR
 *       every file of the corpus (in name order), then N (default 20000)
 *       random, generated and mutated inputs from a fixed seed, so a run
 *       is deterministic and a failure reproduces
 *   fuzz-NAME-replay FILE...
 *       just those inputs (a crash file libFuzzer wrote, say)
 *   fuzz-NAME-replay --write-seeds DIR
 *       the target's generated seeds (targets with fuzz_write_seeds only)
 *
 * Output is TAP.  A wrong answer aborts inside the target, which fails the
 * test; the driver prints the name of each corpus file before running it,
 * and, for a random input, writes it to $FUZZ_FAILED_INPUT (when set)
 * before running it, so the input that failed can be kept.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Weak: a target may leave them out. */
#pragma weak fuzz_generate
#pragma weak fuzz_write_seeds

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

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		perror("fuzz replay");
		exit(2);
	}
	return p;
}

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
		b->p = xrealloc(b->p, b->n + k);
		memcpy(b->p + b->n, buf, k);
		b->n += k;
	}
	int err = ferror(f);
	fclose(f);
	return err ? -1 : 0;
}

/* Run one input from a copy of exactly its size, so that reading one byte
 * past the end is caught by the sanitizers. */
static void run_one(const uint8_t *p, size_t n)
{
	uint8_t *copy = xrealloc(NULL, n);
	if (n)
		memcpy(copy, p, n);
	LLVMFuzzerTestOneInput(copy, n);
	free(copy);
}

/* --- mutations ------------------------------------------------------------ */

static void mutate(struct blob *in, struct blob *other, struct blob *out)
{
	size_t n = in->n;
	out->p = xrealloc(NULL, INPUT_MAX + 64);
	if (n > INPUT_MAX)
		n = INPUT_MAX;
	if (n) /* an empty corpus file has no buffer (memcpy from NULL is undefined) */
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
				static const uint8_t v[] = { 0, 1, 0x7f, 0x80, 0xff, 0x10, 0x21,
							     '\n', '%', '=', '\\', '"', '/' };
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
		case 5: /* overwrite 32 bits with an edge value (lengths, counts) */
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

static void keep_failed(const struct blob *b)
{
	const char *path = getenv("FUZZ_FAILED_INPUT");
	if (!path || !*path)
		return;
	FILE *f = fopen(path, "wb");
	if (f) {
		fwrite(b->p, 1, b->n, f);
		fclose(f);
	}
}

/* The files named on the command line, one test each. */
static int run_files(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		struct blob b;
		if (read_file(argv[i], &b) < 0) {
			printf("not ok %d - %s: %s\n", i + 1, argv[i], strerror(errno));
			return 1;
		}
		run_one(b.p, b.n);
		free(b.p);
		printf("ok %d - %s (%zu bytes)\n", i + 1, argv[i], b.n);
	}
	printf("1..%d\n", argc);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--write-seeds")) {
		if (!fuzz_write_seeds) {
			fprintf(stderr, "this target has no generated seeds\n");
			return 2;
		}
		return fuzz_write_seeds(argv[2]);
	}
	long inputs = 20000;
	if (argc >= 3 && !strcmp(argv[1], "--inputs")) {
		inputs = strtol(argv[2], NULL, 10);
		argc -= 2;
		argv += 2;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: %s [--inputs N] CORPUS_DIR | FILE... | --write-seeds DIR\n",
			argv[0]);
		return 2;
	}
	struct stat st;
	if (argc > 2 || (stat(argv[1], &st) == 0 && !S_ISDIR(st.st_mode)))
		return run_files(argc - 1, argv + 1);

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
		names = xrealloc(names, (nn + 1) * sizeof(*names));
		names[nn++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, nn, sizeof(*names), cmp_names);
	struct blob *corpus = xrealloc(NULL, (nn + 1) * sizeof(*corpus));
	size_t nc = 0;
	for (size_t i = 0; i < nn; i++) {
		char path[4096];
		if (snprintf(path, sizeof(path), "%s/%s", argv[1], names[i]) >= (int)sizeof(path))
			continue;
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && read_file(path, &corpus[nc]) == 0) {
			printf("# %s\n", names[i]);
			fflush(stdout);
			run_one(corpus[nc].p, corpus[nc].n);
			nc++;
		}
		free(names[i]);
	}
	free(names);
	printf("%s 1 - corpus (%zu files)\n", nc ? "ok" : "not ok", nc);
	fflush(stdout);

	/* Random bytes, generated inputs (when the target has a generator),
	 * and mutated corpus files. */
	struct blob empty = { 0 };
	for (long i = 0; i < inputs; i++) {
		struct blob in;
		switch (i % 3) {
		case 0:
			in.n = (size_t)(rng() % 512);
			in.p = xrealloc(NULL, in.n);
			for (size_t k = 0; k < in.n; k++)
				in.p[k] = (uint8_t)rng();
			break;
		case 1:
			if (fuzz_generate) {
				in.p = xrealloc(NULL, INPUT_MAX);
				in.n = fuzz_generate(rng, in.p, INPUT_MAX);
				break;
			}
			/* fall through */
		default: {
			struct blob *src = nc ? &corpus[rng() % nc] : &empty;
			struct blob *other = nc ? &corpus[rng() % nc] : &empty;
			mutate(src, other, &in);
			break;
		}
		}
		keep_failed(&in);
		run_one(in.p, in.n);
		free(in.p);
	}
	printf("ok 2 - random (%ld inputs)\n1..2\n", inputs);
	for (size_t i = 0; i < nc; i++)
		free(corpus[i].p);
	free(corpus);
	return nc ? 0 : 1;
}
