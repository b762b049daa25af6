// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_kv.c — libFuzzer harness for what a KV agent reads from other agents (src/serve/). Byte 0
 * picks the reader, modulo 3:
 *   0  a metadata blob, as strata_kv_peer_load parses it (kv_agent.c): a peer or
 *      STRATA_ERR_PARSE, and a parsed peer keeps its promises (kv_blob_parse_for_test aborts
 *      otherwise);
 *   1  what an authenticated peer sends on one connection, HELLO first, as the responder serves
 *      it (kv_responder.c) against an agent with two registered regions at a fixed address
 *      (0x3e0000000000, 1 MiB, and 4 KiB after it, ids 1 and 2) so inputs can name bytes inside
 *      them: every input ends with the connection closed, its replies drained, nothing written
 *      outside a region;
 *   2  a UCX active message's header and data length, as the UCX backend decodes a request
 *      (target) and a reply (initiator) (kv_wire.h): byte 1 bit 0 says rendezvous, bytes 2..5
 *      the data length; what decodes must agree with itself.
 * A copy of exactly the input's bytes is parsed, so a read past it is caught.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/kv_internal.h"

static void ucx_headers(const uint8_t *data, size_t size) {
  if (size < 5) return;
  int rendezvous = data[0] & 1;
  uint32_t data_bytes;
  memcpy(&data_bytes, data + 1, 4);
  data_bytes = le32toh(data_bytes);
  const uint8_t *header = data + 5;
  size_t header_bytes = size - 5;
  kv_ucx_request request;
  if (kv_ucx_request_decode(header, header_bytes, data_bytes, rendezvous, &request) == 0) {
    if (request.bytes > KV_WIRE_MAX_SLICE_BYTES ||
        (request.type != KV_READ && request.type != KV_WRITE) ||
        (request.type == KV_WRITE && request.bytes != data_bytes) ||
        (request.type == KV_READ && (data_bytes != 0 || rendezvous)))
      abort();
  }
  kv_ucx_reply reply;
  if (kv_ucx_reply_decode(header, header_bytes, data_bytes, rendezvous, &reply) == 0) {
    if ((rendezvous && reply.status != 0) || reply.status > 0 || reply.bytes != data_bytes ||
        (reply.status < 0 && reply.bytes > KV_UCX_REASON_BYTES))
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t *copy = malloc(size - 1 ? size - 1 : 1);
  if (!copy) return 0;
  memcpy(copy, data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      int status = kv_blob_parse_for_test(copy, size - 1);
      if (status != STRATA_OK && status != STRATA_ERR_PARSE && status != STRATA_ERR_NO_MEMORY)
        abort();
      break;
    }
    case 1:
      kv_responder_frames_for_test(copy, size - 1);
      break;
    default:
      ucx_headers(copy, size - 1);
  }
  free(copy);
  return 0;
}
