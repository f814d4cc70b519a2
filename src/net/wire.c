/* DNS query, TLS ClientHello SNI and HTTP Host parsers (see wire.h).
 *
 * Every read is bounds-checked against the length in hand before it is
 * made; lengths taken from the input are checked against what remains
 * before they are used.  The reader helpers below return -1 rather than
 * read past the end, and callers treat that as "malformed" or "need more"
 * depending on whether the input could still grow.
 */
#include "net/wire.h"

#include <string.h>

/* ---- host names ----------------------------------------------------------- */

static int name_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int sl_name_normalize(const char *in, size_t len, char out[SL_NAME_MAX + 1])
{
	out[0] = '\0';
	if (len > 0 && in[len - 1] == '.')
		len--;
	if (len == 0 || len > SL_NAME_MAX)
		return SL_NAME_BAD;
	size_t label = 0;
	int all_digits = 1;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c >= 'A' && c <= 'Z')
			c = (unsigned char)(c - 'A' + 'a');
		if (c == '.') {
			if (label == 0)
				goto bad;
			label = 0;
		} else {
			if (!name_char(c) || ++label > 63)
				goto bad;
			if (c < '0' || c > '9')
				all_digits = 0;
		}
		out[i] = (char)c;
	}
	if (label == 0)
		goto bad;
	out[len] = '\0';
	/* "10.0.0.1", but also "2130706433": resolvers and libc turn dotted or
	 * plain digits into addresses, so no such string is ever a name. */
	if (all_digits) {
		out[0] = '\0';
		return SL_NAME_IP_LITERAL;
	}
	return SL_NAME_OK;
