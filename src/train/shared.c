// SPDX-License-Identifier: Apache-2.0
/*
 * shared.c — shared state: named buffers every member of a communicator must hold alike (the
 * model, the optimizer's moments, DiLoCo's global parameters and outer momentum), with a
 * revision the caller advances after each update. A sync makes every member hold the bytes of
 * the newest revision — among the ranks at that revision, the content most of them hold — and
 * a rank that differs (a joiner, a rank that missed a step, a corrupted copy) pulls them from one
 * that has them. As PCCL's shared-state synchronisation.
 *
 * One sync:
 *   1. every rank digests its state: the layout (names and sizes, which must be the same
 *      everywhere) and the content (revision and every byte), BLAKE2b;
 *   2. an allgather of the digests; every rank computes the same plan from the same table: the
 *      newest revision, the content most ranks at that revision hold (ties: the one the lowest
 *      rank holds), the holders, and for each rank that differs a holder to pull from, dealt
 *      round-robin so several pullers spread over the holders;
 *   3. each holder sends every buffer to its pullers, each puller receives them, and checks that
 *      what arrived digests to the chosen content (STRATA_ERR_PROTOCOL otherwise).
 * A rank that already holds the chosen bytes moves nothing but its digest.
 */
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "strata.h"

enum { DIGEST_BYTES = 32, RECORD_BYTES = 2 * DIGEST_BYTES + 8 };

/* The record each rank contributes: layout digest, content digest, revision (little-endian). */
typedef struct record {
  uint8_t layout[DIGEST_BYTES];
  uint8_t content[DIGEST_BYTES];
  uint64_t revision;
} record;

static void put_u64(crypto_generichash_state *h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  crypto_generichash_update(h, b, sizeof b);
}

static void digest(const strata_shared_state *state, int with_content, uint8_t *out) {
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, DIGEST_BYTES);
  put_u64(&h, (uint64_t)state->count);
  if (with_content) put_u64(&h, state->revision);
  for (int i = 0; i < state->count; i++) {
    const strata_shared_entry *e = &state->entries[i];
    size_t len = strlen(e->name);
    put_u64(&h, len);
    crypto_generichash_update(&h, (const unsigned char *)e->name, len);
    put_u64(&h, e->bytes);
    if (with_content && e->bytes) crypto_generichash_update(&h, e->data, e->bytes);
  }
  crypto_generichash_final(&h, out, DIGEST_BYTES);
}

static void record_pack(const record *r, uint8_t *out) {
  memcpy(out, r->layout, DIGEST_BYTES);
  memcpy(out + DIGEST_BYTES, r->content, DIGEST_BYTES);
  for (int i = 0; i < 8; i++) out[2 * DIGEST_BYTES + i] = (uint8_t)(r->revision >> (8 * i));
}

static void record_unpack(const uint8_t *in, record *r) {
  memcpy(r->layout, in, DIGEST_BYTES);
  memcpy(r->content, in + DIGEST_BYTES, DIGEST_BYTES);
  r->revision = 0;
  for (int i = 0; i < 8; i++) r->revision |= (uint64_t)in[2 * DIGEST_BYTES + i] << (8 * i);
}

static int check_state(const strata_shared_state *state) {
  if (!state || state->count < 0 || (state->count > 0 && !state->entries))
    return STRATA_ERR_INVALID_ARG;
  for (int i = 0; i < state->count; i++) {
    const strata_shared_entry *e = &state->entries[i];
    if (!e->name || !e->name[0] || (e->bytes && !e->data)) return STRATA_ERR_INVALID_ARG;
    for (int j = 0; j < i; j++)
      if (!strcmp(state->entries[j].name, e->name)) return STRATA_ERR_INVALID_ARG;
  }
  return STRATA_OK;
}

/* Every buffer from `peer` (send) or to it (receive), in entry order, in pieces an int count
 * can carry. */
