// SPDX-License-Identifier: Apache-2.0
/*
 * tcp_tune.c — congestion control and socket buffers of the TCP transport's connections.
 *
 * Congestion control. STRATA_TCP_CC names an algorithm ("bbr", "cubic", ...) set with
 * TCP_CONGESTION on every socket before it connects (a listener's choice is inherited by the
 * sockets it accepts; it is set again after the handshake anyway). strata_tcp_tune_check tries it
 * on a throw-away socket first, so a name the kernel does not know (ENOENT) or does not allow an
 * unprivileged process (EPERM: not in net.ipv4.tcp_allowed_congestion_control) fails the
 * communicator with one clear sentence instead of silently running with the default.
 *
 * Buffers. A stream keeps at most min(cwnd, peer's receive window) bytes in flight, so a link of
 * rate R and round trip T needs R·T (the bandwidth-delay product) in flight across the S streams
 * of a pair: R·T/S per stream. 1 Gb/s × 50 ms is 6.25 MB in flight (docs/netem.md).
 *  - STRATA_TCP_BUFFER=N: SO_SNDBUF/SO_RCVBUF = N on every socket before it connects (the kernel
 *    caps it at net.core.wmem_max/rmem_max and doubles it for bookkeeping; it also switches off
 *    the kernel's autotuning for that socket).
 *  - unset (auto): after the handshake the kernel's RTT of the connection (TCP_INFO tcpi_rtt,
 *    measured on the SYN exchange and the handshake messages) and the rate hint
 *    STRATA_TCP_LINK_GBPS (default 10 Gb/s, generous on purpose: too big a buffer costs memory
 *    only when the data is there, too small one caps throughput) give want = R·T/S × 2 (headroom:
 *    BBR probes at 1.25× its estimate, cubic's window saw-tooths up to 1/0.7 of the mean, and the
 *    kernel charges skb overhead against the buffer). If the kernel's autotuning can reach it
 *    (want ≤ net.ipv4.tcp_rmem[2] resp. tcp_wmem[2]) the socket is left alone: autotuning grows
 *    the buffer only as far as the connection really needs, which on loopback/LAN (T ≈ 50 µs)
 *    keeps the memory small and is as fast as a fixed buffer; so is a socket whose limits cannot
 *    be read (a guess would fix it small for good). Otherwise SO_RCVBUF/SO_SNDBUF is set
 *    to want, capped by net.core.rmem_max/wmem_max (read from /proc); when the cap bites, or when
 *    autotuning's own limit is the larger one and is still short, a warning says which sysctl to
 *    raise. Window scaling is fixed at the SYN from the larger of tcp_rmem[2] and rmem_max, not
 *    from SO_RCVBUF, so sizing after connect loses nothing.
 *
 * LAN default (STRATA_TCP_CC unset, the system's default bbr). Every socket starts with cubic
 * (set before connect, as STRATA_TCP_CC is; the listener's choice passes to the sockets it
 * accepts), and one whose handshake RTT says WAN (>= 1 ms) goes back to bbr before any data
 * flows. BBR on a short path leaves the pair slow for seconds after every bulk transfer and again
 * at each ProbeRTT (every 10 s), on loopback and across network namespaces over veth alike: small
 * collectives that follow a large message take about twice as long as with cubic, and bulk
 * throughput drops too. Nothing to gain there: the path has no queue for BBR to keep short.
 * Switching bbr to cubic only after the handshake is not the same: the socket keeps the kernel's
 * internal pacing bbr asked for (the kernel does not undo it when the algorithm changes), whose
 * timer wake-ups cost throughput most where ranks share cores. WAN connections keep bbr
 * (docs/wan.md compares both there).
 *
 * Pacing pieces (WAN only). On a connection whose handshake RTT is >= 1 ms, TCP_NOTSENT_LOWAT
 * (256 KiB) keeps each socket's unsent backlog small, so tcp.c's pieces go to the streams that
 * are actually moving (tcp.c, "Sending").
 *
 * bbr after silence (WAN only). bbr learns a stream's rate from the stream's own deliveries, and a
 * burst that starts with nothing in flight cannot show more than its bytes per round trip (each
 * sample counts from the burst's first byte). A stream that only ever carries bursts below the
 * path's bandwidth-delay product (a compressed outer gradient every few seconds) never leaves
 * bbr's startup, and paces each burst at the rate the last ones showed: left alone that settles at
 * RTT / (g − 1) per burst, g = 2/ln 2 its startup gain, half a round trip whatever the burst's
 * size (docs/wan.md, "Small bursts"). Started afresh, bbr paces from the congestion window the
 * stream has grown (g × cwnd / RTT) until its samples say more, and a stream still in startup has
 * lost nothing by it: it has no estimate of the path to forget. So before a WAN stream that has
 * been quiet for a round trip takes its next piece, strata_tcp_tune_bbr_restart starts its bbr
 * afresh when it is still in startup (TCP_CC_INFO's pacing gain) with nothing in flight. A stream
 * that has seen a transfer large enough to leave startup keeps its estimate: that one is the
 * path's. Setting the running algorithm again does nothing, so it passes through reno.
 *
 * Must never: fail a connection because tuning failed (only the explicit STRATA_TCP_CC check
 * fails, before any connection exists), or block.
 */
