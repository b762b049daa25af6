// SPDX-License-Identifier: Apache-2.0
/*
 * handshake.h — the mutual, authenticated handshake that opens every TCP connection between two
 * ranks (see handshake.c for the protocol). It is a non-blocking state machine so one poll loop
 * can drive many connections at once, and a peer that connects and says nothing costs a slot,
 * never a hang.
 */
#ifndef STRATA_NET_HANDSHAKE_H
#define STRATA_NET_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "net/seal.h"
#include "net/wire.h"

#define STRATA_HANDSHAKE_ADDRESS_BYTES 320

/* What this process says about itself; shared by all its handshakes. */
typedef struct strata_handshake_params {
  char job_id[STRATA_WIRE_JOB_ID_BYTES]; /* NUL-padded */
  uint8_t key[STRATA_WIRE_KEY_BYTES];    /* the job key (core/secret.c) */
  uint32_t version;                      /* announced protocol version */
  int rank, nranks, streams;
  int encrypt;                                  /* strata_encrypt_mode */
  int aes;                                      /* this CPU runs AES-256-GCM */
  char address[STRATA_HANDSHAKE_ADDRESS_BYTES]; /* the address this rank published */
  /* Optional. NULL: the accepting side takes only higher ranks (every pair dialed by its higher
   * rank). Set: any other rank may dial, and this is asked, once the dialer proved the secret and
   * before we prove ourselves (so the dialer cannot have used the connection yet), whether we
   * take (peer_rank, stream); nonzero refuses it with REJECT_CROSSED (tcp_mesh.c: one link per
   * pair when both dialed at once). */
  int (*admit)(void *ctx, int peer_rank, int stream);
  void *admit_ctx;
} strata_handshake_params;

typedef struct strata_handshake {
  const strata_handshake_params *params;
  int fd;
  int peer_rank; /* expected (connecting side) or learned from HELLO (accepting side; -1 until) */
  int stream;    /* expected (connecting side) or learned (accepting side; -1 until) */
  int accepting; /* 1: we accepted this connection, the peer must be a higher rank */
  int claimed_rank;  /* the rank an accepted peer's HELLO claims, before it is verified; or -1 */
  int stage;         /* handshake.c's enum */
  int status;        /* STRATA_ERR_IN_PROGRESS until done; then STRATA_OK or the failure */
  int reject_status; /* the failure we are reporting while the REJECT drains */
  double linger_deadline_s;
  uint8_t my_secret[32];                                  /* ephemeral X25519 secret key */
  uint8_t hello_initiator[sizeof(strata_wire_handshake)]; /* both HELLOs as on the wire: */
  uint8_t hello_responder[sizeof(strata_wire_handshake)]; /* what the MACs and keys bind */
  char bound_address[STRATA_HANDSHAKE_ADDRESS_BYTES];     /* the responder's published address */
  strata_seal_keys keys; /* after STRATA_OK: whether and how the connection's frames are sealed */
  strata_wire_handshake out; /* the record being sent (wire order) */
  size_t out_sent;           /* bytes of `out` sent; sizeof(out) = nothing pending */
  strata_wire_handshake in;  /* the record being received (wire order until complete) */
  size_t in_got;
  char err[400]; /* why it failed, one sentence naming both ranks */
  int crossed;   /* failed with STRATA_ERR_PEER_LOST because one side's admit() refused it: the
                    pair is being connected the other way, not a failure */
} strata_handshake;

/* Fill params (address empty, encrypt AUTO; the caller sets them). key = the job key of
 * (secret, job id). Returns STRATA_OK, STRATA_ERR_SYSTEM (libsodium could not initialize),
 * STRATA_ERR_NO_MEMORY (the key derivation) or STRATA_ERR_INVALID_ARG (job id too long). */
int strata_handshake_params_init(strata_handshake_params *params, const char *job_id,
                                 const char *secret, int rank, int nranks, int streams);

/* Start a handshake on a connected non-blocking socket. peer_rank/stream >= 0: we connected to
 * that rank for that stream, at `address` (the text it published); -1/-1 (address NULL): we
 * accepted and learn them from the peer's HELLO. */
void strata_handshake_start(strata_handshake *hs, const strata_handshake_params *params, int fd,
                            int peer_rank, int stream, const char *address);

/* Do whatever I/O is possible without blocking. Returns STRATA_ERR_IN_PROGRESS (poll for
 * strata_handshake_events() and call again), STRATA_OK (authenticated; hs->peer_rank and
 * hs->stream name the connection; the socket carries frames from now on) or a failure:
 * STRATA_ERR_VERSION / _JOB / _AUTH / _CONFIG / _PROTOCOL / _PEER_LOST / _SYSTEM with hs->err
 * saying which check failed on which side. The caller owns and closes the fd either way. */
int strata_handshake_advance(strata_handshake *hs);

/* 1 when the socket's two ends are on one host (loopback, or the same local and peer address):
 * what STRATA_ENCRYPT=auto leaves in clear. */
int strata_handshake_same_host(int fd);

/* Fail a pending handshake whose deadline passed (STRATA_ERR_TIMEOUT, message in hs->err). */
void strata_handshake_expire(strata_handshake *hs);

/* What an accepting side may drop first when strangers crowd it: 2 = already refusing the peer
 * (REJECT queued or lingering), 1 = the peer has sent nothing yet, 0 = it is talking. */
int strata_handshake_evictable(const strata_handshake *hs);

/* POLLIN and/or POLLOUT: what advance() is waiting for. */
short strata_handshake_events(const strata_handshake *hs);

#endif
