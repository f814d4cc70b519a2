/* The egress engine's pure parts: host names, the DNS, TLS and HTTP
 * parsers (src/net/wire.c), and policies (src/net/policy.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/error.h"
#include "linux/netns.h"
#include "net/policy.h"
#include "net/wire.h"
#include "tap.h"

/* ---- names ---------------------------------------------------------------------- */

static void name_is(const char *in, int want, const char *out)
{
	char buf[SL_NAME_MAX + 1];
	int st = sl_name_normalize(in, strlen(in), buf);
	if (st != want || strcmp(buf, out) != 0) {
		printf("#   normalize(\"%s\") = %d \"%s\", want %d \"%s\"\n", in, st, buf, want, out);
		tap_case_failed = 1;
	}
}

static void test_names(void)
{
	name_is("PyPI.org", SL_NAME_OK, "pypi.org");
	name_is("pypi.org.", SL_NAME_OK, "pypi.org");
	name_is("_dmarc.example-1.com", SL_NAME_OK, "_dmarc.example-1.com");
	name_is("localhost", SL_NAME_OK, "localhost");
	name_is("1.2.3.4", SL_NAME_IP_LITERAL, "");
	name_is("2130706433", SL_NAME_IP_LITERAL, "");
	name_is("0x7f.1", SL_NAME_OK, "0x7f.1"); /* a name; its addresses are checked */
	name_is("", SL_NAME_BAD, "");
	name_is(".", SL_NAME_BAD, "");
	name_is("a..b", SL_NAME_BAD, "");
	name_is(".a", SL_NAME_BAD, "");
	name_is("a.b..", SL_NAME_BAD, "");
	name_is("exa mple.com", SL_NAME_BAD, "");
	name_is("b\xc3\xbc" "cher.de", SL_NAME_BAD, "");
	name_is("*.x.com", SL_NAME_BAD, "");
	char l64[70], long254[260];
	memset(l64, 'a', 64);
	l64[64] = '\0';
	name_is(l64, SL_NAME_BAD, "");
	l64[63] = '\0';
	name_is(l64, SL_NAME_OK, l64);
	/* 253 characters is the most; 254 is too many. */
	memset(long254, 'a', 254);
	for (int i = 63; i < 254; i += 64)
		long254[i] = '.';
	long254[253] = '\0';
	char want[260];
	memcpy(want, long254, 254);
	name_is(long254, SL_NAME_OK, want);
	long254[253] = 'a';
	long254[254] = '\0';
	name_is(long254, SL_NAME_BAD, "");
}

/* ---- DNS -------------------------------------------------------------------------- */

static size_t query(uint8_t *out, const char *name, uint16_t qtype, uint16_t flags)
{
	uint8_t h[12] = { 0xbe, 0xef, (uint8_t)(flags >> 8), (uint8_t)flags, 0, 1, 0, 0, 0, 0, 0, 0 };
	memcpy(out, h, 12);
	size_t n = 12;
	const char *p = name;
	while (*p) {
		size_t l = strcspn(p, ".");
		out[n++] = (uint8_t)l;
		memcpy(out + n, p, l);
		n += l;
		p += l;
		if (*p == '.')
			p++;
	}
	out[n++] = 0;
	out[n++] = (uint8_t)(qtype >> 8);
	out[n++] = (uint8_t)qtype;
	out[n++] = 0;
	out[n++] = 1;
	return n;
}

