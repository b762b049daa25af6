// SPDX-License-Identifier: Apache-2.0
/*
 * api.c — the collective entry points: check arguments, work out buffer sizes and in-place
 * forms, build the schedule, wrap it in an operation, hand it to the engine.
 *
 * Every buffer rule of include/strata.h is enforced here, once, so schedule builders and the
 * engine can trust their inputs: sizes do not overflow, buffers that must exist are not NULL,
 * the only overlaps are the documented in-place forms, and every step of a schedule stays
 * inside the buffers it names.
 */
#include <stdlib.h>
#include <string.h>

#include "core/compress.h"
#include "core/core.h"
#include "engine/engine.h"

static int is_rooted(strata_coll coll) {
  return coll == STRATA_COLL_BROADCAST || coll == STRATA_COLL_REDUCE ||
         coll == STRATA_COLL_GATHER || coll == STRATA_COLL_SCATTER;
}

static int is_reduction(strata_coll coll) {
  return coll == STRATA_COLL_ALLREDUCE || coll == STRATA_COLL_REDUCE_SCATTER ||
         coll == STRATA_COLL_REDUCE;
}

static int mul_overflows(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

/* Bytes each buffer must hold on this rank (0 = not used here). */
static int buffer_bytes(const strata_comm *comm, const strata_coll_args *a, uint64_t elem,
                        uint64_t *send, uint64_t *recv) {
  uint64_t one, all;
  if (mul_overflows(a->count, elem, &one) || mul_overflows(one, (uint64_t)comm->nranks, &all))
    return STRATA_ERR_INVALID_ARG;
  int root = comm->rank == a->root;
  switch (a->coll) {
    case STRATA_COLL_ALLREDUCE:
      *send = one, *recv = one;
      break;
    case STRATA_COLL_REDUCE_SCATTER:
      *send = all, *recv = one;
      break;
    case STRATA_COLL_ALLGATHER:
      *send = one, *recv = all;
      break;
    case STRATA_COLL_BROADCAST:
      *send = root ? one : 0, *recv = one;
      break;
    case STRATA_COLL_REDUCE:
      *send = one, *recv = root ? one : 0;
      break;
    case STRATA_COLL_GATHER:
      *send = one, *recv = root ? all : 0;
      break;
    case STRATA_COLL_SCATTER:
      *send = root ? all : 0, *recv = one;
      break;
    case STRATA_COLL_ALLTOALL:
      *send = all, *recv = all;
      break;
    case STRATA_COLL_BARRIER:
      *send = 0, *recv = 0;
      break;
    case STRATA_COLL_SEND:
      *send = one, *recv = 0;
      break;
    case STRATA_COLL_RECV:
      *send = 0, *recv = one;
      break;
    default:
      return STRATA_ERR_INVALID_ARG;
  }
  return STRATA_OK;
}

int strata_coll_buffer_bytes(const strata_comm *comm, const strata_coll_args *args,
                             uint64_t *send_bytes, uint64_t *recv_bytes) {
  if (!comm || !args || !send_bytes || !recv_bytes || (unsigned)args->dtype >= STRATA_DTYPE_COUNT)
    return STRATA_ERR_INVALID_ARG;
  return buffer_bytes(comm, args, strata_dtype_size(args->dtype), send_bytes, recv_bytes);
}

/* The documented in-place form for this collective on this rank, if the buffers have it. */
static int in_place_form(const strata_comm *comm, const strata_coll_args *a, uint64_t elem) {
  const uint8_t *send = a->sendbuf, *recv = a->recvbuf;
  if (!send || !recv) return 0;
  uint64_t block = a->count * elem;
  int root = comm->rank == a->root;
  switch (a->coll) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_ALLTOALL:
      return send == recv;
    case STRATA_COLL_REDUCE_SCATTER:
      if (recv == send + (uint64_t)comm->rank * block) return STRATA_IN_PLACE; /* rank 0: both */
      return recv == send ? STRATA_IN_PLACE_ALIAS : 0;
    case STRATA_COLL_ALLGATHER:
      return send == recv + (uint64_t)comm->rank * block;
    case STRATA_COLL_BROADCAST:
    case STRATA_COLL_REDUCE:
      return root && send == recv;
    case STRATA_COLL_GATHER:
      return root && send == recv + (uint64_t)a->root * block;
    case STRATA_COLL_SCATTER:
      return root && recv == send + (uint64_t)a->root * block;
    default:
      return 0;
  }
}

static int ranges_overlap(const void *a, uint64_t a_bytes, const void *b, uint64_t b_bytes) {
  if (!a || !b || !a_bytes || !b_bytes) return 0;
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + b_bytes && y < x + a_bytes;
}

