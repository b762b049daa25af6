// SPDX-License-Identifier: Apache-2.0
/*
 * test_topo_fuzz.c — the topology parser under thousands of mutated inputs, bounded in time.
 *
 * Seeds are every preset and every YAML file in examples/topologies. Each round applies one to four
 * random mutations (bit flips, YAML-significant bytes, deletions, duplications, truncations,
 * line swaps, hostile tokens, splices of two seeds) and loads the result from a buffer of exactly
 * its length, so AddressSanitizer sees any read past the end. Every result must be either a valid
 * topology (which then passes strata_topo_validate) or STRATA_ERR_PARSE with a message shaped
 * "fuzz:LINE:COL: expected ...". Any crash, leak, hang or other message fails the suite.
 *
 * STRATA_FUZZ_SEED and STRATA_FUZZ_ITERATIONS override the fixed seed and the round count; the
 * run also stops after STRATA_FUZZ_SECONDS (default 6) so a slow sanitizer build stays quick.
 * The coverage-guided harness for longer runs is tests/fuzz/fuzz_topo.c.
 */
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "topo/topo.h"

typedef struct seed {
  char *text;
  size_t len;
} seed;

static seed seeds[256];
static size_t seed_count;
static uint64_t rng_state;
static long parsed_ok, parsed_error;

static uint64_t next_random(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}

static size_t below(size_t n) {
  return n ? (size_t)(next_random() % n) : 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void add_seed(const char *text, size_t len) {
  if (seed_count == sizeof seeds / sizeof seeds[0]) return;
  seeds[seed_count].text = malloc(len + 1);
  memcpy(seeds[seed_count].text, text, len);
  seeds[seed_count].text[len] = '\0';
  seeds[seed_count++].len = len;
}

static void load_seeds(void) {
  for (size_t i = 0; i < strata_topo_preset_count(); i++) {
    const char *yaml = strata_topo_preset_yaml(strata_topo_preset_name(i));
    add_seed(yaml, strlen(yaml));
  }
  const char *dir = getenv("STRATA_SOURCE_DIR");
  if (dir == NULL) dir = access("examples/topologies", F_OK) == 0 ? "." : "..";
  char pattern[1024];
  snprintf(pattern, sizeof pattern, "%s/examples/topologies/*.yaml", dir);
  glob_t found;
  if (glob(pattern, 0, NULL, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; i++) {
      FILE *file = fopen(found.gl_pathv[i], "rb");
      if (file == NULL) continue;
      static char buf[1 << 16];
      size_t len = fread(buf, 1, sizeof buf, file);
      fclose(file);
      add_seed(buf, len);
    }
    globfree(&found);
  }
  /* A few hand-written corners the examples do not reach. */
  static const char *const extra[] = {
      "templates: {t: {gpu: h100, gpus: 8, intra: {kind: nvlink, nvlink: 4, nvswitch_domain: 8}}}\n"
      "sites:\n  - name: a\n    racks: [{name: r, count: 3, nodes: [{count: 2, template: t}]}]\n"
      "    buildings: [{name: b, nodes: {count: 1, gpu: none}}]\n",
      "sites: [{name: a, location: {lat: 1.5, lon: -2}}, {name: b}]\n"
      "links: [{between: [a, b], overlay: {kind: wg, site_to_site: yes, site_to_site_feature: "
      "x}}]\n",
  };
  for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) add_seed(extra[i], strlen(extra[i]));
}

/* ---- mutations on a growable buffer ---- */

typedef struct buffer {
  char *data;
  size_t len, cap;
} buffer;

static void buffer_reserve(buffer *b, size_t extra) {
  if (b->len + extra <= b->cap) return;
  b->cap = (b->len + extra) * 2;
  b->data = realloc(b->data, b->cap);
}

static void insert_bytes(buffer *b, size_t at, const char *bytes, size_t n) {
  buffer_reserve(b, n);
  memmove(b->data + at + n, b->data + at, b->len - at);
  memcpy(b->data + at, bytes, n);
  b->len += n;
}

static const char *const tokens[] = {
    ":",
    "- ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "\n",
    "  ",
    "#",
    "&a ",
    "*a",
    "!!str ",
    "? ",
    "|\n  x",
    ">",
    "'",
    "\"",
    "\\",
    "~",
    "null",
    "-1",
    "0",
    "1e999",
    "nan",
    "3:1",
    "0:0",
    "9999999999999999999999",
    "count: 0",
    "template: dgx-h100",
    "template: ib-cluster",
    "gpu: none",
    "gpus: 4096",
    "\"\\0\"",
    "---\n",
    "...\n",
    "%YAML 1.1\n",
    "\t",
    "\xc3\x28",
    "\xef\xbb\xbf",
    "nodes: {count: 100000000, gpu: h100, gpus: 4096, intra: pcie}",
    "between: [a, a]",
    "kind: none"};

