/* Ending sandboxes from a long-lived owner (sandlotd): the calls it needs
 * besides sandlot_destroy(), so that it never reaches past libsandlot into
 * a backend's processes or cgroups.  Each dispatches through the backend
 * table (src/backend/backend.h).  Not (yet) part of the public ABI.
 */
#ifndef SANDLOT_CORE_TEARDOWN_H
#define SANDLOT_CORE_TEARDOWN_H

#include "sandlot.h"

/* Start killing every process of sb and return at once: commands then end
 * as killed and sandlot_alive() turns 0 soon after; sandlot_destroy() still
 * has to follow (it waits for the end and frees everything).  For an owner
 * that must stop a sandbox now while other threads may still be in calls
 * on it.  Safe from any thread concurrently with every call on sb except
 * sandlot_destroy() and sandlot_destroy_nowait(); idempotent; never fails. */
void sandlot__stop(sandlot_t *sb);

/* 1 when sb's sandbox has ended, by itself (its init exited: a crash, an
 * out-of-memory kill of init) or through sandlot__stop(); 0 while it runs.
 * Unlike sandlot_alive(), which reports the protocol connection, this asks
 * the backend whether the sandbox itself is still there.  Reaps nothing
 * (sandlot_destroy() does).  Thread safety as for sandlot__stop(). */
int sandlot__ended(const sandlot_t *sb);

/* Remove what a sandbox with this id left on the host after its owner lost
 * it: a sandlot_destroy() whose cleanup the kernel was slow to let finish
 * (a loaded host), or a sandbox whose owner was killed (kill -9 of
 * sandlotd).  Asks every backend.  With kill, whatever of it still runs is
 * killed first; without, a part that still holds a process is left alone.
 * The sandbox's workspace is not touched (sandlot_workspace_*).
 *
 * Only for ids the caller knows to be its own (from its registry): another
 * process's live sandbox of that id would be torn down.
 *
 * Returns how many parts of it remain (the kernel is still finishing with
 * its processes: call again later), 0 when nothing is left, or -1 with an
 * error: EINVAL when id is not a sandbox id. */
int sandlot__remove_leftovers(const char *id, int kill, sandlot_error_t **err);

#endif
