// SPDX-License-Identifier: Apache-2.0
/*
 * shm_wire.h — the layout of a shared-memory segment, as both processes see it: the header, the
 * channel control blocks and the records in the rings. Everything a peer reads from another
 * process's memory is defined here, as the TCP wire format is in wire.h.
 *
 * Segment. Every rank creates one segment (a memfd; shm_setup.c) holding, for each local peer p,
 * the INBOUND channel from p: a one-page control block (shm_channel) followed by a
 * single-producer / single-consumer byte ring. p writes, the segment's owner reads.
 *
 *     [shm_header, channel_offset[nranks]]  padded to a page
 *     [shm_channel from peer a]             one page
 *     [ring from peer a]                    ring_bytes, a power of two
 *     [shm_channel from peer b] [ring from peer b] ...
 *
 * The control block keeps what the producer writes (head, abort word) and what the consumer
 * writes (tail, count of CMA messages read) on separate cache lines, so the two sides never write
 * the same line. What the owner writes once before the ready barrier (cma_readable, the ring's
 * place) sits on a third line.
 *
 * Records. The k-th message from p to us is the k-th record in p's ring in our segment. A record
 * is one 64-byte cache line (shm_record), 64-byte aligned, followed, for INLINE, by its payload
 * padded to 64 bytes:
 *  - SHM_KIND_INLINE: the payload follows in the ring. A payload larger than the free space is
 *    streamed (the producer publishes head as it writes, the consumer frees space as it copies
 *    out), so no message has to fit in the ring.
 *  - SHM_KIND_CMA: no payload in the ring; the record carries the payload's address in the
 *    producer (src_addr) and, when that buffer lies in strata_mem_alloc memory, the region's
 *    memfd, id and offset, so the consumer can pull it in a single copy (shm_pull.c). The send
 *    completes when the channel's cma_acked reaches the record's cma_number.
 *
 * Invariants. head and tail only grow (uint64 byte counts; ring position = count & (ring_bytes -
 * 1)); the producer never lets head - tail exceed ring_bytes; a record never wraps (records are
 * 64-byte aligned, the ring a multiple of 64). Records carry their sequence number, and a
 * consumer trusts none whose number, kind or CMA number is not the one it expects. head, tail,
 * cma_acked and the abort word are published with release and read with acquire, so the bytes
 * they cover are visible before the counter that announces them.
 */
#ifndef STRATA_NET_SHM_WIRE_H
#define STRATA_NET_SHM_WIRE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_MAGIC 0x5354524154415348ull /* "STRATASH": written last, once the header is set */
#define SHM_VERSION 1u
#define SHM_LINE 64u   /* a record, and the alignment of records and of the control lines */
#define SHM_PAGE 4096u /* the header and each control block are padded to pages */

enum { SHM_KIND_INLINE = 1, SHM_KIND_CMA = 2 };

typedef struct shm_channel {
  /* written by the producer (the peer that sends to this segment's owner) */
  _Alignas(64) _Atomic uint64_t head;
  _Atomic int32_t abort_status;
  _Atomic uint64_t abort_sent;   /* messages the producer had written to us when it aborted */
  _Atomic uint64_t abort_op_seq; /* the first operation its abort concerns */
  /* written by the consumer (the segment's owner) */
  _Alignas(64) _Atomic uint64_t tail;
  _Atomic uint64_t cma_acked;
  /* written once by the owner before the ready barrier */
  _Alignas(64) uint32_t cma_readable; /* the owner can process_vm_readv the producer */
  int32_t producer_rank;
  uint64_t ring_offset; /* from the segment's start */
  uint64_t ring_bytes;
} shm_channel;

typedef struct shm_header {
  uint64_t magic;
  uint32_t version;
  int32_t owner_rank;
  int32_t nranks;
  int32_t owner_pid;
  uint64_t canary_addr; /* a word in the owner's private memory: the CMA probe */
  uint64_t canary_value;
  uint64_t segment_bytes;
  uint64_t channel_offset[]; /* [nranks]: channel from that rank, 0 = none */
} shm_header;

typedef struct shm_record {
  uint64_t tag;
  uint64_t bytes;
  uint64_t seq;        /* message number from this producer, from 0 */
  uint64_t src_addr;   /* CMA: the payload's address in the producer */
  uint64_t cma_number; /* CMA: 1-based; the send completes when cma_acked reaches it */
  uint32_t kind;
  int32_t mem_fd;      /* CMA from strata_mem_alloc memory: the region's memfd in the producer, */
  uint64_t mem_id;     /* its id there (0 = not such memory), */
  uint64_t mem_offset; /* and the payload's offset in it */
} shm_record;
_Static_assert(sizeof(shm_record) == SHM_LINE, "a record is one cache line");

/* The header with its channel_offset table, padded to a page. */
static inline size_t shm_header_bytes(int nranks) {
  size_t bytes = sizeof(shm_header) + (size_t)nranks * sizeof(uint64_t);
  return (bytes + SHM_PAGE - 1) & ~(size_t)(SHM_PAGE - 1);
}

static inline shm_channel *shm_channel_at(void *map, uint64_t offset) {
  return (shm_channel *)((uint8_t *)map + offset);
}

/* Where the record after `v` ring bytes starts. */
static inline uint64_t shm_align_line(uint64_t v) {
  return (v + SHM_LINE - 1) & ~(uint64_t)(SHM_LINE - 1);
}

#endif
