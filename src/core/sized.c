/* Versioned option structs: see sized.h. */
#include "core/sized.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* A size this far past the library's struct is not a newer version of it
 * but an uninitialised size field: refuse it before reading that much. */
#define SIZE_SLACK 4096

/* Whether `size` ends between two fields (or inside the padding after
 * one), never inside one. */
static int on_boundary(const struct sl_struct_layout *l, size_t size)
{
	for (size_t i = 0; i < l->nfields; i++) {
		const struct sl_field *f = &l->fields[i];
		if (size > f->off && size < f->off + f->len)
			return 0;
	}
	return 1;
}

int sandlot__sized_copy(const struct sl_struct_layout *l, const void *in, void *out,
			sandlot_error_t **err)
{
	size_t size;
	memset(out, 0, l->size);
	memcpy(&size, in, sizeof(size));
	if (size == 0)
		return sandlot__error(err, EINVAL,
				      "%s: size is 0 (not initialised): set .size = sizeof(%s)%s%s",
				      l->name, l->name, l->init ? " or call " : "",
				      l->init ? l->init : "");
	if (size < sizeof(size_t) || size > l->size + SIZE_SLACK)
		return sandlot__error(err, EINVAL,
				      "%s: size %zu is not the size of any version of it (this "
				      "libsandlot's is %zu): set .size = sizeof(%s)",
				      l->name, size, l->size, l->name);
	if (size < l->size && !on_boundary(l, size))
		return sandlot__error(err, EINVAL,
				      "%s: size %zu ends inside a field: set .size = sizeof(%s)",
				      l->name, size, l->name);
	if (size > l->size) {
		/* A newer caller: fine if it left every field this library
		 * does not know at zero. */
		const unsigned char *extra = (const unsigned char *)in + l->size;
		for (size_t i = 0; i < size - l->size; i++)
			if (extra[i])
				return sandlot__error(err, EINVAL,
						      "%s: the caller's struct (%zu bytes) sets fields "
						      "that this libsandlot (%zu bytes) does not know: "
						      "it needs a newer libsandlot",
						      l->name, size, l->size);
		size = l->size;
	}
	memcpy(out, in, size);
	memcpy(out, &l->size, sizeof(size_t));
	return 0;
}

