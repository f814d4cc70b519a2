/* `sandlot drain`: remove what `sandlot run` keeps ready for the next run
 * (see linux/netns.h, "spare namespaces"). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/images.h"
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
	"    two network namespaces ready for the next runs of the same data\n"
	"    directory (bind mounts under /run/sandlot/netns-spare), so that those\n"
	"    start faster.  sandlot drain removes them now, waiting for one being\n"
	"    made, and prints how many it removed.  Runs still going on may leave\n"
	"    new ones when they end.  They also go by themselves once their data\n"
	"    directory is removed (the next run's cleanup sweeps them).\n"
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
	unsigned n = sandlot__netns_spare_drain(sandlot__data_dir(NULL));
	printf("%u\n", n);
	return 0;
}