static int check_args(const strata_comm *comm, const strata_coll_args *a) {
  if ((unsigned)a->coll >= STRATA_COLL_COUNT || (unsigned)a->dtype >= STRATA_DTYPE_COUNT ||
      (unsigned)a->algo >= STRATA_ALGO_COUNT)
    return STRATA_ERR_INVALID_ARG;
  /* also refuses a bitwise op on a float dtype */
  if (is_reduction(a->coll) && !strata_reduce_defined(a->dtype, a->op))
    return STRATA_ERR_INVALID_ARG;
  if (is_rooted(a->coll) && (a->root < 0 || a->root >= comm->nranks)) return STRATA_ERR_INVALID_ARG;
  if ((unsigned)a->compress >= STRATA_COMPRESS_COUNT) return STRATA_ERR_INVALID_ARG;
  if (strata_compress_is_lossy(a->compress) && a->dtype != STRATA_F32)
    return STRATA_ERR_UNSUPPORTED;
  int any_source = a->coll == STRATA_COLL_RECV && a->root == STRATA_ANY_SOURCE && comm->nranks > 1;
  if ((a->coll == STRATA_COLL_SEND || a->coll == STRATA_COLL_RECV) && !any_source &&
      (a->root < 0 || a->root >= comm->nranks || a->root == comm->rank))
    return STRATA_ERR_INVALID_ARG;
  return STRATA_OK;
}

static uint64_t fnv1a(uint64_t hash, uint64_t value) {
  for (int i = 0; i < 8; i++) {
    hash ^= (value >> (8 * i)) & 0xff;
    hash *= 1099511628211ULL;
  }
  return hash;
}

/* The tag every message of this operation carries: what was called (so ranks that called
 * something else are told; a rooted collective's signature check makes sure its ranks exchange
 * messages even when they disagree on the root, schedule.c) and the sequence number (so
 * operations cannot be confused). A collective's number is its index in the communicator's
 * lineage (lineage_base, elastic.c): after a shrink, survivors that finished different numbers
 * of collectives and did not agree since are told instead of summing different steps. */
uint64_t strata_engine_signature_hash(const strata_operation *op, int root) {
  const strata_coll_args *a = &op->args;
  int p2p = a->coll == STRATA_COLL_SEND || a->coll == STRATA_COLL_RECV;
  uint64_t hash = 1469598103934665603ULL;
  hash = fnv1a(hash, p2p ? (uint64_t)STRATA_COLL_SEND : (uint64_t)a->coll);
  hash = fnv1a(hash, a->count);
  hash = fnv1a(hash, (uint64_t)a->dtype);
  hash = fnv1a(hash, (uint64_t)op->codec); /* both ends must agree on the wire format */
  if (!p2p) {
    hash = fnv1a(hash, is_reduction(a->coll) ? (uint64_t)a->op : 0);
    hash = fnv1a(hash, is_rooted(a->coll) ? (uint64_t)root : 0);
    hash = fnv1a(hash, (uint64_t)op->sched.algo);
  }
  return hash & 0xffffff;
}

int strata_engine_is_rooted(strata_coll coll) {
  return is_rooted(coll);
}

static uint64_t operation_tag(strata_comm *comm, strata_operation *op) {
  const strata_coll_args *a = &op->args;
  int p2p = a->coll == STRATA_COLL_SEND || a->coll == STRATA_COLL_RECV;
  uint64_t hash = strata_engine_signature_hash(op, a->root);
  uint64_t seq = 0; /* a receive's: set when it is handed to the transport (engine.c) */
  if (a->coll == STRATA_COLL_SEND)
    seq = comm->p2p_send_seq[a->root]++;
  else if (!p2p)
    seq = comm->lineage_base + comm->coll_seq++;
  if (!p2p) comm->agreed_last = 0;
  op->coll_seq = p2p ? UINT64_MAX : seq - comm->lineage_base;
  return (p2p ? STRATA_TAG_P2P : 0) | ((seq & STRATA_TAG_SEQ_MASK) << STRATA_TAG_SEQ_SHIFT) |
         (hash & 0xffffff);
}

static int step_refs_ok(const strata_operation *op, const strata_step *step, strata_bufref ref) {
  if (ref.buf > STRATA_BUF_SCRATCH) return 0;
  uint64_t end;
  if (__builtin_add_overflow(ref.offset, step->bytes, &end)) return 0;
  return end <= op->buf_bytes[ref.buf];
}

