/* Sandbox ids, with or without the node that made them (issue 16, the
 * fleet; docs/fleet.md).
 *
 * Two shapes, both exactly SANDLOT_ID_LEN (29) characters, so that every
 * id buffer stays char[32] and the id can stay the sandbox's cgroup name:
 *
 *   single node   "sb-" + 26 of [a-z2-7]                 (130 random bits)
 *   with a node   "sb-" + NODE + "-" + (25 - |NODE|) of [a-z2-7]
 *                 NODE = 1 to 8 of [a-z0-9]               (>= 85 random bits)
 *
 * A proxy routes a call by the NODE between the first and second '-';
 * an id of the first shape has one '-' only.  The ids a process makes
 * carry the node set with sandlot__node_id_set() (sandlotd --node-id);
 * ids of both shapes are accepted everywhere, whatever the node. */
#ifndef SANDLOT_COMMON_SBID_H
#define SANDLOT_COMMON_SBID_H

#include <stddef.h>

#define SANDLOT_ID_LEN 29
#define SANDLOT_NODE_ID_MAX 8

/* Whether node (len bytes) can be a node id: 1 to 8 of [a-z0-9]. */
int sandlot__node_id_ok(const char *node, size_t len);

/* The node this process puts in the ids it makes from now on, or NULL for
 * single-node ids.  -1 (EINVAL) if node is not a node id; call it before
 * the first id is made (it is read without a lock). */
int sandlot__node_id_set(const char *node);
/* The node set with sandlot__node_id_set(), or NULL. */
const char *sandlot__node_id(void);

/* Whether the len bytes at id are a sandbox id of either shape.  When it
 * is one and node is not NULL, node gets the id's node id (NUL-terminated,
 * "" for a single-node id).  Bytes from requests: fuzzed (fuzz_sbid.c). */
int sandlot__sbid_parse(const char *id, size_t len, char node[SANDLOT_NODE_ID_MAX + 1]);

/* A new sandbox id with this process's node (buf: at least 32 bytes). */
void sandlot__sbid_new(char *buf);

/* An id of another kind that a proxy routes by its node too, e.g. an MCP
 * session id: prefix + NODE + "-" + 26 random characters of [a-z2-7] (all
 * 130 bits: such ids are credentials), or prefix + 26 of them without a
 * node.  buf must hold strlen(prefix) + 36 bytes. */
void sandlot__node_new_id(const char *prefix, char *buf);

/* What an invalid sandbox id is answered with, after "invalid sandbox id
 * \"...\": ". */
#define SANDLOT_SBID_EXPECTED \
	"expected \"sb-\" and 26 characters of [a-z2-7], or \"sb-NODE-\" and random " \
	"characters of [a-z2-7], 29 characters in all (NODE: 1 to 8 of [a-z0-9])"

#endif
