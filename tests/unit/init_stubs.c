/* Test-only stand-ins for src/init/setup.c, so the init-loop unit test can
 * run sandlot-init's serving loop on the host: no sandbox is built, and a
 * command only switches to the configured uid/gid (the test passes its own,
 * so it needs no privilege). */
#include "init/init.h"

#include <errno.h>
#include <unistd.h>

int init_setup_early(const struct init_config *cfg)
{
	/* No early warm child here: the test's init forks it after OK. */
	errno = ENOSYS;
	return -1;
}

int init_setup(struct init_config *cfg)
{
	return 0;
}

const char *init_setup_error(int *err)
{
	*err = 0;
	return "";
}

int init_setup_finish(const struct init_config *cfg)
{
	return 0;
}

int init_setup_children(const struct init_config *cfg)
{
	return 0;
}

int init_drop_privileges(const struct init_config *cfg)
{
	if (getgid() != cfg->gid && setgid(cfg->gid) < 0)
		return -1;
	if (getuid() != cfg->uid && setuid(cfg->uid) < 0)
		return -1;
	return 0;
}
