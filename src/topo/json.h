// SPDX-License-Identifier: Apache-2.0
/*
 * json.h — the planner side's one way to write JSON: build a jansson tree, then print it.
 *
 * Every JSON document strata writes (a plan, a link matrix, `strata bench -J`, `strata place
 * --json`) goes through jansson (Debian's libjansson), so escaping, UTF-8 and number spelling
 * are done once, right. These helpers add the three conventions jansson leaves to us: how a
 * double that may be whole, NaN or infinite is spelled, how a string that is not valid UTF-8 is
 * kept, and where the document goes. Only the planner side and the command link jansson; the
 * runtime (libstrata) never does.
 */
#ifndef STRATA_TOPO_JSON_H
#define STRATA_TOPO_JSON_H

#include <jansson.h>
#include <stdio.h>

/* A number: null when not finite (JSON has no NaN), an integer when whole and exactly
 * representable (|v| < 2^53), else a real. Returns a new reference (NULL only without memory). */
json_t *strata_json_number(double v);

/* A string: `s` itself when it is valid UTF-8, else a copy with each invalid byte replaced by
 * U+FFFD, so a hostname or argument in another encoding never loses the whole document. NULL `s`
 * gives null. Returns a new reference (NULL only without memory). */
json_t *strata_json_string(const char *s);

/* obj[key] = value, stealing the reference to value. Returns obj, or NULL when obj or value is
 * NULL or the set fails (no memory), having released both: a failure anywhere in a document
 * makes the whole document NULL, never a document with a key missing. json_pack's "o" steals
 * and fails on NULL the same way. */
json_t *strata_json_set(json_t *obj, const char *key, json_t *value);

/* Appends value to array, stealing it; returns array or NULL as strata_json_set. */
json_t *strata_json_append(json_t *array, json_t *value);

/* Writes `doc` to `out` indented by two spaces, reals with `real_digits` significant digits (17
 * reads back bit for bit), and a final newline; then releases `doc`. Returns 0, or -1 when `doc`
 * is NULL (building it ran out of memory) or the write failed. */
int strata_json_write(FILE *out, json_t *doc, int real_digits);

#endif
