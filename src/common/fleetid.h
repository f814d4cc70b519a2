/* The node in a sandbox id (docs/fleet.md).
 *
 * A daemon started with --node-id NODE makes ids of the shape
 * KIND-NODE-RAND ("sb-n1-abc…", "mcp-n1-…"): KIND is lowercase letters,
 * NODE 1 to SANDLOT_NODE_ID_MAX characters of [a-z0-9], RAND 16 to 64 of
 * [a-z0-9].  A single-node daemon makes KIND-RAND, which names no node.
 * Ids come from clients: this is a parser of untrusted bytes (fuzzed:
 * tests/fuzz, target fleetid).
 */
#ifndef SANDLOT_COMMON_FLEETID_H
#define SANDLOT_COMMON_FLEETID_H

#include <stddef.h>

#define SANDLOT_NODE_ID_MAX 16

/* Whether `s` (len bytes, no NUL needed) is a valid node id. */
int sandlot__node_id_valid(const char *s, size_t len);

/* The node of id (len bytes).  Returns 1 and copies the node, NUL-ended,
 * into node when the id has one; 0 for a well-formed single-node id (node
 * set to ""); -1 when id is neither shape (node set to ""). */
int sandlot__id_node(const char *id, size_t len, char node[SANDLOT_NODE_ID_MAX + 1]);

#endif
