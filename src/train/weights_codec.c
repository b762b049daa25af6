// SPDX-License-Identifier: Apache-2.0
/*
 * weights_codec.c — encodes one version of a tensor set as a blob (a full copy or a sparse
 * patch) and applies a blob to a staging copy, checking every tensor's digest (weights.h has the
 * format).
 *
 * A patch carries the NEW bits of every element whose bits changed, never a difference: applying
 * it is a store, so the result is bit-exact whatever the dtype, and a NaN or a signed zero
 * survives. Every read of a blob is bounds-checked: a blob from the wire may be anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <zstd.h>

#include "core/core.h"
#include "train/weights.h"

/* ---- the set ---- */

static int by_name(const void *a, const void *b) {
  return strcmp((*(const weights_tensor *const *)a)->name,
                (*(const weights_tensor *const *)b)->name);
}

static uint64_t set_digest(const weights_set *set) {
  const weights_tensor **order = malloc((set->count ? set->count : 1) * sizeof *order);
  if (!order) return 0;
  for (size_t i = 0; i < set->count; i++) order[i] = &set->tensors[i];
  qsort(order, set->count, sizeof *order, by_name);
  XXH3_state_t *state = XXH3_createState();
  if (!state) {
    free(order);
    return 0;
  }
  XXH3_64bits_reset(state);
  for (size_t i = 0; i < set->count; i++) {
    const weights_tensor *t = order[i];
    int32_t dtype = (int32_t)t->dtype, ndim = t->ndim;
    XXH3_64bits_update(state, t->name, strlen(t->name) + 1);
    XXH3_64bits_update(state, &dtype, sizeof dtype);
    XXH3_64bits_update(state, &ndim, sizeof ndim);
    XXH3_64bits_update(state, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
  }
  uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  free(order);
  return digest;
}

int weights_set_init(weights_set *set, const strata_weights_tensor *tensors, size_t count,
                     char *err, size_t err_len) {
  memset(set, 0, sizeof *set);
  if (!tensors && count) return snprintf(err, err_len, "tensors is NULL"), STRATA_ERR_INVALID_ARG;
  set->tensors = calloc(count ? count : 1, sizeof *set->tensors);
  if (!set->tensors) return STRATA_ERR_NO_MEMORY;
  set->count = count;
  for (size_t i = 0; i < count; i++) {
    const strata_weights_tensor *in = &tensors[i];
    weights_tensor *t = &set->tensors[i];
    size_t name_len = in->name ? strlen(in->name) : 0;
    int status = STRATA_ERR_INVALID_ARG;
    if (name_len == 0 || name_len > WEIGHTS_NAME_MAX) {
      snprintf(err, err_len, "tensor %zu: a name of 1..%d bytes is required", i, WEIGHTS_NAME_MAX);
      goto fail;
    }
    memcpy(t->name, in->name, name_len + 1);
    if (in->dtype != STRATA_BF16 && in->dtype != STRATA_F16 && in->dtype != STRATA_F32) {
      snprintf(err, err_len, "tensor '%s': dtype %s is not bf16, f16 or f32", t->name,
               strata_dtype_name(in->dtype));
      status = STRATA_ERR_UNSUPPORTED;
      goto fail;
    }
    if (in->ndim < 0 || in->ndim > STRATA_WEIGHTS_MAX_DIMS) {
      snprintf(err, err_len, "tensor '%s': ndim %d outside 0..%d", t->name, in->ndim,
               STRATA_WEIGHTS_MAX_DIMS);
      goto fail;
    }
    t->dtype = in->dtype;
    t->ndim = in->ndim;
    t->element_bytes = strata_dtype_size(in->dtype);
    size_t elements = 1;
    for (int d = 0; d < in->ndim; d++) {
      if (in->shape[d] < 0 ||
          (in->shape[d] > 0 && elements > SIZE_MAX / 16 / (uint64_t)in->shape[d])) {
        snprintf(err, err_len, "tensor '%s': dimension %d is negative or too large", t->name, d);
        goto fail;
      }
      t->shape[d] = in->shape[d];
      elements *= (size_t)in->shape[d];
    }
    t->elements = elements;
    t->bytes = elements * t->element_bytes;
    if (!in->data && t->bytes) {
      snprintf(err, err_len, "tensor '%s': data is NULL", t->name);
      goto fail;
    }
    t->data = in->data;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(set->tensors[j].name, t->name)) {
        snprintf(err, err_len, "tensor name '%s' appears twice", t->name);
        goto fail;
      }
    set->total_bytes += t->bytes;
    continue;
  fail:
    weights_set_free(set);
    return status;
  }
  set->digest = set_digest(set);
  return STRATA_OK;
}

