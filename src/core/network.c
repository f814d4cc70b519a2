/* A sandbox's network policy: applying it when the sandbox starts and when
 * it changes, and the public network calls (include/sandlot.h).
 *
 * The pieces: src/linux/netns.c makes the namespace and sets up, inside it,
 * the listeners and the nftables ruleset; src/net/ is the engine that
 * serves those listeners.  A sandbox created with mode none gets neither
 * (loopback only, nothing to pay); the first policy with a network sets
 * both up, and from then on a change swaps the engine's policy (and the
 * ruleset, between "redirect" and "drop everything").
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sized.h"
#include "linux/netns.h"
#include "net/engine.h"
#include "net/policy.h"

struct sl_policy *sandlot__net_policy_of(const sandlot_options_t *opts, sandlot_error_t **err)
{
	sandlot_net_policy_t p = { .size = sizeof(p), .mode = opts->network,
				   .allow = opts->net_allow, .deny = opts->net_deny };
	return sl_policy_compile(&p, err);
}

/* The caller's policy as this library's struct (sized.h); NULL stays NULL
 * (no network). */
static int policy_norm(const sandlot_net_policy_t **policy, sandlot_net_policy_t *buf,
		       sandlot_error_t **err)
{
	if (!*policy)
		return 0;
	if (sandlot__net_policy_copy(*policy, buf, err) < 0)
		return -1;
	*policy = buf;
	return 0;
}

int sandlot_net_policy_validate(const sandlot_net_policy_t *policy, sandlot_error_t **err)
{
	sandlot_net_policy_t buf;
	if (policy_norm(&policy, &buf, err) < 0)
		return -1;
	struct sl_policy *p = sl_policy_compile(policy, err);
	sl_policy_unref(p);
	return p ? 0 : -1;
}

/* Make the namespace match p (sb->net_lock held).  On failure the sandbox
 * is left with no network (rules that drop, or none at all). */
static int apply_locked(sandlot_t *sb, struct sl_policy *p, sandlot_error_t **err)
{
	int want_redirect = p->mode != SANDLOT_NET_NONE;
	if (!sb->net && !want_redirect) {
		/* Never had a network: loopback only, nothing to change. */
		sl_policy_unref(sb->net_policy);
		sb->net_policy = p;
		return 0;
	}
	int nsfd = sb->ops->netns_fd ? sb->ops->netns_fd(sb) : -1;
	if (nsfd < 0) {
		sl_policy_unref(p);
		return sandlot__error(err, ENOTSUP, "network access is not supported for %s sandboxes "
				      "yet", sb->ops->name);
	}
	if (!sb->net) {
		int fds[3] = { -1, -1, -1 };
		/* Set up ahead (a namespace from sandlot_prepare()'s stock), or now. */
		int ahead = !sb->net_nft && sb->ops->take_egress &&
			    sb->ops->take_egress(sb, fds, &sb->net_nft);
		if (!ahead && sandlot__netns_egress(nsfd, 1, fds, &sb->net_nft, err) < 0) {
			sl_policy_unref(p);
			return sandlot__error_wrap(err, "set up the sandbox's network");
		}
		sb->net_redirect = 1;
		sb->net = sandlot__net_attach(sb->id, fds, sl_policy_ref(p), err);
		if (!sb->net) {
			int none[3] = { 0, 0, 0 };
			sandlot__netns_egress(nsfd, 0, none, &sb->net_nft, NULL); /* back to dropping */
			sb->net_redirect = 0;
			sl_policy_unref(p);
			return sandlot__error_wrap(err, "set up the sandbox's network");
		}
		sl_policy_unref(sb->net_policy);
		sb->net_policy = p;
		return 0;
	}
	/* Narrowing to none: stop new connections first, then close the old. */
	int keep[3] = { 0, 0, 0 }; /* listeners exist: only the rules change */
	if (!want_redirect && sb->net_redirect) {
		if (sandlot__netns_egress(nsfd, 0, keep, &sb->net_nft, err) < 0) {
			sl_policy_unref(p);
			return sandlot__error_wrap(err, "change the sandbox's network");
		}
		sb->net_redirect = 0;
	}
	sandlot__net_set_policy(sb->net, sl_policy_ref(p));
	sl_policy_unref(sb->net_policy);
	sb->net_policy = p;
	if (want_redirect && !sb->net_redirect) {
		if (sandlot__netns_egress(nsfd, 1, keep, &sb->net_nft, err) < 0) {
			/* The engine has the policy but nothing reaches it: say so,
			 * and record the truth. */
			sandlot__net_set_policy(sb->net, sl_policy_compile(NULL, NULL));
			sl_policy_unref(sb->net_policy);
			sb->net_policy = sl_policy_compile(NULL, NULL);
			return sandlot__error_wrap(err, "change the sandbox's network");
		}
		sb->net_redirect = 1;
	}
	return 0;
}

int sandlot__net_start(sandlot_t *sb, sandlot_error_t **err)
{
	pthread_mutex_lock(&sb->net_lock);
	struct sl_policy *p = sb->net_policy;
	sb->net_policy = sl_policy_compile(NULL, err);
	int r = sb->net_policy ? apply_locked(sb, p, err) : -1;
	if (!sb->net_policy)
		sl_policy_unref(p);
	pthread_mutex_unlock(&sb->net_lock);
	return r;
}

