/* sandlot-init's command line (the options are listed in init.h). */
#include "init.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal number in [0, max]; -1 if s is anything else. */
static int parse_num(const char *s, uint64_t max, uint64_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

static int usage(const char *msg, const char *arg)
{
	fprintf(stderr, "sandlot-init: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
	return -1;
}

int init_parse_args(int argc, char **argv, struct init_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->uid = 1000;
	cfg->gid = 1000;
	cfg->hostname = "sandbox";
	cfg->home = INIT_HOME;
	cfg->user_name = "user";

	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t n;
		if (!strcmp(opt, "--no-seccomp")) {
			cfg->no_seccomp = 1;
			continue;
		}
		if (!strcmp(opt, "--tmpfs-storage")) {
			cfg->tmpfs_storage = 1;
			continue;
		}
		if (!strcmp(opt, "--no-warm")) {
			cfg->no_warm = 1;
			continue;
		}
		if (!strcmp(opt, "--image")) {
			cfg->image = 1;
			continue;
		}
		if (!strcmp(opt, "--no-setup")) {
			cfg->no_setup = 1;
			continue;
		}
		if (!val)
			return usage("option needs a value (or is unknown)", opt);
		i++;
		if (!strcmp(opt, "--hostname")) {
			if (!*val || strlen(val) > 64)
				return usage("bad hostname", val);
			cfg->hostname = val;
		} else if (!strcmp(opt, "--home")) {
			size_t hl = strlen(val);
			if (val[0] != '/' || (hl > 1 && val[hl - 1] == '/'))
				return usage("--home needs an absolute path without a final slash",
					     val);
			cfg->home = val;
		} else if (!strcmp(opt, "--workdir")) {
			if (val[0] != '/' || strlen(val) > 1024)
				return usage("--workdir needs an absolute path", val);
			cfg->workdir = val;
		} else if (!strcmp(opt, "--user-name")) {
			/* It goes into a passwd line: no separators, no newlines. */
			size_t ul = strlen(val);
			if (ul == 0 || ul > 32 || strpbrk(val, ":\n/ \t"))
				return usage("bad --user-name", val);
			cfg->user_name = val;
		} else if (!strcmp(opt, "--uid") || !strcmp(opt, "--gid")) {
			/* (uid_t)-1 means "unchanged" to the set*id calls: refuse it. */
			if (parse_num(val, UINT32_MAX - 1, &n) < 0)
				return usage("bad id", val);
			if (opt[2] == 'u')
				cfg->uid = (uid_t)n;
			else
				cfg->gid = (gid_t)n;
		} else if (!strcmp(opt, "--pids")) {
			if (parse_num(val, UINT32_MAX, &cfg->pids) < 0)
				return usage("bad --pids", val);
		} else if (!strcmp(opt, "--nofile")) {
			if (parse_num(val, UINT64_MAX, &cfg->nofile) < 0)
				return usage("bad --nofile", val);
		} else if (!strcmp(opt, "--fsize")) {
			if (parse_num(val, UINT64_MAX, &cfg->fsize) < 0)
				return usage("bad --fsize", val);
		} else if (!strcmp(opt, "--scan-memory")) {
			if (parse_num(val, UINT64_MAX, &cfg->scan_memory) < 0)
				return usage("bad --scan-memory", val);
		} else if (!strcmp(opt, "--disk")) {
			if (parse_num(val, UINT64_MAX, &cfg->disk) < 0)
				return usage("bad --disk", val);
		} else {
			return usage("unknown option", opt);
		}
	}
	return 0;
}