static void test_dns_parse_and_reply(void)
{
	uint8_t m[512], r[512];
	size_t n = query(m, "Files.PythonHosted.org", SL_DNS_TYPE_A, 0x0100);
	struct sl_dns_query q;
	CHECK_EQ_INT(sl_dns_parse_query(m, n, &q), SL_DNS_OK);
	CHECK_EQ_INT(q.id, 0xbeef);
	CHECK_EQ_INT(q.qtype, SL_DNS_TYPE_A);
	CHECK_EQ_INT(q.qclass, 1);
	CHECK_EQ_INT(q.name_status, SL_NAME_OK);
	CHECK_STR(q.name, "files.pythonhosted.org");
	CHECK_EQ_INT(q.question_len, n - 12);

	uint32_t addrs[2] = { htonl(0xcb007150), htonl(0xcb007151) };
	size_t rl = sl_dns_build_reply(r, sizeof(r), &q, SL_DNS_RCODE_NOERROR, addrs, 2, 42);
	CHECK_EQ_INT(rl, 12 + (n - 12) + 2 * 16);
	CHECK(r[0] == 0xbe && r[1] == 0xef);
	CHECK_EQ_INT(r[2], 0x81);           /* QR, RD */
	CHECK_EQ_INT(r[3], 0x80);           /* RA, NOERROR */
	CHECK_EQ_INT(r[5], 1);              /* one question */
	CHECK_EQ_INT(r[7], 2);              /* two answers */
	CHECK(memcmp(r + 12, m + 12, n - 12) == 0); /* question echoed, case kept */
	const uint8_t *a = r + n;
	CHECK(a[0] == 0xc0 && a[1] == 12);  /* pointer to the question's name */
	CHECK(a[3] == 1 && a[5] == 1);      /* A, IN */
	CHECK_EQ_INT(a[9], 42);             /* TTL */
	CHECK_EQ_INT(a[11], 4);
	CHECK(memcmp(a + 12, &addrs[0], 4) == 0);

	rl = sl_dns_build_reply(r, sizeof(r), &q, SL_DNS_RCODE_NXDOMAIN, NULL, 0, 0);
	CHECK_EQ_INT(rl, n);
	CHECK_EQ_INT(r[3] & 15, SL_DNS_RCODE_NXDOMAIN);
	CHECK_EQ_INT(r[7], 0);
	/* More addresses than fit are cut to SL_DNS_MAX_ADDRS. */
	uint32_t many[20] = { 0 };
	rl = sl_dns_build_reply(r, sizeof(r), &q, 0, many, 20, 1);
	CHECK_EQ_INT(r[7], SL_DNS_MAX_ADDRS);
}

