/* The credentials of the file operations the host asks for.
 *
 * Init is root of the sandbox's user namespace with every capability, so
 * that it can set the sandbox up and start commands.  The file operations
 * (FWRITE, FREAD, STAT, LIST, MKDIR, REMOVE) act for the API caller, whose
 * rights must be the sandbox user's and no more: as root, a planted link to
 * /proc/1/maps or /proc/1/environ gave init's memory map and environment,
 * a root-only file its contents, a directory only root may write a new
 * file.  So every one of them runs between init__as_user() and
 * init__as_init():
 *
 *   - the filesystem uid and gid become the sandbox user's (uid/gid 1000,
 *     or --uid/--gid): permission checks, file ownership and the owner
 *     checks of /proc (ptrace_may_access with PTRACE_MODE_FSCREDS) all use
 *     them, and what is created belongs to the user;
 *   - the *effective* capability set is emptied.  setfsuid() away from 0
 *     clears only the filesystem capabilities (CAP_CHOWN, CAP_DAC_*,
 *     CAP_FOWNER, ...); CAP_SYS_PTRACE, for one, would still let /proc/1
 *     be read.  The permitted set is kept, so init can take them back.
 *
 * Init has no supplementary groups (the host's clone child dropped them),
 * so the groups of an access check are the user's gid only, as for
 * commands.
 *
 * Why in init and not in a separate unprivileged process: init runs one
 * thread, so the switch covers exactly the operation and nothing else runs
 * meanwhile; fs credentials and capabilities are per thread, and the two
 * switches cost four system calls each, nothing next to the operation.  A
 * helper process with the user's uid would be reachable by the user's own
 * code (same uid: it could be signalled or, through its /proc entries,
 * inspected), and every transfer would need another hop.
 *
 * The changes tracker (scan.c) keeps init's credentials: it only reads
 * names and metadata of the workspace, which holds nothing the user did not
 * put there, and it must see the whole tree whatever the modes.
 */
#include "loop.h"

#include <linux/capability.h>
#include <string.h>

#include "linux/syscalls.h"

/* Both switches are checked: if the kernel refused one (it should never),
 * the file operation must not run with init's rights, and init must not go
 * on with the user's — so the connection ends (the sandbox is broken, the
 * host reports it). */

int init__as_user(struct loop *l)
{
	if (l->user_depth++ > 0)
		return 0;
	uid_t uid = l->cfg->uid;
	gid_t gid = l->cfg->gid;
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	if (sys_capget(&hdr, data) < 0)
		goto fail;
	l->saved_effective[0] = data[0].effective;
	l->saved_effective[1] = data[1].effective;
	l->saved_fsuid = sys_setfsuid((uid_t)-1);
	l->saved_fsgid = sys_setfsgid((gid_t)-1);
	/* The gid first: changing it needs CAP_SETGID, which leaving fsuid 0
	 * does not take away, but better not to depend on that. */
	sys_setfsgid(gid);
	sys_setfsuid(uid);
	if (sys_setfsgid((gid_t)-1) != gid || sys_setfsuid((uid_t)-1) != uid)
		goto fail;
	data[0].effective = data[1].effective = 0;
	if (sys_capset(&hdr, data) < 0)
		goto fail;
	return 0;
fail:
	init__fail(l, 1, "cannot take the sandbox user's credentials for a file operation");
	return -1;
}

void init__as_init(struct loop *l)
{
	if (l->user_depth == 0 || --l->user_depth > 0)
		return;
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	/* Capabilities first: going back to fsuid 0 is allowed anyway (the
	 * real uid is 0), and with them the fsgid can be restored. */
	if (sys_capget(&hdr, data) == 0) {
		data[0].effective = l->saved_effective[0];
		data[1].effective = l->saved_effective[1];
		if (sys_capset(&hdr, data) == 0) {
			sys_setfsuid(l->saved_fsuid);
			sys_setfsgid(l->saved_fsgid);
			if (sys_setfsuid((uid_t)-1) == l->saved_fsuid &&
			    sys_setfsgid((gid_t)-1) == l->saved_fsgid)
				return;
		}
	}
	init__fail(l, 1, "cannot restore init's credentials after a file operation");
}
