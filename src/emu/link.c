// SPDX-License-Identifier: Apache-2.0
/* link.c — the arithmetic of one emulated link direction (see link.h for the model).
 *
 * Invariants: busy_until_ns never moves backwards; an in-order packet's due time is never earlier
 * than the previous in-order packet's (FIFO clamp), so jitter stretches the tail of the delay
 * distribution instead of reordering; a dropped packet changes no timing state except that a
 * packet lost on the wire has used its serialization time, as on a real link.
 * Must never: read a clock, allocate, or draw randomness from anything but the link's own seeded
 * generator (runs must be reproducible from --seed).
 */
#include "emu/link.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "strata.h"

#define NS_PER_S 1000000000.0
#define LINK_MIN_QUEUE_BYTES (64u * 1024u)
#define LINK_MIN_QUEUE_RTT_NS 10000000ull      /* 10 ms */
#define LINK_DEFAULT_REORDER_GAP_NS 1000000ull /* 1 ms */

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double strata_emu_link_random(strata_emu_link *link) {
  return (double)(splitmix64(&link->rng_state) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t strata_emu_link_queue_default_bytes(const strata_emu_link_params *params) {
  if (params->rate_bps == 0) return LINK_MIN_QUEUE_BYTES;
  uint64_t rtt_ns = 2 * params->delay_ns;
  if (rtt_ns < LINK_MIN_QUEUE_RTT_NS) rtt_ns = LINK_MIN_QUEUE_RTT_NS;
  double bdp = (double)params->rate_bps / 8.0 * (double)rtt_ns / NS_PER_S;
  return bdp < LINK_MIN_QUEUE_BYTES ? LINK_MIN_QUEUE_BYTES : (uint64_t)bdp;
}

void strata_emu_link_init(strata_emu_link *link, const strata_emu_link_params *params,
                          uint64_t seed) {
  memset(link, 0, sizeof *link);
  link->params = *params;
  if (link->params.reorder_gap_ns == 0) link->params.reorder_gap_ns = LINK_DEFAULT_REORDER_GAP_NS;
  if (params->queue_bytes) {
    link->queue_limit_bytes = params->queue_bytes;
  } else if (params->queue_ns && params->rate_bps) {
    link->queue_limit_bytes =
        (uint64_t)((double)params->rate_bps / 8.0 * (double)params->queue_ns / NS_PER_S);
  } else {
    link->queue_limit_bytes = strata_emu_link_queue_default_bytes(params);
  }
  link->rng_state = seed ^ 0x5eed5eed5eedull;
}

/* One jitter sample in ns (may be negative). Normal by Box-Muller, cut at ±3σ so a rare draw
 * cannot stall the FIFO behind it for a long time. */
static double link_jitter_ns(strata_emu_link *link) {
  double sigma = (double)link->params.jitter_ns;
  if (sigma <= 0) return 0;
  if (link->params.jitter_uniform) return (2.0 * strata_emu_link_random(link) - 1.0) * sigma;
  double u1 = strata_emu_link_random(link), u2 = strata_emu_link_random(link);
  if (u1 < 1e-300) u1 = 1e-300;
  double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
  if (z > 3) z = 3;
  if (z < -3) z = -3;
  return z * sigma;
}

static int link_lost(strata_emu_link *link) {
  const strata_emu_link_params *p = &link->params;
  if (!p->ge_enabled) return p->loss > 0 && strata_emu_link_random(link) < p->loss;
  /* Gilbert-Elliott: move between states first, then lose with the state's probability. */
  if (link->ge_bad) {
    if (strata_emu_link_random(link) < p->ge_r) link->ge_bad = 0;
  } else {
    if (strata_emu_link_random(link) < p->ge_p) link->ge_bad = 1;
  }
  double loss = link->ge_bad ? p->ge_loss_bad : p->ge_loss_good;
  return loss > 0 && strata_emu_link_random(link) < loss;
}

strata_emu_verdict strata_emu_link_admit(strata_emu_link *link, uint64_t now_ns, uint32_t bytes,
                                         uint64_t *due_ns, int *reordered) {
  const strata_emu_link_params *p = &link->params;
  link->stats.packets_in++;
  link->stats.bytes_in += bytes;
  *reordered = 0;
  double tx_end_ns = (double)now_ns;
  if (p->rate_bps) {
    double start_ns = link->busy_until_ns > (double)now_ns ? link->busy_until_ns : (double)now_ns;
    double backlog_bytes = (start_ns - (double)now_ns) * (double)p->rate_bps / 8.0 / NS_PER_S;
    if (backlog_bytes + bytes > (double)link->queue_limit_bytes) {
      link->stats.dropped_queue++;
      return STRATA_EMU_DROP_QUEUE;
    }
    tx_end_ns = start_ns + (double)bytes * 8.0 * NS_PER_S / (double)p->rate_bps;
    link->busy_until_ns = tx_end_ns;
  }
  if (link_lost(link)) {
    link->stats.dropped_loss++;
    return STRATA_EMU_DROP_LOSS;
  }
  double due = tx_end_ns + (double)p->delay_ns + link_jitter_ns(link);
  if (due < tx_end_ns) due = tx_end_ns;
  uint64_t due_int = (uint64_t)due;
  if (p->reorder > 0 && strata_emu_link_random(link) < p->reorder) {
    /* Held back: later packets overtake it; it does not move the FIFO clamp. */
    uint64_t base = due_int > link->last_due_ns ? due_int : link->last_due_ns;
    *due_ns = base + p->reorder_gap_ns;
    *reordered = 1;
    link->stats.reordered++;
    return STRATA_EMU_DELIVER;
  }
  if (due_int < link->last_due_ns) due_int = link->last_due_ns;
  link->last_due_ns = due_int;
  *due_ns = due_int;
  return STRATA_EMU_DELIVER;
}

/* ---- parsing ---- */

typedef struct unit {
  const char *suffix;
  double scale;
} unit;

/* Parses a number followed by one of the units (case-insensitive); the empty suffix is allowed
 * only if listed. */
static int parse_scaled(const char *text, const unit *units, size_t nunits, double *out) {
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || !isfinite(v) || v < 0) return -1;
  for (size_t i = 0; i < nunits; i++) {
    if (!strcasecmp(end, units[i].suffix)) {
      *out = v * units[i].scale;
      return 0;
    }
  }
  return -1;
}

static int parse_rate(const char *text, uint64_t *bps) {
  static const unit units[] = {{"bit", 1},     {"kbit", 1e3},  {"mbit", 1e6}, {"gbit", 1e9},
                               {"tbit", 1e12}, {"k", 1e3},     {"m", 1e6},    {"g", 1e9},
                               {"kbits", 1e3}, {"mbits", 1e6}, {"gbits", 1e9}};
  double v;
  if (parse_scaled(text, units, sizeof units / sizeof units[0], &v)) return -1;
  if (v > 1e13) return -1;
  *bps = (uint64_t)(v + 0.5);
  return 0;
}

static int parse_time(const char *text, uint64_t *ns) {
  static const unit units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  double v;
  if (parse_scaled(text, units, sizeof units / sizeof units[0], &v)) return -1;
  if (v > 600e9) return -1; /* ten minutes is not a link */
  *ns = (uint64_t)(v + 0.5);
  return 0;
}

static int parse_size(const char *text, uint64_t *bytes) {
  uint64_t v;
  if (strata_size_parse(text, &v) != STRATA_OK || v < 1 || v > (1ull << 34)) return -1;
  *bytes = v;
  return 0;
}

/* "1%" or "0.01"; must end in [0, 1]. */
static int parse_probability(const char *text, double *out) {
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || !isfinite(v)) return -1;
  if (!strcmp(end, "%"))
    v /= 100.0;
  else if (*end)
    return -1;
  if (v < 0 || v > 1) return -1;
  *out = v;
  return 0;
}

