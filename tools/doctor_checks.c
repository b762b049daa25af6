// SPDX-License-Identifier: Apache-2.0
/*
 * doctor_checks.c — the node checks of `strata doctor` (doctor.h, docs/doctor.md).
 *
 * Each check reads a few files under the root (in->root + "/proc/...", "/sys/..."), grades what
 * it found and, when the grade is not PASS, says the command or setting that fixes it. The
 * thresholds are strata's own needs where strata has one (the shared-memory segment size of
 * src/net/shm_setup.c, the socket buffer rule of src/net/tcp_tune.c, the descriptors a rank
 * opens per peer), and the usual requirements of the libraries a GPU job runs beside strata
 * (NCCL, UCX) where strata has none (locked memory for RDMA, /dev/shm).
 *
 * Must never: change the node (every fix is printed, none applied), fail because a file is
 * missing (a missing file is a finding), or print: the command decides what goes where.
 */
#include "doctor.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef STRATA_HAVE_HWLOC
#include <hwloc.h>
#endif

#define DOCTOR_MIB (1024.0 * 1024.0)
#define DOCTOR_MAX_CPUS (1 << 20) /* beyond any machine: a cpulist saying more is malformed */
#define DOCTOR_GIB (1024.0 * 1024.0 * 1024.0)
/* src/net/shm_internal.h and shm_wire.h: each rank's segment holds a page and a ring per local
 * peer, rings of 1 MiB halved while the segment passes 16 MiB, down to 128 KiB. */
#define DOCTOR_SHM_RING_BYTES (1u << 20)
#define DOCTOR_SHM_BUDGET_BYTES (16u << 20)
#define DOCTOR_SHM_RING_MIN_BYTES (128u << 10)
#define DOCTOR_SHM_PAGE_BYTES 4096u
/* NCCL's shm transport and torch's DataLoader workers put their segments in /dev/shm; Docker's
 * default of 64 MiB is the classic failure ("unhandled system error", "bus error"). */
#define DOCTOR_DEV_SHM_MIN_BYTES (1.0 * DOCTOR_GIB)
/* Descriptors a rank holds beside its streams: the store, listeners, the shm segment and a pidfd
 * per local peer, the engine's pipes, the program's own files. */
#define DOCTOR_FDS_PER_RANK_BASE 64
#define DOCTOR_FDS_PER_PEER_EXTRA 2
/* Memory a rank needs beyond its segment before it does anything (the engine, its scratch). */
#define DOCTOR_MEM_PER_RANK_BYTES (256.0 * DOCTOR_MIB)
/* strata's LAN/WAN line (src/net/tcp_tune.c): from this RTT a connection counts as WAN. */
#define DOCTOR_WAN_RTT_MS 1.0
/* A link the socket buffers are judged against when none is given: STRATA_TCP_LINK_GBPS's
 * default. */
#define DOCTOR_DEFAULT_LINK_GBIT 10.0

/* ---- reports ---- */

const char *doctor_status_name(int status) {
  static const char *const names[] = {"PASS", "INFO", "WARN", "FAIL"};
  return status >= DOCTOR_PASS && status <= DOCTOR_FAIL ? names[status] : "?";
}

doctor_check *doctor_add(doctor_report *report, const char *id, int status, const char *fix,
                         const char *found_format, ...) {
  if (report->count >= DOCTOR_MAX_CHECKS) return NULL;
  doctor_check *check = &report->checks[report->count++];
  memset(check, 0, sizeof *check);
  snprintf(check->id, sizeof check->id, "%s", id);
  check->status = status;
  va_list args;
  va_start(args, found_format);
  vsnprintf(check->found, sizeof check->found, found_format, args);
  va_end(args);
  snprintf(check->fix, sizeof check->fix, "%s", fix ? fix : "");
  return check;
}

/* snprintf where cutting a long text short is intended (a finding that does not fit is still
 * worth its first DOCTOR_TEXT_BYTES). */
__attribute__((format(printf, 3, 4))) static void doctor_text(char *out, size_t len,
                                                              const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(out, len, format, args);
  va_end(args);
}

/* ---- reading the tree ---- */

static void doctor_path(const doctor_inputs *in, const char *path, char *out, size_t len) {
  snprintf(out, len, "%s%s", in->root, path);
}

/* The file's text (at most len - 1 bytes, trailing whitespace cut). Returns 0, or -1 when it
 * cannot be read. */
static int doctor_read(const doctor_inputs *in, const char *path, char *out, size_t len) {
  char full[4096];
  doctor_path(in, path, full, sizeof full);
  FILE *f = fopen(full, "r");
  if (!f) return -1;
  size_t n = fread(out, 1, len - 1, f);
  int failed = ferror(f);
  fclose(f);
  if (failed) return -1;
  out[n] = '\0';
  while (n > 0 && isspace((unsigned char)out[n - 1])) out[--n] = '\0';
  return 0;
}

/* A file holding one integer (a sysctl). Returns 0, or -1 when missing or not a number. */
static int doctor_read_long(const doctor_inputs *in, const char *path, long long *out) {
  char text[64];
  if (doctor_read(in, path, text, sizeof text)) return -1;
  char *end = NULL;
  errno = 0;
  long long value = strtoll(text, &end, 10);
  if (end == text || errno) return -1;
  *out = value;
  return 0;
}

/* A file of three integers (net.ipv4.tcp_rmem). Returns the third, or -1. */
static long long doctor_read_third(const doctor_inputs *in, const char *path) {
  char text[128];
  long long a, b, c;
  if (doctor_read(in, path, text, sizeof text) || sscanf(text, "%lld %lld %lld", &a, &b, &c) != 3)
    return -1;
  return c;
}