void weights_set_free(weights_set *set) {
  free(set->tensors);
  memset(set, 0, sizeof *set);
}

uint64_t weights_digest_bytes(const void *data, size_t len) {
  return XXH3_64bits(data, len);
}

void weights_hash_all(const weights_set *set, uint8_t *const *data, uint64_t *hashes) {
  for (size_t i = 0; i < set->count; i++)
    hashes[i] = XXH3_64bits(data ? data[i] : set->tensors[i].data, set->tensors[i].bytes);
}

/* ---- writing ---- */

static size_t header_bytes(size_t ntensors) {
  return WEIGHTS_BLOB_HEADER_BYTES + 8 * ntensors;
}

static void write_header(uint8_t *blob, uint32_t kind, uint64_t version, const weights_set *set,
                         const uint64_t *hashes, uint64_t raw_bytes, uint64_t payload_bytes) {
  weights_put_u32(blob, WEIGHTS_BLOB_MAGIC);
  weights_put_u32(blob + 4, kind);
  weights_put_u64(blob + 8, version);
  weights_put_u32(blob + 16, (uint32_t)set->count);
  weights_put_u32(blob + 20, 0);
  weights_put_u64(blob + 24, raw_bytes);
  weights_put_u64(blob + 32, payload_bytes);
  for (size_t i = 0; i < set->count; i++)
    weights_put_u64(blob + WEIGHTS_BLOB_HEADER_BYTES + 8 * i, hashes[i]);
}

int weights_encode_full(const weights_set *set, uint64_t version, const uint64_t *hashes,
                        uint8_t **out, size_t *out_len) {
  size_t len = header_bytes(set->count) + set->total_bytes;
  uint8_t *blob = malloc(len);
  if (!blob) return STRATA_ERR_NO_MEMORY;
  write_header(blob, WEIGHTS_BLOB_FULL, version, set, hashes, set->total_bytes, set->total_bytes);
  uint8_t *p = blob + header_bytes(set->count);
  for (size_t i = 0; i < set->count; i++) {
    if (set->tensors[i].bytes) memcpy(p, set->tensors[i].data, set->tensors[i].bytes);
    p += set->tensors[i].bytes;
  }
  *out = blob;
  *out_len = len;
  return STRATA_OK;
}

/* A growing byte buffer that refuses to pass `limit`. */
typedef struct byte_buffer {
  uint8_t *bytes;
  size_t len, cap, limit;
} byte_buffer;

