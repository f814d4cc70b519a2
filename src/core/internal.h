/* libsandlot internals: the sandbox object and the protocol connection.
 *
 * Threading model.  One I/O thread per process (started on first use) reads
 * the connections of all sandboxes with epoll and dispatches frames to
 * streams.  Stream handlers run on that thread with conn->lock held; they
 * update state and broadcast conn->cond, which the synchronous API calls on
 * other threads wait on.  Frames are written by whichever thread needs to,
 * under conn->wlock.  Lock order: timers lock → conn->lock → conn->wlock.
 */
#ifndef SANDLOT_CORE_INTERNAL_H
#define SANDLOT_CORE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "sandlot.h"
#include "backend/backend.h"
#include "common/error.h"
#include "common/proto.h"
#include "core/images.h"

struct sl_conn;
struct sl_stream;

typedef void (*sl_frame_fn)(struct sl_stream *s, const struct sl_frame_header *h,
			    const uint8_t *payload);
/* The connection died while the stream was open. */
typedef void (*sl_lost_fn)(struct sl_stream *s);

struct sl_stream {
	uint32_t id;
	struct sl_conn *conn;
	sl_frame_fn on_frame;
	sl_lost_fn on_lost;
	struct sl_stream *next;
	int registered;
};

struct sl_conn {
	int fd;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_mutex_t wlock;
	struct sl_reader reader;
	struct sl_stream *streams;
	uint32_t next_id;
	int hello;     /* 1: HELLO of our version came; -1: of another one */
	/* The answer to CONFIG: 1 OK, -1 ERROR (config_errno, config_msg). */
	int configured;
	int config_errno;
	char *config_msg;
	int dead;      /* no more frames will arrive */
	int wclosed;   /* DETACH was sent: nothing more may be (under wlock) */
	int io_done;   /* the I/O thread has let go of this connection */
	int kind;      /* tag for the epoll dispatcher; must stay first-ish */
};

/* What CONFIG tells a sandbox's init (spec/protocol.md, "Configuration"):
 * core fills it from the options before the backend starts, the backend
 * adds what only it knows (flags, the workspace's size) in start.  The
 * strings are borrowed (from the sandbox); NULL leaves init's default. */
struct sandlot_init_config {
	uint32_t flags;         /* SL_CONFIG_* */
	uint64_t nofile;        /* RLIMIT_NOFILE of commands (0: inherited) */
	uint64_t fsize;         /* RLIMIT_FSIZE of commands (0: none) */
	uint64_t disk;          /* size of a tmpfs workspace (SL_CONFIG_TMPFS) */
	uint64_t scan_memory;   /* bound of init's first baseline (0: default) */
	uint32_t pids;          /* the sandbox's pids limit (0: unknown) */
	const char *hostname, *workdir, *user;
	const void *seccomp;    /* the program (sock_filter array); NULL with NO_SECCOMP */
	size_t seccomp_len;
	/* A VM's clock and entropy (the vm backend sets them in start and
	 * resume): TIME is the host's clock when CONFIG is sent, SEED fresh
	 * random bytes for each start (spec/protocol.md). */
	int send_time;
	uint8_t seed[32];
	size_t seed_len;
	/* init sent its HELLO to an earlier connection already (a VM
	 * restored from a template): this one counts it as read. */
	int hello_before;
	/* A VM guest's NIC (NET_* records; 0: none, an ns sandbox's case):
	 * IPv4 addresses as numbers, the relay's TCP port. */
	uint32_t net_addr, net_prefix, net_gateway, net_dns, net_relay;
};

/* Set up conn on a connected socket and hand it to the I/O thread. */
int sandlot__conn_open(struct sl_conn *c, int fd, sandlot_error_t **err);
/* The handshake's first half: send CONFIG, without waiting for HELLO (they
 * cross: start-up costs no extra round trip).  0, or -1 with an error. */
int sandlot__conn_configure(struct sl_conn *c, const struct sandlot_init_config *ic,
			    sandlot_error_t **err);
/* Fill sb->init_cfg from sb's options (what every backend's init gets:
 * limits, names, the seccomp program), before the backend's start adds its
 * own part.  0, or -1 with an error (the seccomp program could not be
 * built). */
int sandlot__init_config_fill(struct sandlot *sb, sandlot_error_t **err);
/* The second half: wait (up to timeout_ms) for HELLO and the answer to
 * CONFIG.  0 when init is set up and serving; -1 with an error on timeout,
 * death, another protocol version, or init's ERROR (its errno and message:
 * what failed in the set-up). */
int sandlot__conn_wait_ready(struct sl_conn *c, uint64_t timeout_ms, sandlot_error_t **err);
/* Shut the socket down and wait until the I/O thread dropped it: every open
 * stream has seen on_lost.  The struct stays usable (calls fail with EPIPE). */