#define DOCTOR_MAX_ENTRIES 64
typedef char doctor_name[256];

static int doctor_compare_names(const void *a, const void *b) {
  return strcmp(*(const doctor_name *)a, *(const doctor_name *)b);
}

/* The entries of a directory under the root, not starting with '.', sorted (readdir's order is
 * the filesystem's, and the report must not depend on it); at most DOCTOR_MAX_ENTRIES. Returns
 * how many, 0 when the directory is missing. */
static int doctor_list(const doctor_inputs *in, const char *path, doctor_name *names) {
  char full[4096];
  snprintf(full, sizeof full, "%s%s", in->root, path);
  DIR *dir = opendir(full);
  int count = 0;
  struct dirent *entry;
  while (dir && count < DOCTOR_MAX_ENTRIES && (entry = readdir(dir)))
    if (entry->d_name[0] != '.') snprintf(names[count++], sizeof names[0], "%s", entry->d_name);
  if (dir) closedir(dir);
  qsort(names, (size_t)count, sizeof names[0], doctor_compare_names);
  return count;
}

static int doctor_is_real_root(const doctor_inputs *in) {
  return in->root[0] == '\0';
}

/* CPUs in a list such as "0-3,8,10-11" (the kernel's cpulist format); -1 when malformed. */
static int doctor_count_cpulist(const char *list) {
  int count = 0;
  const char *p = list;
  while (*p) {
    char *end = NULL;
    long first = strtol(p, &end, 10);
    if (end == p || first < 0) return -1;
    long last = first;
    p = end;
    if (*p == '-') {
      last = strtol(p + 1, &end, 10);
      if (end == p + 1 || last < first || last - first > DOCTOR_MAX_CPUS) return -1;
      p = end;
    }
    count += (int)(last - first + 1);
    if (count > DOCTOR_MAX_CPUS) return -1;
    if (*p == ',')
      p++;
    else if (*p && !isspace((unsigned char)*p))
      return -1;
    else if (*p)
      break;
  }
  return count;
}

static const char *doctor_human_bytes(double bytes, char *out, size_t len) {
  if (bytes >= DOCTOR_GIB)
    snprintf(out, len, "%.1f GiB", bytes / DOCTOR_GIB);
  else if (bytes >= DOCTOR_MIB)
    snprintf(out, len, "%.1f MiB", bytes / DOCTOR_MIB);
  else
    snprintf(out, len, "%.0f KiB", bytes / 1024.0);
  return out;
}

/* ---- cores and NUMA ---- */

/* Online CPUs; those the node gives the job (a container's or scheduler's cpuset, cgroup v2 or
 * v1, when the tree has one, else the online ones); and those this process may run on (the real
 * root: its affinity mask, which `strata launch` narrows to one CPU per rank; a made-up tree: the
 * node's). */
static void doctor_cpus(const doctor_inputs *in, int *online, int *node, int *bound) {
  char list[1024];
  *online = doctor_read(in, "/sys/devices/system/cpu/online", list, sizeof list)
                ? -1
                : doctor_count_cpulist(list);
  *node = *online;
  if (!doctor_read(in, "/sys/fs/cgroup/cpuset.cpus.effective", list, sizeof list) ||
      !doctor_read(in, "/sys/fs/cgroup/cpuset/cpuset.effective_cpus", list, sizeof list)) {
    int cpuset = doctor_count_cpulist(list);
    if (cpuset > 0 && (*node <= 0 || cpuset < *node)) *node = cpuset;
  }
  *bound = *node;
  cpu_set_t set;
  if (doctor_is_real_root(in) && sched_getaffinity(0, sizeof set, &set) == 0)
    *bound = CPU_COUNT(&set);
}

static void doctor_check_cores(const doctor_inputs *in, doctor_report *report) {
  int online = 0, node = 0, bound = 0;
  doctor_cpus(in, &online, &node, &bound);
  report->cpus = node > 0 ? node : 1;
  char physical[96] = "", binding[64] = "";
#ifdef STRATA_HAVE_HWLOC
  hwloc_topology_t topology;
  if (doctor_is_real_root(in) && hwloc_topology_init(&topology) == 0) {
    if (hwloc_topology_load(topology) == 0)
      snprintf(physical, sizeof physical, " (hwloc: %d cores, %d hardware threads)",
               hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE),
               hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU));
    hwloc_topology_destroy(topology);
  }
#endif
  if (bound > 0 && bound < node)
    snprintf(binding, sizeof binding, ", this rank bound to %d", bound);
  if (online <= 0) {
    doctor_add(report, "cores", DOCTOR_WARN,
               "check that /sys is mounted (mount -t sysfs sysfs /sys)",
               "cannot read or parse /sys/devices/system/cpu/online");
    return;
  }
  if (in->local_ranks > node) {
    doctor_add(report, "cores", DOCTOR_WARN,
               "run at most one rank per CPU (strata launch -n N), or give the job more CPUs "
               "(the container's or the scheduler's cpuset)",
               "%d online CPUs%s, %d for this job%s; %d ranks on this node share them: each "
               "rank's engine thread wants a CPU of its own",
               online, physical, node, binding, in->local_ranks);
    return;
  }
  doctor_add(report, "cores", DOCTOR_PASS, NULL,
             "%d online CPUs%s, %d for this job%s; %d rank%s on this node", online, physical, node,
             binding, in->local_ranks, in->local_ranks == 1 ? "" : "s");
}

