/* The network options shared by `run`, `create` and `mcp`: --net MODE,
 * --allow-host NAME, --deny-host NAME (docs/network.md).  They build the
 * "network" object of a create request; `run` turns it into a
 * sandlot_net_policy_t. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static json_t *net_obj(json_t *body)
{
	json_t *n = json_object_get(body, "network");
	if (!json_is_object(n)) {
		n = json_object();
		json_object_set_new(body, "network", n);
	}
	return n;
}

int cli_net_option(const char *verb, int c, const char *arg, json_t *body)
{
	switch (c) {
	case OPT_NET:
		if (strcmp(arg, "none") && strcmp(arg, "open") && strcmp(arg, "allowlist"))
			return cli_usage_error(verb, "invalid --net \"%s\": expected none, open or "
					       "allowlist (or give --allow-host)", arg);
		json_object_set_new(net_obj(body), "mode", json_string(arg));
		return 0;
	case OPT_ALLOW_HOST:
	case OPT_DENY_HOST: {
		const char *key = c == OPT_ALLOW_HOST ? "allow" : "deny";
		sandlot_net_policy_t p = { .size = sizeof(p), .mode = SANDLOT_NET_ALLOWLIST };
		const char *one[2] = { arg, NULL };
		if (c == OPT_ALLOW_HOST)
			p.allow = one;
		else
			p.deny = one;
		sandlot_error_t *err = NULL;
		if (sandlot_net_policy_validate(&p, &err) < 0) {
			int rc = cli_usage_error(verb, "--%s-host: %s", key, sandlot_error_message(err));
			sandlot_error_free(err);
			return rc;
		}
		json_t *n = net_obj(body);
		json_t *list = json_object_get(n, key);
		if (!list) {
			list = json_array();
			json_object_set_new(n, key, list);
		}
		json_array_append_new(list, json_string(arg));
		return 0;
	}
	case OPT_PIP:
	case OPT_NPM: {
		const char *key = c == OPT_PIP ? "pip" : "npm";
		const char *one[2] = { arg, NULL };
		sandlot_packages_t pk = { .size = sizeof(pk),
					  .pip = c == OPT_PIP ? one : NULL, .npm = c == OPT_NPM ? one : NULL };
		sandlot_error_t *err = NULL;
		if (sandlot_packages_validate(&pk, &err) < 0) {
			int rc = cli_usage_error(verb, "--%s: %s", key, sandlot_error_message(err));
			sandlot_error_free(err);
			return rc;
		}
		json_t *p = json_object_get(body, "packages");
		if (!p) {
			p = json_object();
			json_object_set_new(body, "packages", p);
		}
		json_t *list = json_object_get(p, key);
		if (!list) {
			list = json_array();
			json_object_set_new(p, key, list);
		}
		json_array_append_new(list, json_string(arg));
		return 0;
	}
	default:
		return 1;
	}
}

int cli_net_finish(const char *verb, json_t *body)
{
	json_t *n = json_object_get(body, "network");
	if (!n)
		return 0;
	const char *mode = json_string_value(json_object_get(n, "mode"));
	int allow = json_object_get(n, "allow") != NULL, deny = json_object_get(n, "deny") != NULL;
	if (!mode) {
		if (!allow)
			return cli_usage_error(verb, "--deny-host needs --allow-host or --net open");
		json_object_set_new(n, "mode", json_string("allowlist"));
		return 0;
	}
	if (allow && strcmp(mode, "allowlist") != 0)
		return cli_usage_error(verb, "--allow-host cannot be used with --net %s", mode);
	if (deny && !strcmp(mode, "none"))
		return cli_usage_error(verb, "--deny-host cannot be used with --net none");
	if (!allow && !strcmp(mode, "allowlist"))
		return cli_usage_error(verb, "--net allowlist needs at least one --allow-host");
	return 0;
}

/* One of the lists of net as a NULL-terminated array of its strings (owned
 * by net); NULL with nothing to list. */
static const char **strings(json_t *net, const char *key)
{
	json_t *a = json_object_get(net, key);
	if (!a)
		return NULL;
	const char **v = calloc(json_array_size(a) + 1, sizeof(*v));
	for (size_t i = 0; v && i < json_array_size(a); i++)
		v[i] = json_string_value(json_array_get(a, i));
	return v;
}

int cli_net_policy(json_t *body, sandlot_options_t *opts, const char ***allow, const char ***deny)
{
	json_t *n = json_object_get(body, "network");
	*allow = *deny = NULL;
	if (!n)
		return 0;
	const char *mode = json_string_value(json_object_get(n, "mode"));
	opts->network = !strcmp(mode, "open")        ? SANDLOT_NET_OPEN
			: !strcmp(mode, "allowlist") ? SANDLOT_NET_ALLOWLIST
						     : SANDLOT_NET_NONE;
	*allow = strings(n, "allow");
	*deny = strings(n, "deny");
	if ((json_object_get(n, "allow") && !*allow) || (json_object_get(n, "deny") && !*deny))
		return -1;
	opts->net_allow = *allow;
	opts->net_deny = *deny;
	return 0;
}
