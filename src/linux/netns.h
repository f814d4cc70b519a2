/* Network namespaces owned by the host.
 *
 * A sandbox's network namespace is made by the host, as root of the initial
 * user namespace, before the sandbox's own user namespace exists.  The
 * kernel checks network privileges (CAP_NET_ADMIN, CAP_NET_RAW,
 * CAP_NET_BIND_SERVICE) against the user namespace that owns the network
 * namespace, so "root" inside the sandbox cannot change its routes,
 * addresses, sysctls or nftables rules, nor bind ports below 1024: the
 * egress rules sandlot installs there (src/net) stay as they are.  (Cloning
 * CLONE_NEWUSER|CLONE_NEWNET together would give the new user namespace
 * the network namespace, and its root all of that.)
 *
 * Namespaces are per thread: these functions move only the calling thread,
 * and always bring it back before returning, except sandlot__netns_new(),
 * which leaves it inside until sandlot__netns_leave() so that a clone()
 * made in between starts its child there.
 */
#ifndef SANDLOT_LINUX_NETNS_H
#define SANDLOT_LINUX_NETNS_H

#include <stdint.h>

#include "common/error.h"

/* Move the calling thread into a new network namespace with loopback up.
 * *ns_fd: the new namespace (the caller owns it; it keeps the namespace
 * alive), *saved_fd: the one to return to with sandlot__netns_leave().  On
 * failure the thread is where it was and both are -1. */
int sandlot__netns_new(int *ns_fd, int *saved_fd, sandlot_error_t **err);

/* Move the calling thread into ns_fd; *saved_fd for sandlot__netns_leave(). */
int sandlot__netns_enter(int ns_fd, int *saved_fd, sandlot_error_t **err);

/* Back to the namespace saved by _new or _enter, and close *saved_fd.  A
 * thread that could not go back would create its sockets in a sandbox's
 * namespace from then on, so failing to is fatal (abort). */
void sandlot__netns_leave(int *saved_fd);

/* The sandbox's side of egress, set up inside ns_fd (idempotent):
 * an address on loopback and a default route through it (without a route
 * connect() fails with ENETUNREACH before the redirect can take it), the
 * listeners the redirect leads to, and the nftables ruleset:
 *   redirect: DNS (UDP and TCP port 53, to any address) to the DNS
 *             listeners, every other TCP connection but DNS over TLS (port
 *             853) to the proxy listener;
 *   filter:   everything else leaving the namespace is dropped, which a
 *             local sender sees at once as EPERM (UDP, QUIC, ICMP).
 * With redirect == 0 the ruleset only drops (the sandbox is back to
 * loopback only, and fails fast).  fds[] receives the listeners
 * (SANDLOT_NETNS_FD_*) the first time; later calls leave fds[] alone
 * when fds[0] >= 0.  *nft is the nftables context the rules go through,
 * made on the first call (NULL before) and reused after; release it with
 * sandlot__nft_free().  On failure nothing is half-applied to
 * the ruleset (one nftables transaction) and fds[] is unchanged. */
enum { SANDLOT_NETNS_FD_PROXY, SANDLOT_NETNS_FD_DNS_UDP, SANDLOT_NETNS_FD_DNS_TCP,
       SANDLOT_NETNS_NFDS };
struct sandlot_nft;
int sandlot__netns_egress(int ns_fd, int redirect, int fds[SANDLOT_NETNS_NFDS],
			  struct sandlot_nft **nft, sandlot_error_t **err);

/* ---- the egress rules (src/linux/nft.c) ---- */

/* Load the egress ruleset into ns_fd's namespace (redirect: as
 * sandlot__netns_egress() says; else drop only) through *nft, the
 * namespace's nftables context: made on the first call (*nft NULL before;
 * ns_fd is only read then) and reused after, from any namespace. */
int sandlot__nft_load(int ns_fd, int redirect, struct sandlot_nft **nft, sandlot_error_t **err);
/* Free the context (NULL: nothing).  Its socket's close waits for RCU
 * grace periods (milliseconds): a teardown path, or the helper's. */
void sandlot__nft_free(struct sandlot_nft *nft);
/* Hand every nftables context of this process to a helper process forked
 * now.  libnftables select()s on its netlink socket, which a descriptor
 * numbered FD_SETSIZE (1024) or more overflows, and a new socket takes
 * the lowest free number of the process: in a process holding thousands
 * of descriptors (a daemon's connections) that number is anybody's, and
 * the process aborts.  The helper's descriptors are only its sockets.
 * Call it while the process has one thread (fork); a process that never
 * calls it makes its contexts itself, refusing (EMFILE) when no low
 * number is free.  The helper ends when this process does. */
int sandlot__nft_helper_start(sandlot_error_t **err);

/* ---- namespaces made ahead ---- */

/* A network namespace made before a sandbox asks for one: loopback up and,
 * for egress, everything sandlot__netns_egress(redirect = 1) sets up (its
 * listeners and the nftables context the rules went through). */
