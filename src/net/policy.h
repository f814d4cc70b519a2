/* A sandbox's network policy, compiled: what `"network": {"mode": ...,
 * "allow": [...], "deny": [...]}` means, and the address ranges that stay
 * closed whatever the policy says (docs/network.md).
 *
 * Rules are host names ("pypi.org"), wildcards ("*.pythonhosted.org": the
 * subdomains, not the name itself) and IPv4 ranges ("203.0.113.0/24", or
 * one address).  A deny rule wins over an allow rule.
 *
 * A compiled policy is immutable and reference counted, so the egress
 * engine can hold the one a connection was judged by while the API swaps
 * in another.
 */
#ifndef SANDLOT_NET_POLICY_H
#define SANDLOT_NET_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "sandlot.h"
#include "net/wire.h"

#define SL_POLICY_MAX_RULES 256

enum sl_rule_kind { SL_RULE_NAME, SL_RULE_WILDCARD, SL_RULE_CIDR };

struct sl_rule {
	enum sl_rule_kind kind;
	uint32_t net, mask;         /* CIDR, host byte order */
	char name[SL_NAME_MAX + 1]; /* NAME: the name; WILDCARD: the suffix without "*." */
};

struct sl_policy {
	sandlot_network_t mode;
	size_t nallow, ndeny;
	struct sl_rule *allow, *deny;
	char **allow_text, **deny_text; /* the rules as written (normalised), NULL-terminated */
	int refs;
};

/* Compile a policy; NULL with EINVAL naming the bad entry, or ENOMEM.
 * A NULL p means {mode none}.  The new policy has one reference. */
struct sl_policy *sl_policy_compile(const sandlot_net_policy_t *p, sandlot_error_t **err);
/* The union of p and extra allow names (for package installs: the
 * registries, for as long as the install runs).  Mode none becomes an
 * allowlist of just those; open stays open.  Deny rules are kept. */
struct sl_policy *sl_policy_widen(const struct sl_policy *p, const char *const *names,
				  sandlot_error_t **err);
struct sl_policy *sl_policy_ref(struct sl_policy *p);
void sl_policy_unref(struct sl_policy *p);

enum sl_verdict {
	SL_ALLOW = 0,
	SL_NOT_ALLOWED, /* no allow rule matches (or mode none) */
	SL_DENIED,      /* a deny rule matches */
};

/* Whether connections to (and lookups of) a normalised name may go. */
enum sl_verdict sl_policy_name(const struct sl_policy *p, const char *name);
/* Whether an address is allowed by itself (an allow range, or mode open)
 * or denied by a deny range.  Says nothing of the closed ranges. */
enum sl_verdict sl_policy_addr(const struct sl_policy *p, uint32_t addr);
/* Whether an address is denied by a deny range of the policy. */
int sl_policy_addr_denied(const struct sl_policy *p, uint32_t addr);

/* Whether addr (host byte order) lies in the ranges no sandbox may reach
 * unless the operator opens them: this host, private (RFC 1918), CGNAT,
 * loopback, link-local (cloud metadata), "this network", benchmarking,
 * IETF protocol assignments, multicast, reserved, broadcast. */
int sl_addr_closed(uint32_t addr);

/* Parse "a.b.c.d/n" or "a.b.c.d" into net/mask (host byte order).  0, or
 * -1 with a reason in msg. */
int sl_cidr_parse(const char *s, uint32_t *net, uint32_t *mask, char *msg, size_t msglen);

#endif