static int buffer_reserve(byte_buffer *b, size_t more) {
  if (b->len + more <= b->cap) return STRATA_OK;
  if (b->len + more > b->limit) return STRATA_ERR_UNSUPPORTED;
  size_t cap = b->cap ? b->cap : 1 << 16;
  while (cap < b->len + more) cap *= 2;
  if (cap > b->limit) cap = b->limit;
  uint8_t *bytes = realloc(b->bytes, cap);
  if (!bytes) return STRATA_ERR_NO_MEMORY;
  b->bytes = bytes;
  b->cap = cap;
  return STRATA_OK;
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

/* The elements of one tensor whose bits differ, compared a word of 8 bytes at a time first:
 * most words of an RL update are untouched. Calls visit(index) in ascending order. */
#define FOR_EACH_CHANGED(cur, prev, bytes, esize, index, body)      \
  do {                                                              \
    size_t words_ = (bytes) / 8;                                    \
    for (size_t w_ = 0; w_ < words_; w_++) {                        \
      uint64_t a_, b_;                                              \
      memcpy(&a_, (cur) + 8 * w_, 8);                               \
      memcpy(&b_, (prev) + 8 * w_, 8);                              \
      if (a_ == b_) continue;                                       \
      for (size_t e_ = 0; e_ < 8 / (esize); e_++) {                 \
        size_t off_ = 8 * w_ + e_ * (esize);                        \
        if (memcmp((cur) + off_, (prev) + off_, (esize))) {         \
          size_t index = off_ / (esize);                            \
          body;                                                     \
        }                                                           \
      }                                                             \
    }                                                               \
    for (size_t off_ = words_ * 8; off_ < (bytes); off_ += (esize)) \
      if (memcmp((cur) + off_, (prev) + off_, (esize))) {           \
        size_t index = off_ / (esize);                              \
        body;                                                       \
      }                                                             \
  } while (0)

static uint64_t count_changed(const weights_tensor *t, const uint8_t *prev) {
  const uint8_t *cur = t->data;
  uint64_t changed = 0;
  FOR_EACH_CHANGED(cur, prev, t->bytes, t->element_bytes, index, (void)index; changed++);
  return changed;
}

/* Appends one tensor's part of the patch: count, gaps, new values. */
static int patch_tensor(byte_buffer *b, const weights_tensor *t, const uint8_t *prev,
                        uint64_t *changed_out) {
  const uint8_t *cur = t->data;
  size_t esize = t->element_bytes;
  uint64_t changed = count_changed(t, prev);
  *changed_out = changed;
  int status = buffer_reserve(b, 10 + changed * (10 + esize));
  if (status != STRATA_OK) return status;
  b->len += put_varint(b->bytes + b->len, changed);
  /* one pass writes the gaps in place and the values past the gaps' worst case, then the values
   * move down behind the gaps */
  uint8_t *values = b->bytes + b->len + 10 * changed, *value = values;
  size_t last = 0;
  int first = 1;
  FOR_EACH_CHANGED(cur, prev, t->bytes, esize, index, {
    b->len += put_varint(b->bytes + b->len, first ? index : index - last - 1);
    last = index;
    first = 0;
    memcpy(value, cur + index * esize, esize);
    value += esize;
  });
  memmove(b->bytes + b->len, values, changed * esize);
  b->len += changed * esize;
  return STRATA_OK;
}

int weights_encode_patch(const weights_set *set, uint8_t *const *previous, uint64_t version,
                         const uint64_t *hashes, int zstd_level, size_t give_up_bytes, int corrupt,
                         uint8_t **out, size_t *out_len, uint64_t *changed, size_t *raw_len) {
  *out = NULL;
  *changed = 0;
  *raw_len = 0;
  byte_buffer raw = {.limit = give_up_bytes};
  int status = STRATA_OK;
  for (size_t i = 0; i < set->count && status == STRATA_OK; i++) {
    uint64_t n = 0;
    status = patch_tensor(&raw, &set->tensors[i], previous[i], &n);
    *changed += n;
    if (status == STRATA_ERR_UNSUPPORTED) /* abandoned: count the rest for the statistics */
      for (size_t j = i + 1; j < set->count; j++)
        *changed += count_changed(&set->tensors[j], previous[j]);
  }
  if (status != STRATA_OK) {
    free(raw.bytes);
    return status;
  }
  if (corrupt && raw.len) raw.bytes[raw.len - 1] ^= 0x01;
  size_t head = header_bytes(set->count);
  size_t bound = ZSTD_compressBound(raw.len);
  uint8_t *blob = malloc(head + bound);
  if (!blob) {
    free(raw.bytes);
    return STRATA_ERR_NO_MEMORY;
  }
  size_t packed = ZSTD_compress(blob + head, bound, raw.bytes, raw.len, zstd_level);
  free(raw.bytes);
  if (ZSTD_isError(packed)) {
    free(blob);
    return STRATA_ERR_SYSTEM;
  }
  write_header(blob, WEIGHTS_BLOB_PATCH, version, set, hashes, raw.len, packed);
  *out = blob;
  *out_len = head + packed;
  *raw_len = raw.len;
  return STRATA_OK;
}

/* ---- reading ---- */

int weights_blob_parse(const uint8_t *blob, size_t len, weights_blob_header *h, char *err,
                       size_t err_len) {
  if (len < WEIGHTS_BLOB_HEADER_BYTES || weights_get_u32(blob) != WEIGHTS_BLOB_MAGIC) {
    snprintf(err, err_len, "a version's bytes do not start with a version header");
    return STRATA_ERR_PROTOCOL;
  }
  h->kind = weights_get_u32(blob + 4);
  h->version = weights_get_u64(blob + 8);
  h->ntensors = weights_get_u32(blob + 16);
  h->raw_bytes = weights_get_u64(blob + 24);
  h->payload_bytes = weights_get_u64(blob + 32);
  if ((h->kind != WEIGHTS_BLOB_FULL && h->kind != WEIGHTS_BLOB_PATCH) ||
      h->ntensors > (len - WEIGHTS_BLOB_HEADER_BYTES) / 8 ||
      h->payload_bytes != len - header_bytes(h->ntensors) ||
      (h->kind == WEIGHTS_BLOB_FULL && h->raw_bytes != h->payload_bytes)) {
    snprintf(err, err_len, "version %llu: malformed header (kind %u, %u tensors, %llu bytes)",
             (unsigned long long)h->version, h->kind, h->ntensors, (unsigned long long)len);
    return STRATA_ERR_PROTOCOL;
  }
  return STRATA_OK;
}

static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*p >= end) return 0;
    uint8_t byte = *(*p)++;
    x |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) {
      *v = x;
      return 1;
    }
  }
  return 0;
}

