// SPDX-License-Identifier: Apache-2.0
/* site.c — creating and removing the namespaces and TUN devices of emulated sites.
 *
 * The TUN device of site K is created from inside site K's namespace (setns, open /dev/net/tun,
 * TUNSETIFF, setns back), so its name never meets the host's interface names, and the fd, kept by
 * the forwarder in the root namespace, still reaches it. The device is not persistent: it
 * disappears when the last fd closes or its namespace is deleted, so a dead forwarder leaves only
 * empty namespaces behind, which strata_emu_sites_destroy() removes by name.
 * Sysctls are written through /proc/sys while the thread sits in the namespace (/proc/sys/net
 * follows the opener's network namespace).
 * Must never: add an address outside 10.77.0.0/16, or touch an interface or namespace it did not
 * create (destroy matches "<name>-s<digits>" exactly).
 */
#include "emu/site.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu/forwarder.h"

int strata_emu_name_valid(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > STRATA_EMU_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)name[i]) && name[i] != '-' && name[i] != '_') return 0;
  return 1;
}

void strata_emu_netns_name(char *out, size_t out_bytes, const char *name, int site) {
  snprintf(out, out_bytes, "%s-s%d", name, site);
}

void strata_emu_site_address(char *out, size_t out_bytes, int site) {
  snprintf(out, out_bytes, "%d.%d.%d.1", STRATA_EMU_NET_OCTET_A, STRATA_EMU_NET_OCTET_B, site);
}

/* Runs argv (NULL-terminated), stdout silenced, stderr passed through; returns the exit code. */
static int run_command(char *const argv[]) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) dup2(null_fd, 1);
    execvp(argv[0], argv);
    fprintf(stderr, "netem: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int write_sysctl(const char *path, const char *value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, value, strlen(value));
  close(fd);
  return n == (ssize_t)strlen(value) ? 0 : -1;
}

static int site_sysctls(const strata_emu_site_options *o, char *err, size_t err_bytes) {
  /* No IPv6 in the sites: no link-local chatter through the forwarder. Absent IPv6 is fine. */
  write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
  write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
  if (o->congestion_control &&
      write_sysctl("/proc/sys/net/ipv4/tcp_congestion_control", o->congestion_control)) {
    char allowed[256] = "";
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_allowed_congestion_control", "r");
    if (f) {
      if (!fgets(allowed, sizeof allowed, f)) allowed[0] = 0;
      fclose(f);
      allowed[strcspn(allowed, "\n")] = 0;
    }
    /* A namespace may default only to an algorithm in the host-wide allowed list; changing
     * that list would change the host, which this must never do. */
    snprintf(err, err_bytes,
             "congestion control '%s' cannot be a site's default: allowed are '%s' "
             "(net.ipv4.tcp_allowed_congestion_control, host-wide); a program can still pick "
             "any available one per socket (TCP_CONGESTION, e.g. iperf3 -C)",
             o->congestion_control, allowed);
    return -1;
  }
  if (o->tcp_mem_max_bytes) {
    char value[64];
    unsigned long long max = (unsigned long long)o->tcp_mem_max_bytes;
    snprintf(value, sizeof value, "%llu", max);
    /* net.core.[rw]mem_max only bound SO_RCVBUF/SO_SNDBUF requests and refuse writes outside
     * the root namespace on recent kernels: best effort. Autotuning follows tcp_[rw]mem. */
    write_sysctl("/proc/sys/net/core/rmem_max", value);
    write_sysctl("/proc/sys/net/core/wmem_max", value);
    snprintf(value, sizeof value, "4096 131072 %llu", max);
    int rc = write_sysctl("/proc/sys/net/ipv4/tcp_rmem", value);
    snprintf(value, sizeof value, "4096 16384 %llu", max);
    rc |= write_sysctl("/proc/sys/net/ipv4/tcp_wmem", value);
    if (rc) {
      snprintf(err, err_bytes, "cannot set socket buffer maxima to %llu bytes", max);
      return -1;
    }
  }
  return 0;
}

/* With offload, TCP in the site sends super-packets of up to 64 KiB (TSO) with the checksum left
 * to "hardware" (the forwarder passes that duty on to the receiving site's kernel): one read and
 * one write per ~44 segments instead of per segment, so the forwarder's per-packet CPU cost does
 * not cap the emulated rate. The forwarder still models every segment (forwarder.c). */
