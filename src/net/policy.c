/* Network policies: compile the rules, match names and addresses. */
#include "net/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int sl_cidr_parse(const char *s, uint32_t *net, uint32_t *mask, char *msg, size_t msglen)
{
	char addr[32];
	const char *slash = strchr(s, '/');
	size_t al = slash ? (size_t)(slash - s) : strlen(s);
	if (strchr(s, ':')) {
		snprintf(msg, msglen, "IPv6 is not supported (sandboxes have no IPv6)");
		return -1;
	}
	if (al == 0 || al >= sizeof(addr)) {
		snprintf(msg, msglen, "expected an IPv4 address or range such as 203.0.113.0/24");
		return -1;
	}
	memcpy(addr, s, al);
	addr[al] = '\0';
	struct in_addr ia;
	if (inet_pton(AF_INET, addr, &ia) != 1) {
		snprintf(msg, msglen, "expected an IPv4 address or range such as 203.0.113.0/24");
		return -1;
	}
	unsigned bits = 32;
	if (slash) {
		const char *p = slash + 1;
		if (!*p || strlen(p) > 2 || strspn(p, "0123456789") != strlen(p) ||
		    (bits = (unsigned)atoi(p)) > 32) {
			snprintf(msg, msglen, "the prefix length after '/' must be 0 to 32");
			return -1;
		}
	}
	uint32_t a = ntohl(ia.s_addr);
	uint32_t m = bits ? ~0u << (32 - bits) : 0;
	if (a & ~m) {
		snprintf(msg, msglen, "has bits set past the prefix length (did you mean %u.%u.%u.%u/%u?)",
			 (a & m) >> 24, ((a & m) >> 16) & 255, ((a & m) >> 8) & 255, (a & m) & 255,
			 bits);
		return -1;
	}
	*net = a;
	*mask = m;
	return 0;
}

/* One rule, written as the API takes it. */
static int rule_parse(const char *s, struct sl_rule *r, char **text, char *msg, size_t msglen)
{
	memset(r, 0, sizeof(*r));
	size_t n = strlen(s);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] >= 0x80) {
			snprintf(msg, msglen, "not ASCII: write an international name in its punycode "
					      "form (xn--...)");
			return -1;
		}
	char norm[SL_NAME_MAX + 3];
	if (n && (strchr(s, '/') || strchr(s, ':') || strspn(s, "0123456789.") == n)) {
		if (sl_cidr_parse(s, &r->net, &r->mask, msg, msglen) < 0)
			return -1;
		r->kind = SL_RULE_CIDR;
		struct in_addr ia = { htonl(r->net) };
		unsigned bits = 0;
		for (uint32_t m = r->mask; m; m <<= 1)
			bits++;
		char a[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &ia, a, sizeof(a));
		snprintf(norm, sizeof(norm), "%s/%u", a, bits);
	} else if (n >= 2 && s[0] == '*' && s[1] == '.') {
		if (sl_name_normalize(s + 2, n - 2, r->name) != SL_NAME_OK) {
			snprintf(msg, msglen, "not a wildcard of the form *.example.com");
			return -1;
		}
		if (!strchr(r->name, '.')) {
			snprintf(msg, msglen, "too broad: a wildcard needs at least two labels after "
					      "\"*.\" (for everything, use mode \"open\")");
			return -1;
		}
		r->kind = SL_RULE_WILDCARD;
		snprintf(norm, sizeof(norm), "*.%s", r->name);
	} else {
		if (strchr(s, '*')) {
			snprintf(msg, msglen, "'*' is allowed only as a whole first label (*.example.com)");
			return -1;
		}
		if (sl_name_normalize(s, n, r->name) != SL_NAME_OK) {
			snprintf(msg, msglen, "not a host name, IPv4 address or range");
			return -1;
		}
		r->kind = SL_RULE_NAME;
		snprintf(norm, sizeof(norm), "%s", r->name);
	}
	*text = strdup(norm);
	if (!*text) {
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	return 0;
}