static void doctor_check_numa(const doctor_inputs *in, doctor_report *report) {
  char summary[256] = "";
  doctor_name names[DOCTOR_MAX_ENTRIES];
  int entries = doctor_list(in, "/sys/devices/system/node", names);
  int nodes = 0;
  size_t used = 0;
  for (int e = 0; e < entries; e++) {
    int id;
    char tail;
    if (sscanf(names[e], "node%d%c", &id, &tail) != 1) continue;
    char path[320], list[1024];
    doctor_text(path, sizeof path, "/sys/devices/system/node/%s/cpulist", names[e]);
    int cpus = doctor_read(in, path, list, sizeof list) ? -1 : doctor_count_cpulist(list);
    nodes++;
    if (used < sizeof summary - 1)
      used += (size_t)snprintf(summary + used, sizeof summary - used, "%snode%d %d CPUs",
                               nodes > 1 ? ", " : "", id, cpus < 0 ? 0 : cpus);
  }
  char source[64] = "/sys";
#ifdef STRATA_HAVE_HWLOC
  hwloc_topology_t topology;
  if (doctor_is_real_root(in) && hwloc_topology_init(&topology) == 0) {
    if (hwloc_topology_load(topology) == 0) {
      int hwloc_nodes = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
      if (hwloc_nodes > 0 && nodes == 0) nodes = hwloc_nodes;
      if (hwloc_nodes == nodes)
        snprintf(source, sizeof source, "/sys; hwloc agrees");
      else
        snprintf(source, sizeof source, "/sys; hwloc counts %d", hwloc_nodes);
    }
    hwloc_topology_destroy(topology);
  }
#endif
  if (nodes == 0) {
    doctor_add(report, "numa", DOCTOR_INFO, NULL,
               "no NUMA nodes under /sys/devices/system/node (a kernel without NUMA: one node)");
    return;
  }
  long long balancing = 0;
  if (nodes > 1 && !doctor_read_long(in, "/proc/sys/kernel/numa_balancing", &balancing) &&
      balancing) {
    doctor_add(report, "numa", DOCTOR_WARN, "sysctl -w kernel.numa_balancing=0",
               "%d NUMA nodes (%s; %s); kernel.numa_balancing=%lld moves the pages of ranks "
               "bound to a CPU (strata launch binds rank r to the r-th CPU) behind their back",
               nodes, summary, source, balancing);
    return;
  }
  doctor_add(report, "numa", DOCTOR_PASS, NULL, "%d NUMA node%s (%s; %s)", nodes,
             nodes == 1 ? "" : "s", summary, source);
}

/* ---- memory and shared memory ---- */

/* Bytes of one rank's shared-memory segment with `peers` local peers (src/net/shm_setup.c). */
static double doctor_shm_segment_bytes(int peers) {
  if (peers <= 0) return 0;
  uint64_t ring = DOCTOR_SHM_RING_BYTES;
  while (ring > DOCTOR_SHM_RING_MIN_BYTES && (uint64_t)peers * ring > DOCTOR_SHM_BUDGET_BYTES)
    ring >>= 1;
  return (double)DOCTOR_SHM_PAGE_BYTES + (double)peers * (double)(DOCTOR_SHM_PAGE_BYTES + ring);
}

static double doctor_shm_need_bytes(int local_ranks) {
  return local_ranks * doctor_shm_segment_bytes(local_ranks - 1);
}

static int doctor_meminfo(const doctor_inputs *in, double *total, double *available) {
  char text[8192];
  if (doctor_read(in, "/proc/meminfo", text, sizeof text)) return -1;
  const char *t = strstr(text, "MemTotal:"), *a = strstr(text, "MemAvailable:");
  double kib_total = 0, kib_available = 0;
  if (!t || !a || sscanf(t, "MemTotal: %lf", &kib_total) != 1 ||
      sscanf(a, "MemAvailable: %lf", &kib_available) != 1)
    return -1;
  *total = kib_total * 1024;
  *available = kib_available * 1024;
  return 0;
}

static void doctor_check_memory(const doctor_inputs *in, doctor_report *report) {
  double total = 0, available = 0;
  char t[32], a[32], n[32];
  if (doctor_meminfo(in, &total, &available)) {
    doctor_add(report, "memory", DOCTOR_WARN, "check that /proc is mounted",
               "cannot read MemTotal and MemAvailable in /proc/meminfo");
    return;
  }
  double need =
      doctor_shm_need_bytes(in->local_ranks) + in->local_ranks * DOCTOR_MEM_PER_RANK_BYTES;
  doctor_human_bytes(total, t, sizeof t);
  doctor_human_bytes(available, a, sizeof a);
  doctor_human_bytes(need, n, sizeof n);
  if (available < need) {
    doctor_add(report, "memory", DOCTOR_FAIL,
               "stop what holds the memory (ps aux --sort=-rss | head), or run fewer ranks here",
               "%s available of %s; %d rank%s on this node need%s about %s (their "
               "shared-memory segments and 256 MiB each) before any buffer of the program",
               a, t, in->local_ranks, in->local_ranks == 1 ? "" : "s",
               in->local_ranks == 1 ? "s" : "", n);
    return;
  }
  doctor_add(report, "memory", DOCTOR_PASS, NULL,
             "%s available of %s; %d rank%s on this node need%s about %s before the "
             "program's buffers",
             a, t, in->local_ranks, in->local_ranks == 1 ? "" : "s",
             in->local_ranks == 1 ? "s" : "", n);
}