bad:
	out[0] = '\0';
	return SL_NAME_BAD;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get24(const uint8_t *p)
{
	return ((uint32_t)p[0] << 16) | ((uint32_t)p[1] << 8) | p[2];
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* ---- DNS -------------------------------------------------------------------- */

int sl_dns_parse_query(const uint8_t *msg, size_t len, struct sl_dns_query *q)
{
	memset(q, 0, sizeof(*q));
	q->name_status = SL_NAME_BAD;
	if (len < SL_DNS_HEADER)
		return SL_DNS_DROP;
	q->id = get16(msg);
	q->flags = get16(msg + 2);
	if (q->flags & 0x8000) /* QR: a response; answering it could loop */
		return SL_DNS_DROP;
	unsigned opcode = (q->flags >> 11) & 0xf;
	uint16_t qd = get16(msg + 4), an = get16(msg + 6), ns = get16(msg + 8), ar = get16(msg + 10);
	if (opcode != 0) {
		q->rcode = SL_DNS_RCODE_NOTIMP;
		return SL_DNS_ERROR;
	}
	/* One question, nothing in answer or authority; the additional section
	 * may hold an EDNS OPT record, which we do not need to read. */
	if (qd != 1 || an != 0 || ns != 0 || ar > 1) {
		q->rcode = SL_DNS_RCODE_FORMERR;
		return SL_DNS_ERROR;
	}
	size_t off = SL_DNS_HEADER;
	char text[256];
	size_t tl = 0;
	for (;;) {
		if (off >= len)
			goto formerr;
		uint8_t l = msg[off++];
		if (l == 0)
			break;
		if (l > 63) /* compression pointers (0xc0) and the reserved label types */
			goto formerr;
		/* At most 255 bytes on the wire, the terminating zero included
		 * (RFC 1035 3.1): text of at most 253. */
		if (off + l > len || (off - 1 - SL_DNS_HEADER) + 1 + l + 1 > 255)
			goto formerr;
		if (tl)
			text[tl++] = '.';
		/* A label may hold any byte on the wire; a '.' inside one would
		 * read as two labels once the name is text, so refuse it there. */
		for (size_t i = 0; i < l; i++) {
			uint8_t c = msg[off + i];
			text[tl++] = (c == '.' || c == 0) ? '\x01' : (char)c;
		}
		off += l;
	}
	if (off + 4 > len)
		goto formerr;
	q->qtype = get16(msg + off);
	q->qclass = get16(msg + off + 2);
	off += 4;
	q->question = msg + SL_DNS_HEADER;
	q->question_len = off - SL_DNS_HEADER;
	q->name_status = tl ? sl_name_normalize(text, tl, q->name) : SL_NAME_BAD;
	return SL_DNS_OK;
formerr:
	q->rcode = SL_DNS_RCODE_FORMERR;
	return SL_DNS_ERROR;
}

size_t sl_dns_build_reply(uint8_t *out, size_t cap, const struct sl_dns_query *q, int rcode,
			  const uint32_t *addrs, size_t naddrs, uint32_t ttl)
{
	if (naddrs > SL_DNS_MAX_ADDRS)
		naddrs = SL_DNS_MAX_ADDRS;
	if (!q->question_len)
		naddrs = 0;
	size_t need = SL_DNS_HEADER + q->question_len + naddrs * 16;
	if (need > cap || need > SL_DNS_UDP_MAX)
		return 0;
	put16(out, q->id);
	/* QR, opcode 0, RD as asked, RA, the rcode. */
	uint16_t flags = (uint16_t)(0x8000 | (q->flags & 0x0100) | 0x0080 | (rcode & 0xf));
	put16(out + 2, flags);
	put16(out + 4, q->question_len ? 1 : 0);
	put16(out + 6, (uint16_t)naddrs);
	put16(out + 8, 0);
	put16(out + 10, 0);
	size_t off = SL_DNS_HEADER;
	if (q->question_len) {
		memcpy(out + off, q->question, q->question_len);
		off += q->question_len;
	}
	for (size_t i = 0; i < naddrs; i++) {
		put16(out + off, 0xc000 | SL_DNS_HEADER); /* the question's name */
		put16(out + off + 2, SL_DNS_TYPE_A);
		put16(out + off + 4, 1); /* IN */
		out[off + 6] = (uint8_t)(ttl >> 24);
		out[off + 7] = (uint8_t)(ttl >> 16);
		out[off + 8] = (uint8_t)(ttl >> 8);
		out[off + 9] = (uint8_t)ttl;
		put16(out + off + 10, 4);
		memcpy(out + off + 12, &addrs[i], 4);
		off += 16;
	}
	return off;
}

/* ---- TLS ClientHello ---------------------------------------------------------- */

/* Gather up to `want` handshake bytes from the records in buf into
 * scratch.  Returns the number gathered (>= 0; fewer than want when the
 * records so far hold no more), or an sl_sni_status < 0. */
static long gather_handshake(const uint8_t *buf, size_t len, uint8_t *scratch, size_t want)
{
	size_t off = 0, got = 0;
	while (got < want) {
		if (len - off < 5)
			return off >= SL_TLS_MAX_BUFFER ? SL_SNI_TOO_BIG : (long)got;
		/* ContentType handshake(22), legacy_version 3.x, length <= 2^14. */
		if (buf[off] != 22 || buf[off + 1] != 3)
			return SL_SNI_BAD;
		size_t rl = get16(buf + off + 3);
		if (rl == 0 || rl > 16384)
			return SL_SNI_BAD;
		if (off + 5 + rl > SL_TLS_MAX_BUFFER)
			return SL_SNI_TOO_BIG;
		size_t avail = len - off - 5 < rl ? len - off - 5 : rl;
		size_t take = avail < want - got ? avail : want - got;
		memcpy(scratch + got, buf + off + 5, take);
		got += take;
		if (avail < rl)
			return (long)got; /* the rest of this record is yet to come */
		off += 5 + rl;
	}
	return (long)got;
}

/* The server_name extension's first host_name entry. */
static int parse_server_name(const uint8_t *p, size_t n, char name[SL_NAME_MAX + 1])
{
	if (n < 2 || get16(p) != n - 2)
		return SL_SNI_BAD;
	size_t off = 2;
	while (off < n) {
		if (n - off < 3)
			return SL_SNI_BAD;
		uint8_t type = p[off];
		size_t l = get16(p + off + 1);
		off += 3;
		if (l > n - off)
			return SL_SNI_BAD;
		if (type == 0) { /* host_name */
			int st = sl_name_normalize((const char *)p + off, l, name);
			if (st == SL_NAME_IP_LITERAL)
				return SL_SNI_IP_LITERAL;
			return st == SL_NAME_OK ? SL_SNI_FOUND : SL_SNI_BAD_NAME;
		}
		off += l;
	}
	return SL_SNI_NONE;
}

static int parse_client_hello(const uint8_t *h, size_t n, char name[SL_NAME_MAX + 1])
{
	/* legacy_version(2) random(32) */
	size_t off = 34;
	if (n < off + 1)
		return SL_SNI_BAD;
	off += 1 + h[off]; /* legacy_session_id <0..32> */
	if (h[34] > 32 || n < off + 2)
		return SL_SNI_BAD;
	size_t cs = get16(h + off); /* cipher_suites <2..2^16-2> */
	if (cs < 2 || cs % 2 || n - off - 2 < cs)
		return SL_SNI_BAD;
	off += 2 + cs;
	if (n < off + 1)
		return SL_SNI_BAD;
	size_t cm = h[off]; /* legacy_compression_methods <1..2^8-1> */
	if (cm < 1 || n - off - 1 < cm)
		return SL_SNI_BAD;
	off += 1 + cm;
	if (off == n)
		return SL_SNI_NONE; /* no extensions at all (TLS 1.2 allows it) */
	if (n - off < 2)
		return SL_SNI_BAD;
	size_t el = get16(h + off);
	off += 2;
	if (el != n - off)
		return SL_SNI_BAD;
	int found = SL_SNI_NONE, seen_sni = 0;
	while (off < n) {
		if (n - off < 4)
			return SL_SNI_BAD;
		uint16_t type = get16(h + off);
		size_t l = get16(h + off + 2);
		off += 4;
		if (l > n - off)
			return SL_SNI_BAD;
		if (type == 0) {
			/* Two server_name extensions: which one would the server
			 * read?  Refuse rather than guess. */
			if (seen_sni++)
				return SL_SNI_BAD;
			found = parse_server_name(h + off, l, name);
			if (found < 0 && found != SL_SNI_NONE)
				return found;
		}
		off += l;
	}
	return found;
}

int sl_tls_sni(const uint8_t *buf, size_t len, uint8_t *scratch, char name[SL_NAME_MAX + 1])
{
	name[0] = '\0';
	if (len == 0)
		return SL_SNI_NEED_MORE;
	if (buf[0] != 22)
		return SL_SNI_BAD;
	/* The handshake header first, to learn how much to wait for. */
	long got = gather_handshake(buf, len, scratch, 4);
	if (got < 0)
		return (int)got;
	if (got < 4)
		return SL_SNI_NEED_MORE;
	if (scratch[0] != 1) /* client_hello */
		return SL_SNI_BAD;
	size_t hl = get24(scratch + 1);
	if (hl + 4 > SL_TLS_MAX_HANDSHAKE)
		return SL_SNI_TOO_BIG;
	got = gather_handshake(buf, len, scratch, hl + 4);
	if (got < 0)
		return (int)got;
	if ((size_t)got < hl + 4)
		return SL_SNI_NEED_MORE;
	int st = parse_client_hello(scratch + 4, hl, name);
	if (st != SL_SNI_FOUND)
		name[0] = '\0';
	return st;
}

/* ---- HTTP/1.x request head ------------------------------------------------------ */

static int tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int ieq(const uint8_t *a, size_t n, const char *b)
{
	if (strlen(b) != n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = a[i];
		if (c >= 'A' && c <= 'Z')
			c = (unsigned char)(c - 'A' + 'a');
		if (c != (unsigned char)b[i])
			return 0;
	}
	return 1;
}

/* The host of "host[:port]" (authority without userinfo).  An IPv6
 * literal ("[...]") is an address, not a name. */
static int authority_host(const uint8_t *p, size_t n, char name[SL_NAME_MAX + 1])
{
	while (n && (p[0] == ' ' || p[0] == '\t'))
		p++, n--;
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	if (n && p[0] == '[')
		return SL_HTTP_IP_LITERAL;
	const uint8_t *colon = memchr(p, ':', n);
	if (colon) {
		size_t pl = n - (size_t)(colon - p) - 1;
		if (pl == 0 || pl > 5)
			return SL_HTTP_BAD;
		for (size_t i = 0; i < pl; i++)
			if (colon[1 + i] < '0' || colon[1 + i] > '9')
				return SL_HTTP_BAD;
		n = (size_t)(colon - p);
	}
	int st = sl_name_normalize((const char *)p, n, name);
	if (st == SL_NAME_IP_LITERAL)
		return SL_HTTP_IP_LITERAL;
	return st == SL_NAME_OK ? SL_HTTP_FOUND : SL_HTTP_BAD_NAME;
}

int sl_http_host(const uint8_t *buf, size_t len, char name[SL_NAME_MAX + 1], size_t *head_len)
{
	name[0] = '\0';
	*head_len = 0;
	size_t max = len < SL_HTTP_MAX_HEAD ? len : SL_HTTP_MAX_HEAD;
	/* Request line: method SP target SP HTTP/1.x CRLF. */
	size_t i = 0;
	while (i < max && tchar(buf[i]))
		i++;
	if (i < max && (i == 0 || buf[i] != ' '))
		return SL_HTTP_BAD;
	if (i == max)
		return len >= SL_HTTP_MAX_HEAD ? SL_HTTP_TOO_BIG : SL_HTTP_NEED_MORE;
	size_t mlen = i;
	int is_connect = mlen == 7 && memcmp(buf, "CONNECT", 7) == 0; /* methods are case-sensitive */
	size_t t0 = ++i;
	while (i < max && buf[i] > ' ' && buf[i] < 0x7f)
		i++;
	if (i == max)
		return len >= SL_HTTP_MAX_HEAD ? SL_HTTP_TOO_BIG : SL_HTTP_NEED_MORE;
	if (buf[i] != ' ' || i == t0)
		return SL_HTTP_BAD;
	size_t t1 = i++;
	static const char ver[] = "HTTP/1.";
	for (size_t k = 0; k < 7; k++, i++) {
		if (i == max)
			return len >= SL_HTTP_MAX_HEAD ? SL_HTTP_TOO_BIG : SL_HTTP_NEED_MORE;
		if (buf[i] != (uint8_t)ver[k])
			return SL_HTTP_BAD;
	}
	if (i + 3 > max)
		return len >= SL_HTTP_MAX_HEAD ? SL_HTTP_TOO_BIG : SL_HTTP_NEED_MORE;
	if ((buf[i] != '0' && buf[i] != '1') || buf[i + 1] != '\r' || buf[i + 2] != '\n')
		return SL_HTTP_BAD;
	i += 3;
	if (is_connect)
		return SL_HTTP_CONNECT;

	/* Header fields until the empty line.  Only CRLF line ends: a bare LF
	 * or CR is where two parsers start to disagree. */
	int hosts = 0;
	char host[SL_NAME_MAX + 1] = "";
	int host_st = SL_HTTP_NO_HOST;
	for (;;) {
		if (i + 2 > max)
			return len >= SL_HTTP_MAX_HEAD ? SL_HTTP_TOO_BIG : SL_HTTP_NEED_MORE;
		if (buf[i] == '\r') {
			if (buf[i + 1] != '\n')
				return SL_HTTP_BAD;
			i += 2;
			break;
		}
		if (buf[i] == ' ' || buf[i] == '\t') /* obs-fold */
			return SL_HTTP_BAD;
		size_t n0 = i;
		while (i < max && tchar(buf[i]))
			i++;
		if (i == max)
			return len >= SL_HTTP_MAX_HEAD ? SL_HTTP_TOO_BIG : SL_HTTP_NEED_MORE;
		if (buf[i] != ':' || i == n0)
			return SL_HTTP_BAD;
		size_t nlen = i - n0, v0 = ++i;
		while (i < max && buf[i] != '\r' && buf[i] != '\n') {
			if (buf[i] < ' ' && buf[i] != '\t')
				return SL_HTTP_BAD;
			i++;
		}
		if (i + 2 > max)
			return len >= SL_HTTP_MAX_HEAD ? SL_HTTP_TOO_BIG : SL_HTTP_NEED_MORE;
		if (buf[i] != '\r' || buf[i + 1] != '\n')
			return SL_HTTP_BAD;
		if (ieq(buf + n0, nlen, "host")) {
			if (hosts++)
				return SL_HTTP_BAD;
			host_st = authority_host(buf + v0, i - v0, host);
		}
		i += 2;
	}
	if (host_st != SL_HTTP_FOUND)
		return host_st;
	/* An absolute-form target ("http://other/") is what a proxy obeys; a
	 * server may too.  It must name the same host as the Host header. */
	const uint8_t *t = buf + t0;
	size_t tl = t1 - t0;
	if (tl && t[0] != '/' && !(tl == 1 && t[0] == '*')) {
		size_t skip = 0;
		if (tl > 7 && ieq(t, 7, "http://"))
			skip = 7;
		else if (tl > 8 && ieq(t, 8, "https://"))
			skip = 8;
		else
			return SL_HTTP_BAD;
		size_t a0 = skip, a1 = skip;
		while (a1 < tl && t[a1] != '/' && t[a1] != '?' && t[a1] != '#')
			a1++;
		if (memchr(t + a0, '@', a1 - a0)) /* userinfo: an old confusion trick */
			return SL_HTTP_BAD;
		char other[SL_NAME_MAX + 1];
		int st = authority_host(t + a0, a1 - a0, other);
		if (st != SL_HTTP_FOUND)
			return st == SL_HTTP_IP_LITERAL ? SL_HTTP_MISMATCH : st;
		if (strcmp(other, host) != 0)
			return SL_HTTP_MISMATCH;
	}
	memcpy(name, host, strlen(host) + 1);
	*head_len = i;
	return SL_HTTP_FOUND;
}
