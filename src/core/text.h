// SPDX-License-Identifier: Apache-2.0
/*
 * text.h — writing strings into the text formats strata emits (JSON, YAML).
 */
#ifndef STRATA_CORE_TEXT_H
#define STRATA_CORE_TEXT_H

#include <stdio.h>

/* `s` as a JSON string literal, which is also a valid YAML double-quoted scalar: quote and
 * backslash escaped, newline as \n, other control characters and DEL as \u00XX. NULL writes "". */
void strata_write_quoted(FILE *f, const char *s);

#endif