static void doctor_check_shm(const doctor_inputs *in, doctor_report *report) {
  char path[4096], size_text[32], free_text[32], need_text[32];
  doctor_path(in, "/dev/shm", path, sizeof path);
  double need = doctor_shm_need_bytes(in->local_ranks);
  doctor_human_bytes(need, need_text, sizeof need_text);
  struct statvfs fs;
  if (statvfs(path, &fs) != 0) {
    doctor_add(report, "shm", DOCTOR_WARN,
               "mount -t tmpfs -o size=8g tmpfs /dev/shm (in Docker: docker run --shm-size=8g)",
               "no /dev/shm (%s). strata's rings (%s for %d rank%s here) are memfd segments and "
               "do not need it; NCCL's shm transport and torch's DataLoader do",
               strerror(errno), need_text, in->local_ranks, in->local_ranks == 1 ? "" : "s");
    return;
  }
  double size = (double)fs.f_blocks * (double)fs.f_frsize;
  double free_bytes = (double)fs.f_bavail * (double)fs.f_frsize;
  doctor_human_bytes(size, size_text, sizeof size_text);
  doctor_human_bytes(free_bytes, free_text, sizeof free_text);
  int small = free_bytes < DOCTOR_DEV_SHM_MIN_BYTES || free_bytes < need;
  doctor_add(
      report, "shm", small ? DOCTOR_WARN : DOCTOR_PASS,
      small ? "mount -o remount,size=8g /dev/shm (in Docker: docker run --shm-size=8g)" : NULL,
      "/dev/shm %s free of %s; strata's rings need %s for %d rank%s here (memfd segments: "
      "they draw on memory, not on /dev/shm)%s",
      free_text, size_text, need_text, in->local_ranks, in->local_ranks == 1 ? "" : "s",
      small ? "; under 1 GiB free, NCCL's shm transport and torch's DataLoader fail" : "");
}

/* ---- ptrace scope: CMA single-copy ---- */

/* The real root only: whether process_vm_readv works at all here (seccomp, as in Docker's
 * default profile before 19.03, turns it into EPERM/ENOSYS whatever Yama says). */
static int doctor_cma_works(void) {
  char source[16] = "strata-doctor", target[16] = "";
  struct iovec local = {target, sizeof target}, remote = {source, sizeof source};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof source;
}

static void doctor_check_ptrace(const doctor_inputs *in, doctor_report *report) {
  long long scope = -1;
  int has_yama = !doctor_read_long(in, "/proc/sys/kernel/yama/ptrace_scope", &scope);
  const char *fix =
      "sysctl -w kernel.yama.ptrace_scope=0 (persist: echo kernel.yama.ptrace_scope=0 > "
      "/etc/sysctl.d/10-ptrace.conf; in a container: --cap-add SYS_PTRACE)";
  if (doctor_is_real_root(in) && !doctor_cma_works()) {
    doctor_add(report, "ptrace", DOCTOR_WARN,
               "allow process_vm_readv: docker run --cap-add SYS_PTRACE or a seccomp profile "
               "that permits it",
               "process_vm_readv is refused here (seccomp?): messages of 32 KiB and more between "
               "ranks of this node go through the rings, two copies instead of one");
    return;
  }
  if (!has_yama || scope == 0) {
    doctor_add(report, "ptrace", DOCTOR_PASS, NULL,
               "%s: ranks of one node read each other's buffers with one copy "
               "(process_vm_readv)",
               has_yama ? "kernel.yama.ptrace_scope=0" : "no Yama (classic ptrace rules)");
    return;
  }
  doctor_add(report, "ptrace", DOCTOR_WARN,
             scope == 3 ? "reboot with kernel.yama.ptrace_scope=0 "
                          "in /etc/sysctl.d (3 cannot be lowered "
                          "while running)"
                        : fix,
             "kernel.yama.ptrace_scope=%lld: a rank may not read a sibling's memory, so "
             "messages of 32 KiB and more between ranks of this node take two copies through the "
             "rings instead of one (strata falls back by itself; large shm collectives run "
             "slower)",
             scope);
}

/* ---- limits ---- */

/* A limit from /proc/self/limits ("Max open files  1024  1048576  files"): soft and hard, -1 for
 * unlimited. Returns 0, or -1 when the line is missing. */
static int doctor_limit(const doctor_inputs *in, const char *name, long long *soft,
                        long long *hard) {
  char text[8192];
  if (doctor_read(in, "/proc/self/limits", text, sizeof text)) return -1;
  const char *line = strstr(text, name);
  if (!line) return -1;
  line += strlen(name);
  char soft_text[32], hard_text[32];
  if (sscanf(line, " %31s %31s", soft_text, hard_text) != 2) return -1;
  *soft = strcmp(soft_text, "unlimited") ? strtoll(soft_text, NULL, 10) : -1;
  *hard = strcmp(hard_text, "unlimited") ? strtoll(hard_text, NULL, 10) : -1;
  return 0;
}

static int doctor_rdma_devices(const doctor_inputs *in) {
  doctor_name names[DOCTOR_MAX_ENTRIES];
  return doctor_list(in, "/sys/class/infiniband", names);
}

static void doctor_check_memlock(const doctor_inputs *in, doctor_report *report) {
  long long soft = 0, hard = 0;
  if (doctor_limit(in, "Max locked memory", &soft, &hard)) {
    doctor_add(report, "memlock", DOCTOR_WARN, NULL,
               "cannot read \"Max locked memory\" in /proc/self/limits");
    return;
  }
  char soft_text[32] = "unlimited";
  if (soft >= 0) doctor_human_bytes((double)soft, soft_text, sizeof soft_text);
  const char *fix =
      "ulimit -l unlimited; persist: '* - memlock unlimited' in /etc/security/limits.conf, "
      "LimitMEMLOCK=infinity for a systemd unit, docker run --ulimit memlock=-1";
  int rdma = doctor_rdma_devices(in);
  if (soft < 0) {
    doctor_add(report, "memlock", DOCTOR_PASS, NULL, "locked memory unlimited");
  } else if (rdma > 0) {
    doctor_add(report, "memlock", DOCTOR_FAIL, fix,
               "locked memory %s with %d RDMA device%s: NCCL, UCX and libibverbs pin every "
               "buffer they register and fail past this",
               soft_text, rdma, rdma == 1 ? "" : "s");
  } else {
    doctor_add(report, "memlock", DOCTOR_PASS, NULL,
               "locked memory %s; strata's TCP and shm transports lock nothing, and no RDMA "
               "device here would (RDMA needs unlimited)",
               soft_text);
  }
}

