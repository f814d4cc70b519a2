/* sandlot image: build, ls, inspect, rm (image.c, image_build.c). */
#ifndef SANDLOT_CLI_IMAGE_H
#define SANDLOT_CLI_IMAGE_H

#include <stddef.h>

int image_build(int argc, char **argv);

/* Remove a directory tree without crossing into other filesystems
 * (unmounting first whatever is mounted under it).  Best effort. */
void image_rm_tree(const char *dir);

/* Remove images/<digest> unless a sandbox uses it or a name other than
 * those already removed points at it: 0 removed, 1 kept (why says why),
 * -1 failed (why says why). */
int image_remove_digest(const char *images, const char *digest, char *why, size_t whylen);

#endif