#define LAYOUT(var, type, init_hint, ...)                                              \
	static const struct sl_field var##_fields[] = { __VA_ARGS__ };                  \
	static const struct sl_struct_layout var = {                                    \
		#type, init_hint, sizeof(type), var##_fields,                            \
		sizeof(var##_fields) / sizeof(var##_fields[0]),                          \
	}

/* Every member after `size`.  New members go at the end of the struct and
 * at the end of its list here. */
LAYOUT(options_layout, sandlot_options_t, "sandlot_options_init()",
       SL_FIELD(sandlot_options_t, image), SL_FIELD(sandlot_options_t, memory_bytes),
       SL_FIELD(sandlot_options_t, cpus_milli), SL_FIELD(sandlot_options_t, pids),
       SL_FIELD(sandlot_options_t, disk_bytes), SL_FIELD(sandlot_options_t, nofile),
       SL_FIELD(sandlot_options_t, env), SL_FIELD(sandlot_options_t, hostname),
       SL_FIELD(sandlot_options_t, network), SL_FIELD(sandlot_options_t, net_allow),
       SL_FIELD(sandlot_options_t, net_deny), SL_FIELD(sandlot_options_t, storage),
       SL_FIELD(sandlot_options_t, data_dir), SL_FIELD(sandlot_options_t, init_path),
       SL_FIELD(sandlot_options_t, workspace), SL_FIELD(sandlot_options_t, disk_overcommit),
       SL_FIELD(sandlot_options_t, id), SL_FIELD(sandlot_options_t, changes_max_bytes),
       SL_FIELD(sandlot_options_t, scan_memory_bytes),
       SL_FIELD(sandlot_options_t, cleanup_helper), SL_FIELD(sandlot_options_t, start_nowait),
       SL_FIELD(sandlot_options_t, isolation));

LAYOUT(exec_spec_layout, sandlot_exec_spec_t, NULL,
       SL_FIELD(sandlot_exec_spec_t, argv), SL_FIELD(sandlot_exec_spec_t, env),
       SL_FIELD(sandlot_exec_spec_t, cwd), SL_FIELD(sandlot_exec_spec_t, stdin_pipe),
       SL_FIELD(sandlot_exec_spec_t, timeout_ms), SL_FIELD(sandlot_exec_spec_t, last));

LAYOUT(exec_callbacks_layout, sandlot_exec_callbacks_t, NULL,
       SL_FIELD(sandlot_exec_callbacks_t, on_output), SL_FIELD(sandlot_exec_callbacks_t, on_exit),
       SL_FIELD(sandlot_exec_callbacks_t, userdata));

LAYOUT(net_policy_layout, sandlot_net_policy_t, NULL,
       SL_FIELD(sandlot_net_policy_t, mode), SL_FIELD(sandlot_net_policy_t, allow),
       SL_FIELD(sandlot_net_policy_t, deny));

LAYOUT(net_config_layout, sandlot_net_config_t, NULL,
       SL_FIELD(sandlot_net_config_t, resolver), SL_FIELD(sandlot_net_config_t, allow_ranges),
       SL_FIELD(sandlot_net_config_t, max_connections),
       SL_FIELD(sandlot_net_config_t, dns_qps));

LAYOUT(packages_layout, sandlot_packages_t, NULL,
       SL_FIELD(sandlot_packages_t, pip), SL_FIELD(sandlot_packages_t, npm));

LAYOUT(packages_config_layout, sandlot_packages_config_t, NULL,
       SL_FIELD(sandlot_packages_config_t, pip_index),
       SL_FIELD(sandlot_packages_config_t, pip_hosts),
       SL_FIELD(sandlot_packages_config_t, npm_registry),
       SL_FIELD(sandlot_packages_config_t, npm_hosts),
       SL_FIELD(sandlot_packages_config_t, ca_file),
       SL_FIELD(sandlot_packages_config_t, cache_dir));

int sandlot__options_copy(const sandlot_options_t *in, sandlot_options_t *out,
			  sandlot_error_t **err)
{
	return sandlot__sized_copy(&options_layout, in, out, err);
}

int sandlot__exec_spec_copy(const sandlot_exec_spec_t *in, sandlot_exec_spec_t *out,
			    sandlot_error_t **err)
{
	return sandlot__sized_copy(&exec_spec_layout, in, out, err);
}

int sandlot__exec_callbacks_copy(const sandlot_exec_callbacks_t *in,
				 sandlot_exec_callbacks_t *out, sandlot_error_t **err)
{
	return sandlot__sized_copy(&exec_callbacks_layout, in, out, err);
}

int sandlot__net_policy_copy(const sandlot_net_policy_t *in, sandlot_net_policy_t *out,
			     sandlot_error_t **err)
{
	return sandlot__sized_copy(&net_policy_layout, in, out, err);
}

int sandlot__net_config_copy(const sandlot_net_config_t *in, sandlot_net_config_t *out,
			     sandlot_error_t **err)
{
	return sandlot__sized_copy(&net_config_layout, in, out, err);
}

int sandlot__packages_copy(const sandlot_packages_t *in, sandlot_packages_t *out,
			   sandlot_error_t **err)
{
	return sandlot__sized_copy(&packages_layout, in, out, err);
}

int sandlot__packages_config_copy(const sandlot_packages_config_t *in,
				  sandlot_packages_config_t *out, sandlot_error_t **err)
{
	return sandlot__sized_copy(&packages_config_layout, in, out, err);
}

static const struct sl_struct_layout *const layouts[] = {
	&options_layout,  &exec_spec_layout, &exec_callbacks_layout, &net_policy_layout,
	&net_config_layout, &packages_layout, &packages_config_layout,
};

/* Whether each layout lists every member: in order, from right after
 * `size` to the end, with no gap longer than padding (shorter than the next
 * member and than 8 bytes; the structs are 8-aligned by `size`).  It cannot
 * see a small member missing where padding could have been. */
int sandlot__sized_layouts_check(char *why, size_t len)
{
	for (size_t k = 0; k < sizeof(layouts) / sizeof(layouts[0]); k++) {
		const struct sl_struct_layout *l = layouts[k];
		size_t end = sizeof(size_t);
		for (size_t i = 0; i < l->nfields; i++) {
			const struct sl_field *f = &l->fields[i];
			if (f->off < end || f->off - end >= 8 || f->off - end >= f->len) {
				snprintf(why, len, "%s: field %zu at offset %zu, after a field ending at %zu",
					 l->name, i, f->off, end);
				return -1;
			}
			end = f->off + f->len;
		}
		if (((end + 7) & ~(size_t)7) != l->size) {
			snprintf(why, len, "%s: the listed fields end at %zu, the struct at %zu",
				 l->name, end, l->size);
			return -1;
		}
	}
	return 0;
}

/* ---- structs the library fills in --------------------------------------------- */

int sandlot__out_check(const char *name, const void *out, size_t lib_size,
		       sandlot_error_t **err)
{
	size_t size;
	memcpy(&size, out, sizeof(size));
	if (size == 0)
		return sandlot__error(err, EINVAL,
				      "%s: size is 0 (not initialised): set .size = sizeof(%s) "
				      "before the call", name, name);
	if (size < sizeof(size_t) || size > lib_size + SIZE_SLACK)
		return sandlot__error(err, EINVAL,
				      "%s: size %zu is not the size of any version of it (this "
				      "libsandlot's is %zu): set .size = sizeof(%s)",
				      name, size, lib_size, name);
	return 0;
}

void sandlot__out_put(void *out, const void *full, size_t lib_size)
{
	size_t size;
	memcpy(&size, out, sizeof(size));
	sandlot__elem_put(out, size, full, lib_size);
	size_t wrote = size < lib_size ? size : lib_size;
	memcpy(out, &wrote, sizeof(wrote));
}

int sandlot__elem_check(const char *name, size_t size, size_t min, size_t lib_size,
			sandlot_error_t **err)
{
	if (size < min || size > lib_size + SIZE_SLACK)
		return sandlot__error(err, EINVAL,
				      "%s: the caller's size %zu is not the size of any version of "
				      "it (this libsandlot's is %zu)", name, size, lib_size);
	return 0;
}

void sandlot__elem_put(void *dst, size_t size, const void *full, size_t lib_size)
{
	if (size <= lib_size) {
		memcpy(dst, full, size);
	} else {
		memcpy(dst, full, lib_size);
		memset((char *)dst + lib_size, 0, size - lib_size);
	}
}