static void doctor_check_nofile(const doctor_inputs *in, doctor_report *report) {
  long long soft = 0, hard = 0;
  if (doctor_limit(in, "Max open files", &soft, &hard)) {
    doctor_add(report, "nofile", DOCTOR_WARN, NULL,
               "cannot read \"Max open files\" in /proc/self/limits");
    return;
  }
  long long peers = in->ranks > 1 ? in->ranks - 1 : 0;
  long long need = peers * (in->streams + DOCTOR_FDS_PER_PEER_EXTRA) + DOCTOR_FDS_PER_RANK_BASE;
  if (soft >= 0 && soft < need) {
    char fix[DOCTOR_TEXT_BYTES];
    snprintf(fix, sizeof fix,
             "ulimit -n %lld%s; persist: '* - nofile %lld' in /etc/security/limits.conf, "
             "LimitNOFILE=%lld for a systemd unit",
             need, hard >= 0 && hard < need ? " (as root: the hard limit is lower)" : "", need,
             need);
    doctor_add(report, "nofile", DOCTOR_FAIL, fix,
               "open files %lld (hard %lld); a rank of %d ranks with %d streams per peer opens "
               "about %lld: connecting fails with EMFILE",
               soft, hard, in->ranks, in->streams, need);
    return;
  }
  doctor_add(report, "nofile", DOCTOR_PASS, NULL,
             "open files %lld; a rank of %d ranks with %d streams per peer opens about %lld", soft,
             in->ranks, in->streams, need);
}

/* ---- TCP: buffers against the links' bandwidth-delay product, congestion control ---- */

double doctor_stream_buffer_bytes(const doctor_link *link, int streams) {
  double bdp = link->gbit_per_s * 1e9 / 8 * link->rtt_ms * 1e-3;
  return bdp / (streams > 0 ? streams : 1) * 2;
}

static const doctor_link *doctor_widest_link(const doctor_inputs *in) {
  const doctor_link *widest = NULL;
  for (int i = 0; i < in->links_count; i++)
    if (!widest ||
        in->links[i].gbit_per_s * in->links[i].rtt_ms > widest->gbit_per_s * widest->rtt_ms)
      widest = &in->links[i];
  return widest;
}

/* A fix never lowers a setting that is already higher. */
static long long doctor_at_least(long long current, long long wanted) {
  return current > wanted ? current : wanted;
}

static void doctor_check_tcp_buffers(const doctor_inputs *in, doctor_report *report) {
  long long rmem_max = -1, wmem_max = -1;
  doctor_read_long(in, "/proc/sys/net/core/rmem_max", &rmem_max);
  doctor_read_long(in, "/proc/sys/net/core/wmem_max", &wmem_max);
  long long tcp_rmem = doctor_read_third(in, "/proc/sys/net/ipv4/tcp_rmem");
  long long tcp_wmem = doctor_read_third(in, "/proc/sys/net/ipv4/tcp_wmem");
  if (rmem_max < 0 || wmem_max < 0 || tcp_rmem < 0 || tcp_wmem < 0) {
    doctor_add(report, "tcp_buffers", DOCTOR_WARN, "check that /proc/sys is readable",
               "cannot read net.core.rmem_max, wmem_max, net.ipv4.tcp_rmem or tcp_wmem");
    return;
  }
  char sysctls[160];
  snprintf(sysctls, sizeof sysctls,
           "tcp_rmem max %lld, tcp_wmem max %lld, rmem_max %lld, wmem_max %lld", tcp_rmem, tcp_wmem,
           rmem_max, wmem_max);
  /* the buffer a stream can have: autotuning's limit, or what strata sets itself (capped) */
  double autotuned = (double)(tcp_rmem < tcp_wmem ? tcp_rmem : tcp_wmem);
  double capped = (double)(rmem_max < wmem_max ? rmem_max : wmem_max);
  double reachable = autotuned > capped ? autotuned : capped;
  const doctor_link *link = doctor_widest_link(in);
  if (!link) {
    /* the RTT a stream fills at the default rate, with the window half the buffer */
    double rtt_ms = reachable / 2 * in->streams * 8 / (DOCTOR_DEFAULT_LINK_GBIT * 1e9) * 1e3;
    doctor_add(report, "tcp_buffers", DOCTOR_PASS, NULL,
               "%s: %d streams fill %.0f Gb/s up to %.1f ms RTT (--link GBPS,RTT_MS or --topo "
               "FILE checks your links)",
               sysctls, in->streams, DOCTOR_DEFAULT_LINK_GBIT, rtt_ms);
    return;
  }
  double want = doctor_stream_buffer_bytes(link, in->streams);
  double bdp = link->gbit_per_s * 1e9 / 8 * link->rtt_ms * 1e-3;
  char want_text[32], bdp_text[32];
  doctor_human_bytes(want, want_text, sizeof want_text);
  doctor_human_bytes(bdp, bdp_text, sizeof bdp_text);
  char what[DOCTOR_TEXT_BYTES];
  doctor_text(what, sizeof what,
              "link %s%s%.4g Gb/s x %.3g ms = %s in flight; %d streams want %s each (x2 headroom, "
              "src/net/tcp_tune.c); %s",
              link->name,
              in->links_count > 1 ? " (the widest given): "
              : link->name[0]     ? ": "
                                  : "",
              link->gbit_per_s, link->rtt_ms, bdp_text, in->streams, want_text, sysctls);
  long long bytes = (long long)ceil(want / DOCTOR_MIB) * (1 << 20);
  char fix[DOCTOR_TEXT_BYTES];
  snprintf(fix, sizeof fix,
           "sysctl -w net.core.rmem_max=%lld net.core.wmem_max=%lld "
           "net.ipv4.tcp_rmem='4096 131072 %lld' net.ipv4.tcp_wmem='4096 16384 %lld' "
           "(persist in /etc/sysctl.d/90-strata.conf)",
           doctor_at_least(rmem_max, bytes), doctor_at_least(wmem_max, bytes),
           doctor_at_least(tcp_rmem, bytes), doctor_at_least(tcp_wmem, bytes));
  if (want <= autotuned) {
    doctor_add(report, "tcp_buffers", DOCTOR_PASS, NULL, "%s", what);
  } else if (want <= capped) {
    doctor_add(report, "tcp_buffers", DOCTOR_WARN, fix,
               "%s: strata sets its buffers itself and fills the link, but programs left to "
               "autotuning (NCCL's sockets, gloo, iperf3) stop at tcp_rmem/tcp_wmem",
               what);
  } else {
    double cap_gbit = reachable / 2 * in->streams * 8 / (link->rtt_ms * 1e-3) / 1e9;
    doctor_add(report, "tcp_buffers", DOCTOR_FAIL, fix,
               "%s: a pair of ranks tops out near %.3g Gb/s of the link's %.4g", what, cap_gbit,
               link->gbit_per_s);
  }
}