/* Every step inside its buffers, every dependency earlier, every peer real. */
static int schedule_fits(const strata_comm *comm, const strata_operation *op) {
  const strata_schedule *s = &op->sched;
  for (uint32_t i = 0; i < s->nsteps; i++) {
    const strata_step *st = &s->steps[i];
    int ok = 1;
    switch (st->kind) {
      case STRATA_STEP_SEND:
        ok = step_refs_ok(op, st, st->src);
        break;
      case STRATA_STEP_RECV:
        ok = step_refs_ok(op, st, st->dst);
        break;
      case STRATA_STEP_RECV_REDUCE:
        ok = step_refs_ok(op, st, st->src) && step_refs_ok(op, st, st->dst) &&
             step_refs_ok(op, st, st->staging) && op->reduce;
        break;
      case STRATA_STEP_COPY:
        ok = step_refs_ok(op, st, st->src) && step_refs_ok(op, st, st->dst);
        break;
      case STRATA_STEP_REDUCE:
        ok = step_refs_ok(op, st, st->src) && step_refs_ok(op, st, st->src2) &&
             step_refs_ok(op, st, st->dst) && op->reduce;
        break;
      default:
        ok = 0;
    }
    int unbound = st->kind == STRATA_STEP_RECV && st->peer == STRATA_ANY_SOURCE &&
                  op->args.coll == STRATA_COLL_RECV && op->args.root == STRATA_ANY_SOURCE;
    if (st->kind <= STRATA_STEP_RECV_REDUCE && !unbound)
      ok = ok && st->peer >= 0 && st->peer < comm->nranks && st->peer != comm->rank &&
           comm->net.peer && comm->net.peer[st->peer];
    if (st->kind >= STRATA_STEP_RECV_REDUCE && st->bytes % op->elem_size) ok = 0;
    for (uint32_t k = 0; k < st->dep_count && ok; k++)
      if (s->deps[st->dep_begin + k] >= i) ok = 0;
    if (!ok) {
      STRATA_LOG(STRATA_LOG_ERROR, comm->rank,
                 "internal error: step %u of the %s schedule (%s) is malformed", i,
                 strata_coll_name(op->args.coll), strata_algo_name(s->algo));
      return 0;
    }
  }
  return 1;
}

static size_t align16(size_t n) {
  return (n + 15) & ~(size_t)15;
}

/* The per-step state a call starts from: every step waiting on all its dependencies, nothing
 * posted, ready or completed. A new operation's arrays and a spare's taken again alike. */
static void operation_reset_steps(strata_operation *op) {
  const strata_schedule *s = &op->sched;
  uint32_t n = s->nsteps;
  for (uint32_t i = 0; i < n; i++) op->deps_left[i] = s->steps[i].dep_count;
  memset(op->xfers, 0, n * sizeof *op->xfers);
  memset(op->entries, 0, n * sizeof *op->entries);
  memset(op->ready, 0, n * sizeof *op->ready);
  memset(op->completed, 0, n * sizeof *op->completed);
  memset(op->state, 0, n ? n : 1);
}

/* Every per-step array in one block (deps_left first: it owns the block). Returns the block's
 * size; given the block, points the arrays into it (a new operation's, and a spare's again). */
static size_t operation_lay_out_steps(strata_operation *op, uint8_t *block) {
  const strata_schedule *s = &op->sched;
  size_t n = s->nsteps, nd = s->ndeps;
  size_t sizes[8] = {n * sizeof(uint32_t),          n * sizeof(strata_xfer),
                     n * sizeof(strata_post_entry), (n + 1) * sizeof(uint32_t),
                     nd * sizeof(uint32_t),         n * sizeof(uint32_t),
                     n * sizeof(uint32_t),          n ? n : 1};
  size_t offsets[8], total = 0;
  for (int i = 0; i < 8; i++) {
    offsets[i] = total;
    total += align16(sizes[i]);
  }
  if (block) {
    op->deps_left = (uint32_t *)(block + offsets[0]);
    op->xfers = (strata_xfer *)(block + offsets[1]);
    op->entries = (strata_post_entry *)(block + offsets[2]);
    op->dep_index = (uint32_t *)(block + offsets[3]);
    op->dependents = (uint32_t *)(block + offsets[4]);
    op->ready = (uint32_t *)(block + offsets[5]);
    op->completed = (uint32_t *)(block + offsets[6]);
    op->state = block + offsets[7];
  }
  return total;
}

/* The per-step arrays of a new operation; dependents laid out as CSR. */
static int operation_alloc_steps(strata_operation *op) {
  const strata_schedule *s = &op->sched;
  size_t n = s->nsteps;
  uint8_t *block = calloc(1, operation_lay_out_steps(op, NULL));
  if (!block) return STRATA_ERR_NO_MEMORY;
  operation_lay_out_steps(op, block);

  for (uint32_t i = 0; i < n; i++) {
    const strata_step *st = &s->steps[i];
    for (uint32_t k = 0; k < st->dep_count; k++) op->dep_index[s->deps[st->dep_begin + k] + 1]++;
  }
  for (uint32_t i = 0; i < n; i++) op->dep_index[i + 1] += op->dep_index[i];
  uint32_t *fill = op->ready; /* borrowed as a cursor array, cleared below */
  for (uint32_t i = 0; i < n; i++) fill[i] = op->dep_index[i];
  for (uint32_t i = 0; i < n; i++) {
    const strata_step *st = &s->steps[i];
    for (uint32_t k = 0; k < st->dep_count; k++)
      op->dependents[fill[s->deps[st->dep_begin + k]]++] = i;
  }
  operation_reset_steps(op);
  return STRATA_OK;
}