#include <errno.h>
#include <linux/inet_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "net/tcp_tune.h"

static const double TUNE_DEFAULT_LINK_GBPS = 10.0;
static const double TUNE_HEADROOM = 2.0;
/* TCP_NOTSENT_LOWAT on WAN connections: the socket takes more data only while less than this is
 * waiting to be sent. tcp.c hands a piece to whichever stream's socket takes it, so this is what
 * keeps a stalled stream (a loss being repaired) from sitting on megabytes of unsent pieces that
 * the other streams could have carried. 256 KiB is ~2 ms of 1 Gbit/s: refilled long before it
 * runs dry. Not on LAN/loopback, where it would only add wake-ups. */
static const int TUNE_NOTSENT_LOWAT_BYTES = 256 * 1024;
/* ---- /proc/sys ---- */

long strata_tcp_sysctl_long(const char *path, int field) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  long value = 0;
  for (int i = 0; i <= field; i++)
    if (fscanf(f, "%ld", &value) != 1) value = 0;
  fclose(f);
  return value;
}

static void sysctl_text(const char *path, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (!fgets(out, (int)cap, f)) out[0] = '\0';
  fclose(f);
  out[strcspn(out, "\n")] = '\0';
}

/* ---- congestion control ---- */

static int set_congestion(int fd, const char *cc) {
  if (!cc[0]) return 0;
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) == 0 ? 0 : errno;
}

int strata_tcp_congestion_get(int fd, char *out, size_t cap) {
  char name[32] = {0};
  socklen_t len = sizeof name - 1;
  if (cap == 0) return STRATA_ERR_INVALID_ARG;
  out[0] = '\0';
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return STRATA_ERR_SYSTEM;
  name[len < sizeof name ? len : sizeof name - 1] = '\0';
  snprintf(out, cap, "%s", name);
  return STRATA_OK;
}

/* bbr's startup gain (2/ln 2) in TCP_CC_INFO's units (<< 8); any gain at or above this is
 * startup: drain, ProbeBW (1.25 at most) and ProbeRTT are all lower. */
static const unsigned TUNE_BBR_STARTUP_GAIN_Q8 = 700;

int strata_tcp_tune_bbr_restart(int fd) {
  char cc[32];
  if (strata_tcp_congestion_get(fd, cc, sizeof cc) != STRATA_OK || strcmp(cc, "bbr") != 0) return 0;
  struct tcp_info info;
  socklen_t len = sizeof info;
  memset(&info, 0, sizeof info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 || info.tcpi_unacked != 0) return 0;
  union tcp_cc_info cc_info;
  len = sizeof cc_info;
  memset(&cc_info, 0, sizeof cc_info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_CC_INFO, &cc_info, &len) != 0 || len < sizeof cc_info.bbr ||
      cc_info.bbr.bbr_pacing_gain < TUNE_BBR_STARTUP_GAIN_Q8)
    return 0;
  /* setting the algorithm a socket already runs does nothing: pass through reno (always built
   * in, and in the default allowed list; where it is not allowed nothing changes) and back */
  if (set_congestion(fd, "reno") != 0) return 0;
  return set_congestion(fd, "bbr") == 0 ? 1 : -1;
}