/* Whether `name` is a word of the space-separated list. */
static int doctor_has_word(const char *list, const char *name) {
  size_t len = strlen(name);
  for (const char *p = list; (p = strstr(p, name)); p += len)
    if ((p == list || p[-1] == ' ') && (p[len] == '\0' || p[len] == ' ')) return 1;
  return 0;
}

static void doctor_check_congestion(const doctor_inputs *in, doctor_report *report) {
  char available[256], selected[64];
  if (doctor_read(in, "/proc/sys/net/ipv4/tcp_available_congestion_control", available,
                  sizeof available) ||
      doctor_read(in, "/proc/sys/net/ipv4/tcp_congestion_control", selected, sizeof selected)) {
    doctor_add(report, "congestion", DOCTOR_WARN, NULL,
               "cannot read net.ipv4.tcp_available_congestion_control or "
               "tcp_congestion_control");
    return;
  }
  if (in->congestion[0] && !doctor_has_word(available, in->congestion)) {
    char fix[DOCTOR_TEXT_BYTES];
    snprintf(fix, sizeof fix, "modprobe tcp_%s, or unset STRATA_TCP_CC (available: %s)",
             in->congestion, available);
    doctor_add(report, "congestion", DOCTOR_FAIL, fix,
               "STRATA_TCP_CC=%s is not available (%s): every communicator fails at creation",
               in->congestion, available);
    return;
  }
  int wan = 0;
  for (int i = 0; i < in->links_count; i++) wan |= in->links[i].rtt_ms >= DOCTOR_WAN_RTT_MS;
  const char *used = in->congestion[0] ? in->congestion : selected;
  if (wan && strcmp(used, "bbr")) {
    int has_bbr = doctor_has_word(available, "bbr");
    doctor_add(report, "congestion", DOCTOR_WARN,
               has_bbr ? "sysctl -w net.ipv4.tcp_congestion_control=bbr, or STRATA_TCP_CC=bbr"
                       : "modprobe tcp_bbr && sysctl -w net.ipv4.tcp_congestion_control=bbr "
                         "(kernels before 4.20 also: sysctl -w net.core.default_qdisc=fq)",
               "%s in use, available: %s; a link given has an RTT of 1 ms or more, where bbr "
               "keeps a long path full with little queueing and loss-based %s backs off at "
               "every drop",
               used, available, used);
    return;
  }
  doctor_add(report, "congestion", DOCTOR_PASS, NULL, "%s%s, available: %s%s", used,
             in->congestion[0] ? " (STRATA_TCP_CC)" : "", available,
             !strcmp(used, "bbr") ? "; strata starts LAN sockets with cubic and keeps bbr for "
                                    "WAN ones (RTT >= 1 ms)"
                                  : "");
}

/* ---- MTU per interface ---- */