struct sandlot_netns_ready {
	int ns_fd;
	int fds[SANDLOT_NETNS_NFDS];        /* egress: the listeners, else -1 */
	struct sandlot_nft *nft;                /* egress: the rules' context, else NULL */
};
int sandlot__netns_make(int egress, struct sandlot_netns_ready *r, sandlot_error_t **err);
/* Close what r still holds (each member may have been taken: -1 / NULL). */
void sandlot__netns_ready_close(struct sandlot_netns_ready *r);

/* An in-process stock of them, for a long-running process (sandlotd, through
 * sandlot_prepare()): creating a network namespace costs the kernel most of
 * a millisecond, and loading the egress rules about as much again.
 * _want sets how many of each kind to keep (0, 0 empties the stock);
 * _fill makes what is missing (the preparing thread calls it); _take hands
 * one over (0) or says there is none (-1: make it on the spot). */
void sandlot__netns_pool_want(unsigned plain, unsigned egress);
void sandlot__netns_pool_fill(void);
int sandlot__netns_pool_take(int egress, struct sandlot_netns_ready *out);

/* Where the proxy listens inside each sandbox: a port below 1024, which
 * nothing in the sandbox may bind (see above), on 127.0.0.1. */
#define SANDLOT_NETNS_PROXY_PORT 1
/* The sandbox's own address (on loopback, never seen outside it). */
#define SANDLOT_NETNS_ADDR 0x0afffe01u /* 10.255.254.1 */

/* ---- spare namespaces for the next `sandlot run` ----------------------------
 *
 * Making a network namespace is the dearest single step of a sandbox's
 * start (about 0.75 ms of a 6 ms `sandlot run` on the 2-CPU test host: the
 * kernel registers a loopback device, sysctls and per-namespace tables).
 * sandlotd keeps some in the process (sandlot__netns_pool_*); a one-shot
 * `sandlot run` has no process that lives until the next run, so the
 * cleanup helper of each run (backend/ns-helper.c), after its teardown,
 * leaves plain ones (loopback only, no egress) for the next runs of the
 * same data directory, kept by bind mounts:
 *
 *   /run/sandlot/netns-spare/<hash of data dir>/   (SANDLOT_NETNS_SPARE_DIR
 *       data-dir        the data directory they are for  overrides the base)
 *       fill.lock       held (exclusive) by whoever fills or drains
 *       <name>.ns       a bind mount of the namespace (nsfs)
 *       <name>.free     the marker: whoever unlinks it owns <name>.ns
 *
 * At most SANDLOT_NETNS_SPARE_MAX free ones per data directory.  A taker
 * opens the namespace and gives <name>.ns back (sandlot__netns_spare_put:
 * unmount, unlink) once its sandbox holds the namespace; the namespace
 * itself lives as long as its sandbox's processes.  Left-overs are
 * reclaimed by sandlot__netns_spare_sweep() (the stale collector): taken
 * ones whose taker died before putting them back, and every spare of a data
 * directory that no longer exists.  Taking is safe against all of these:
 * a spare unmounted under its taker is either open already (the namespace
 * lives on) or refused (a bare file), and the taker makes its own.  `sandlot drain` drains a data
 * directory's on purpose (sandlot__netns_spare_drain). */
#define SANDLOT_NETNS_SPARE_MAX 2
#define SANDLOT_NETNS_SPARE_NAME 32

/* Take a free spare of data_dir: the namespace's descriptor, with its name
 * in name[] (for sandlot__netns_spare_put), or -1 when there is none (or
 * none usable).  Never fails otherwise: the caller makes its own. */
int sandlot__netns_spare_take(const char *data_dir, char name[SANDLOT_NETNS_SPARE_NAME]);

/* Unmount and remove a taken spare's mount point (name from _take; "": a
 * no-op).  Best effort: what is left, the sweep removes. */
void sandlot__netns_spare_put(const char *data_dir, const char *name);

/* Make spares until data_dir has `target` free (capped at
 * SANDLOT_NETNS_SPARE_MAX), unless another process is filling it now.
 * Returns how many were made; never fails.  Moves the calling thread
 * between namespaces: for a single-threaded helper, off the critical
 * path. */
unsigned sandlot__netns_spare_fill(const char *data_dir, unsigned target);

/* Free spares of data_dir now. */
unsigned sandlot__netns_spare_count(const char *data_dir);

/* Remove every free spare of data_dir (waiting for a fill in progress) and,
 * when none is taken, its directory; returns how many were removed. */
unsigned sandlot__netns_spare_drain(const char *data_dir);

/* For every data directory on the host: remove taken spares (whose taker
 * died before putting them back; one that is still to put them back finds
 * nothing to do), and drain all of a data directory that is gone.  Skips a
 * pool being filled. */
void sandlot__netns_spare_sweep(void);

#endif
