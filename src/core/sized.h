/* Versioned option structs (docs/libsandlot.md, "Versioned structs").
 *
 * Every struct of sandlot.h that a caller fills in starts with `size_t
 * size`, the sizeof the struct had in the caller's sandlot.h.  A caller
 * built against an older, shorter struct keeps working with a newer
 * library: the library copies only the fields that the caller's size
 * covers into a struct of its own, zero-filled, so the fields the caller
 * did not know have their defaults (0 means "default" in every such
 * struct).  A caller built against a newer, longer struct works with an
 * older library as long as the fields this library does not know are all
 * zero.  Everything else is refused with EINVAL: a size of 0 (the struct
 * was not initialised), a size that ends inside a field, a size far past
 * any version, or unknown fields that are set.
 */
#ifndef SANDLOT_CORE_SIZED_H
#define SANDLOT_CORE_SIZED_H

#include <stddef.h>

#include "sandlot.h"

/* One field of a versioned struct: where it is and how long. */
struct sl_field {
	size_t off, len;
};
#define SL_FIELD(type, member) { offsetof(type, member), sizeof(((type *)0)->member) }

/* The layout of a versioned struct as this library knows it. */
struct sl_struct_layout {
	const char *name;              /* "sandlot_options_t" */
	const char *init;              /* how to initialise it, for the message */
	size_t size;                   /* sizeof in this library */
	const struct sl_field *fields; /* every member but `size`, in order */
	size_t nfields;
};

/* Copy the caller's struct `in` into `out` (layout->size bytes): the
 * fields in->size covers, zeros for the rest, out's size set to
 * layout->size.  0, or -1 with EINVAL naming the struct and what is wrong
 * with its size; out is then all zeros. */
int sandlot__sized_copy(const struct sl_struct_layout *layout, const void *in, void *out,
			sandlot_error_t **err);

/* The same for each versioned struct of sandlot.h.  A NULL `in` is not
 * allowed here: callers handle their own defaults for NULL. */
int sandlot__options_copy(const sandlot_options_t *in, sandlot_options_t *out,
			  sandlot_error_t **err);
int sandlot__exec_spec_copy(const sandlot_exec_spec_t *in, sandlot_exec_spec_t *out,
			    sandlot_error_t **err);
int sandlot__exec_callbacks_copy(const sandlot_exec_callbacks_t *in,
				 sandlot_exec_callbacks_t *out, sandlot_error_t **err);
int sandlot__net_policy_copy(const sandlot_net_policy_t *in, sandlot_net_policy_t *out,
			     sandlot_error_t **err);
int sandlot__net_config_copy(const sandlot_net_config_t *in, sandlot_net_config_t *out,
			     sandlot_error_t **err);
int sandlot__packages_copy(const sandlot_packages_t *in, sandlot_packages_t *out,
			   sandlot_error_t **err);
int sandlot__packages_config_copy(const sandlot_packages_config_t *in,
				  sandlot_packages_config_t *out, sandlot_error_t **err);

/* ---- structs the library fills in (docs/libsandlot.md) ----
 *
 * One struct to fill, with a size field first: sandlot__out_check() before
 * the work (0, or -1 with EINVAL naming `name` when out->size is 0 or far
 * past any version: nothing is written), sandlot__out_put() at the end: the
 * library's `full` (lib_size bytes) into the caller's out, as far as its
 * size goes, zeros for the rest of it, size = what was written. */
int sandlot__out_check(const char *name, const void *out, size_t lib_size,
		       sandlot_error_t **err);
void sandlot__out_put(void *out, const void *full, size_t lib_size);

/* Elements of arrays, and structs without a size field of their own
 * (sandlot_stat_t), whose size the caller's macro passes: check it (EINVAL
 * naming `name` when it is below `min` or far past lib_size), then put
 * each: lib_size bytes of `full` into `size` bytes at dst (truncated, or
 * zero-filled). */
int sandlot__elem_check(const char *name, size_t size, size_t min, size_t lib_size,
			sandlot_error_t **err);
void sandlot__elem_put(void *dst, size_t size, const void *full, size_t lib_size);

/* For the tests: 0 if every layout lists all members of its struct, else
 * -1 with what is missing in why. */
int sandlot__sized_layouts_check(char *why, size_t len);

#endif
