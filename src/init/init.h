/* sandlot-init: PID 1 of every sandbox.
 *
 * Init is configured over the protocol (spec/protocol.md, "Configuration"):
 * it runs with no arguments, sends HELLO on its connection, reads the
 * host's CONFIG (config.c), sets the sandbox up (setup.c) and answers OK, or
 * ERROR naming what failed and exits 1; the loop (loop.c and friends) then
 * serves the protocol until the host goes away.
 *
 * How the connection and the rest of what a sandbox is made of reach init
 * is the backend's business.  The ns backend (src/backend/ns.c) starts init
 * already inside the sandbox's new namespaces, before the root is switched,
 * with these descriptors open (the vm backend's guest opens its own
 * connection and places the mounts it makes from its disks the same way):
 *   3  the protocol connection
 *   6  workspace storage: a detached mount (fsmount/open_tree fd) that
 *      becomes the sandbox's writable storage, or absent with CONFIG's
 *      TMPFS flag (init makes a tmpfs of DISK bytes instead)
 *   7  with CONFIG's IMAGE flag: a detached read-only mount of a built
 *      image's root filesystem (open_tree clone), which replaces the host's
 *      /usr, /etc...
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
 * Descriptors 4 and 5 are not used (the ns backend closes them).
 */
#ifndef SANDLOT_INIT_H
#define SANDLOT_INIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/filter.h>

#include "common/proto.h"

#define INIT_FD_PROTO 3
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

/* The sandbox's configuration, from CONFIG (config.c).  The strings and
 * the filter are init's own copies (init_config_free()). */
struct init_config {
	uid_t uid;
	gid_t gid;
	uint64_t nofile;
	uint64_t fsize;
	uint64_t disk;
	uint64_t pids;          /* the sandbox's pids limit (0 = unknown) */
	uint64_t scan_memory;   /* bound of the first change-tracking baseline (0: default) */
	const char *hostname;
	const char *home;       /* workspace and default cwd: INIT_HOME; tests may send another */
	int no_seccomp;
	int no_warm;            /* fork each command on demand (tests) */
	int tmpfs_storage;
	int image;              /* root from fd 7 */
	const char *workdir;    /* default cwd of commands; NULL: home */
	const char *user_name;  /* passwd name of uid `uid` */
	/* The seccomp program of commands; NULL/0 with no_seccomp. */
	struct sock_filter *filter;
	unsigned short filter_len;
	/* A VM guest's NIC (NET_* records; net_addr 0: none): IPv4 addresses
	 * as numbers, the port relay's TCP port (0: no relay). */
	uint32_t net_addr, net_prefix, net_gateway, net_dns, net_relay;
	char *owned[4];         /* the strings above that were allocated */
	/* A VM's clock and entropy from the host (TIME, SEED; 0 / 0: none):
	 * applied at the first CONFIG and at every re-attach (vm.c). */
	uint64_t time_ns;
	uint8_t seed[64];
	size_t seed_len;
};

/* strerror() in the host C library's words, whichever libc built init
 * (errtext.c). */
const char *init__strerror(int err);

/* Decode CONFIG's payload into cfg (defaults for what is absent).  Returns
 * 0, or an errno value (EPROTO: a malformed record; EINVAL: a bad or missing
 * value; ENOMEM) with a message naming the record in why; cfg then holds
 * nothing to free.  Pure: the fuzz target drives it.  (config.c) */
int init_config_decode(const uint8_t *payload, size_t len, struct init_config *cfg, char *why,
		       size_t why_size);
void init_config_free(struct init_config *cfg);

/* The start of the protocol on fd 3, up to the set-up: send HELLO, read
 * the host's CONFIG into cfg and set the sandbox up with it (init_setup()).
 * Bytes the host sent after CONFIG stay in rd (a fresh reader on entry), for
 * init_serve().  Returns 0, or -1 after answering ERROR on stream 0 (when
 * the connection still works), with nothing to free but rd; the caller
 * exits 1.  (config.c) */
int init_start(struct init_config *cfg, struct sl_reader *rd);

/* Send one finished frame on a blocking or non-blocking fd, waiting for it
 * to become writable: 0, or -1 with errno.  For the start, before the loop's
 * queue exists.  (config.c) */
int init_write_frame(int fd, struct sl_msg *m);

/* Before init_setup(), in an ns sandbox: the cgroup namespace, and the
 * working directory at the root, so that a child forked now (the first
 * warm child) is in the sandbox's cgroup namespace and is moved into the
 * new root with init by pivot_root().  0, or -1 (in a VM, or it failed:
 * init_setup() then does it and reports a failure).  (setup.c) */