static void policy_free(struct sl_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; p->allow_text && p->allow_text[i]; i++)
		free(p->allow_text[i]);
	for (size_t i = 0; p->deny_text && p->deny_text[i]; i++)
		free(p->deny_text[i]);
	free(p->allow_text);
	free(p->deny_text);
	free(p->allow);
	free(p->deny);
	free(p);
}

static size_t count(const char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	return n;
}

/* Append the rules of list (named `what`) to p's allow or deny side. */
static int add_rules(struct sl_policy *p, int deny, const char *const *list, const char *what,
		     sandlot_error_t **err)
{
	size_t *n = deny ? &p->ndeny : &p->nallow;
	struct sl_rule *rules = deny ? p->deny : p->allow;
	char **text = deny ? p->deny_text : p->allow_text;
	for (size_t i = 0; list && list[i]; i++) {
		char msg[160];
		struct sl_rule r;
		char *t;
		if (rule_parse(list[i], &r, &t, msg, sizeof(msg)) < 0)
			return sandlot__error(err, EINVAL, "network %s rule \"%.80s\": %s", what, list[i],
					      msg);
		/* Duplicates are harmless but clutter the record: keep one. */
		size_t j;
		for (j = 0; j < *n; j++)
			if (strcmp(text[j], t) == 0)
				break;
		if (j < *n) {
			free(t);
			continue;
		}
		rules[*n] = r;
		text[(*n)++] = t;
	}
	return 0;
}

static struct sl_policy *policy_alloc(sandlot_network_t mode, size_t nallow, size_t ndeny)
{
	struct sl_policy *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->mode = mode;
	p->refs = 1;
	p->allow = calloc(nallow + 1, sizeof(*p->allow));
	p->deny = calloc(ndeny + 1, sizeof(*p->deny));
	p->allow_text = calloc(nallow + 1, sizeof(char *));
	p->deny_text = calloc(ndeny + 1, sizeof(char *));
	if (!p->allow || !p->deny || !p->allow_text || !p->deny_text) {
		policy_free(p);
		return NULL;
	}
	return p;
}

struct sl_policy *sl_policy_compile(const sandlot_net_policy_t *in, sandlot_error_t **err)
{
	sandlot_net_policy_t none = { .size = sizeof(none), .mode = SANDLOT_NET_NONE };
	if (!in)
		in = &none;
	if (in->mode != SANDLOT_NET_NONE && in->mode != SANDLOT_NET_ALLOWLIST &&
	    in->mode != SANDLOT_NET_OPEN)
		return sandlot__error(err, EINVAL, "unknown network mode %d", (int)in->mode), NULL;
	size_t na = count(in->allow), nd = count(in->deny);
	if (na > SL_POLICY_MAX_RULES || nd > SL_POLICY_MAX_RULES)
		return sandlot__error(err, EINVAL, "a network policy has at most %d allow and %d deny "
				      "rules", SL_POLICY_MAX_RULES, SL_POLICY_MAX_RULES), NULL;
	if (na && in->mode != SANDLOT_NET_ALLOWLIST)
		return sandlot__error(err, EINVAL, "network allow rules need mode \"allowlist\" "
				      "(mode \"%s\" %s)", in->mode == SANDLOT_NET_OPEN ? "open" : "none",
				      in->mode == SANDLOT_NET_OPEN ? "allows every public host already"
				      : "allows nothing"), NULL;
	struct sl_policy *p = policy_alloc(in->mode, na, nd);
	if (!p)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	if (add_rules(p, 0, in->allow, "allow", err) < 0 || add_rules(p, 1, in->deny, "deny", err) < 0) {
		policy_free(p);
		return NULL;
	}
	return p;
}

struct sl_policy *sl_policy_widen(const struct sl_policy *base, const char *const *names,
				  sandlot_error_t **err)
{
	size_t nn = count(names);
	sandlot_network_t mode = base->mode == SANDLOT_NET_OPEN ? SANDLOT_NET_OPEN
								 : SANDLOT_NET_ALLOWLIST;
	struct sl_policy *p = policy_alloc(mode, base->nallow + nn, base->ndeny);
	if (!p)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	if (add_rules(p, 0, (const char *const *)base->allow_text, "allow", err) < 0 ||
	    (mode == SANDLOT_NET_ALLOWLIST && add_rules(p, 0, names, "allow", err) < 0) ||
	    add_rules(p, 1, (const char *const *)base->deny_text, "deny", err) < 0) {
		policy_free(p);
		return NULL;
	}
	return p;
}