void sandlot__net_stop(sandlot_t *sb)
{
	pthread_mutex_lock(&sb->net_lock);
	sandlot__net_detach(sb->net);
	sb->net = NULL;
	struct sandlot_nft *nft = sb->net_nft;
	sb->net_nft = NULL;
	pthread_mutex_unlock(&sb->net_lock);
	sandlot__nft_free(nft);
}

int sandlot_set_network(sandlot_t *sb, const sandlot_net_policy_t *policy, sandlot_error_t **err)
{
	sandlot_net_policy_t buf;
	if (policy_norm(&policy, &buf, err) < 0)
		return -1;
	struct sl_policy *p = sl_policy_compile(policy, err);
	if (!p)
		return -1;
	pthread_mutex_lock(&sb->net_lock);
	int r = apply_locked(sb, p, err);
	pthread_mutex_unlock(&sb->net_lock);
	return r;
}

sandlot_network_t sandlot_network(sandlot_t *sb, const char *const **allow,
				  const char *const **deny)
{
	pthread_mutex_lock(&sb->net_lock);
	struct sl_policy *p = sb->net_policy;
	sandlot_network_t m = p ? p->mode : SANDLOT_NET_NONE;
	static const char *const empty[] = { NULL };
	if (allow)
		*allow = p ? (const char *const *)p->allow_text : empty;
	if (deny)
		*deny = p ? (const char *const *)p->deny_text : empty;
	pthread_mutex_unlock(&sb->net_lock);
	return m;
}

int sandlot_net_configure(const sandlot_net_config_t *cfg, sandlot_error_t **err)
{
	sandlot_net_config_t buf;
	if (cfg) {
		if (sandlot__net_config_copy(cfg, &buf, err) < 0)
			return -1;
		cfg = &buf;
	}
	return sandlot__net_configure(cfg, err);
}

/* The size of the first sandlot_net_event_t with a growth rule: a caller's
 * is never smaller.  Do not change it when the struct grows. */
#define NET_EVENT_MIN_SIZE 336
_Static_assert(sizeof(sandlot_net_event_t) >= NET_EVENT_MIN_SIZE, "sandlot_net_event_t only grows");

int sandlot_net_log_sized(sandlot_t *sb, uint64_t after, sandlot_net_event_t **out,
			  size_t *count, uint64_t *dropped, size_t entry_size, sandlot_error_t **err)
{
	if (sandlot__elem_check("sandlot_net_event_t", entry_size, NET_EVENT_MIN_SIZE,
				sizeof(sandlot_net_event_t), err) < 0)
		return -1;
	pthread_mutex_lock(&sb->net_lock);
	int r = sandlot__net_log_read(sb->net, after, out, count, dropped, err);
	pthread_mutex_unlock(&sb->net_lock);
	if (r < 0 || entry_size == sizeof(sandlot_net_event_t) || !*out)
		return r;
	/* Laid out again with the caller's stride. */
	char *v = calloc(*count ? *count : 1, entry_size);
	if (!v) {
		free(*out);
		*out = NULL;
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < *count; i++)
		sandlot__elem_put(v + i * entry_size, entry_size, &(*out)[i],
				  sizeof(sandlot_net_event_t));
	free(*out);
	*out = (sandlot_net_event_t *)(void *)v;
	return 0;
}

void sandlot_net_stats(sandlot_net_stats_t *caller)
{
	/* It cannot fail: a caller that did not set size gets nothing. */
	if (sandlot__out_check("sandlot_net_stats_t", caller, sizeof(*caller), NULL) < 0)
		return;
	sandlot_net_stats_t full;
	sandlot_net_stats_t *out = &full;
	memset(out, 0, sizeof(*out));
	out->dns_allowed = __atomic_load_n(&sl_stats.dns_allowed, __ATOMIC_RELAXED);
	out->dns_refused = __atomic_load_n(&sl_stats.dns_refused, __ATOMIC_RELAXED);
	out->tcp_allowed = __atomic_load_n(&sl_stats.tcp_allowed, __ATOMIC_RELAXED);
	out->tcp_refused = __atomic_load_n(&sl_stats.tcp_refused, __ATOMIC_RELAXED);
	out->bytes_out = __atomic_load_n(&sl_stats.bytes_out, __ATOMIC_RELAXED);
	out->bytes_in = __atomic_load_n(&sl_stats.bytes_in, __ATOMIC_RELAXED);
	out->connections_open = __atomic_load_n(&sl_stats.open, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < SL_R_COUNT && i < 20; i++)
		out->refused_by_reason[i] = __atomic_load_n(&sl_stats.refused[i], __ATOMIC_RELAXED);
	sandlot__out_put(caller, &full, sizeof(full));
}

const char *sandlot_net_reason_name(unsigned i)
{
	return i < SL_R_COUNT && i < 20 ? sl_reason_name((enum sl_reason)i) : NULL;
}