static void test_dns_refusals(void)
{
	uint8_t m[600];
	struct sl_dns_query q;
	size_t n = query(m, "pypi.org", 1, 0x8180); /* a response */
	CHECK_EQ_INT(sl_dns_parse_query(m, n, &q), SL_DNS_DROP);
	CHECK_EQ_INT(sl_dns_parse_query(m, 11, &q), SL_DNS_DROP);
	n = query(m, "pypi.org", 1, 0x1100); /* opcode 2 (status) */
	CHECK_EQ_INT(sl_dns_parse_query(m, n, &q), SL_DNS_ERROR);
	CHECK_EQ_INT(q.rcode, SL_DNS_RCODE_NOTIMP);
	n = query(m, "pypi.org", 1, 0x0100);
	m[5] = 2; /* two questions */
	CHECK_EQ_INT(sl_dns_parse_query(m, n, &q), SL_DNS_ERROR);
	CHECK_EQ_INT(q.rcode, SL_DNS_RCODE_FORMERR);
	m[5] = 1;
	CHECK_EQ_INT(sl_dns_parse_query(m, n - 1, &q), SL_DNS_ERROR); /* cut */
	/* A compression pointer in a query. */
	static const uint8_t ptr[] = { 1, 2, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1 };
	CHECK_EQ_INT(sl_dns_parse_query(ptr, sizeof(ptr), &q), SL_DNS_ERROR);
	/* A '.' inside a label: well-formed wire, not a host name. */
	static const uint8_t dot[] = { 1, 2, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', '.', 'b', 0, 0, 1, 0, 1 };
	CHECK_EQ_INT(sl_dns_parse_query(dot, sizeof(dot), &q), SL_DNS_OK);
	CHECK_EQ_INT(q.name_status, SL_NAME_BAD);
	CHECK_STR(q.name, "");
	n = query(m, "10.0.0.1", 1, 0x0100);
	CHECK_EQ_INT(sl_dns_parse_query(m, n, &q), SL_DNS_OK);
	CHECK_EQ_INT(q.name_status, SL_NAME_IP_LITERAL);
	/* 255 bytes on the wire is the limit. */
	char name[300];
	memset(name, 'a', sizeof(name));
	for (int i = 63; i < 260; i += 64)
		name[i] = '.';
	name[253] = '\0'; /* wire: 255 */
	n = query(m, name, 1, 0x0100);
	CHECK_EQ_INT(sl_dns_parse_query(m, n, &q), SL_DNS_OK);
	CHECK_EQ_INT(q.name_status, SL_NAME_OK);
	name[253] = 'a';
	name[254] = '\0'; /* wire: 256 */
	n = query(m, name, 1, 0x0100);
	CHECK_EQ_INT(sl_dns_parse_query(m, n, &q), SL_DNS_ERROR);
}

/* ---- TLS ---------------------------------------------------------------------------- */

/* A minimal ClientHello with the given extensions, in one record. */
static size_t hello(uint8_t *out, const uint8_t *exts, size_t el)
{
	uint8_t body[2048];
	size_t n = 0;
	body[n++] = 3;
	body[n++] = 3;
	memset(body + n, 0x11, 32);
	n += 32;
	body[n++] = 0;                  /* session id */
	body[n++] = 0;
	body[n++] = 2;
	body[n++] = 0x13;
	body[n++] = 0x01;               /* one cipher suite */
	body[n++] = 1;
	body[n++] = 0;                  /* compression: null */
	body[n++] = (uint8_t)(el >> 8);
	body[n++] = (uint8_t)el;
	memcpy(body + n, exts, el);
	n += el;
	size_t hl = n + 4;
	out[0] = 22;
	out[1] = 3;
	out[2] = 1;
	out[3] = (uint8_t)(hl >> 8);
	out[4] = (uint8_t)hl;
	out[5] = 1;
	out[6] = 0;
	out[7] = (uint8_t)(n >> 8);
	out[8] = (uint8_t)n;
	memcpy(out + 9, body, n);
	return 9 + n;
}

static size_t sni_ext(uint8_t *out, const char *name)
{
	size_t l = strlen(name);
	out[0] = 0;
	out[1] = 0;
	out[2] = (uint8_t)((l + 5) >> 8);
	out[3] = (uint8_t)(l + 5);
	out[4] = (uint8_t)((l + 3) >> 8);
	out[5] = (uint8_t)(l + 3);
	out[6] = 0;
	out[7] = (uint8_t)(l >> 8);
	out[8] = (uint8_t)l;
	memcpy(out + 9, name, l);
	return 9 + l;
}

static uint8_t scratch[SL_TLS_MAX_HANDSHAKE];

static void test_tls_sni(void)
{
	uint8_t ext[600], h[4096];
	char name[SL_NAME_MAX + 1];
	size_t el = sni_ext(ext, "Registry.NPMjs.org");
	size_t n = hello(h, ext, el);
	CHECK_EQ_INT(sl_tls_sni(h, n, scratch, name), SL_SNI_FOUND);
	CHECK_STR(name, "registry.npmjs.org");
	/* Every prefix asks for more. */
	for (size_t k = 0; k < n; k++)
		if (sl_tls_sni(h, k, scratch, name) != SL_SNI_NEED_MORE) {
			printf("#   prefix %zu did not ask for more\n", k);
			tap_case_failed = 1;
			break;
		}
	/* Split into records of 3 handshake bytes each. */
	uint8_t split[8192];
	size_t sn = 0;
	for (size_t i = 5; i < n; i += 3) {
		size_t k = n - i < 3 ? n - i : 3;
		split[sn++] = 22;
		split[sn++] = 3;
		split[sn++] = 3;
		split[sn++] = 0;
		split[sn++] = (uint8_t)k;
		memcpy(split + sn, h + i, k);
		sn += k;
	}
	CHECK_EQ_INT(sl_tls_sni(split, sn, scratch, name), SL_SNI_FOUND);
	CHECK_STR(name, "registry.npmjs.org");
	/* Data after the hello does not matter. */
	memcpy(h + n, "\x14\x03\x03\x00\x01\x01", 6);
	CHECK_EQ_INT(sl_tls_sni(h, n + 6, scratch, name), SL_SNI_FOUND);

	/* No extensions at all. */
	n = hello(h, (const uint8_t *)"", 0);
	CHECK_EQ_INT(sl_tls_sni(h, n, scratch, name), SL_SNI_NONE);
	el = sni_ext(ext, "203.0.113.9");
	n = hello(h, ext, el);
	CHECK_EQ_INT(sl_tls_sni(h, n, scratch, name), SL_SNI_IP_LITERAL);
	el = sni_ext(ext, "a b.com");
	n = hello(h, ext, el);
	CHECK_EQ_INT(sl_tls_sni(h, n, scratch, name), SL_SNI_BAD_NAME);
	/* Two server_name extensions. */
	el = sni_ext(ext, "a.example");
	el += sni_ext(ext + el, "b.example");
	n = hello(h, ext, el);
	CHECK_EQ_INT(sl_tls_sni(h, n, scratch, name), SL_SNI_BAD);
	/* Not a handshake, not a ClientHello, a huge length. */
	CHECK_EQ_INT(sl_tls_sni((const uint8_t *)"GET / HTTP/1.1\r\n", 16, scratch, name), SL_SNI_BAD);
	static const uint8_t sh[] = { 22, 3, 3, 0, 4, 2, 0, 0, 0 };
	CHECK_EQ_INT(sl_tls_sni(sh, sizeof(sh), scratch, name), SL_SNI_BAD);
	static const uint8_t big[] = { 22, 3, 1, 0, 4, 1, 0x01, 0x10, 0x00 };
	CHECK_EQ_INT(sl_tls_sni(big, sizeof(big), scratch, name), SL_SNI_TOO_BIG);
	static const uint8_t zero_rec[] = { 22, 3, 1, 0, 0 };
	CHECK_EQ_INT(sl_tls_sni(zero_rec, sizeof(zero_rec), scratch, name), SL_SNI_BAD);
}

static void test_tls_large_hello(void)
{
	/* A 1.5 KiB extension before the SNI (post-quantum key share sized),
	 * sent as two records. */
	static uint8_t ext[2000], h[4096], two[4200];
	ext[0] = 0x11;
	ext[1] = 0xec;
	ext[2] = 0x06;
	ext[3] = 0x00;
	memset(ext + 4, 0x42, 0x600);
	size_t el = 4 + 0x600;
	el += sni_ext(ext + el, "files.pythonhosted.org");
	size_t n = hello(h, ext, el);
	CHECK(n > 1600);
	char name[SL_NAME_MAX + 1];
	CHECK_EQ_INT(sl_tls_sni(h, n, scratch, name), SL_SNI_FOUND);
	size_t half = (n - 5) / 2;
	memcpy(two, "\x16\x03\x01", 3);
	two[3] = (uint8_t)(half >> 8);
	two[4] = (uint8_t)half;
	memcpy(two + 5, h + 5, half);
	size_t rest = n - 5 - half;
	memcpy(two + 5 + half, "\x16\x03\x01", 3);
	two[8 + half] = (uint8_t)(rest >> 8);
	two[9 + half] = (uint8_t)rest;
	memcpy(two + 10 + half, h + 5 + half, rest);
	CHECK_EQ_INT(sl_tls_sni(two, n + 5, scratch, name), SL_SNI_FOUND);
	CHECK_STR(name, "files.pythonhosted.org");
	CHECK_EQ_INT(sl_tls_sni(two, 5 + half + 3, scratch, name), SL_SNI_NEED_MORE);
}

/* ---- HTTP ---------------------------------------------------------------------------- */

static void http_is(const char *req, int want, const char *name)
{
	char got[SL_NAME_MAX + 1];
	size_t head;
	int st = sl_http_host((const uint8_t *)req, strlen(req), got, &head);
	if (st != want || strcmp(got, name) != 0) {
		printf("#   http \"%.60s\": %d \"%s\", want %d \"%s\"\n", req, st, got, want, name);
		tap_case_failed = 1;
	}
}

static void test_http_host(void)
{
	http_is("GET /simple/ HTTP/1.1\r\nHost: PyPI.org\r\nAccept: */*\r\n\r\n", SL_HTTP_FOUND,
		"pypi.org");
	http_is("GET / HTTP/1.1\r\nhost:registry.npmjs.org:443\r\n\r\nbody", SL_HTTP_FOUND,
		"registry.npmjs.org");
	http_is("GET http://pypi.org/x HTTP/1.1\r\nHost: pypi.org\r\n\r\n", SL_HTTP_FOUND, "pypi.org");
	http_is("OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n", SL_HTTP_FOUND, "a.example");
	http_is("GET http://evil.example/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", SL_HTTP_MISMATCH, "");
	http_is("GET http://pypi.org@evil.example/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", SL_HTTP_BAD,
		"");
	http_is("GET http://10.0.0.1/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", SL_HTTP_MISMATCH, "");
	http_is("CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example\r\n\r\n", SL_HTTP_CONNECT, "");
	http_is("GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", SL_HTTP_BAD, "");
	http_is("GET / HTTP/1.1\r\nX: 1\r\n folded\r\nHost: a.example\r\n\r\n", SL_HTTP_BAD, "");
	http_is("GET / HTTP/1.1\nHost: a.example\n\n", SL_HTTP_BAD, "");
	http_is("GET / HTTP/1.1\r\nHost : a.example\r\n\r\n", SL_HTTP_BAD, "");
	http_is("GET / HTTP/1.0\r\n\r\n", SL_HTTP_NO_HOST, "");
	http_is("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", SL_HTTP_IP_LITERAL, "");
	http_is("GET / HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n", SL_HTTP_IP_LITERAL, "");
	http_is("GET / HTTP/1.1\r\nHost: a.example:http\r\n\r\n", SL_HTTP_BAD, "");
	http_is("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", SL_HTTP_BAD, "");
	http_is("\x16\x03\x01", SL_HTTP_BAD, "");
	http_is("GET /simple/ HTTP/1.1\r\nHost: pyp", SL_HTTP_NEED_MORE, "");
	http_is("GET", SL_HTTP_NEED_MORE, "");
	/* No end of head within 16 KiB. */
	static char big[SL_HTTP_MAX_HEAD + 64];
	strcpy(big, "GET / HTTP/1.1\r\nX: ");
	size_t l = strlen(big);
	memset(big + l, 'a', sizeof(big) - l - 1);
	big[sizeof(big) - 1] = '\0';
	http_is(big, SL_HTTP_TOO_BIG, "");
	size_t head;
	char name[SL_NAME_MAX + 1];
	const char *r = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET / HTTP/1.1\r\n";
	CHECK_EQ_INT(sl_http_host((const uint8_t *)r, strlen(r), name, &head), SL_HTTP_FOUND);
	CHECK_EQ_INT(head, strlen("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"));
}

/* ---- policies -------------------------------------------------------------------------- */

static struct sl_policy *compile(sandlot_network_t mode, const char *const *allow,
				 const char *const *deny)
{
	sandlot_net_policy_t p = { .size = sizeof(p), .mode = mode, .allow = allow, .deny = deny };
	sandlot_error_t *err = NULL;
	struct sl_policy *c = sl_policy_compile(&p, &err);
	if (!c)
		printf("#   compile: %s\n", sandlot_error_message(err));
	sandlot_error_free(err);
	return c;
}

static uint32_t ip(const char *s)
{
	struct in_addr a;
	inet_pton(AF_INET, s, &a);
	return ntohl(a.s_addr);
}

static void test_policy_match(void)
{
	const char *allow[] = { "pypi.org", "*.pythonhosted.org", "203.0.113.0/24", NULL };
	const char *deny[] = { "evil.pythonhosted.org", "203.0.113.66", NULL };
	struct sl_policy *p = compile(SANDLOT_NET_ALLOWLIST, allow, deny);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(sl_policy_name(p, "pypi.org"), SL_ALLOW);
	CHECK_EQ_INT(sl_policy_name(p, "www.pypi.org"), SL_NOT_ALLOWED);
	CHECK_EQ_INT(sl_policy_name(p, "files.pythonhosted.org"), SL_ALLOW);
	CHECK_EQ_INT(sl_policy_name(p, "a.b.pythonhosted.org"), SL_ALLOW);
	CHECK_EQ_INT(sl_policy_name(p, "pythonhosted.org"), SL_NOT_ALLOWED); /* not the apex */
	CHECK_EQ_INT(sl_policy_name(p, "xpythonhosted.org"), SL_NOT_ALLOWED);
	CHECK_EQ_INT(sl_policy_name(p, "evil.pythonhosted.org"), SL_DENIED);
	CHECK_EQ_INT(sl_policy_addr(p, ip("203.0.113.5")), SL_ALLOW);
	CHECK_EQ_INT(sl_policy_addr(p, ip("203.0.113.66")), SL_DENIED);
	CHECK_EQ_INT(sl_policy_addr(p, ip("203.0.114.1")), SL_NOT_ALLOWED);
	CHECK_STR(p->allow_text[2], "203.0.113.0/24");
	CHECK_STR(p->deny_text[1], "203.0.113.66/32");

	const char *extra[] = { "registry.npmjs.org", "pypi.org", NULL };
	struct sl_policy *w = sl_policy_widen(p, extra, NULL);
	CHECK(w && w->mode == SANDLOT_NET_ALLOWLIST && w->nallow == 4 && w->ndeny == 2);
	CHECK_EQ_INT(sl_policy_name(w, "registry.npmjs.org"), SL_ALLOW);
	CHECK_EQ_INT(sl_policy_name(w, "evil.pythonhosted.org"), SL_DENIED);
	sl_policy_unref(w);
	sl_policy_unref(p);

	struct sl_policy *none = compile(SANDLOT_NET_NONE, NULL, NULL);
	CHECK_EQ_INT(sl_policy_name(none, "pypi.org"), SL_NOT_ALLOWED);
	CHECK_EQ_INT(sl_policy_addr(none, ip("203.0.113.5")), SL_NOT_ALLOWED);
	w = sl_policy_widen(none, extra, NULL);
	CHECK(w && w->mode == SANDLOT_NET_ALLOWLIST);
	CHECK_EQ_INT(sl_policy_name(w, "pypi.org"), SL_ALLOW);
	sl_policy_unref(w);
	sl_policy_unref(none);

	const char *odeny[] = { "*.tracker.example", NULL };
	struct sl_policy *open = compile(SANDLOT_NET_OPEN, NULL, odeny);
	CHECK_EQ_INT(sl_policy_name(open, "anything.example"), SL_ALLOW);
	CHECK_EQ_INT(sl_policy_name(open, "a.tracker.example"), SL_DENIED);
	CHECK_EQ_INT(sl_policy_addr(open, ip("8.8.8.8")), SL_ALLOW);
	sl_policy_unref(open);
}

static void bad_rule(const char *rule, const char *want)
{
	const char *allow[] = { rule, NULL };
	sandlot_net_policy_t p = { .size = sizeof(p),
				   .mode = SANDLOT_NET_ALLOWLIST, .allow = allow };
	sandlot_error_t *err = NULL;
	struct sl_policy *c = sl_policy_compile(&p, &err);
	if (c || !err || sandlot_error_status(err) != EINVAL ||
	    !strstr(sandlot_error_message(err), want)) {
		printf("#   rule \"%s\": want EINVAL with \"%s\", got %s\n", rule, want,
		       err ? sandlot_error_message(err) : "success");
		tap_case_failed = 1;
	}
	sl_policy_unref(c);
	sandlot_error_free(err);
}

static void test_policy_errors(void)
{
	bad_rule("*", "whole first label");
	bad_rule("*.com", "too broad");
	bad_rule("a.*.com", "whole first label");
	bad_rule("b\xc3\xbc" "cher.de", "punycode");
	bad_rule("::1", "IPv6");
	bad_rule("10.0.0.1/8", "did you mean 10.0.0.0/8");
	bad_rule("10.0.0.0/33", "prefix length");
	bad_rule("999.1.1.1", "IPv4");
	bad_rule("", "not a host name");
	const char *one[] = { "x.example", NULL };
	sandlot_net_policy_t p = { .size = sizeof(p), .mode = SANDLOT_NET_OPEN, .allow = one };
	sandlot_error_t *err = NULL;
	CHECK(sl_policy_compile(&p, &err) == NULL);
	CHECK(err && strstr(sandlot_error_message(err), "mode \"allowlist\""));
	sandlot_error_free(err);
}

static void test_closed_ranges(void)
{
	static const char *const closed[] = { "0.0.0.0", "10.1.2.3", "100.64.0.1", "100.127.255.255",
					      "127.0.0.1", "169.254.169.254", "172.16.0.1",
					      "172.31.255.255", "192.0.0.8", "192.168.1.1", "198.18.0.1",
					      "224.0.0.1", "240.0.0.1", "255.255.255.255" };
	static const char *const open[] = { "1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.0",
					    "172.15.255.255", "172.32.0.0", "192.0.2.1",
					    "198.51.100.1", "203.0.113.80", "223.255.255.255" };
	for (size_t i = 0; i < sizeof(closed) / sizeof(closed[0]); i++)
		if (!sl_addr_closed(ip(closed[i]))) {
			printf("#   %s should be closed\n", closed[i]);
			tap_case_failed = 1;
		}
	for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); i++)
		if (sl_addr_closed(ip(open[i]))) {
			printf("#   %s should be open\n", open[i]);
			tap_case_failed = 1;
		}
}