const char *strata_tcp_tune_auto_congestion(const char *system_default, int connected,
                                            unsigned rtt_us) {
  if (!system_default || strcmp(system_default, "bbr") != 0) return NULL;
  return connected && rtt_us >= STRATA_TCP_WAN_RTT_US ? "bbr" : "cubic";
}

/* STRATA_TCP_CC, else the LAN default's choice (see the top), else "" (the system's). */
static const char *congestion_for(const strata_config *cfg, int connected, unsigned rtt_us) {
  if (cfg->tcp_congestion[0]) return cfg->tcp_congestion;
  char system_default[32];
  sysctl_text("/proc/sys/net/ipv4/tcp_congestion_control", system_default, sizeof system_default);
  const char *cc = strata_tcp_tune_auto_congestion(system_default, connected, rtt_us);
  return cc ? cc : "";
}

int strata_tcp_tune_check(const strata_config *cfg, char *err, size_t err_len) {
  if (!cfg->tcp_congestion[0]) return STRATA_OK;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return STRATA_OK; /* no socket at all: the mesh will say so */
  int e = set_congestion(fd, cfg->tcp_congestion);
  close(fd);
  if (e == 0) return STRATA_OK;
  char available[256], allowed[256];
  sysctl_text("/proc/sys/net/ipv4/tcp_available_congestion_control", available, sizeof available);
  sysctl_text("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof allowed);
  if (err && err_len)
    snprintf(err, err_len, "STRATA_TCP_CC=%s: the kernel refuses it (%s); available: %s%s%s%s",
             cfg->tcp_congestion, strerror(e), available[0] ? available : "?",
             e == EPERM ? "; allowed without CAP_NET_ADMIN: " : "", e == EPERM ? allowed : "",
             e == ENOENT ? " (a module may need loading: modprobe tcp_<name>)" : "");
  return STRATA_ERR_CONFIG;
}

/* ---- buffers ---- */

static void set_buffer(int fd, int option, size_t bytes) {
  int value = bytes > (size_t)0x3fffffff ? 0x3fffffff : (int)bytes;
  setsockopt(fd, SOL_SOCKET, option, &value, sizeof value);
}

void strata_tcp_tune_before_connect(const strata_config *cfg, int fd) {
  if (cfg->tcp_buffer_bytes) {
    set_buffer(fd, SO_SNDBUF, cfg->tcp_buffer_bytes);
    set_buffer(fd, SO_RCVBUF, cfg->tcp_buffer_bytes);
  }
  /* STRATA_TCP_CC is checked by strata_tcp_tune_check; the LAN default may be refused (not in
   * net.ipv4.tcp_allowed_congestion_control): the socket then keeps the system's */
  set_congestion(fd, congestion_for(cfg, 0, 0));
}

size_t strata_tcp_tune_want_bytes(double link_gbps, unsigned rtt_us, int streams) {
  double gbps = link_gbps > 0 ? link_gbps : TUNE_DEFAULT_LINK_GBPS;
  double bdp_bytes = gbps * 1e9 / 8.0 * (double)rtt_us * 1e-6;
  return (size_t)(bdp_bytes / (streams > 0 ? streams : 1) * TUNE_HEADROOM);
}

int strata_tcp_tune_notsent_lowat_bytes(unsigned rtt_us) {
  return rtt_us >= STRATA_TCP_WAN_RTT_US ? TUNE_NOTSENT_LOWAT_BYTES : 0;
}

/* A fixed buffer is the right call only when we know autotuning stops short: with the limits
 * unreadable (no /proc/sys in a container, or a process out of descriptors) a guessed size could
 * only be the small loopback-RTT one, and it would switch autotuning off for good. */
size_t strata_tcp_tune_buffer_bytes(size_t want, long autotune_max, long core_max) {
  if (autotune_max <= 0 || want <= (size_t)autotune_max) return 0;
  if (core_max > 0 && autotune_max >= core_max) return 0; /* autotuning reaches further */
  return core_max > 0 && want > (size_t)core_max ? (size_t)core_max : want;
}

/* One direction's buffer in auto mode: left to autotuning, or set (capped). The shortfall is a
 * warning when the user gave the link rate (the want is then real), else an info line: the
 * default rate is a deliberate over-estimate and S streams of a smaller buffer may well do. */
static void size_one(int fd, int option, size_t want, const char *what, int hinted, int rank,
                     int peer, int stream) {
  int is_rcv = option == SO_RCVBUF;
  long autotune_max = strata_tcp_sysctl_long(
      is_rcv ? "/proc/sys/net/ipv4/tcp_rmem" : "/proc/sys/net/ipv4/tcp_wmem", 2);
  long core_max = strata_tcp_sysctl_long(
      is_rcv ? "/proc/sys/net/core/rmem_max" : "/proc/sys/net/core/wmem_max", 0);
  static int warned; /* once per process, not once per stream */
  const strata_log_level level = hinted ? STRATA_LOG_WARN : STRATA_LOG_INFO;
  size_t bytes = strata_tcp_tune_buffer_bytes(want, autotune_max, core_max);
  if (bytes == 0 && autotune_max > 0 && want > (size_t)autotune_max) {
    if (!warned++)
      STRATA_LOG(level, rank,
                 "tcp tune: peer %d stream %d wants %s %zu bytes, autotuning stops at %ld "
                 "(net.ipv4.%s[2]; raise it to use the link fully)",
                 peer, stream, what, want, autotune_max, is_rcv ? "tcp_rmem" : "tcp_wmem");
    return;
  }
  if (bytes == 0) return; /* autotuning gets there, or we cannot tell: leave it to autotuning */
  if (bytes < want) {
    if (!warned++)
      STRATA_LOG(level, rank,
                 "tcp tune: peer %d stream %d wants %s %zu bytes, capped at %ld by net.core.%s "
                 "(raise it to use the link fully)",
                 peer, stream, what, want, core_max, is_rcv ? "rmem_max" : "wmem_max");
  }
  set_buffer(fd, option, bytes);
}

static int get_int(int fd, int level, int option) {
  int value = 0;
  socklen_t len = sizeof value;
  return getsockopt(fd, level, option, &value, &len) == 0 ? value : -1;
}

void strata_tcp_tune_established(const strata_config *cfg, int fd, int rank, int peer, int stream) {
  struct tcp_info info;
  socklen_t len = sizeof info;
  memset(&info, 0, sizeof info);
  unsigned rtt_us = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 ? info.tcpi_rtt : 0;
  /* STRATA_TCP_CC again (a listener's choice may not have reached an accepted socket), or the
   * LAN default's choice now that the RTT is known */
  char current[32];
  const char *cc = congestion_for(cfg, 1, rtt_us);
  int e = 0;
  if (cc[0] && (strata_tcp_congestion_get(fd, current, sizeof current) != STRATA_OK ||
                strcmp(current, cc) != 0))
    e = set_congestion(fd, cc);
  if (e)
    STRATA_LOG(cfg->tcp_congestion[0] ? STRATA_LOG_WARN : STRATA_LOG_DEBUG, rank,
               "tcp tune: peer %d stream %d: TCP_CONGESTION %s: %s", peer, stream, cc, strerror(e));
  size_t want = 0;
  int lowat = strata_tcp_tune_notsent_lowat_bytes(rtt_us);
  if (lowat > 0) setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
  if (!cfg->tcp_buffer_bytes && rtt_us > 0) {
    want = strata_tcp_tune_want_bytes(cfg->tcp_link_gbps, rtt_us, cfg->tcp_streams);
    int hinted = cfg->tcp_link_gbps > 0;
    size_one(fd, SO_SNDBUF, want, "send buffer", hinted, rank, peer, stream);
    size_one(fd, SO_RCVBUF, want, "receive buffer", hinted, rank, peer, stream);
  }
  if (STRATA_LOG_INFO <= strata_log_get_level()) {
    char cc[32];
    if (strata_tcp_congestion_get(fd, cc, sizeof cc) != STRATA_OK) snprintf(cc, sizeof cc, "?");
    STRATA_LOG(STRATA_LOG_INFO, rank,
               "tcp tune: peer %d stream %d cc=%s rtt_us=%u want_bytes=%zu sndbuf=%d rcvbuf=%d "
               "notsent_lowat=%d%s",
               peer, stream, cc, rtt_us, want, get_int(fd, SOL_SOCKET, SO_SNDBUF),
               get_int(fd, SOL_SOCKET, SO_RCVBUF), lowat, cfg->tcp_buffer_bytes ? " (fixed)" : "");
  }
}
