// SPDX-License-Identifier: Apache-2.0
/*
 * abi.h — the struct header of the public option structs (strata.h, STRATA_STRUCT_HEADER): how
 * their _init calls fill it and how the calls that take a struct read it, so that a program
 * built against an older strata of this major version keeps working with this library.
 *
 * The library never reads a caller's struct directly: it imports it into a struct of its own
 * size, defaults first, then the caller's struct_size bytes over them; and writes back (config
 * calls that fill the caller's struct) only those bytes.
 */
#ifndef STRATA_CORE_ABI_H
#define STRATA_CORE_ABI_H

#include <stddef.h>
#include <stdint.h>

/* The first fields of every option struct, as STRATA_STRUCT_HEADER declares them. */
typedef struct strata_struct_header {
  size_t struct_size;
  uint32_t struct_magic;
  uint32_t struct_version;
} strata_struct_header;

/* _init: the defaults (`defaults`, full_size bytes: the library's struct) into the caller's
 * struct of struct_size bytes, then its header. Bytes past full_size (a program built against a
 * newer header) are zeroed; import refuses such a struct. */
void strata_struct_init(void *user, const void *defaults, size_t full_size, size_t struct_size,
                        int header_version);
/* Reads the caller's struct `user` into `full` (full_size bytes, holding the defaults): STRATA_OK;
 * STRATA_ERR_INVALID_ARG when it is NULL or was not filled by its _init (`init` names the
 * call), STRATA_ERR_VERSION when it is larger than full_size. The error is logged and, when err
 * is not NULL, written there. */
int strata_struct_import(const void *user, void *full, size_t full_size, const char *what,
                         const char *init, char *err, size_t err_len);
/* Writes `full` back into the caller's imported struct: its struct_size bytes. */
void strata_struct_export(void *user, const void *full);

#endif