static int doctor_is_tunnel(const char *name) {
  static const char *const prefixes[] = {"wg",    "tun", "tap",  "tailscale", "zt",
                                         "vxlan", "gre", "ipip", "sit",       "docker",
                                         "veth",  "br-", "virbr"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    if (!strncmp(name, prefixes[i], strlen(prefixes[i]))) return 1;
  return 0;
}

static void doctor_check_mtu(const doctor_inputs *in, doctor_report *report) {
  char list[DOCTOR_TEXT_BYTES] = "", small[256] = "";
  doctor_name names[DOCTOR_MAX_ENTRIES];
  int entries = doctor_list(in, "/sys/class/net", names);
  size_t used = 0;
  int count = 0;
  for (int e = 0; e < entries; e++) {
    const char *name = names[e];
    if (!strcmp(name, "lo")) continue;
    char file[512], state[32] = "?";
    long long mtu = -1;
    doctor_text(file, sizeof file, "/sys/class/net/%s/mtu", name);
    if (doctor_read_long(in, file, &mtu)) continue;
    doctor_text(file, sizeof file, "/sys/class/net/%s/operstate", name);
    doctor_read(in, file, state, sizeof state);
    count++;
    if (used < sizeof list - 1)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s %lld (%s)",
                               count > 1 ? ", " : "", name, mtu, state);
    if (mtu < 1500 && !doctor_is_tunnel(name) && !strcmp(state, "up") && !small[0])
      doctor_text(small, sizeof small, "%s", name);
  }
  if (!count) {
    doctor_add(report, "mtu", DOCTOR_INFO, NULL, "no network interface but lo");
    return;
  }
  if (small[0]) {
    char fix[DOCTOR_TEXT_BYTES];
    doctor_text(
        fix, sizeof fix,
        "find the MTU the network carries (tracepath to a peer node); if it is 1500, or 9000 "
        "on a jumbo-frame fabric: ip link set dev %s mtu 1500 (or 9000). A cloud network "
        "that sets a lower one (GCP: 1460) means keep it",
        small);
    doctor_add(report, "mtu", DOCTOR_WARN, fix,
               "%s: %s is below Ethernet's 1500 without being a tunnel: every packet carries "
               "less, and peers with 1500 lose packets unless path-MTU discovery works",
               list, small);
    return;
  }
  doctor_add(report, "mtu", DOCTOR_PASS, NULL,
             "%s (a tunnel's lower MTU is its overhead; jumbo 9000 needs every hop to agree)",
             list);
}

/* ---- clock ---- */

static void doctor_check_clock(const doctor_inputs *in, doctor_report *report) {
  if (!doctor_is_real_root(in)) {
    doctor_add(report, "clock", DOCTOR_INFO, NULL,
               "the kernel clock (adjtimex) belongs to the real root: not read under --root");
    return;
  }
  struct timex tx;
  memset(&tx, 0, sizeof tx);
  int state = adjtimex(&tx);
  if (state < 0) {
    doctor_add(report, "clock", DOCTOR_WARN, NULL, "adjtimex failed: %s", strerror(errno));
    return;
  }
  const char *fix =
      "timedatectl set-ntp true, or systemctl enable --now chrony (timedatectl status shows "
      "\"System clock synchronized: yes\" once it is)";
  if (state == TIME_ERROR || (tx.status & STA_UNSYNC)) {
    doctor_add(report, "clock", DOCTOR_WARN, fix,
               "not synchronized (adjtimex: no NTP or PTP daemon disciplines this clock); ranks' "
               "logs and traces from different nodes will not line up, and certificate and "
               "token checks may fail");
    return;
  }
  doctor_add(report, "clock", DOCTOR_PASS, NULL,
             "synchronized (adjtimex), estimated error %.3f ms, maximum %.3f ms",
             tx.esterror / 1000.0, tx.maxerror / 1000.0);
}

/* ---- GPUs, NVLink, RDMA ---- */

/* NVML's C ABI, the few calls used (nvml.h is not needed to call them). */
typedef int (*nvml_void_fn)(void);
typedef int (*nvml_count_fn)(unsigned *);
typedef int (*nvml_handle_fn)(unsigned, void **);
typedef int (*nvml_name_fn)(void *, char *, unsigned);
typedef int (*nvml_link_fn)(void *, unsigned, int *);
#define DOCTOR_NVML_MAX_LINKS 18 /* NVML_NVLINK_MAX_LINKS */