static int move_all(strata_comm *comm, strata_shared_state *state, int peer, int sending,
                    uint64_t *moved) {
  const size_t piece = (size_t)1 << 30;
  for (int i = 0; i < state->count; i++) {
    strata_shared_entry *e = &state->entries[i];
    for (size_t off = 0; off < e->bytes; off += piece) {
      size_t n = e->bytes - off < piece ? e->bytes - off : piece;
      int status = sending ? strata_send(comm, (const uint8_t *)e->data + off, n, STRATA_U8, peer)
                           : strata_recv(comm, (uint8_t *)e->data + off, n, STRATA_U8, peer);
      if (status != STRATA_OK) return status;
      *moved += n;
    }
  }
  return STRATA_OK;
}

int strata_shared_sync(strata_comm *comm, strata_shared_state *state,
                       strata_shared_sync_info *info) {
  if (!comm) return STRATA_ERR_INVALID_ARG;
  int status = check_state(state);
  if (status != STRATA_OK) return status;
  if (sodium_init() < 0) return STRATA_ERR_SYSTEM;
  int n = strata_comm_size(comm), me = strata_comm_rank(comm);
  strata_shared_sync_info local = {.source = -1};
  record mine;
  digest(state, 0, mine.layout);
  digest(state, 1, mine.content);
  mine.revision = state->revision;
  uint8_t packed[RECORD_BYTES];
  record_pack(&mine, packed);
  uint8_t *table = malloc((size_t)n * RECORD_BYTES);
  record *all = malloc((size_t)n * sizeof *all);
  int *holders = malloc((size_t)n * sizeof *holders);
  if (!table || !all || !holders) {
    status = STRATA_ERR_NO_MEMORY;
    goto out;
  }
  status = strata_allgather(comm, packed, table, RECORD_BYTES, STRATA_U8);
  if (status != STRATA_OK) goto out;
  for (int r = 0; r < n; r++) record_unpack(table + (size_t)r * RECORD_BYTES, &all[r]);
  /* the same table on every rank: every rank reaches the same verdicts */
  for (int r = 0; r < n; r++)
    if (memcmp(all[r].layout, all[0].layout, DIGEST_BYTES)) {
      STRATA_LOG(STRATA_LOG_ERROR, me,
                 "shared state: rank %d's buffers differ from rank 0's in names or sizes", r);
      status = STRATA_ERR_MISMATCH;
      goto out;
    }
  uint64_t newest = 0;
  for (int r = 0; r < n; r++)
    if (all[r].revision > newest) newest = all[r].revision;
  /* the content most ranks at the newest revision hold; ties go to the lowest rank's */
  int chosen = -1, best = 0;
  for (int r = 0; r < n; r++) {
    if (all[r].revision != newest) continue;
    int same = 0;
    for (int q = 0; q < n; q++)
      same += all[q].revision == newest && !memcmp(all[q].content, all[r].content, DIGEST_BYTES);
    if (same > best) best = same, chosen = r;
  }
  int nholders = 0;
  for (int r = 0; r < n; r++)
    if (all[r].revision == newest && !memcmp(all[r].content, all[chosen].content, DIGEST_BYTES))
      holders[nholders++] = r;
  local.revision = newest;
  local.ranks_in_majority = nholders;
  /* pullers in rank order, each dealt the next holder */
  int dealt = 0;
  for (int r = 0; r < n && status == STRATA_OK; r++) {
    int holds =
        all[r].revision == newest && !memcmp(all[r].content, all[chosen].content, DIGEST_BYTES);
    if (holds) continue;
    int source = holders[dealt++ % nholders];
    if (source == me) {
      status = move_all(comm, state, r, 1, &local.bytes_sent);
    } else if (r == me) {
      local.pulled = 1;
      local.source = source;
      status = move_all(comm, state, source, 0, &local.bytes_received);
      if (status == STRATA_OK) {
        state->revision = newest;
        uint8_t check[DIGEST_BYTES];
        digest(state, 1, check);
        if (memcmp(check, all[chosen].content, DIGEST_BYTES)) {
          STRATA_LOG(STRATA_LOG_ERROR, me,
                     "shared state: the bytes from rank %d do not digest to revision %llu's",
                     source, (unsigned long long)newest);
          status = STRATA_ERR_PROTOCOL;
        }
      }
    }
  }
out:
  free(table);
  free(all);
  free(holders);
  if (info) *info = local;
  return status;
}