void sandlot__conn_shutdown(struct sl_conn *c);
/* Free what conn_open allocated (after shutdown, when nobody uses it). */
void sandlot__conn_free(struct sl_conn *c);

/* Register s with a fresh id (lock must NOT be held).  -1 if conn dead. */
int sandlot__stream_register(struct sl_conn *c, struct sl_stream *s, sl_frame_fn on_frame,
			     sl_lost_fn on_lost);
/* Remove s; call with conn->lock held. */
void sandlot__stream_unregister_locked(struct sl_stream *s);

/* Finish m and write it (under wlock).  Frees m.  -1 with EPIPE if dead. */
int sandlot__conn_send(struct sl_conn *c, struct sl_msg *m, sandlot_error_t **err);
/* Convenience: a frame with a single u32 record (KILL, CREDIT). */
int sandlot__conn_send_u32(struct sl_conn *c, uint8_t type, uint32_t stream, uint16_t tag,
			   uint32_t v, sandlot_error_t **err);

/* Exec timeouts, fired on the I/O thread. */
struct sl_timer {
	uint64_t deadline_ms;
	void (*fire)(struct sl_timer *t);
	struct sl_timer *next;
	int armed;
};
void sandlot__timer_arm(struct sl_timer *t);
void sandlot__timer_disarm(struct sl_timer *t);

/* Turn an ERROR frame's payload into a sandlot error with context. */
int sandlot__error_from_frame(sandlot_error_t **err, const uint8_t *payload, uint32_t len,
			      const char *what);

struct sandlot {
	char id[32];
	int id_given;               /* the caller chose the id (opts->id) */
	sandlot_options_t opts;     /* strings below are owned copies */
	char *image, *hostname, *data_dir, *init_path;
	char *workspace;            /* kept workspace's name, or NULL */
	struct sandlot_image img;   /* a built image (locked while the sandbox exists), or
				     * img.lock_fd < 0 for "host" */
	char **env;                 /* full default environment, NULL-terminated */
	pthread_mutex_t env_lock;   /* guards env (sandlot_set_env vs sandlot_exec); a leaf */
	const struct sandlot_backend_ops *ops;
	void *backend;
	int conn_fd;
	struct sandlot_init_config init_cfg; /* sent as CONFIG once started */
	struct sl_conn conn;
	int conn_open;
	int refs;                   /* the caller's handle + procs, readers, writers, requests */
	/* start_nowait: 0 until sandlot_wait_ready() knows, then 1 (ready) or
	 * -1 (the set-up failed: ready_status, ready_msg); under ready_lock. */
	int ready;
	int ready_status;
	char *ready_msg;
	pthread_mutex_t ready_lock;
	/* network (network.c), under net_lock */
	pthread_mutex_t net_lock;
	struct sl_policy *net_policy;  /* the policy now (never NULL once created) */
	struct sl_net *net;            /* the egress engine's attachment, once it had a network */
	struct sandlot_nft *net_nft;       /* the namespace's nftables context, once it had a network */
	int net_redirect;              /* the ruleset in the namespace redirects (not just drops) */
};

/* Network (network.c).  Compile opts' policy (EINVAL on a bad rule). */
struct sl_policy *sandlot__net_policy_of(const sandlot_options_t *opts, sandlot_error_t **err);
/* After the backend started sb: give it the policy in sb->net_policy. */
int sandlot__net_start(sandlot_t *sb, sandlot_error_t **err);
/* Destroy: stop serving the sandbox (its processes are dead). */
void sandlot__net_stop(sandlot_t *sb);

/* Handles that point into a sandbox (procs, readers, writers, requests in
 * flight) hold a reference, so sandlot_destroy() never frees memory they
 * still use; the last unref frees it. */
void sandlot__ref(sandlot_t *sb);
void sandlot__unref(sandlot_t *sb);

/* The disk overcommit ratio for opts: its own, else $SANDLOT_DISK_OVERCOMMIT,
 * else 1. */
double sandlot__overcommit(const sandlot_options_t *opts);
/* EINVAL naming it if opts->disk_overcommit, or $SANDLOT_DISK_OVERCOMMIT
 * when that is 0, is not a ratio from 1 to 1000. */
int sandlot__overcommit_check(const sandlot_options_t *opts, sandlot_error_t **err);

/* Whether id has the form of a sandbox id: "sb-" and 26 of [a-z2-7]. */
int sandlot__sandbox_id_valid(const char *id);

/* Record the workspace baseline for change tracking (no report). */
int sandlot__changes_baseline(sandlot_t *sb, sandlot_error_t **err);

/* Merge env lists: later entries override earlier ones with the same key. */
char **sandlot__env_merge(char *const *base, const char *const *extra);
void sandlot__strv_free(char **v);

#endif
