// SPDX-License-Identifier: Apache-2.0
/*
 * doctor.h — `strata doctor`: the bring-up check of a node and of a job (docs/doctor.md).
 *
 * A check reads what the node says about itself and grades it PASS, WARN or FAIL with the fix,
 * or INFO when there is nothing to grade (no GPU on a CPU node is fine). Checks read /proc and
 * /sys under a root directory (--root DIR or STRATA_DOCTOR_ROOT; "" = the real one), so a test
 * can hand them a made-up tree; what has no file to stand for it (the kernel clock, hwloc, NVML,
 * libibverbs, a live process_vm_readv) is asked only of the real root.
 *
 * A doctor_report is plain bytes with no pointers: the ranks of a job gather theirs to rank 0 as
 * they are.
 */
#ifndef STRATA_TOOLS_DOCTOR_H
#define STRATA_TOOLS_DOCTOR_H

#include <stddef.h>

typedef enum doctor_status {
  DOCTOR_PASS = 0,
  DOCTOR_INFO, /* nothing to grade: shown, never counts against the node */
  DOCTOR_WARN,
  DOCTOR_FAIL,
} doctor_status;

#define DOCTOR_ID_BYTES 24
#define DOCTOR_TEXT_BYTES 400
#define DOCTOR_HOST_BYTES 64
#define DOCTOR_MAX_CHECKS 24
#define DOCTOR_MAX_LINKS 64
#define DOCTOR_LINK_NAME_BYTES 64

typedef struct doctor_check {
  char id[DOCTOR_ID_BYTES];      /* stable, for scripts: "cores", "tcp_buffers", ... */
  int status;                    /* doctor_status */
  char found[DOCTOR_TEXT_BYTES]; /* what the node says, with the figures the grade rests on */
  char fix[DOCTOR_TEXT_BYTES];   /* a command or a setting; "" when nothing is to be done */
} doctor_check;

/* A link whose bandwidth-delay product the TCP buffers must hold. */
typedef struct doctor_link {
  char name[DOCTOR_LINK_NAME_BYTES];
  double gbit_per_s; /* line rate, Gb/s */
  double rtt_ms;     /* round trip */
} doctor_link;

typedef struct doctor_inputs {
  const char *root;       /* "" = the real /; else a directory standing for it */
  int ranks;              /* ranks of the job (each opens streams to every other) */
  int local_ranks;        /* ranks on this node */
  int streams;            /* STRATA_TCP_STREAMS */
  const char *congestion; /* STRATA_TCP_CC, "" = the system's */
  const doctor_link *links;
  int links_count;
} doctor_inputs;

typedef struct doctor_report {
  char host[DOCTOR_HOST_BYTES];
  int cpus; /* CPUs this process may run on */
  int count;
  doctor_check checks[DOCTOR_MAX_CHECKS];
} doctor_report;

/* Every node check, in a fixed order (the ids docs/doctor.md lists), into *out. */
void doctor_run_checks(const doctor_inputs *in, doctor_report *out);

/* Appends a check to *report (dropped when full). The texts are printf formats; fix may be
 * NULL. Returns the check, or NULL when the report is full. */
doctor_check *doctor_add(doctor_report *report, const char *id, int status, const char *fix,
                         const char *found_format, ...) __attribute__((format(printf, 5, 6)));

const char *doctor_status_name(int status); /* "PASS", "INFO", "WARN", "FAIL" */

/* The per-stream socket buffer strata's auto sizing wants for a link (src/net/tcp_tune.c):
 * rate × RTT / streams × 2. */
double doctor_stream_buffer_bytes(const doctor_link *link, int streams);

#endif
