/* The node in a sandbox id: see fleetid.h.  libc only. */
#include "common/fleetid.h"

#include <string.h>

#define RAND_MIN_LEN 16
#define RAND_MAX_LEN 64
#define KIND_MAX_LEN 8

static int alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int sandlot__node_id_valid(const char *s, size_t len)
{
	if (len == 0 || len > SANDLOT_NODE_ID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!alnum(s[i]))
			return 0;
	return 1;
}

static int rand_ok(const char *s, size_t len)
{
	if (len < RAND_MIN_LEN || len > RAND_MAX_LEN)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!alnum(s[i]))
			return 0;
	return 1;
}

int sandlot__id_node(const char *id, size_t len, char node[SANDLOT_NODE_ID_MAX + 1])
{
	node[0] = '\0';
	size_t k = 0;
	while (k < len && k <= KIND_MAX_LEN && id[k] >= 'a' && id[k] <= 'z')
		k++;
	if (k == 0 || k > KIND_MAX_LEN || k >= len || id[k] != '-')
		return -1;
	const char *rest = id + k + 1;
	size_t rlen = len - k - 1;
	const char *dash = memchr(rest, '-', rlen);
	if (!dash)
		return rand_ok(rest, rlen) ? 0 : -1;
	size_t nlen = (size_t)(dash - rest);
	if (!sandlot__node_id_valid(rest, nlen) || !rand_ok(dash + 1, rlen - nlen - 1))
		return -1;
	memcpy(node, rest, nlen);
	node[nlen] = '\0';
	return 1;
}