static void mutate_once(buffer *b) {
  size_t at = below(b->len + 1);
  switch (below(8)) {
    case 0: /* flip a bit */
      if (b->len) b->data[below(b->len)] ^= (char)(1u << below(8));
      break;
    case 1: /* overwrite with any byte */
      if (b->len) b->data[below(b->len)] = (char)below(256);
      break;
    case 2: { /* delete a range */
      size_t n = below(b->len - (at < b->len ? at : b->len) + 1);
      if (n > 64) n = below(64);
      memmove(b->data + at, b->data + at + n, b->len - at - n);
      b->len -= n;
      break;
    }
    case 3: { /* duplicate a range somewhere */
      if (b->len == 0) break;
      size_t from = below(b->len), n = below(b->len - from + 1);
      if (n > 128) n = below(128);
      char *copy = malloc(n + 1);
      memcpy(copy, b->data + from, n);
      insert_bytes(b, at, copy, n);
      free(copy);
      break;
    }
    case 4: /* truncate */
      b->len = at;
      break;
    case 5: { /* swap the halves around a newline */
      size_t from = below(b->len);
      char *newline = b->len ? memchr(b->data + from, '\n', b->len - from) : NULL;
      if (newline == NULL) break;
      size_t cut = (size_t)(newline - b->data) + 1;
      char *rotated = malloc(b->len);
      memcpy(rotated, b->data + cut, b->len - cut);
      memcpy(rotated + b->len - cut, b->data, cut);
      memcpy(b->data, rotated, b->len);
      free(rotated);
      break;
    }
    case 6: { /* a YAML-significant or hostile token */
      const char *token = tokens[below(sizeof tokens / sizeof tokens[0])];
      insert_bytes(b, at, token, strlen(token));
      break;
    }
    default: { /* splice another seed's tail */
      const seed *other = &seeds[below(seed_count)];
      size_t from = below(other->len + 1);
      b->len = at;
      insert_bytes(b, at, other->text + from, other->len - from);
      break;
    }
  }
}

/* "fuzz:<digits>:<digits>: expected " */
static int message_well_formed(const char *err) {
  const char *p = err;
  if (strncmp(p, "fuzz:", 5) != 0) return 0;
  p += 5;
  for (int field = 0; field < 2; field++) {
    if (*p < '1' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    if (*p++ != ':') return 0;
  }
  return strncmp(p, " expected ", 10) == 0;
}

static int check_one(const char *data, size_t len) {
  char *exact = malloc(len ? len : 1); /* exactly len bytes: ASan catches overreads */
  memcpy(exact, data, len);
  char err[700];
  err[0] = '\0';
  strata_topo *topo = NULL;
  int status = strata_topo_load_string("fuzz", exact, len, &topo, err, sizeof err);
  int ok = 1;
  if (status == STRATA_OK) {
    parsed_ok++;
    ok = topo != NULL && strata_topo_validate(topo, err, sizeof err) == STRATA_OK &&
         strata_topo_gpus(topo) >= 0 && topo->site_count >= 1;
    for (int s = 0; ok && s < topo->site_count; s++)
      ok = strata_topo_site_index(topo, topo->sites[s].name) == s;
    for (int l = 0; ok && l < topo->link_count; l++)
      ok = strata_topo_links_between(topo, topo->links[l].site_a, topo->links[l].site_b, NULL, 0) >=
           1;
  } else {
    parsed_error++;
    ok = status == STRATA_ERR_PARSE && topo == NULL && message_well_formed(err);
  }
  if (!ok) {
    fprintf(stderr, "fuzz failure: status %d, message '%s', input (%zu bytes):\n", status, err,
            len);
    fwrite(data, 1, len, stderr);
    fputc('\n', stderr);
  }
  strata_topo_free(topo);
  free(exact);
  return ok;
}

int main(void) {
  load_seeds();
  if (seed_count < 10) {
    fprintf(stderr, "test_topo_fuzz: only %zu seeds\n", seed_count);
    return 1;
  }
  const char *env = getenv("STRATA_FUZZ_SEED");
  rng_state = env ? strtoull(env, NULL, 0) : 0x5eed5eedULL;
  if (rng_state == 0) rng_state = 1;
  env = getenv("STRATA_FUZZ_ITERATIONS");
  long iterations = env ? atol(env) : 20000;
  env = getenv("STRATA_FUZZ_SECONDS");
  double budget_s = env ? atof(env) : 6.0;
  double start = now_s();
  int failures = 0;

  /* Every seed as is, then every truncation of the first few (each prefix is a distinct input). */
  for (size_t i = 0; i < seed_count; i++) failures += !check_one(seeds[i].text, seeds[i].len);
  for (size_t i = 0; i < 3 && i < seed_count; i++)
    for (size_t cut = 0; cut < seeds[i].len; cut++) failures += !check_one(seeds[i].text, cut);

  buffer b = {0};
  long round = 0;
  for (; round < iterations && failures < 5; round++) {
    if ((round & 63) == 0 && now_s() - start > budget_s) break;
    const seed *s = &seeds[below(seed_count)];
    b.len = 0;
    buffer_reserve(&b, s->len);
    memcpy(b.data, s->text, s->len);
    b.len = s->len;
    size_t mutations = 1 + below(4);
    for (size_t m = 0; m < mutations; m++) mutate_once(&b);
    failures += !check_one(b.data, b.len);
  }
  free(b.data);
  for (size_t i = 0; i < seed_count; i++) free(seeds[i].text);
  printf("test_topo_fuzz: %ld mutated rounds in %.2f s, %ld parsed, %ld rejected, %d failures\n",
         round, now_s() - start, parsed_ok, parsed_error, failures);
  if (round < 1000 && failures == 0) {
    fprintf(stderr, "test_topo_fuzz: too few rounds (%ld) in the time budget\n", round);
    return 1;
  }
  return failures ? 1 : 0;
}