/* Applies one tensor's part of a decompressed patch; *p advances past it. */
static int apply_tensor(const weights_tensor *t, uint8_t *dst, const uint8_t **p,
                        const uint8_t *end, uint64_t *changed_out) {
  uint64_t changed;
  if (!get_varint(p, end, &changed) || changed > t->elements) return 0;
  *changed_out = changed;
  /* the gaps come first: find where the values start, then walk both */
  const uint8_t *gaps = *p;
  for (uint64_t k = 0; k < changed; k++) {
    uint64_t gap;
    if (!get_varint(p, end, &gap)) return 0;
  }
  const uint8_t *values = *p;
  if ((size_t)(end - values) / t->element_bytes < changed) return 0;
  uint64_t index = 0;
  for (uint64_t k = 0; k < changed; k++) {
    uint64_t gap = 0;
    get_varint(&gaps, values, &gap);
    index = k == 0 ? gap : index + 1 + gap;
    if (gap >= t->elements || index >= t->elements) return 0;
    memcpy(dst + index * t->element_bytes, values + k * t->element_bytes, t->element_bytes);
  }
  *p = values + changed * t->element_bytes;
  return 1;
}

int weights_blob_apply(const weights_set *set, const size_t *map, uint8_t *const *staging,
                       uint8_t *touched, const uint8_t *blob, size_t len, char *err,
                       size_t err_len) {
  weights_blob_header h;
  int status = weights_blob_parse(blob, len, &h, err, err_len);
  if (status != STRATA_OK) return status;
  if (h.ntensors != set->count) {
    snprintf(err, err_len, "version %llu carries %u tensors, the set has %zu",
             (unsigned long long)h.version, h.ntensors, set->count);
    return STRATA_ERR_PROTOCOL;
  }
  const uint8_t *payload = blob + header_bytes(h.ntensors);
  if (h.kind == WEIGHTS_BLOB_FULL) {
    weights_full_cursor c = {0};
    status =
        weights_full_apply_prefix(set, map, staging, touched, &c, blob, len, len, err, err_len);
    weights_full_cursor_free(&c);
    return status;
  }
  /* The sizes come from the wire: a frame that does not state its size, or one larger than any
   * patch of this set can be (an index and a value per element, with room for the tensors'
   * own headers), is refused before anything is allocated for it. */
  unsigned long long frame = ZSTD_getFrameContentSize(payload, h.payload_bytes);
  unsigned long long bound = 16ull * set->total_bytes + 1024ull * (set->count + 1);
  int sized = frame != ZSTD_CONTENTSIZE_ERROR && frame != ZSTD_CONTENTSIZE_UNKNOWN &&
              frame == h.raw_bytes && h.raw_bytes <= bound;
  uint8_t *raw = sized ? malloc(h.raw_bytes ? h.raw_bytes : 1) : NULL;
  size_t got = raw ? ZSTD_decompress(raw, h.raw_bytes, payload, h.payload_bytes) : 0;
  if (!raw || ZSTD_isError(got) || got != h.raw_bytes) {
    free(raw);
    snprintf(err, err_len, "version %llu: the patch does not decompress",
             (unsigned long long)h.version);
    return STRATA_ERR_PROTOCOL;
  }
  const uint8_t *p = raw, *end = raw + h.raw_bytes;
  for (size_t i = 0; i < set->count; i++) {
    const weights_tensor *t = &set->tensors[map[i]];
    uint64_t changed = 1; /* a malformed tensor may have been written in part */
    int good = apply_tensor(t, staging[map[i]], &p, end, &changed);
    if (changed) touched[map[i]] = 1;
    if (!good) {
      free(raw);
      snprintf(err, err_len, "version %llu: tensor '%s': malformed patch",
               (unsigned long long)h.version, t->name);
      return STRATA_ERR_PROTOCOL;
    }
  }
  free(raw);
  for (size_t i = 0; i < set->count; i++) {
    const weights_tensor *t = &set->tensors[map[i]];
    uint64_t want = weights_get_u64(blob + WEIGHTS_BLOB_HEADER_BYTES + 8 * i);
    if (XXH3_64bits(staging[map[i]], t->bytes) != want) {
      snprintf(err, err_len,
               "version %llu: tensor '%s' differs from the publisher's digest after applying the "
               "patch (corrupted)",
               (unsigned long long)h.version, t->name);
      return STRATA_ERR_PROTOCOL;
    }
  }
  return STRATA_OK;
}