/* The wire encoding of a call: its own, or the communicator's default for f32 data. */
static strata_compress call_codec(const strata_comm *comm, const strata_coll_args *a) {
  strata_compress c = a->compress;
  if (c == STRATA_COMPRESS_DEFAULT) c = a->dtype == STRATA_F32 ? comm->cfg.compress : c;
  return strata_compress_is_lossy(c) ? c : STRATA_COMPRESS_NONE;
}

/* One encoded slot per transfer step, each 64-byte aligned. A transfer's slot lives as long as
 * the operation, so a send's encoding stays valid however long the transport holds it. */
static int operation_alloc_wire(strata_operation *op) {
  const strata_schedule *s = &op->sched;
  op->wire_off = calloc(s->nsteps ? s->nsteps : 1, sizeof *op->wire_off);
  if (!op->wire_off) return STRATA_ERR_NO_MEMORY;
  uint64_t total = 0;
  for (uint32_t i = 0; i < s->nsteps; i++) {
    const strata_step *st = &s->steps[i];
    if (st->kind != STRATA_STEP_SEND && st->kind != STRATA_STEP_RECV &&
        st->kind != STRATA_STEP_RECV_REDUCE)
      continue;
    op->wire_off[i] = total;
    total += (strata_compress_wire_bytes(op->codec, st->bytes / sizeof(float)) + 63) & ~63ULL;
  }
  op->wire = aligned_alloc(64, total ? total : 64);
  return op->wire ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

static uint8_t empty_buffer[1];

/* The schedule parameters of a call: exactly what the engine builds (strata_comm_algorithm shows
 * the same choice without running anything). An algorithm asked for in the call must exist for
 * the collective; one forced for the whole communicator (STRATA_ALGO) applies only where it
 * exists. */
static strata_sched_params sched_params_for(const strata_comm *comm, const strata_coll_args *a,
                                            uint32_t elem_size, int in_place) {
  strata_algo algo = a->algo;
  if (algo == STRATA_ALGO_AUTO && strata_schedule_algo_applies(a->coll, comm->cfg.algo))
    algo = comm->cfg.algo;
  strata_sched_params params = {
      .coll = a->coll,
      .algo = algo,
      .rank = comm->rank,
      .nranks = comm->nranks,
      .root = a->root,
      .count = a->count,
      .elem_size = elem_size,
      .in_place = in_place,
      .chunk_bytes = comm->cfg.chunk_bytes, /* resolved at init (comm.c) */
      .site_of_rank = comm->site_of_rank,
  };
  return params;
}

strata_algo strata_comm_algorithm(const strata_comm *comm, const strata_coll_args *args) {
  if (!comm || !args || check_args(comm, args) != STRATA_OK) return STRATA_ALGO_AUTO;
  strata_sched_params params =
      sched_params_for(comm, args, (uint32_t)strata_dtype_size(args->dtype), 0);
  return params.algo != STRATA_ALGO_AUTO ? params.algo : strata_schedule_choose(&params);
}

/* Give `op` (its args and schedule set) its buffers, scratch and per-step state, after checking
 * that every step stays inside them. */
static int operation_attach(strata_comm *comm, strata_operation *op, const void *sendbuf,
                            uint64_t send_bytes, void *recvbuf, uint64_t recv_bytes, int reused) {
  op->elem_size = (uint32_t)strata_dtype_size(op->args.dtype);
  op->codec = call_codec(comm, &op->args);
  if (is_reduction(op->args.coll)) {
    op->reduce = strata_reduce_kernel(op->args.dtype, op->args.op);
    op->avg_finish = op->args.op == STRATA_AVG;
  }
  int status = STRATA_OK;
  if (op->sched.scratch_bytes) {
    op->scratch = strata_scratch_take(comm, op->sched.scratch_bytes, &op->scratch_cap);
    if (!op->scratch) status = STRATA_ERR_NO_MEMORY;
  }
  if (status == STRATA_OK) {
    op->bufs[STRATA_BUF_SEND] = sendbuf ? (uint8_t *)sendbuf : empty_buffer;
    op->bufs[STRATA_BUF_RECV] = recvbuf ? (uint8_t *)recvbuf : empty_buffer;
    op->bufs[STRATA_BUF_SCRATCH] = op->scratch ? (uint8_t *)op->scratch : empty_buffer;
    op->buf_bytes[STRATA_BUF_SEND] = sendbuf ? send_bytes : 0;
    op->buf_bytes[STRATA_BUF_RECV] = recvbuf ? recv_bytes : 0;
    op->buf_bytes[STRATA_BUF_SCRATCH] = op->sched.scratch_bytes;
    /* a reused schedule was checked against buffers of these very sizes, with this reduction */
    if (!reused && !schedule_fits(comm, op)) status = STRATA_ERR_PROTOCOL;
  }
  if (reused) return status;
  if (status == STRATA_OK && op->codec != STRATA_COMPRESS_NONE) status = operation_alloc_wire(op);
  if (status == STRATA_OK) status = operation_alloc_steps(op);
  return status;
}

/* ---- the spare operation ----------------------------------------------------------------------
 * A program calls the same collective on the same sizes over and over (a training step, a
 * benchmark's loop). Building the schedule and allocating the operation's arrays each time cost
 * a small call a large share of its time, so a finished operation from strata_collective is
 * kept as the communicator's spare, and the next call with the same key (schedule parameters,
 * and args' datatype, reduction and compress field) takes it back with its schedule and
 * dependency arrays as they are, resetting only the per-call state. One spare: a
 * call with another key builds anew and its operation replaces the spare when it finishes. */
static int params_equal(const strata_sched_params *a, const strata_sched_params *b) {
  return a->coll == b->coll && a->algo == b->algo && a->rank == b->rank && a->nranks == b->nranks &&
         a->root == b->root && a->count == b->count && a->elem_size == b->elem_size &&
         a->in_place == b->in_place && a->chunk_bytes == b->chunk_bytes &&
         a->site_of_rank == b->site_of_rank;
}

/* The spare, if its key is this call's; NULL otherwise (the spare stays). */
static strata_operation *spare_take(strata_comm *comm, const strata_sched_params *params,
                                    const strata_coll_args *args) {
  strata_operation *op = atomic_exchange(&comm->spare_op, NULL);
  if (!op) return NULL;
  /* the buffer sizes follow from the parameters (buffer_bytes); a spare's wire was plain, and
   * with the same dtype and compress field this call's is too (call_codec) */
  if (!params_equal(&op->key, params) || op->args.dtype != args->dtype || op->args.op != args->op ||
      op->args.compress != args->compress) {
    strata_operation *other = NULL; /* put it back, unless another thread retired one meanwhile */
    if (!atomic_compare_exchange_strong(&comm->spare_op, &other, op)) strata_operation_free(op);
    return NULL;
  }
  /* What a spare keeps: its schedule, key and per-step arrays (one block, owned by deps_left;
   * their dependency layout stays). Everything else is the call's and starts from zero, as calloc
   * leaves a new operation, so a per-call field added later needs no reset of its own here. */
  strata_schedule sched = op->sched;
  strata_sched_params key = op->key;
  uint8_t *block = (uint8_t *)op->deps_left;
  memset(op, 0, sizeof *op);
  atomic_init(&op->done, 0);
  op->comm = comm;
  op->sched = sched;
  op->reusable = 1; /* only reusable operations become spares (operation_retire) */
  op->key = key;
  operation_lay_out_steps(op, block);
  operation_reset_steps(op);
  return op;
}

/* A finished operation: kept as the spare when strata_collective built it and it succeeded,
 * freed otherwise (and the spare it displaces). */
static void operation_retire(strata_operation *op) {
  if (!op) return;
  strata_comm *comm = op->comm;
  if (!op->reusable || op->status != STRATA_OK || op->codec != STRATA_COMPRESS_NONE) {
    strata_operation_free(op);
    return;
  }
  if (op->scratch) strata_scratch_give(comm, op->scratch, op->scratch_cap);
  op->scratch = NULL;
  strata_operation_free(atomic_exchange(&comm->spare_op, op));
}

void strata_spare_release(strata_comm *comm) {
  strata_operation_free(atomic_exchange(&comm->spare_op, NULL));
}

static int operation_create(strata_comm *comm, const strata_coll_args *args,
                            strata_operation **out) {
  int status = check_args(comm, args);
  if (status != STRATA_OK) return status;
  uint64_t elem = strata_dtype_size(args->dtype);
  uint64_t send_bytes, recv_bytes;
  status = buffer_bytes(comm, args, elem, &send_bytes, &recv_bytes);
  if (status != STRATA_OK) return status;
  if ((send_bytes && !args->sendbuf) || (recv_bytes && !args->recvbuf))
    return STRATA_ERR_INVALID_ARG;
  const void *sendbuf = send_bytes ? args->sendbuf : NULL;
  void *recvbuf = recv_bytes ? args->recvbuf : NULL;
  strata_coll_args resolved = *args;
  resolved.sendbuf = sendbuf;
  resolved.recvbuf = recvbuf;
  int in_place = in_place_form(comm, &resolved, elem);
  if (!in_place && ranges_overlap(sendbuf, send_bytes, recvbuf, recv_bytes))
    return STRATA_ERR_INVALID_ARG;

  strata_sched_params params = sched_params_for(comm, &resolved, (uint32_t)elem, in_place);
  strata_operation *op = spare_take(comm, &params, &resolved);
  int reused = op != NULL;
  if (!op && !(op = calloc(1, sizeof *op))) return STRATA_ERR_NO_MEMORY;
  op->comm = comm;
  op->args = resolved;
  if (!reused) {
    status = strata_schedule_build(&params, &op->sched);
    if (status == STRATA_OK) status = strata_schedule_add_signature_check(&params, &op->sched);
    /* a receive from any source gets its peer written into its schedule: never a spare */
    op->reusable = !(resolved.coll == STRATA_COLL_RECV && resolved.root == STRATA_ANY_SOURCE);
    op->key = params;
  }
  op->source = -1;
  if (status == STRATA_OK)
    status = operation_attach(comm, op, sendbuf, send_bytes, recvbuf, recv_bytes, reused);
  if (status != STRATA_OK) {
    strata_operation_free(op);
    return status;
  }
  *out = op;
  return STRATA_OK;
}

/* cfg.elastic: an in-place reduction writes its input, so a copy is kept until it ends
 * (engine.c: elastic_settle), and a failure leaves every survivor's input as it was. Only in place:
 * out of place, the input is never written. */
static int elastic_backup(strata_comm *comm, strata_operation *op) {
  const strata_coll_args *a = &op->args;
  if (!comm->cfg.elastic || !a->sendbuf || !op->key.in_place ||
      (a->coll != STRATA_COLL_ALLREDUCE && a->coll != STRATA_COLL_REDUCE_SCATTER &&
       a->coll != STRATA_COLL_REDUCE))
    return STRATA_OK;
  uint64_t bytes = op->buf_bytes[STRATA_BUF_SEND];
  if (!bytes) return STRATA_OK;
  op->backup = malloc(bytes);
  if (!op->backup) return STRATA_ERR_NO_MEMORY;
  memcpy(op->backup, a->sendbuf, bytes);
  op->backup_dst = (void *)a->sendbuf;
  op->backup_bytes = bytes;
  return STRATA_OK;
}

/* Hand `op` to the engine; without `req`, drive it to the end here and free it. */
static int operation_run(strata_comm *comm, strata_operation *op, strata_request **req) {
  /* Counted while it takes the lock too, not only while it waits: the progress thread hands the
   * lock to anyone counted here (engine.c) instead of re-taking it pass after pass, so a
   * nonblocking post does not queue behind a busy progress thread. */
  atomic_fetch_add(&comm->waiters, 1);
  pthread_mutex_lock(&comm->lock);
  op->tag = operation_tag(comm, op);
  STRATA_LOG(STRATA_LOG_INFO, comm->rank, "%s count %zu %s %s root %d: algorithm %s, %u steps%s%s",
             strata_coll_name(op->args.coll), op->args.count, strata_dtype_name(op->args.dtype),
             strata_op_name(op->args.op), op->args.root, strata_algo_name(op->sched.algo),
             op->sched.nsteps, op->codec != STRATA_COMPRESS_NONE ? ", wire " : "",
             op->codec != STRATA_COMPRESS_NONE ? strata_compress_name(op->codec) : "");
  int status = elastic_backup(comm, op);
  if (status == STRATA_OK) status = strata_engine_submit(comm, op);
  if (req) {
    /* uncounted before the signal: a thread woken while we are still counted waits again */
    atomic_fetch_sub(&comm->waiters, 1);
    pthread_cond_signal(&comm->cond); /* the progress thread drives it while nobody waits */
    pthread_mutex_unlock(&comm->lock);
    if (status != STRATA_OK) {
      strata_operation_free(op);
      return status;
    }
    atomic_fetch_add(&comm->requests_held, 1); /* until the caller completes it */
    *req = (strata_request *)op;
    return STRATA_OK;
  }
  if (status == STRATA_OK) status = strata_engine_wait(comm, op);
  pthread_mutex_unlock(&comm->lock);
  atomic_fetch_sub(&comm->waiters, 1);
  operation_retire(op);
  return status;
}

/* A refused call after a peer's abort: the failure is made final (and passed on) now, so that
 * our exit is never taken for a loss by a rank that has not heard of it yet. */
static int comm_refuses(strata_comm *comm) {
  int error = atomic_load(&comm->error);
  if (!error && atomic_load(&comm->doomed)) {
    pthread_mutex_lock(&comm->lock);
    strata_engine_fail(comm, atomic_load(&comm->doomed), 1);
    pthread_mutex_unlock(&comm->lock);
    error = atomic_load(&comm->error);
  }
  return error;
}

int strata_engine_run_schedule(strata_comm *comm, const strata_coll_args *name,
                               strata_schedule *sched, void *send, uint64_t send_bytes, void *recv,
                               uint64_t recv_bytes) {
  int status = !comm || !name || !sched ? STRATA_ERR_INVALID_ARG : STRATA_OK;
  if (status == STRATA_OK) status = check_args(comm, name);
  if (status == STRATA_OK && (name->coll == STRATA_COLL_SEND || name->coll == STRATA_COLL_RECV))
    status = STRATA_ERR_INVALID_ARG; /* a collective's sequence, not a point-to-point one */
  if (status == STRATA_OK &&
      (sched->status != STRATA_OK || sched->rank != comm->rank || sched->nranks != comm->nranks))
    status = sched->status != STRATA_OK ? sched->status : STRATA_ERR_INVALID_ARG;
  if (status == STRATA_OK) status = comm_refuses(comm);
  strata_operation *op = status == STRATA_OK ? calloc(1, sizeof *op) : NULL;
  if (status == STRATA_OK && !op) status = STRATA_ERR_NO_MEMORY;
  if (status != STRATA_OK) {
    if (sched) strata_schedule_free(sched);
    return status;
  }
  op->comm = comm;
  op->args = *name;
  op->args.compress = STRATA_COMPRESS_NONE;
  op->args.sendbuf = send;
  op->args.recvbuf = recv;
  op->sched = *sched; /* taken over */
  memset(sched, 0, sizeof *sched);
  status = operation_attach(comm, op, send_bytes ? send : NULL, send_bytes,
                            recv_bytes ? recv : NULL, recv_bytes, 0);
  if (status != STRATA_OK) {
    strata_operation_free(op);
    return status;
  }
  return operation_run(comm, op, NULL);
}

/* strata_collective, and the sender of a receive from any source into *source on success. */
static int collective_run(strata_comm *comm, const strata_coll_args *args, int *source,
                          strata_request **req) {
  if (!comm || !args) return STRATA_ERR_INVALID_ARG;
  if (req) *req = NULL;
  int error = comm_refuses(comm);
  if (error) return error;
  strata_operation *op;
  int status = operation_create(comm, args, &op);
  if (status != STRATA_OK) return status;
  op->source_out = source;
  return operation_run(comm, op, req);
}

int strata_collective(strata_comm *comm, const strata_coll_args *args, strata_request **req) {
  return collective_run(comm, args, NULL, req);
}

/* A request the caller completed: the operation retires, then its hold on the communicator goes,
 * the last of which frees a destroyed communicator (strata_comm_destroy keeps it for them). */
static int request_complete(strata_operation *op) {
  strata_comm *comm = op->comm;
  int status = op->status;
  operation_retire(op);
  strata_comm_release(comm);
  return status;
}

int strata_request_wait(strata_request *req) {
  strata_operation *op = (strata_operation *)req;
  if (!op) return STRATA_ERR_INVALID_ARG;
  strata_comm *comm = op->comm;
  if (!atomic_load(&op->done)) {
    atomic_fetch_add(&comm->waiters, 1);
    pthread_mutex_lock(&comm->lock);
    strata_engine_wait(comm, op);
    pthread_mutex_unlock(&comm->lock);
    atomic_fetch_sub(&comm->waiters, 1);
  }
  return request_complete(op);
}

int strata_request_test(strata_request *req) {
  strata_operation *op = (strata_operation *)req;
  if (!op) return STRATA_ERR_INVALID_ARG;
  strata_comm *comm = op->comm;
  if (!atomic_load(&op->done) && pthread_mutex_trylock(&comm->lock) == 0) {
    strata_engine_poll(comm);
    pthread_mutex_unlock(&comm->lock);
  }
  if (!atomic_load(&op->done)) return STRATA_ERR_IN_PROGRESS;
  return request_complete(op);
}

int strata_comm_get_stats(strata_comm *comm, strata_comm_stats *out) {
  if (!comm || !out) return STRATA_ERR_INVALID_ARG;
  pthread_mutex_lock(&comm->lock);
  *out = comm->stats;
  pthread_mutex_unlock(&comm->lock);
  return STRATA_OK;
}

/* ---- wrappers ---- */
static int run(strata_comm *comm, strata_coll coll, const void *send, void *recv, size_t count,
               strata_dtype dtype, strata_op op, int root, strata_request **req) {
  strata_coll_args args = {.coll = coll,
                           .sendbuf = send,
                           .recvbuf = recv,
                           .count = count,
                           .dtype = dtype,
                           .op = op,
                           .root = root,
                           .algo = STRATA_ALGO_AUTO};
  return strata_collective(comm, &args, req);
}

int strata_allreduce(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d,
                     strata_op o) {
  return run(c, STRATA_COLL_ALLREDUCE, s, r, n, d, o, 0, NULL);
}
int strata_iallreduce(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, strata_op o,
                      strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_ALLREDUCE, s, r, n, d, o, 0, q);
}
int strata_reduce_scatter(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d,
                          strata_op o) {
  return run(c, STRATA_COLL_REDUCE_SCATTER, s, r, n, d, o, 0, NULL);
}
int strata_ireduce_scatter(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d,
                           strata_op o, strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_REDUCE_SCATTER, s, r, n, d, o, 0, q);
}
int strata_allgather(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d) {
  return run(c, STRATA_COLL_ALLGATHER, s, r, n, d, STRATA_SUM, 0, NULL);
}
int strata_iallgather(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d,
                      strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_ALLGATHER, s, r, n, d, STRATA_SUM, 0, q);
}
int strata_broadcast(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, int root) {
  return run(c, STRATA_COLL_BROADCAST, s, r, n, d, STRATA_SUM, root, NULL);
}
int strata_ibroadcast(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, int root,
                      strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_BROADCAST, s, r, n, d, STRATA_SUM, root, q);
}
int strata_reduce(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, strata_op o,
                  int root) {
  return run(c, STRATA_COLL_REDUCE, s, r, n, d, o, root, NULL);
}
int strata_ireduce(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, strata_op o,
                   int root, strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_REDUCE, s, r, n, d, o, root, q);
}
int strata_gather(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, int root) {
  return run(c, STRATA_COLL_GATHER, s, r, n, d, STRATA_SUM, root, NULL);
}
int strata_igather(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, int root,
                   strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_GATHER, s, r, n, d, STRATA_SUM, root, q);
}
int strata_scatter(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, int root) {
  return run(c, STRATA_COLL_SCATTER, s, r, n, d, STRATA_SUM, root, NULL);
}
int strata_iscatter(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d, int root,
                    strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_SCATTER, s, r, n, d, STRATA_SUM, root, q);
}
int strata_alltoall(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d) {
  return run(c, STRATA_COLL_ALLTOALL, s, r, n, d, STRATA_SUM, 0, NULL);
}
int strata_ialltoall(strata_comm *c, const void *s, void *r, size_t n, strata_dtype d,
                     strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_ALLTOALL, s, r, n, d, STRATA_SUM, 0, q);
}
int strata_barrier(strata_comm *c) {
  return run(c, STRATA_COLL_BARRIER, NULL, NULL, 0, STRATA_U8, STRATA_SUM, 0, NULL);
}
int strata_ibarrier(strata_comm *c, strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_BARRIER, NULL, NULL, 0, STRATA_U8, STRATA_SUM, 0, q);
}
int strata_send(strata_comm *c, const void *b, size_t n, strata_dtype d, int peer) {
  return run(c, STRATA_COLL_SEND, b, NULL, n, d, STRATA_SUM, peer, NULL);
}
int strata_isend(strata_comm *c, const void *b, size_t n, strata_dtype d, int peer,
                 strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_SEND, b, NULL, n, d, STRATA_SUM, peer, q);
}
int strata_recv(strata_comm *c, void *b, size_t n, strata_dtype d, int peer) {
  return run(c, STRATA_COLL_RECV, NULL, b, n, d, STRATA_SUM, peer, NULL);
}
int strata_irecv(strata_comm *c, void *b, size_t n, strata_dtype d, int peer, strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return run(c, STRATA_COLL_RECV, NULL, b, n, d, STRATA_SUM, peer, q);
}

static int recv_any(strata_comm *c, void *b, size_t n, strata_dtype d, int *source,
                    strata_request **q) {
  if (source) *source = STRATA_ANY_SOURCE;
  strata_coll_args args = {.coll = STRATA_COLL_RECV,
                           .recvbuf = b,
                           .count = n,
                           .dtype = d,
                           .op = STRATA_SUM,
                           .root = STRATA_ANY_SOURCE,
                           .algo = STRATA_ALGO_AUTO};
  return collective_run(c, &args, source, q);
}
int strata_recv_any(strata_comm *c, void *b, size_t n, strata_dtype d, int *source) {
  return recv_any(c, b, n, d, source, NULL);
}
int strata_irecv_any(strata_comm *c, void *b, size_t n, strata_dtype d, int *source,
                     strata_request **q) {
  if (!q) return STRATA_ERR_INVALID_ARG;
  return recv_any(c, b, n, d, source, q);
}