static int tun_open_here(int offload, char *err, size_t err_bytes) {
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, err_bytes, "open /dev/net/tun: %s", strerror(errno));
    return -1;
  }
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (offload ? IFF_VNET_HDR : 0);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", STRATA_EMU_TUN_NAME);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    snprintf(err, err_bytes, "TUNSETIFF %s: %s", STRATA_EMU_TUN_NAME, strerror(errno));
    close(fd);
    return -1;
  }
  int hdr_bytes = (int)sizeof(struct virtio_net_hdr);
  if (offload && (ioctl(fd, TUNSETVNETHDRSZ, &hdr_bytes) < 0 ||
                  ioctl(fd, TUNSETOFFLOAD, (unsigned long)(TUN_F_CSUM | TUN_F_TSO4)) < 0)) {
    snprintf(err, err_bytes, "TUN offload on %s: %s (try --no-offload)", STRATA_EMU_TUN_NAME,
             strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

int strata_emu_site_enter(const char *name, int site, char *err, size_t err_bytes) {
  char ns[64], path[128];
  strata_emu_netns_name(ns, sizeof ns, name, site);
  snprintf(path, sizeof path, "/run/netns/%s", ns);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, err_bytes, "no namespace %s (is `strata netem up --name %s` running?)", ns, name);
    return -1;
  }
  int rc = setns(fd, CLONE_NEWNET);
  int saved = errno;
  close(fd);
  if (rc) snprintf(err, err_bytes, "setns %s: %s", ns, strerror(saved));
  return rc ? -1 : 0;
}

/* Inside site K's namespace: sysctls, then the TUN. Returns the fd or -1. */
static int site_make_tun(const strata_emu_site_options *o, int site, char *err, size_t err_bytes) {
  int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) {
    snprintf(err, err_bytes, "open /proc/self/ns/net: %s", strerror(errno));
    return -1;
  }
  int fd = -1;
  if (strata_emu_site_enter(o->name, site, err, err_bytes) == 0) {
    if (site_sysctls(o, err, err_bytes) == 0) fd = tun_open_here(o->offload, err, err_bytes);
    if (setns(self, CLONE_NEWNET)) {
      /* Cannot happen short of a kernel bug; continuing in the wrong namespace would be worse. */
      perror("netem: setns back to the root namespace");
      abort();
    }
  }
  close(self);
  return fd;
}

static int site_configure(const strata_emu_site_options *o, int site, char *err, size_t err_bytes) {
  char ns[64], addr[32], mtu[16];
  strata_emu_netns_name(ns, sizeof ns, o->name, site);
  strata_emu_site_address(addr, sizeof addr, site);
  strcat(addr, "/16");
  snprintf(mtu, sizeof mtu, "%u", o->mtu);
  char *lo_up[] = {"ip", "-n", ns, "link", "set", "lo", "up", NULL};
  char *tun_up[] = {"ip",  "-n", ns,           "link", "set", STRATA_EMU_TUN_NAME,
                    "mtu", mtu,  "txqueuelen", "1000", "up",  NULL};
  char *addr_add[] = {"ip", "-n", ns, "addr", "add", addr, "dev", STRATA_EMU_TUN_NAME, NULL};
  if (run_command(lo_up) || run_command(tun_up) || run_command(addr_add)) {
    snprintf(err, err_bytes, "configuring %s in namespace %s failed (see the ip error above)",
             STRATA_EMU_TUN_NAME, ns);
    return -1;
  }
  return 0;
}

int strata_emu_sites_create(const strata_emu_site_options *o, int *tun_fds, char *err,
                            size_t err_bytes) {
  if (!strata_emu_name_valid(o->name) || o->nsites < 2 || o->nsites > STRATA_EMU_MAX_SITES) {
    snprintf(err, err_bytes, "bad name or site count");
    return -1;
  }
  for (int k = 0; k < o->nsites; k++) tun_fds[k] = -1;
  for (int k = 0; k < o->nsites; k++) {
    char ns[64];
    strata_emu_netns_name(ns, sizeof ns, o->name, k);
    char *add[] = {"ip", "netns", "add", ns, NULL};
    if (run_command(add)) {
      snprintf(err, err_bytes, "ip netns add %s failed (see above)", ns);
      goto fail;
    }
    tun_fds[k] = site_make_tun(o, k, err, err_bytes);
    if (tun_fds[k] < 0 || site_configure(o, k, err, err_bytes)) goto fail;
  }
  return 0;
fail:
  for (int k = 0; k < o->nsites; k++) {
    if (tun_fds[k] >= 0) close(tun_fds[k]);
    tun_fds[k] = -1;
  }
  strata_emu_sites_destroy(o->name);
  return -1;
}

/* "<name>-s<digits>" exactly. */
static int is_site_netns(const char *entry, const char *name) {
  size_t n = strlen(name);
  if (strncmp(entry, name, n) || entry[n] != '-' || entry[n + 1] != 's' || !entry[n + 2]) return 0;
  for (const char *p = entry + n + 2; *p; p++)
    if (!isdigit((unsigned char)*p)) return 0;
  return 1;
}

int strata_emu_sites_destroy(const char *name) {
  if (!strata_emu_name_valid(name)) return 0;
  DIR *dir = opendir("/run/netns");
  if (!dir) return 0;
  char found[STRATA_EMU_MAX_SITES * 4][256];
  int count = 0;
  for (struct dirent *e; (e = readdir(dir)) && count < (int)(sizeof found / sizeof found[0]);)
    if (is_site_netns(e->d_name, name)) snprintf(found[count++], sizeof found[0], "%s", e->d_name);
  closedir(dir);
  int removed = 0;
  for (int i = 0; i < count; i++) {
    char *del[] = {"ip", "netns", "del", found[i], NULL};
    if (run_command(del) == 0) removed++;
  }
  return removed;
}