struct sl_policy *sl_policy_ref(struct sl_policy *p)
{
	if (p)
		__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
	return p;
}

void sl_policy_unref(struct sl_policy *p)
{
	if (p && __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0)
		policy_free(p);
}

static int rule_name_match(const struct sl_rule *r, const char *name)
{
	if (r->kind == SL_RULE_NAME)
		return strcmp(r->name, name) == 0;
	if (r->kind != SL_RULE_WILDCARD)
		return 0;
	size_t n = strlen(name), s = strlen(r->name);
	return n > s + 1 && name[n - s - 1] == '.' && strcmp(name + n - s, r->name) == 0;
}

enum sl_verdict sl_policy_name(const struct sl_policy *p, const char *name)
{
	if (!p || p->mode == SANDLOT_NET_NONE)
		return SL_NOT_ALLOWED;
	for (size_t i = 0; i < p->ndeny; i++)
		if (rule_name_match(&p->deny[i], name))
			return SL_DENIED;
	if (p->mode == SANDLOT_NET_OPEN)
		return SL_ALLOW;
	for (size_t i = 0; i < p->nallow; i++)
		if (rule_name_match(&p->allow[i], name))
			return SL_ALLOW;
	return SL_NOT_ALLOWED;
}

int sl_policy_addr_denied(const struct sl_policy *p, uint32_t addr)
{
	for (size_t i = 0; p && i < p->ndeny; i++)
		if (p->deny[i].kind == SL_RULE_CIDR && (addr & p->deny[i].mask) == p->deny[i].net)
			return 1;
	return 0;
}

enum sl_verdict sl_policy_addr(const struct sl_policy *p, uint32_t addr)
{
	if (!p || p->mode == SANDLOT_NET_NONE)
		return SL_NOT_ALLOWED;
	if (sl_policy_addr_denied(p, addr))
		return SL_DENIED;
	if (p->mode == SANDLOT_NET_OPEN)
		return SL_ALLOW;
	for (size_t i = 0; i < p->nallow; i++)
		if (p->allow[i].kind == SL_RULE_CIDR && (addr & p->allow[i].mask) == p->allow[i].net)
			return SL_ALLOW;
	return SL_NOT_ALLOWED;
}

int sl_addr_closed(uint32_t a)
{
	static const struct {
		uint32_t net;
		unsigned bits;
	} closed[] = {
		{ 0x00000000, 8 },  /* 0.0.0.0/8 "this network" (0.0.0.0 reaches the host) */
		{ 0x0a000000, 8 },  /* 10.0.0.0/8 private */
		{ 0x64400000, 10 }, /* 100.64.0.0/10 carrier-grade NAT */
		{ 0x7f000000, 8 },  /* 127.0.0.0/8 loopback */
		{ 0xa9fe0000, 16 }, /* 169.254.0.0/16 link-local, cloud metadata */
		{ 0xac100000, 12 }, /* 172.16.0.0/12 private */
		{ 0xc0000000, 24 }, /* 192.0.0.0/24 IETF protocol assignments */
		{ 0xc0a80000, 16 }, /* 192.168.0.0/16 private */
		{ 0xc6120000, 15 }, /* 198.18.0.0/15 benchmarking */
		{ 0xe0000000, 4 },  /* 224.0.0.0/4 multicast */
		{ 0xf0000000, 4 },  /* 240.0.0.0/4 reserved, and 255.255.255.255 */
	};
	for (size_t i = 0; i < sizeof(closed) / sizeof(closed[0]); i++) {
		uint32_t m = ~0u << (32 - closed[i].bits);
		if ((a & m) == closed[i].net)
			return 1;
	}
	return 0;
}