void weights_full_cursor_free(weights_full_cursor *c) {
  if (c->hash_state) XXH3_freeState(c->hash_state);
  c->hash_state = NULL;
}

static int cursor_fail(weights_full_cursor *c, char *err, size_t err_len, const char *name) {
  c->failed = 1;
  snprintf(err, err_len,
           "version %llu: tensor '%s' differs from the publisher's digest after applying the full "
           "copy (corrupted)",
           (unsigned long long)c->header.version, name);
  return STRATA_ERR_PROTOCOL;
}

int weights_full_apply_prefix(const weights_set *set, const size_t *map, uint8_t *const *staging,
                              uint8_t *touched, weights_full_cursor *c, const uint8_t *blob,
                              size_t arrived, size_t len, char *err, size_t err_len) {
  if (c->failed) return STRATA_ERR_PROTOCOL;
  if (!c->started) {
    /* the header and the digests come first; until they are in, nothing can be placed */
    if (arrived < len &&
        (arrived < WEIGHTS_BLOB_HEADER_BYTES || arrived < header_bytes(set->count)))
      return STRATA_OK;
    int status = weights_blob_parse(blob, len, &c->header, err, err_len);
    if (status == STRATA_OK && c->header.kind != WEIGHTS_BLOB_FULL) {
      snprintf(err, err_len, "version %llu: a patch where the plan said a full copy",
               (unsigned long long)c->header.version);
      status = STRATA_ERR_PROTOCOL;
    } else if (status == STRATA_OK && c->header.ntensors != set->count) {
      snprintf(err, err_len, "version %llu carries %u tensors, the set has %zu",
               (unsigned long long)c->header.version, c->header.ntensors, set->count);
      status = STRATA_ERR_PROTOCOL;
    } else if (status == STRATA_OK && c->header.raw_bytes != set->total_bytes) {
      snprintf(err, err_len, "version %llu: a full copy of %llu bytes for a set of %zu",
               (unsigned long long)c->header.version, (unsigned long long)c->header.raw_bytes,
               set->total_bytes);
      status = STRATA_ERR_PROTOCOL;
    }
    if (status == STRATA_OK && !(c->hash_state = XXH3_createState())) status = STRATA_ERR_NO_MEMORY;
    if (status != STRATA_OK) {
      c->failed = 1;
      return status;
    }
    XXH3_64bits_reset(c->hash_state);
    c->started = 1;
  }
  size_t head = header_bytes(set->count);
  uint64_t avail = arrived > head ? arrived - head : 0;
  while (c->tensor < set->count) {
    const weights_tensor *t = &set->tensors[map[c->tensor]];
    uint64_t take = t->bytes - c->tensor_done;
    if (take > avail - c->applied) take = avail - c->applied;
    if (take) {
      uint8_t *dst = staging[map[c->tensor]] + c->tensor_done;
      memcpy(dst, blob + head + c->applied, take);
      XXH3_64bits_update(c->hash_state, dst, take);
      touched[map[c->tensor]] = 1;
      c->tensor_done += take;
      c->applied += take;
    }
    if (c->tensor_done < t->bytes) break; /* the rest of this tensor has not arrived */
    uint64_t want = weights_get_u64(blob + WEIGHTS_BLOB_HEADER_BYTES + 8 * c->tensor);
    touched[map[c->tensor]] = 1;
    if (XXH3_64bits_digest(c->hash_state) != want) return cursor_fail(c, err, err_len, t->name);
    XXH3_64bits_reset(c->hash_state);
    c->tensor++;
    c->tensor_done = 0;
  }
  return STRATA_OK;
}