/* ---- network namespaces made ahead (linux/netns.h) ------------------------------ */

/* A TCP connect to a documentation address from inside ns_fd: 0 when it went
 * through (to whatever took it), else the errno. */
static int connect_from(int ns_fd, int *sock)
{
	int saved;
	if (sandlot__netns_enter(ns_fd, &saved, NULL) < 0)
		return -1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	sandlot__netns_leave(&saved);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(80) };
	inet_pton(AF_INET, "198.51.100.7", &a.sin_addr);
	int r = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ? 0 : errno;
	*sock = fd;
	return r;
}

static void test_netns_stock(void)
{
	if (geteuid() != 0)
		tap_skip("network namespaces need root");
	sandlot__netns_pool_want(1, 1);
	sandlot__netns_pool_fill();
	struct sandlot_netns_ready plain, egress, none;
	CHECK_EQ_INT(sandlot__netns_pool_take(0, &plain), 0);
	CHECK_EQ_INT(sandlot__netns_pool_take(1, &egress), 0);
	CHECK_EQ_INT(sandlot__netns_pool_take(1, &none), -1); /* one of each was made */
	CHECK(plain.ns_fd >= 0 && plain.fds[0] < 0 && plain.nft == NULL);
	CHECK(egress.ns_fd >= 0 && egress.nft != NULL);
	for (int i = 0; i < SANDLOT_NETNS_NFDS; i++)
		CHECK(egress.fds[i] >= 0);
	/* Plain: loopback only, no route out. */
	int s1 = -1, s2 = -1;
	CHECK_EQ_INT(connect_from(plain.ns_fd, &s1), ENETUNREACH);
	/* Egress: the connection is redirected to the proxy listener. */
	int r = connect_from(egress.ns_fd, &s2);
	CHECK(r == 0 || r == EINPROGRESS);
	struct pollfd p = { .fd = egress.fds[SANDLOT_NETNS_FD_PROXY], .events = POLLIN };
	CHECK_EQ_INT(poll(&p, 1, 5000), 1);
	int c = accept4(egress.fds[SANDLOT_NETNS_FD_PROXY], NULL, NULL, SOCK_CLOEXEC);
	CHECK(c >= 0);
	close(c);
	close(s1);
	close(s2);
	sandlot__netns_ready_close(&plain);
	sandlot__netns_ready_close(&egress);
	CHECK(plain.ns_fd == -1 && egress.nft == NULL && egress.fds[0] == -1);
	/* Emptied: nothing is handed out after want(0, 0), and fill makes none. */
	sandlot__netns_pool_want(0, 0);
	sandlot__netns_pool_fill();
	CHECK_EQ_INT(sandlot__netns_pool_take(0, &none), -1);
	/* A stock filled and then emptied gives back its descriptors. */
	int before = open("/dev/null", O_RDONLY | O_CLOEXEC);
	close(before);
	sandlot__netns_pool_want(2, 2);
	sandlot__netns_pool_fill();
	sandlot__netns_pool_want(0, 0);
	int after = open("/dev/null", O_RDONLY | O_CLOEXEC);
	close(after);
	CHECK_EQ_INT(after, before);
}

