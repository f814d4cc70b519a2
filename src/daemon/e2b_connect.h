/* Connect RPC with the JSON codec, as E2B's SDKs speak it to envd
 * (https://connectrpc.com/docs/protocol): the wire format only, no HTTP.
 *
 *   unary       POST, Content-Type application/json, the request message
 *               as the whole body; the answer is the response message
 *               (200, application/json) or an error {"code", "message"}
 *               with an HTTP status chosen from the code.
 *   server      POST, Content-Type application/connect+json, the body one
 *   stream      envelope; the answer is 200 application/connect+json, a
 *               sequence of envelopes (flags, big-endian 32-bit length,
 *               JSON) ending with one flagged E2B_ENVELOPE_END whose JSON
 *               is {} or {"error": {"code", "message"}}.
 *
 * Messages are protobuf's JSON mapping: lowerCamelCase names (the proto
 * names accepted too), bytes as base64, 64-bit integers as strings, enums
 * as their names.  libc and jansson only; every decoder here is reachable
 * from tests/fuzz/fuzz_connect.c.
 */
#ifndef SANDLOT_DAEMON_E2B_CONNECT_H
#define SANDLOT_DAEMON_E2B_CONNECT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define E2B_ENVELOPE_HEADER 5
#define E2B_ENVELOPE_COMPRESSED 0x01
#define E2B_ENVELOPE_END 0x02
/* The largest request message sandlotd takes (a SendInput of stdin is the
 * biggest the SDKs send). */
#define E2B_CONNECT_MAX_MESSAGE (4u << 20)

#define E2B_CONNECT_STREAM_TYPE "application/connect+json"

/* One envelope of buf[0..len): 1 with its flags and payload (pointing into
 * buf) and *used the bytes it took, 0 if buf holds only part of one (read
 * more), -1 if it is malformed (a length over max): msg says why. */
int e2b_envelope_next(const uint8_t *buf, size_t len, uint32_t max, uint8_t *flags,
		      const uint8_t **payload, uint32_t *plen, size_t *used, char *msg,
		      size_t msglen);

/* The request message of a whole request body, as a JSON object (a new
 * reference).  stream: the body is one envelope (a server-streaming call),
 * else bare JSON (unary).  NULL with msg set (for an invalid_argument
 * error) when the body is not one uncompressed message holding a JSON
 * object. */
json_t *e2b_connect_request(int stream, const void *body, size_t len, char *msg, size_t msglen);

/* Envelope a message: a new buffer of *len bytes (the caller frees it), or
 * NULL when out of memory.  msg is not stolen. */
char *e2b_connect_frame(json_t *msg, uint8_t flags, size_t *len);
/* The end-of-stream envelope: {} when code is NULL, else
 * {"error": {"code", "message"}}.  As e2b_connect_frame(). */
char *e2b_connect_end_frame(const char *code, const char *message, size_t *len);
/* {"code", "message"} for a unary error. */
json_t *e2b_connect_error_body(const char *code, const char *message);
/* The HTTP status of a unary error with this code (Connect's table);
 * 500 for a code it does not know. */
int e2b_connect_http_status(const char *code);
/* The Connect code for an errno-style status of a sandlot_error_t. */
const char *e2b_connect_code_from_errno(int status);

/* ---- protobuf JSON fields ------------------------------------------------ */

/* obj[camel], else obj[snake] (either may be NULL); NULL when obj is not
 * an object, the field is absent or JSON null. */
json_t *e2b_pj_get(json_t *obj, const char *camel, const char *snake);
/* A string field: NULL when absent; *bad = 1 when present but not a
 * string. */
const char *e2b_pj_string(json_t *obj, const char *camel, const char *snake, int *bad);
/* An unsigned 32-bit field (a number, or a string of digits): 0 with *out
 * (0 when absent), -1 when it is something else or out of range. */
int e2b_pj_uint32(json_t *obj, const char *camel, const char *snake, uint32_t *out);
/* A bool field: 0 with *out (dflt when absent), -1 when not a bool. */
int e2b_pj_bool(json_t *obj, const char *camel, const char *snake, int dflt, int *out);
/* A bytes value (base64, standard or URL-safe, padding optional): a new
 * buffer of *len bytes (the caller frees it; never NULL for a valid empty
 * value), or NULL (not a string, or not base64). */
unsigned char *e2b_pj_bytes(json_t *v, size_t *len);

#endif
