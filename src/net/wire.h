/* The three parsers of untrusted bytes the egress engine needs, written by
 * hand because no Debian library does exactly this (docs/network.md):
 *
 *   - a DNS query (one question) and the replies built for it;
 *   - the server name (SNI) of a TLS ClientHello, reassembled across
 *     records and TCP segments;
 *   - the Host of an HTTP/1.x request head.
 *
 * libc only, no allocation, no I/O: each function looks at a buffer the
 * caller owns and either finishes, asks for more bytes, or refuses.  Every
 * entry point is reachable from a fuzz target in tests/fuzz, and the unit
 * suite replays their seed corpora.
 *
 * Names handed out are normalised: lowercase ASCII, no trailing dot, 1 to
 * 253 characters in labels of 1 to 63 of [a-z0-9-_].  Anything else (an
 * IP literal, UTF-8, spaces, empty labels) is refused by the parser, so
 * the policy only ever compares clean names.
 */
#ifndef SANDLOT_NET_WIRE_H
#define SANDLOT_NET_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define SL_NAME_MAX 253

/* ---- host names ----------------------------------------------------------- */

enum sl_name_status {
	SL_NAME_OK = 0,
	SL_NAME_BAD = -1,        /* empty, too long, bad characters or labels */
	SL_NAME_IP_LITERAL = -2, /* dotted digits: an IPv4 address, not a name */
};

/* Normalise the len bytes at in (one trailing dot allowed) into out
 * (NUL-terminated, lowercase).  Returns an sl_name_status; out is an empty
 * string on failure. */
int sl_name_normalize(const char *in, size_t len, char out[SL_NAME_MAX + 1]);

/* ---- DNS -------------------------------------------------------------------- */

#define SL_DNS_HEADER 12
#define SL_DNS_UDP_MAX 512       /* we never answer more than this: no EDNS, no TC */
#define SL_DNS_MAX_ADDRS 8       /* A records per answer */

enum { SL_DNS_TYPE_A = 1, SL_DNS_TYPE_AAAA = 28, SL_DNS_TYPE_SVCB = 64, SL_DNS_TYPE_HTTPS = 65 };
enum {
	SL_DNS_RCODE_NOERROR = 0,
	SL_DNS_RCODE_FORMERR = 1,
	SL_DNS_RCODE_SERVFAIL = 2,
	SL_DNS_RCODE_NXDOMAIN = 3,
	SL_DNS_RCODE_NOTIMP = 4,
	SL_DNS_RCODE_REFUSED = 5,
};

enum sl_dns_status {
	SL_DNS_OK = 0,       /* a well-formed standard query with one question */
	SL_DNS_ERROR = -1,   /* readable header, bad query: answer with q->rcode */
	SL_DNS_DROP = -2,    /* not worth an answer: too short, or a response */
};

struct sl_dns_query {
	uint16_t id;
	uint16_t flags;       /* as received */
	uint16_t qtype, qclass;
	uint8_t rcode;        /* with SL_DNS_ERROR: FORMERR, NOTIMP or REFUSED */
	int name_status;      /* sl_name_status of the question's name */
	char name[SL_NAME_MAX + 1]; /* normalised (empty unless name_status is OK) */
	const uint8_t *question;    /* the question section as received (inside msg) */
	size_t question_len;        /* 0 when it could not be read */
};

/* Parse a query message.  Names must be uncompressed (no pointers: a query
 * has nothing to point at), at most 255 bytes on the wire.  A name that is
 * well-formed on the wire but not a host name (SL_NAME_BAD, IP literal)
 * still parses (SL_DNS_OK) with name_status telling why: the caller answers
 * it like any name the policy does not allow. */
int sl_dns_parse_query(const uint8_t *msg, size_t len, struct sl_dns_query *q);

/* Build the reply to q into out (at least SL_DNS_UDP_MAX bytes): the
 * question echoed byte for byte (case included: some resolvers check it),
 * rcode, and one A record per address (network byte order, at most
 * SL_DNS_MAX_ADDRS) with the given TTL.  With q->question_len == 0 the
 * reply carries only the header.  Returns the length, or 0 if it would not
 * fit. */
size_t sl_dns_build_reply(uint8_t *out, size_t cap, const struct sl_dns_query *q, int rcode,
			  const uint32_t *addrs, size_t naddrs, uint32_t ttl);

/* ---- TLS ClientHello ---------------------------------------------------------- */

/* The most handshake bytes we wait for: post-quantum key shares make
 * ClientHellos of 1.5-2 KiB common; 64 KiB is the ceiling others use. */
#define SL_TLS_MAX_HANDSHAKE (64u * 1024)
/* ... and the most bytes of records that can carry it (a header per
 * record; a sender could use 1-byte records, which we refuse past this). */
#define SL_TLS_MAX_BUFFER (SL_TLS_MAX_HANDSHAKE + 16u * 1024)

enum sl_sni_status {
	SL_SNI_FOUND = 1,        /* name filled in */
	SL_SNI_NEED_MORE = 0,    /* a valid prefix: read more */
	SL_SNI_NONE = -1,        /* a complete ClientHello without server_name */
	SL_SNI_BAD = -2,         /* not a TLS ClientHello, or malformed */
	SL_SNI_TOO_BIG = -3,     /* the handshake would exceed the limits above */
	SL_SNI_BAD_NAME = -4,    /* a server_name that is not a host name */
	SL_SNI_IP_LITERAL = -5,  /* a server_name that is an IPv4 address */
};

/* Find the SNI in the first len bytes a client sent.  The ClientHello may
 * be split over several handshake records; scratch (SL_TLS_MAX_HANDSHAKE
 * bytes) receives the reassembled handshake.  Returns an sl_sni_status. */
int sl_tls_sni(const uint8_t *buf, size_t len, uint8_t *scratch, char name[SL_NAME_MAX + 1]);

/* ---- HTTP/1.x request head ------------------------------------------------------ */

#define SL_HTTP_MAX_HEAD (16u * 1024)

enum sl_http_status {
	SL_HTTP_FOUND = 1,
	SL_HTTP_NEED_MORE = 0,
	SL_HTTP_BAD = -1,          /* not an HTTP/1.x request head, or malformed */
	SL_HTTP_NO_HOST = -2,      /* no Host header (HTTP/1.0 without one) */
	SL_HTTP_TOO_BIG = -3,      /* no end of head within SL_HTTP_MAX_HEAD */
	SL_HTTP_CONNECT = -4,      /* a CONNECT request: we are not a proxy */
	SL_HTTP_MISMATCH = -5,     /* absolute-form target naming another host */
	SL_HTTP_BAD_NAME = -6,
	SL_HTTP_IP_LITERAL = -7,
};

/* The host a request head addresses: its Host header (port stripped), which
 * an absolute-form request target must agree with.  Exactly one Host header;
 * obsolete line folding and bare CR are refused (they are how requests are
 * smuggled past a parser that reads them differently from the server).
 * Returns an sl_http_status; *head_len is the length of the head including
 * its blank line when the status is FOUND. */
int sl_http_host(const uint8_t *buf, size_t len, char name[SL_NAME_MAX + 1], size_t *head_len);

#endif
