// SPDX-License-Identifier: Apache-2.0
/* site.h — emulated sites: one network namespace per site, named "<name>-s<K>", holding one TUN
 * device "netem0" with address 10.77.K.1/16 (so every other site's 10.77.J.0/24 is reached
 * through the TUN, i.e. through the forwarder). Needs root; uses `ip` (iproute2) for namespaces
 * and addresses. Touches nothing outside the namespaces it creates.
 */
#ifndef STRATA_EMU_SITE_H
#define STRATA_EMU_SITE_H

#include <stddef.h>
#include <stdint.h>

#define STRATA_EMU_TUN_NAME "netem0"
#define STRATA_EMU_NAME_MAX 24

typedef struct strata_emu_site_options {
  const char *name; /* [A-Za-z0-9_-], 1..STRATA_EMU_NAME_MAX characters */
  int nsites;
  uint32_t mtu;
  const char *congestion_control; /* e.g. "bbr" or "cubic"; NULL leaves the kernel default */
  uint64_t tcp_mem_max_bytes;     /* socket buffer maxima in every site; 0 leaves them */
  int offload; /* 1: the TUNs carry a virtio_net_hdr and accept TSO/checksum offload, so a site's
                * TCP hands the forwarder 64 KiB super-packets (forwarder.h, vnet_hdr) */
} strata_emu_site_options;

/* 1 if name is usable as a prefix. */
int strata_emu_name_valid(const char *name);

/* "<name>-s<site>" */
void strata_emu_netns_name(char *out, size_t out_bytes, const char *name, int site);

/* "10.77.<site>.1" */
void strata_emu_site_address(char *out, size_t out_bytes, int site);

/* Creates every site: namespace, TUN (fd returned non-blocking in tun_fds[K]), addresses,
 * sysctls. On failure removes whatever it created, writes why into err and returns -1. */
int strata_emu_sites_create(const strata_emu_site_options *options, int *tun_fds, char *err,
                            size_t err_bytes);

/* Removes every namespace "<name>-s<digits>" (whatever their number); returns how many. A TUN
 * device goes with its namespace or with the last fd that holds it. Idempotent. */
int strata_emu_sites_destroy(const char *name);

/* Moves the calling thread into a site's namespace. Returns 0, or -1 with err. */
int strata_emu_site_enter(const char *name, int site, char *err, size_t err_bytes);

#endif