/* Without the helper process: with every descriptor below FD_SETSIZE
 * taken, egress cannot be set up through libnftables, which select()s on
 * its socket: a clear error, not an abort of the process. */
static void test_netns_egress_refused_in_process(void)
{
	if (geteuid() != 0)
		tap_skip("network namespaces need root");
	struct rlimit rl;
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_max < 1200)
		tap_skip("RLIMIT_NOFILE's hard limit is below 1200");
	rl.rlim_cur = rl.rlim_max;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	int held[1100], n = 0;
	for (; n < 1100; n++) {
		held[n] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (held[n] < 0 || held[n] >= 1060)
			break;
	}
	struct sandlot_netns_ready r;
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__netns_make(1, &r, &err), -1);
	CHECK_EQ_INT(sandlot_error_status(err), EMFILE);
	CHECK(err && strstr(sandlot_error_message(err), "nftables") != NULL);
	if (err)
		printf("# %s\n", sandlot_error_message(err));
	sandlot_error_free(err);
	CHECK(r.ns_fd == -1 && r.nft == NULL);
	for (int i = 0; i <= n && i < 1100; i++)
		if (held[i] >= 0)
			close(held[i]);
	/* Descriptors free again: it works. */
	err = NULL;
	CHECK_EQ_INT(sandlot__netns_make(1, &r, &err), 0);
	sandlot_error_free(err);
	sandlot__netns_ready_close(&r);
}