/* ge=P:R[:LOSS_BAD[:LOSS_GOOD]] */
static int parse_ge(char *text, strata_emu_link_params *p) {
  double values[4] = {0, 0, 1, 0};
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(text, ":", &save); tok;
       tok = strtok_r(NULL, ":", &save)) {
    if (n == 4 || parse_probability(tok, &values[n])) return -1;
    n++;
  }
  if (n < 2) return -1;
  p->ge_enabled = 1;
  p->ge_p = values[0];
  p->ge_r = values[1];
  p->ge_loss_bad = values[2];
  p->ge_loss_good = values[3];
  return 0;
}

static int parse_item(const char *key, char *value, strata_emu_link_params *p) {
  if (!strcmp(key, "rate")) return parse_rate(value, &p->rate_bps);
  if (!strcmp(key, "delay")) return parse_time(value, &p->delay_ns);
  if (!strcmp(key, "jitter")) return parse_time(value, &p->jitter_ns);
  if (!strcmp(key, "loss")) return p->ge_enabled = 0, parse_probability(value, &p->loss);
  if (!strcmp(key, "ge")) return parse_ge(value, p);
  if (!strcmp(key, "reorder")) return parse_probability(value, &p->reorder);
  if (!strcmp(key, "reorder_gap")) return parse_time(value, &p->reorder_gap_ns);
  if (!strcmp(key, "jitter_dist")) {
    if (!strcmp(value, "normal")) return p->jitter_uniform = 0, 0;
    if (!strcmp(value, "uniform")) return p->jitter_uniform = 1, 0;
    return -1;
  }
  if (!strcmp(key, "flip")) return parse_size(value, &p->flip_at_bytes);
  if (!strcmp(key, "queue")) {
    uint64_t ns;
    if (parse_time(value, &ns) == 0) return p->queue_ns = ns, p->queue_bytes = 0, 0;
    return p->queue_ns = 0, parse_size(value, &p->queue_bytes);
  }
  return -2;
}

