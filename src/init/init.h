/* sandlot-init: PID 1 of every sandbox.
 *
 * The host starts it (already inside the sandbox's new namespaces, before
 * the root is switched) as
 *
 *   sandlot-init [options]
 *
 * with these descriptors open:
 *   3  the protocol connection (spec/protocol.md)
 *   4  status pipe: setup failure is reported here as one line of text
 *      ("errno message"), then init exits 1; on success it is closed
 *      right before HELLO is sent
 *   5  seccomp program for user commands: raw `struct sock_filter` array
 *      (memfd, read from offset 0), or absent with --no-seccomp (tests only)
 *   6  workspace storage: a detached mount (fsmount/open_tree fd) that
 *      becomes the sandbox's writable storage, or absent with --tmpfs-storage
 *   7  with --image: a detached read-only mount of a built image's root
 *      filesystem (open_tree clone), which replaces the host's /usr, /etc...
 *   8  the workspace's lock (a locked file of the host's storage pool), or
 *      absent: init never reads it, only keeps it open for as long as it
 *      lives, so the host knows the workspace is in use until the last
 *      process of the sandbox is gone (commands never inherit it)
 *   9  optional: the whole root tree, prepared by the host (a detached
 *      clone of src/backend/ns-root.c's template): when it is open, init
 *      attaches it instead of building the root (and ignores fd 7)
 *  10  optional: the sandbox's OOM-kill counter, a read-only file with an
 *      "oom_kill N" line (the ns backend: its cgroup's memory.events, or
 *      memory.oom_control on v1)
 *  11  optional: the sandbox's refused-fork counter, a read-only file with a
 *      "max N" line (the ns backend: its cgroup's pids.events)
 *      Init reads both before and after every command, for EXIT's
 *      OOM_KILLS and PIDS_REFUSED (src/init/events.c); commands never
 *      inherit them.
 *
 * Options (all numbers decimal):
 *   --uid N --gid N        sandbox user (default 1000/1000)
 *   --nofile N             RLIMIT_NOFILE for commands
 *   --fsize N              RLIMIT_FSIZE for commands (bytes)
 *   --disk N               size of the tmpfs storage with --tmpfs-storage
 *   --pids N               the sandbox's pids limit (tunes the warm child)
 *   --hostname NAME
 *   --no-seccomp           do not filter commands (unit tests of init only)
 *   --tmpfs-storage        storage on tmpfs of --disk bytes instead of fd 6
 *   --home DIR             workspace directory (default /home/user)
 *   --no-warm              do not keep a pre-forked child ready for the next command
 *   --image                the root comes from the image on fd 7
 *   --workdir DIR          default working directory of commands (default --home)
 *   --user-name NAME       login name of the sandbox user (default "user")
 *   --no-setup             skip init_setup() entirely (unit tests of the loop
 *                          run init on the host this way, never in production)
 *
 * Setup (setup.c) builds the root filesystem and switches to it; the loop
 * (loop.c and friends) then serves the protocol until the host goes away.
 */
#ifndef SANDLOT_INIT_H
#define SANDLOT_INIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/filter.h>

#define INIT_FD_PROTO 3
#define INIT_FD_STATUS 4
#define INIT_FD_SECCOMP 5
#define INIT_FD_STORAGE 6
#define INIT_FD_IMAGE 7
#define INIT_FD_LOCK 8
#define INIT_FD_ROOT 9
#define INIT_FD_OOM_EVENTS 10
#define INIT_FD_PIDS_EVENTS 11
/* The last descriptor init may be handed. */
#define INIT_FD_LAST INIT_FD_PIDS_EVENTS

#define INIT_HOME "/home/user"
#define INIT_SCAN_LIMIT 100000

struct init_config {
	uid_t uid;
	gid_t gid;
	uint64_t nofile;
	uint64_t fsize;
	uint64_t disk;
	uint64_t pids;          /* the sandbox's pids limit (0 = unknown) */
	uint64_t scan_memory;   /* --scan-memory: bound of the first change-tracking baseline (0: default) */
	const char *hostname;
	const char *home;       /* workspace and default cwd: INIT_HOME; tests may override with --home */
	int no_seccomp;
	int no_setup;           /* --no-setup */
	int no_warm;            /* --no-warm: fork each command on demand (tests) */
	int tmpfs_storage;
	int image;              /* --image: root from fd 7 */
	const char *workdir;    /* default cwd of commands; NULL: home */
	const char *user_name;  /* passwd name of uid `uid` */
	/* Loaded by init_setup() from fd 5; NULL/0 with --no-seccomp. */
	struct sock_filter *filter;
	unsigned short filter_len;
};

/* strerror() in the host C library's words, whichever libc built init
 * (errtext.c). */
const char *init__strerror(int err);

/* Parse argv into cfg; prints a message and returns -1 on bad usage. */
int init_parse_args(int argc, char **argv, struct init_config *cfg);

/* Build the sandbox root, pivot into it, load the seccomp program.  On
 * failure writes "errno message" to the status fd and returns -1; the
 * caller exits 1.  (setup.c) */
int init_setup(struct init_config *cfg);

/* The last step of the setup, after HELLO went out (so that the host
 * works meanwhile): detach the old root left stacked on the new one by
 * pivot_root, and go to the home directory.  No request is read before it.
 * 0, or -1 with errno (init then exits: the sandbox is not usable).
 * (setup.c) */
int init_setup_finish(const struct init_config *cfg);

/* Whether this is PID 1 of a sandlot microVM, started by the kernel as
 * /init (no arguments, no protocol connection open).  (vm.c) */
int init_vm_guest(int argc);

/* In a microVM: mount the kernel's filesystems, load the modules, find the
 * disks and the control port, leave the initramfs, and open what the ns
 * host would hand init (the image, the workspace, the protocol
 * connection), setting cfg->image; returns once the host has connected to
 * the control port.  On failure, says why on the console and returns -1
 * (init exits, the VM stops).  (vm.c) */
int init_vm_boot(struct init_config *cfg);

/* Set by init_vm_boot(). */
extern int init__vm_mode;

/* In a VM, whether the host end of the control port `fd` is not connected
 * (then reads return 0: the host is away, not gone); 0 outside VMs. */
int init__vm_host_away(int fd);

/* Serve the protocol on fd 3 until the host disconnects or sends SHUTDOWN;
 * kills every process before returning.  Sends HELLO first and closes the
 * status fd just before.  Returns the exit status for init.  (loop.c) */
int init_serve(const struct init_config *cfg);

/* In a freshly forked child, about to run a user command: drop to the
 * sandbox user, clear every capability (bounding and ambient included),
 * set no_new_privs, rlimits and oom_score_adj, then load the seccomp filter.
 * Only async-signal-safe calls.  Returns 0 or -1 with errno set.  (setup.c) */
int init_drop_privileges(const struct init_config *cfg);

#endif