int init_setup_early(const struct init_config *cfg);

/* The part of the start that can come before the set-up (called first by
 * init_setup() in an ns sandbox): reset what the host left ignored, the
 * commands' credentials and, where init_setup_early() succeeds, the first
 * command's warm child, which then drops its privileges and compiles its
 * seccomp filter on another CPU while init builds the root.  It runs
 * nothing before init has read an EXEC, which it does only after the
 * host's view of the filesystem is gone (init_setup_finish()).  Best
 * effort: what fails here is done, or reported, later.  (loop.c) */
void init_start_early(const struct init_config *cfg);

/* The first warm child, forked before the set-up (exec.c). */
void init__warm_early(const struct init_config *cfg);

/* Build the sandbox root, pivot into it.  Returns 0, or -1 with the reason
 * for init_setup_error().  (setup.c) */
int init_setup(struct init_config *cfg);

/* Why init_setup() failed: the message ("mount /proc: Operation not
 * permitted"), with the errno in *err.  (setup.c) */
const char *init_setup_error(int *err);

/* The last step of the setup, after the OK to CONFIG went out (so that the
 * host works meanwhile): detach the old root left stacked on the new one by
 * pivot_root, and go to the home directory.  No request is read before it.
 * 0, or -1 with errno (init then exits: the sandbox is not usable).
 * (setup.c) */
int init_setup_finish(const struct init_config *cfg);

/* Whether this is PID 1 of a sandlot microVM, started by the kernel as
 * /init (no arguments, no protocol connection open).  (vm.c) */
int init_vm_guest(int argc);

/* In a microVM: mount the kernel's filesystems, load the modules, find the
 * disks and the control port, leave the initramfs, and open what the ns
 * host would hand init (the image on INIT_FD_IMAGE, the workspace on
 * INIT_FD_STORAGE, the protocol connection); returns once the host has
 * connected to the control port.  On failure, says why on the console and
 * returns -1 (init exits, the VM stops).  (vm.c) */
int init_vm_boot(void);

/* In a microVM, the part of the set-up that depends on CONFIG, called first
 * by init_setup(): the root must come from the image (IMAGE), the
 * workspace disk gets its home/ (the sandbox user's) and tmp/ if it is
 * fresh.  0, or an errno value with the reason in why.  (vm.c) */
int init_vm_configure(const struct init_config *cfg, char *why, size_t len);
/* CONFIG's TIME (the guest's CLOCK_REALTIME) and SEED (credited to the
 * guest's RNG, whose CRNG is then reseeded), where given: at the first
 * CONFIG (init_vm_configure()) and at every re-attach after a DETACH (a
 * restored VM's clock is the saved one's, its RNG state a copy).  0, or an
 * errno value with why. */
int init_vm_clock_and_seed(const struct init_config *cfg, char *why, size_t len);
/* The guest's NIC and port relay from CONFIG's NET_* records (vm-net.c);
 * nothing without them.  0, or an errno value with why. */
int init_vm_net(const struct init_config *cfg, char *why, size_t len);

/* Set by init_vm_boot(). */
extern int init__vm_mode;

/* In a VM, whether the host end of the control port `fd` is not connected
 * (then reads return 0: the host is away, not gone); 0 outside VMs. */
int init__vm_host_away(int fd);

/* Serve the protocol on fd 3 until the host disconnects or sends SHUTDOWN;
 * kills every process before returning.  Answers CONFIG with OK first.
 * Takes over rd (what init_start() read past CONFIG) and frees it.
 * Returns the exit status for init.  (loop.c) */
int init_serve(const struct init_config *cfg, struct sl_reader *rd);

/* Once in init, before the first command's child is forked: empty the
 * capability bounding and ambient sets (which every child inherits; init
 * itself executes nothing) and work out the commands' rlimits.  0, or -1
 * with the reason for init_setup_error(); no command may be started then.
 * Once it succeeded, later calls return 0 at once.
 * (setup.c) */
int init_setup_children(const struct init_config *cfg);

/* In a freshly forked child, about to run a user command: drop to the
 * sandbox user, clear the remaining capabilities (the bounding and ambient
 * sets are empty since init_setup_children(); without it this fails with
 * EPERM), set no_new_privs, rlimits and oom_score_adj, then load the
 * seccomp filter.  Only raw syscalls.  Returns 0 or -1 with errno set.
 * (setup.c) */
int init_drop_privileges(const struct init_config *cfg);

#endif
