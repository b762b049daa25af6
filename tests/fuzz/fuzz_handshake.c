// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_handshake.c — libFuzzer harness for the connection handshake (src/net/handshake.c), on
 * both sides: byte 0 says whether this end accepted the connection (responder, rank 0 of 4) or
 * dialed it (initiator, rank 3 dialing rank 1, stream 0); the rest is everything the peer sends,
 * then it closes. The state machine must end in a verdict (a refusal, a lost peer, or a timeout
 * once the harness stops waiting) without reading or writing out of bounds, leaking, or spinning.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/handshake.h"
#include "strata.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static strata_handshake_params params;
  static int ready;
  if (!ready) {
    if (strata_handshake_params_init(&params, "fuzzjob", "fuzz-secret", 0, 4, 2) != STRATA_OK)
      return 0;
    strcpy(params.address, "127.0.0.1:7000");
    ready = 1;
  }
  if (size < 1) return 0;
  int accepting = data[0] & 1;
  params.rank = accepting ? 0 : 3;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 0;
  ssize_t n = send(sv[1], data + 1, size - 1, MSG_NOSIGNAL);
  (void)n;
  shutdown(sv[1], SHUT_WR);
  strata_handshake hs;
  strata_handshake_start(&hs, &params, sv[0], accepting ? -1 : 1, accepting ? -1 : 0,
                         accepting ? NULL : "127.0.0.1:7000");
  char sink[4096];
  int status = STRATA_ERR_IN_PROGRESS;
  for (int pass = 0; pass < 32 && status == STRATA_ERR_IN_PROGRESS; pass++) {
    status = strata_handshake_advance(&hs);
    while (recv(sv[1], sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
  }
  if (status == STRATA_ERR_IN_PROGRESS) strata_handshake_expire(&hs);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
