/* What a fuzz target (tests/fuzz/fuzz_NAME.c) defines, and the optional
 * hooks the replay driver (replay.c) uses when a target defines them.
 * See tests/fuzz/README.md. */
#ifndef SANDLOT_TESTS_FUZZ_H
#define SANDLOT_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* The entry point (libFuzzer's signature).  Aborts on a wrong answer (an
 * oracle that fails); returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Optional: structure-aware inputs for the replay driver.  Writes at most
 * max bytes to buf from the random numbers rng() gives and returns how
 * many.  Without it every third random input is plain random bytes. */
size_t fuzz_generate(uint64_t (*rng)(void), uint8_t *buf, size_t max);

/* Optional: write the target's generated seed files into dir (for seeds
 * that are easier to make with the code's own encoder than by hand).
 * 0 or 1. */
int fuzz_write_seeds(const char *dir);

#endif
