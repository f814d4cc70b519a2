/* Ending sandboxes from a long-lived owner (teardown.h). */
#include <errno.h>

#include "common/sbid.h"
#include "core/internal.h"
#include "core/teardown.h"

void sandlot__stop(sandlot_t *sb)
{
	if (sb && sb->ops && sb->ops->stop)
		sb->ops->stop(sb);
}

int sandlot__ended(const sandlot_t *sb)
{
	if (!sb || !sb->ops)
		return 1;
	if (sb->ops->ended)
		return sb->ops->ended(sb) ? 1 : 0;
	return !sandlot_alive(sb);
}

int sandlot__remove_leftovers(const char *id, int kill, sandlot_error_t **err)
{
	if (!id || !sandlot__sandbox_id_valid(id))
		return sandlot__error(err, EINVAL,
				      "invalid sandbox id \"%.64s\": " SANDLOT_SBID_EXPECTED,
				      id ? id : "(null)");
	unsigned left = 0;
	for (const struct sandlot_backend_ops *const *b = sandlot__backends; *b; b++)
		if ((*b)->remove_leftovers)
			left += (*b)->remove_leftovers(id, kill);
	return left > 0x7fffffffu ? 0x7fffffff : (int)left;
}
