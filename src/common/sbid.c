/* Sandbox ids with or without their node: see sbid.h.  libc-only (the
 * fuzz target links it alone). */
#include "common/sbid.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <stdlib.h>

static char node_id[SANDLOT_NODE_ID_MAX + 1];

static int is_b32(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '2' && c <= '7');
}

static int is_node_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int sandlot__node_id_ok(const char *node, size_t len)
{
	if (!node || len == 0 || len > SANDLOT_NODE_ID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!is_node_char(node[i]))
			return 0;
	return 1;
}

int sandlot__node_id_set(const char *node)
{
	if (!node) {
		node_id[0] = '\0';
		return 0;
	}
	if (!sandlot__node_id_ok(node, strlen(node))) {
		errno = EINVAL;
		return -1;
	}
	memcpy(node_id, node, strlen(node) + 1);
	return 0;
}

const char *sandlot__node_id(void)
{
	return node_id[0] ? node_id : NULL;
}

int sandlot__sbid_parse(const char *id, size_t len, char node[SANDLOT_NODE_ID_MAX + 1])
{
	if (!id || len != SANDLOT_ID_LEN || memcmp(id, "sb-", 3) != 0)
		return 0;
	const char *rest = id + 3, *end = id + len;
	const char *dash = memchr(rest, '-', (size_t)(end - rest));
	const char *rand = rest;
	if (dash) {
		if (!sandlot__node_id_ok(rest, (size_t)(dash - rest)))
			return 0;
		rand = dash + 1;
	}
	/* The node id is at most 8 characters, so 17 random ones at least. */
	for (const char *p = rand; p < end; p++)
		if (!is_b32(*p))
			return 0;
	if (node) {
		size_t n = dash ? (size_t)(dash - rest) : 0;
		memcpy(node, rest, n);
		node[n] = '\0';
	}
	return 1;
}

/* n lowercase base32 characters (n <= 26) from 130 random bits. */
static void random_b32(char *out, size_t n)
{
	static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";
	unsigned char r[17] = { 0 };
	size_t got = 0;
	while (got < 16) {
		ssize_t k = getrandom(r + got, 16 - got, 0);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			abort(); /* the kernel's CSPRNG is not optional */
		}
		got += (size_t)k;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned bit = (unsigned)i * 5, byte = bit / 8, off = bit % 8;
		unsigned v = ((unsigned)r[byte] << 8 | r[byte + 1]) >> (11 - off);
		out[i] = b32[v & 31];
	}
}

/* prefix + [NODE "-"] + random characters, `total` after the prefix. */
static void make_id(const char *prefix, char *buf, size_t total, int fixed)
{
	size_t pl = strlen(prefix), nl = strlen(node_id);
	memcpy(buf, prefix, pl);
	size_t o = pl;
	if (nl) {
		memcpy(buf + o, node_id, nl);
		o += nl;
		buf[o++] = '-';
	}
	size_t n = fixed ? total - (o - pl) : total;
	random_b32(buf + o, n);
	buf[o + n] = '\0';
}

void sandlot__node_new_id(const char *prefix, char *buf)
{
	make_id(prefix, buf, 26, 0);
}

void sandlot__sbid_new(char *buf)
{
	/* 29 characters whatever the node: "sb-" and 26. */
	make_id("sb-", buf, 26, 1);
}
