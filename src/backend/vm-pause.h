/* Pause, resume and kept workspaces of vm sandboxes (vm-pause.c; what a
 * user sees: docs/vm.md, "Pause and resume").
 *
 * A vm sandbox's kept workspace `name` is a directory
 * <data_dir>/vm/kept/<name>/ holding
 *   disk.img     the workspace disk (ext4, sparse), the guest's /home/user
 *                and /tmp;
 *   state        after a pause with SANDLOT_PAUSE_MEMORY: the running VM
 *                (devices and RAM) as QEMU's migration stream wrote it;
 *   state.meta   what that state needs of the VM it is loaded into (memory,
 *                vCPUs, accelerator, kernel, initramfs, root image), one
 *                line; a resume into anything else is refused;
 *   lock         flock()ed by the sandbox using it (EBUSY for others).
 * It appears whole or not at all (made under a temporary name, renamed).
 * A resume with a state loads it and deletes it once the guest runs
 * again (the disk moves on from there; a later resume without a new
 * memory pause boots afresh on the disk); without one it boots afresh on
 * the disk. */
#ifndef SANDLOT_BACKEND_VM_PAUSE_H
#define SANDLOT_BACKEND_VM_PAUSE_H

#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct sandlot;

struct vm_kept {
	char *dir;        /* NULL: the sandbox has no kept workspace */
	char *disk;       /* dir/disk.img */
	int lock_fd;      /* held while the sandbox uses it; -1 */
	int has_state;    /* a memory pause's state is there to load */
};

#define VM_KEPT_INIT { NULL, NULL, -1, 0 }

/* A VM's monitor: the host end of its QMP socket (fd), and the session on
 * it once it was first used (q: QEMU greets once per connection, so the
 * session lasts as long as the VM). */
struct vm_monitor {
	int fd;
	struct sandlot_qmp *q;
};

/* Close the session (or the bare fd).  Idempotent. */
void sandlot__vm_monitor_close(struct vm_monitor *m);

/* Take the kept workspace `name` for a sandbox whose disk is `bytes` and
 * whose QEMU runs as `owner`: with `resume` it must exist (ENOENT naming
 * it otherwise); without, it is made from `empty` (an empty ext4 of the
 * size; reserved as sandlot__vm_sparse_copy says) when it does not exist.  EBUSY while another sandbox has it.  On
 * failure k holds nothing. */
int sandlot__vm_kept_take(const char *data_dir, const char *name, int resume, uint64_t bytes,
			  const char *empty, uid_t owner, int reserve, struct vm_kept *k,
			  sandlot_error_t **err);
/* Let go of it (the files stay).  Idempotent. */
void sandlot__vm_kept_release(struct vm_kept *k);

/* The line state.meta holds for a VM of these parameters, into out. */
void sandlot__vm_ident(char *out, size_t n, uint64_t memory, unsigned cpus, const char *accel,
		       const char *vmlinux, const char *initrd, const char *root);
/* 0 when the kept state was saved by a VM like `ident`; else -1 with
 * EINVAL saying what differs. */
int sandlot__vm_state_check(const struct vm_kept *k, const char *ident, sandlot_error_t **err);

/* The first half of a pause: tell the guest's init to detach (it syncs the
 * guest's filesystems and answers; nothing more crosses the connection,
 * spec/protocol.md "Detaching"), then with SANDLOT_PAUSE_MEMORY save the
 * stopped VM through QEMU's monitor (mon) into k's state, durably.
 * QEMU is left to the caller to kill.  0, or -1 with err. */
int sandlot__vm_pause_save(struct sandlot *sb, struct vm_monitor *mon, const struct vm_kept *k,
			   const char *ident, unsigned flags, sandlot_error_t **err);
/* Load k's state into a QEMU started with -incoming defer (its monitor:
 * mon) and let the guest run; the state is then deleted.  0, or -1. */
int sandlot__vm_restore(struct vm_monitor *mon, struct vm_kept *k, sandlot_error_t **err);
/* The disk (and nothing else of the sandbox's) durable on the host. */
int sandlot__vm_kept_sync_disk(const struct vm_kept *k, sandlot_error_t **err);

/* The backend ops on kept workspaces by name (backend.h). */
int sandlot__vm_snapshot(const char *data_dir, const char *src, const char *dst,
			 double overcommit, sandlot_error_t **err);
int sandlot__vm_workspace_size(const char *data_dir, const char *name, uint64_t *bytes,
			       sandlot_error_t **err);
int sandlot__vm_workspace_remove(const char *data_dir, const char *name, sandlot_error_t **err);
int sandlot__vm_workspace_list(const char *data_dir, char ***names, sandlot_error_t **err);
int sandlot__vm_workspace_sync(const char *data_dir, sandlot_error_t **err);

/* vm.c's sparse copy of a file (holes stay holes), owned by `owner`; with
 * reserve, every block of it then allocated (fallocate). */
int sandlot__vm_sparse_copy(const char *src, const char *dst, uid_t owner, int reserve,
			    sandlot_error_t **err);
/* ENOSPC naming the numbers unless a new disk file of `file_bytes` fits in
 * the room of dir's filesystem times overcommit (vm.c). */
int sandlot__vm_disk_admit(const char *dir, uint64_t file_bytes, double overcommit,
			   sandlot_error_t **err);
/* Whether kept workspace `name` exists (its directory does). */
int sandlot__vm_kept_exists(const char *data_dir, const char *name);

#endif
