/* Fuzz entry point for sandbox ids (src/common/sbid.c), which sandlotd
 * parses from request paths, hosts and its own data directory.
 *
 * Oracle: the two shapes written out the plain way.  The input is an id
 * exactly when it is 29 bytes of "sb-" + 26 of [a-z2-7], or "sb-" + 1 to 8
 * of [a-z0-9] + "-" + the rest of [a-z2-7]; the node reported is then the
 * part between the dashes ("" for the first shape).  Ids made with a node
 * set from the input (when it is a node id) parse back to that node. */
#include <stdlib.h>
#include <string.h>

#include "common/sbid.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static int b32(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= '2' && c <= '7');
}

static int node_char(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int want = 0;
	size_t node_len = 0;
	if (size == 29 && memcmp(data, "sb-", 3) == 0) {
		int all_b32 = 1;
		for (size_t i = 3; i < size; i++)
			all_b32 &= b32(data[i]);
		if (all_b32) {
			want = 1;
		} else {
			size_t i = 3;
			while (i < size && i < 3 + 9 && node_char(data[i]))
				i++;
			node_len = i - 3;
			if (node_len >= 1 && node_len <= 8 && i < size && data[i] == '-') {
				want = 1;
				for (size_t j = i + 1; j < size; j++)
					want &= b32(data[j]);
			}
			if (!want)
				node_len = 0;
		}
	}
	char node[SANDLOT_NODE_ID_MAX + 1];
	memset(node, 'x', sizeof(node));
	int got = sandlot__sbid_parse((const char *)data, size, node);
	check(got == want);
	if (got)
		check(strlen(node) == node_len && memcmp(node, data + 3, node_len) == 0);

	/* The input's first bytes as a node id: ids made with it parse back. */
	size_t n = size < 8 ? size : 8;
	int ok = n > 0 && sandlot__node_id_ok((const char *)data, n);
	int want_ok = n > 0;
	for (size_t i = 0; i < n; i++)
		want_ok &= node_char(data[i]);
	check(ok == want_ok);
	if (ok) {
		char set[9], id[32];
		memcpy(set, data, n);
		set[n] = '\0';
		check(sandlot__node_id_set(set) == 0);
		sandlot__sbid_new(id);
		check(strlen(id) == SANDLOT_ID_LEN);
		check(sandlot__sbid_parse(id, strlen(id), node) && strcmp(node, set) == 0);
		check(sandlot__node_id_set(NULL) == 0);
		sandlot__sbid_new(id);
		check(sandlot__sbid_parse(id, strlen(id), node) && node[0] == '\0');
	}
	return 0;
}