/* GPUs and active NVLinks from NVML when it loads; 0 and no name otherwise. */
static int doctor_nvml(int *gpus, int *nvlinks, char *name, size_t name_len) {
  *gpus = *nvlinks = 0;
  name[0] = '\0';
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return -1;
  nvml_void_fn init = (nvml_void_fn)dlsym(lib, "nvmlInit_v2");
  nvml_void_fn shutdown = (nvml_void_fn)dlsym(lib, "nvmlShutdown");
  nvml_count_fn count = (nvml_count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
  nvml_handle_fn handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  nvml_name_fn get_name = (nvml_name_fn)dlsym(lib, "nvmlDeviceGetName");
  nvml_link_fn link_state = (nvml_link_fn)dlsym(lib, "nvmlDeviceGetNvLinkState");
  int status = -1;
  unsigned n = 0;
  if (init && shutdown && count && handle && init() == 0) {
    if (count(&n) == 0) {
      status = 0;
      *gpus = (int)n;
      for (unsigned i = 0; i < n; i++) {
        void *device = NULL;
        if (handle(i, &device)) continue;
        if (i == 0 && get_name) get_name(device, name, (unsigned)name_len);
        for (unsigned l = 0; link_state && l < DOCTOR_NVML_MAX_LINKS; l++) {
          int active = 0;
          if (link_state(device, l, &active) == 0 && active) (*nvlinks)++;
        }
      }
    }
    shutdown();
  }
  dlclose(lib);
  return status;
}

/* GPUs the NVIDIA driver lists under /proc/driver/nvidia/gpus (a made-up tree can hold them). */
static int doctor_driver_gpus(const doctor_inputs *in) {
  doctor_name names[DOCTOR_MAX_ENTRIES];
  return doctor_list(in, "/proc/driver/nvidia/gpus", names);
}

static void doctor_check_gpus(const doctor_inputs *in, doctor_report *report) {
  int gpus = 0, nvlinks = 0;
  char name[96] = "";
  int nvml = doctor_is_real_root(in) ? doctor_nvml(&gpus, &nvlinks, name, sizeof name) : -1;
  int listed = doctor_driver_gpus(in);
  if (nvml == 0) {
    doctor_add(report, "gpus", gpus ? DOCTOR_PASS : DOCTOR_INFO, NULL, "NVML: %d GPU%s%s%s", gpus,
               gpus == 1 ? "" : "s", name[0] ? ", " : "", name);
    doctor_add(report, "nvlink", gpus ? DOCTOR_PASS : DOCTOR_INFO, NULL,
               "NVML: %d active NVLink%s over %d GPU%s", nvlinks, nvlinks == 1 ? "" : "s", gpus,
               gpus == 1 ? "" : "s");
    return;
  }
  if (listed > 0 && !doctor_is_real_root(in)) {
    doctor_add(report, "gpus", DOCTOR_PASS, NULL,
               "%d NVIDIA GPU%s under /proc/driver/nvidia/gpus (NVML belongs to the real root: "
               "not asked under --root)",
               listed, listed == 1 ? "" : "s");
    doctor_add(report, "nvlink", DOCTOR_INFO, NULL, "NVLink state needs NVML");
    return;
  }
  if (listed > 0) {
    doctor_add(report, "gpus", DOCTOR_WARN,
               "install the driver's NVML (libnvidia-ml.so.1: the nvidia-driver or "
               "libnvidia-ml1 package) where the ranks run",
               "%d NVIDIA GPU%s under /proc/driver/nvidia/gpus, but libnvidia-ml.so.1 does not "
               "load: NCCL and nvidia-smi need it",
               listed, listed == 1 ? "" : "s");
    doctor_add(report, "nvlink", DOCTOR_INFO, NULL, "NVLink state needs NVML");
    return;
  }
  doctor_add(report, "gpus", DOCTOR_INFO, NULL,
             "no NVIDIA GPU (no libnvidia-ml.so.1, none under /proc/driver/nvidia/gpus): a CPU "
             "node, strata's ranks run on CPUs");
  doctor_add(report, "nvlink", DOCTOR_INFO, NULL, "no NVLink (no GPU)");
}

static void doctor_check_rdma(const doctor_inputs *in, doctor_report *report) {
  char list[DOCTOR_TEXT_BYTES] = "", down[256] = "";
  doctor_name names[DOCTOR_MAX_ENTRIES];
  int count = doctor_list(in, "/sys/class/infiniband", names);
  size_t used = 0;
  for (int e = 0; e < count; e++) {
    const char *device = names[e];
    char file[512], state[64] = "?", rate[64] = "?", layer[32] = "?";
    doctor_text(file, sizeof file, "/sys/class/infiniband/%s/ports/1/state", device);
    doctor_read(in, file, state, sizeof state);
    doctor_text(file, sizeof file, "/sys/class/infiniband/%s/ports/1/rate", device);
    doctor_read(in, file, rate, sizeof rate);
    doctor_text(file, sizeof file, "/sys/class/infiniband/%s/ports/1/link_layer", device);
    doctor_read(in, file, layer, sizeof layer);
    const char *state_name = strchr(state, ':') ? strchr(state, ':') + 2 : state;
    if (used < sizeof list - 1)
      used +=
          (size_t)snprintf(list + used, sizeof list - used, "%s%s %s %s %s", e ? ", " : "", device,
                           !strcmp(layer, "Ethernet") ? "RoCE" : layer, rate, state_name);
    if (strcmp(state_name, "ACTIVE") && !down[0]) doctor_text(down, sizeof down, "%s", device);
  }
  if (!count) {
    doctor_add(report, "rdma", DOCTOR_INFO, NULL,
               "no RDMA device (/sys/class/infiniband is empty or absent): TCP between nodes");
    return;
  }
  int verbs = 1;
  if (doctor_is_real_root(in)) {
    void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    verbs = lib != NULL;
    if (lib) dlclose(lib);
  }
  if (!verbs) {
    doctor_add(report, "rdma", DOCTOR_WARN,
               "apt-get install rdma-core libibverbs1 ibverbs-providers",
               "%s; libibverbs.so.1 does not load, so nothing in user space can use them", list);
  } else if (down[0]) {
    char fix[DOCTOR_TEXT_BYTES];
    doctor_text(fix, sizeof fix,
                "ibstat %s; bring the port up (cable, switch port, subnet manager: systemctl start "
                "opensm on one node of an InfiniBand fabric)",
                down);
    doctor_add(report, "rdma", DOCTOR_WARN, fix, "%s: %s is not ACTIVE", list, down);
  } else {
    doctor_add(report, "rdma", DOCTOR_PASS, NULL, "%s", list);
  }
}

/* ---- all of them ---- */

static void doctor_hostname(const doctor_inputs *in, doctor_report *report) {
  if (!doctor_read(in, "/proc/sys/kernel/hostname", report->host, sizeof report->host)) return;
  if (gethostname(report->host, sizeof report->host - 1))
    snprintf(report->host, sizeof report->host, "?");
}

void doctor_run_checks(const doctor_inputs *in, doctor_report *out) {
  memset(out, 0, sizeof *out);
  doctor_hostname(in, out);
  doctor_check_cores(in, out);
  doctor_check_numa(in, out);
  doctor_check_memory(in, out);
  doctor_check_shm(in, out);
  doctor_check_ptrace(in, out);
  doctor_check_memlock(in, out);
  doctor_check_nofile(in, out);
  doctor_check_tcp_buffers(in, out);
  doctor_check_congestion(in, out);
  doctor_check_mtu(in, out);
  doctor_check_clock(in, out);
  doctor_check_gpus(in, out);
  doctor_check_rdma(in, out);
}