/* With the helper process (sandlotd's way): with every descriptor below
 * FD_SETSIZE taken (a daemon holding thousands of connections), egress
 * still works, because libnftables' sockets are the helper's, low
 * numbered, and the rules can be changed later through the same context. */
static void test_netns_egress_with_high_descriptors(void)
{
	if (geteuid() != 0)
		tap_skip("network namespaces need root");
	struct rlimit rl;
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_max < 1200)
		tap_skip("RLIMIT_NOFILE's hard limit is below 1200");
	rl.rlim_cur = rl.rlim_max;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	int held[1100], n = 0;
	for (; n < 1100; n++) {
		held[n] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (held[n] < 0 || held[n] >= 1060)
			break;
	}
	CHECK(n < 1100 && held[n] >= 1060);
	struct sandlot_netns_ready r;
	sandlot_error_t *err = NULL;
	CHECK_EQ_INT(sandlot__netns_make(1, &r, &err), 0);
	if (err)
		printf("# %s\n", sandlot_error_message(err));
	sandlot_error_free(err);
	err = NULL;
	CHECK(r.ns_fd >= 1060 && r.nft != NULL);
	/* The rules are in: a connection out is redirected to the proxy. */
	int s = -1;
	int e = connect_from(r.ns_fd, &s);
	CHECK(e == 0 || e == EINPROGRESS);
	struct pollfd p = { .fd = r.fds[SANDLOT_NETNS_FD_PROXY], .events = POLLIN };
	CHECK_EQ_INT(poll(&p, 1, 5000), 1);
	int c = accept4(r.fds[SANDLOT_NETNS_FD_PROXY], NULL, NULL, SOCK_CLOEXEC);
	CHECK(c >= 0);
	close(c);
	close(s);
	/* And changing them later goes through the same context. */
	CHECK_EQ_INT(sandlot__netns_egress(r.ns_fd, 0, r.fds, &r.nft, &err), 0);
	sandlot_error_free(err);
	/* dropping now: the connection is refused, not redirected */
	e = connect_from(r.ns_fd, &s);
	if (e == EINPROGRESS) {
		struct pollfd w = { .fd = s, .events = POLLOUT };
		CHECK_EQ_INT(poll(&w, 1, 5000), 1);
		socklen_t len = sizeof(e);
		CHECK(getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &len) == 0);
	}
	CHECK_EQ_INT(e, ECONNREFUSED);
	if (s >= 0)
		close(s);
	sandlot__netns_ready_close(&r);
	for (int i = 0; i <= n && i < 1100; i++)
		if (held[i] >= 0)
			close(held[i]);
}

int main(void)
{
	TAP_RUN(test_names);
	TAP_RUN(test_dns_parse_and_reply);
	TAP_RUN(test_dns_refusals);
	TAP_RUN(test_tls_sni);
	TAP_RUN(test_tls_large_hello);
	TAP_RUN(test_http_host);
	TAP_RUN(test_policy_match);
	TAP_RUN(test_policy_errors);
	TAP_RUN(test_closed_ranges);
	TAP_RUN(test_netns_stock);
	TAP_RUN(test_netns_egress_refused_in_process);
	/* From here on through the helper process, as sandlotd does. */
	sandlot_error_t *err = NULL;
	if (geteuid() == 0 && sandlot__nft_helper_start(&err) < 0) {
		printf("# %s\n", sandlot_error_message(err));
		return 1;
	}
	TAP_RUN(test_netns_stock);
	TAP_RUN(test_netns_egress_with_high_descriptors);
	return tap_done();
}
