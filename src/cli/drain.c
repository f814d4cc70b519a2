/* `sandlot drain`: remove what `sandlot run` keeps ready for the next run
 * (see linux/netns.h, "spare namespaces"). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/images.h"
#include "linux/cgroup.h"
#include "linux/netns.h"

static const char drain_help[] =
	"NAME\n"
	"    sandlot drain - remove what sandlot run keeps ready for the next run\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot drain\n"
	"\n"
	"DESCRIPTION\n"
	"    After a sandbox has ended, the cleanup of each sandlot run leaves up to\n"
	"    two network namespaces (bind mounts under /run/sandlot/netns-spare) and\n"
	"    two cgroups (prepared ones, /run/sandlot/cgroup-pool) ready for the next\n"
	"    runs of the same data directory, so that those start faster.  sandlot\n"
	"    drain removes them now (but prepared cgroups that a sandlotd of the\n"
	"    data directory keeps: it drains those when it stops), waiting for a\n"
	"    namespace being made, and prints how many it removed.  Runs still\n"
	"    going on may leave new ones when they end.  They also go by themselves\n"
	"    once their data directory is removed (the next run's cleanup sweeps\n"
	"    them).\n"
	"\n"
	"ENVIRONMENT\n"
	"    SANDLOT_DATA_DIR   the data directory (default /var/lib/sandlot).\n";

int cmd_drain(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(drain_help, stdout);
			return 0;
		}
		return cli_usage_error("drain", "unexpected argument \"%s\"", argv[i]);
	}
	const char *dd = sandlot__data_dir(NULL);
	unsigned n = sandlot__netns_spare_drain(dd) + sandlot__cgroup_pool_drain_spare(dd);
	printf("%u\n", n);
	return 0;
}