int strata_emu_link_params_parse(const char *text, strata_emu_link_params *params, char *err,
                                 size_t err_bytes) {
  char copy[512];
  if (strlen(text) >= sizeof copy) {
    snprintf(err, err_bytes, "link parameters too long (max %zu characters)", sizeof copy - 1);
    return -1;
  }
  strcpy(copy, text);
  strata_emu_link_params p = *params;
  for (char *save = NULL, *item = strtok_r(copy, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    if (!eq || eq == item || !eq[1]) {
      snprintf(err, err_bytes, "'%s': expected KEY=VALUE", item);
      return -1;
    }
    *eq = 0;
    char value[256];
    snprintf(value, sizeof value, "%s", eq + 1);
    int rc = parse_item(item, value, &p);
    if (rc == -2) {
      snprintf(err, err_bytes,
               "unknown link parameter '%s' (expected rate, delay, jitter, jitter_dist, loss, ge, "
               "reorder, reorder_gap, queue, flip)",
               item);
      return -1;
    }
    if (rc) {
      snprintf(err, err_bytes, "%s=%s: expected %s", item, eq + 1,
               !strcmp(item, "rate")                               ? "a rate like 100mbit or 1gbit"
               : !strcmp(item, "loss") || !strcmp(item, "reorder") ? "a probability like 1% or 0.01"
               : !strcmp(item, "ge")          ? "P:R[:LOSS_BAD[:LOSS_GOOD]] like 1%:30%"
               : !strcmp(item, "queue")       ? "a size like 256kb or 6mb, or a time like 50ms"
               : !strcmp(item, "flip")        ? "a byte offset like 4mb"
               : !strcmp(item, "jitter_dist") ? "normal or uniform"
                                              : "a time with a unit: ns, us, ms or s");
      return -1;
    }
  }
  *params = p;
  return 0;
}

static void format_time(char *out, size_t n, uint64_t ns) {
  if (ns % 1000000 == 0)
    snprintf(out, n, "%llums", (unsigned long long)(ns / 1000000));
  else if (ns % 1000 == 0)
    snprintf(out, n, "%lluus", (unsigned long long)(ns / 1000));
  else
    snprintf(out, n, "%lluns", (unsigned long long)ns);
}

void strata_emu_link_params_format(const strata_emu_link_params *p, char *out, size_t out_bytes) {
  char t1[32], t2[32];
  size_t used = 0;
  out[0] = 0;
#define APPEND(...)                                                                    \
  do {                                                                                 \
    if (used < out_bytes) used += snprintf(out + used, out_bytes - used, __VA_ARGS__); \
  } while (0)
  if (p->rate_bps)
    APPEND("rate=%llubit,", (unsigned long long)p->rate_bps);
  else
    APPEND("rate=unlimited,");
  format_time(t1, sizeof t1, p->delay_ns);
  format_time(t2, sizeof t2, p->jitter_ns);
  APPEND("delay=%s,jitter=%s", t1, t2);
  if (p->jitter_uniform) APPEND(",jitter_dist=uniform");
  if (p->ge_enabled)
    APPEND(",ge=%g%%:%g%%:%g%%:%g%%", p->ge_p * 100, p->ge_r * 100, p->ge_loss_bad * 100,
           p->ge_loss_good * 100);
  else
    APPEND(",loss=%g%%", p->loss * 100);
  if (p->reorder > 0) {
    format_time(t1, sizeof t1, p->reorder_gap_ns ? p->reorder_gap_ns : LINK_DEFAULT_REORDER_GAP_NS);
    APPEND(",reorder=%g%%,reorder_gap=%s", p->reorder * 100, t1);
  }
  if (p->queue_bytes)
    APPEND(",queue=%llub", (unsigned long long)p->queue_bytes);
  else if (p->queue_ns) {
    format_time(t1, sizeof t1, p->queue_ns);
    APPEND(",queue=%s", t1);
  }
  if (p->flip_at_bytes) APPEND(",flip=%llub", (unsigned long long)p->flip_at_bytes);
#undef APPEND
}
