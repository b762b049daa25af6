// SPDX-License-Identifier: Apache-2.0
/*
 * weights.h — internals of RL weight sync (include/strata.h "RL weight sync", docs/weights.md):
 * the tensor set, the blob format of one encoded version, and the codec that writes and applies
 * blobs. weights_codec.c knows nothing of communicators; weights.c runs rounds over one.
 *
 * A blob is one version in one encoding, self-describing and checked field by field on arrival:
 *
 *   u32 magic  u32 kind (FULL | PATCH)  u64 version  u32 ntensors  u32 zero
 *   u64 raw_bytes (payload before zstd)  u64 payload_bytes
 *   u64 hash[ntensors]   xxHash3-64 of each tensor of that version, publisher order
 *   payload              FULL: every tensor's bytes, publisher order (not compressed)
 *                        PATCH: one zstd frame of, per tensor in publisher order,
 *                          varint changed, changed varint gaps, changed new element values
 *                        where gap = index - previous index - 1 (the first: index)
 *
 * Integers are little-endian (the byte order of every host strata runs on); the header is
 * read with memcpy, never cast.
 */
#ifndef STRATA_TRAIN_WEIGHTS_H
#define STRATA_TRAIN_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "strata.h"

#define WEIGHTS_BLOB_MAGIC 0x31425753u /* "SWB1" */
#define WEIGHTS_BLOB_FULL 1u
#define WEIGHTS_BLOB_PATCH 2u
#define WEIGHTS_BLOB_HEADER_BYTES 40u
#define WEIGHTS_NAME_MAX 255

typedef struct weights_tensor {
  char name[WEIGHTS_NAME_MAX + 1];
  void *data; /* the caller's buffer */
  strata_dtype dtype;
  int ndim;
  int64_t shape[STRATA_WEIGHTS_MAX_DIMS];
  size_t elements, element_bytes, bytes;
} weights_tensor;

typedef struct weights_set {
  size_t count;
  weights_tensor *tensors;
  size_t total_bytes;
  uint64_t digest; /* of names, dtypes and shapes in name order: equal sets, equal digests */
} weights_set;

typedef struct weights_blob_header {
  uint32_t kind;
  uint64_t version;
  uint32_t ntensors;
  uint64_t raw_bytes, payload_bytes;
} weights_blob_header;

/* Checks and copies the caller's descriptions; err gets a sentence on failure. */
int weights_set_init(weights_set *set, const strata_weights_tensor *tensors, size_t count,
                     char *err, size_t err_len);
void weights_set_free(weights_set *set);
/* xxHash3-64 of every tensor of `set` whose bytes start at data[i] (the caller's when data is
 * NULL). */
void weights_hash_all(const weights_set *set, uint8_t *const *data, uint64_t *hashes);

/* xxHash3-64 of `len` bytes. */
uint64_t weights_digest_bytes(const void *data, size_t len);

/* A full blob of the caller's buffers: *out from malloc. */
int weights_encode_full(const weights_set *set, uint64_t version, const uint64_t *hashes,
                        uint8_t **out, size_t *out_len);
/* A patch blob from `previous[i]` (the last version's bytes of tensor i) to the caller's
 * buffers. Gives up (STRATA_ERR_UNSUPPORTED, *out = NULL) once the patch before compression
 * passes `give_up_bytes`: a full copy is then the smaller. *changed = elements that changed.
 * `corrupt` (fault injection) flips the low bit of the patch's last byte before compression. */
int weights_encode_patch(const weights_set *set, uint8_t *const *previous, uint64_t version,
                         const uint64_t *hashes, int zstd_level, size_t give_up_bytes, int corrupt,
                         uint8_t **out, size_t *out_len, uint64_t *changed, size_t *raw_len);

/* Reads and checks a blob's header (magic, kind, sizes against `len`). */
int weights_blob_parse(const uint8_t *blob, size_t len, weights_blob_header *h, char *err,
                       size_t err_len);
/* Applies a blob to `staging` (tensor map[i] of `set` receives the publisher's tensor i) and
 * checks the digests: STRATA_ERR_PROTOCOL with a sentence naming the tensor when the blob does
 * not decode or a digest differs. touched[j] becomes 1 for every tensor j it wrote, so only those
 * need copying (after success) or restoring (after a failure, when staging is partly written). */
int weights_blob_apply(const weights_set *set, const size_t *map, uint8_t *const *staging,
                       uint8_t *touched, const uint8_t *blob, size_t len, char *err,
                       size_t err_len);

/* A full blob applied while it arrives, so copying and hashing overlap the rest of the stream
 * instead of following it: weights_full_apply_prefix takes the blob's first `arrived` bytes (of
 * `len`, the whole blob's size, known from the round's plan), copies into staging the tensor
 * bytes not copied yet and checks each tensor's digest as soon as its last byte is in.
 * STRATA_ERR_PROTOCOL with a sentence (the header is malformed, a digest differs): the cursor
 * is then spent. The call with arrived == len finishes the blob. touched as for
 * weights_blob_apply. The cursor starts zeroed; weights_full_cursor_free releases it. */
typedef struct weights_full_cursor {
  int started, failed;
  weights_blob_header header;
  size_t tensor;        /* the publisher's tensor being copied */
  uint64_t tensor_done; /* its bytes copied so far */
  uint64_t applied;     /* payload bytes copied */
  void *hash_state;     /* XXH3 of the tensor being copied */
} weights_full_cursor;
int weights_full_apply_prefix(const weights_set *set, const size_t *map, uint8_t *const *staging,
                              uint8_t *touched, weights_full_cursor *c, const uint8_t *blob,
                              size_t arrived, size_t len, char *err, size_t err_len);
void weights_full_cursor_free(weights_full_cursor *c);

/* Little-endian-host field access for the version and round records (unaligned-safe). */
static inline void weights_put_u32(uint8_t *p, uint32_t v) {
  memcpy(p, &v, 4);
}
static inline void weights_put_u64(uint8_t *p, uint64_t v) {
  memcpy(p, &v, 8);
}
static inline uint32_t weights_get_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline uint64_t weights_get_u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

#endif
