/* Fuzz entry point for what an archive store answers (src/daemon/
 * archive_parse.c): owner.json, meta.json and S3's XML error bodies, which
 * sandlotd reads from a store shared by every node, over the network.
 *
 * The first byte picks the parser, the rest is its input.  Oracles: what
 * a parser accepts satisfies every rule it promises (owner.json:
 * generations >= 1 and in order, names of the allowed characters and NUL
 * within their buffers; meta.json: sha256 of 64 lowercase hex digits,
 * sizes in range, options an object); an S3 code is a prefix of what
 * follows the input's first "<Code>", of the allowed characters, within
 * its buffer. */
#include <stdlib.h>
#include <string.h>

#include "daemon/archive_parse.h"
#include "fuzz.h"

static const char ID[] = "sb-n1-aaaaaaaaaaaaaaaaaaaaaaa";

static void check(int ok)
{
	if (!ok)
		abort();
}

static void owner(const char *t, size_t n)
{
	struct archive_owner o;
	if (archive__owner_parse(t, n, ID, &o) < 0)
		return;
	check(o.generation >= 1 && o.archived >= 1 && o.archived <= o.generation);
	check(memchr(o.node, 0, sizeof(o.node)) && memchr(o.instance, 0, sizeof(o.instance)));
	check(o.node[0] && o.instance[0]);
	for (const char *p = o.node; *p; p++)
		check(*p > 0x20 && *p < 0x7f && *p != '"' && *p != '\\');
	for (const char *p = o.instance; *p; p++)
		check((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'));
}

static void meta(const char *t, size_t n)
{
	json_t *m = archive__meta_parse(t, n, ID, 3);
	if (!m)
		return;
	const char *sha = json_string_value(json_object_get(m, "sha256"));
	check(sha && strlen(sha) == 64 && strspn(sha, "0123456789abcdef") == 64);
	check(json_integer_value(json_object_get(m, "generation")) == 3);
	check(json_integer_value(json_object_get(m, "bytes")) >= 0);
	check(json_integer_value(json_object_get(m, "disk_bytes")) >= 16 << 20);
	check(json_is_object(json_object_get(m, "options")));
	check(strcmp(json_string_value(json_object_get(m, "sandbox")), ID) == 0);
	json_decref(m);
}

static void s3(const char *t, size_t n)
{
	char code[16];
	archive__s3_code(t, n, code, sizeof(code));
	size_t k = strlen(code);
	check(k < sizeof(code));
	check(strspn(code, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == k);
	if (!k)
		return;
	const char *at = NULL;
	for (size_t i = 0; i + 6 <= n && !at; i++)
		if (memcmp(t + i, "<Code>", 6) == 0)
			at = t + i + 6;
	check(at && (size_t)(t + n - at) >= k && memcmp(at, code, k) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *t = (const char *)data + 1;
	size_t n = size - 1;
	switch (data[0] % 3) {
	case 0:
		owner(t, n);
		break;
	case 1:
		meta(t, n);
		break;
	default:
		s3(t, n);
		break;
	}
	return 0;
}
