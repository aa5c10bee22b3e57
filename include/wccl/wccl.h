/*
 * wccl: the WAN Collective Communications Library. Public C API.
 *
 * Plain C99, no C++ or CUDA types. Every function that can fail returns a wccl_result_t; WCCL_OK
 * (0) means it did everything it says, any other value means it did nothing else: no handle is
 * created, no argument is modified except where the contract says so. The detail of the calling
 * thread's most recent failure is in wccl_last_error().
 *
 * What this header holds: result codes, version, configuration, the embeddable coordinator, the
 * communicator's membership calls, the collectives (blocking and non-blocking) and state sync.
 */
#ifndef WCCL_WCCL_H_
#define WCCL_WCCL_H_

#include <stddef.h>
#include <stdint.h>

#include "wccl/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WCCL_BUILDING_LIBRARY)
#define WCCL_API __attribute__((visibility("default")))
#else
#define WCCL_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Result codes.
 *
 * One table generates the enum, wccl_result_name() and wccl_strerror(). Codes are only ever
 * appended; a value never changes meaning.
 *   X(name, value, message)
 */
#define WCCL_RESULT_TABLE(X)                                                                      \
  X(WCCL_OK, 0, "success")                                                                        \
  X(WCCL_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                             \
  X(WCCL_ERR_INVALID_USAGE, 2, "invalid usage: the call is not allowed in this state")            \
  X(WCCL_ERR_NO_MEMORY, 3, "out of memory")                                                       \
  X(WCCL_ERR_IO, 4, "I/O error: a connection failed or was closed by the peer")                   \
  X(WCCL_ERR_TIMEOUT, 5, "timed out")                                                             \
  X(WCCL_ERR_PEER_LOST, 6, "a peer of this epoch was lost; buffers are intact, update and retry") \
  X(WCCL_ERR_TOO_FEW_PEERS, 7, "too few peers")                                                   \
  X(WCCL_ERR_COORDINATOR_UNREACHABLE, 8, "the coordinator cannot be reached")                     \
  X(WCCL_ERR_AUTH, 9, "authentication failed")                                                    \
  X(WCCL_ERR_PROTOCOL, 10, "protocol error: the peer sent something this library rejects")        \
  X(WCCL_ERR_ABORTED, 11, "aborted")                                                              \
  X(WCCL_ERR_UNSUPPORTED, 12, "unsupported: the feature is not compiled into this library")       \
  X(WCCL_ERR_CUDA, 13, "CUDA error")                                                              \
  X(WCCL_ERR_NCCL, 14, "NCCL error")                                                              \
  X(WCCL_ERR_IN_PROGRESS, 15, "in progress")                                                      \
  X(WCCL_ERR_INTERNAL, 16, "internal error (a bug in wccl)")                                      \
  X(WCCL_ERR_MISMATCH, 17, "the members called different operations; buffers are intact")

typedef enum wccl_result_t {
#define WCCL_RESULT_ENUM_(name, value, message) name = (value),
  WCCL_RESULT_TABLE(WCCL_RESULT_ENUM_)
#undef WCCL_RESULT_ENUM_
} wccl_result_t;

/* The enumerator's name ("WCCL_ERR_TIMEOUT"), or "WCCL_ERR_UNKNOWN" for a value not in the table.
 * The string is static. Thread-safe. */
WCCL_API const char *wccl_result_name(wccl_result_t result);

/* A one-line description of the code, static, thread-safe; "unknown result code" for a value not
 * in the table. */
WCCL_API const char *wccl_strerror(wccl_result_t result);

/* Detail of the most recent call on this thread that returned an error: the cause, naming the
 * key, peer, file or OpenSSL reason involved, and the source location that raised it. Successful
 * calls do not clear it. Empty string ("") when no call on this thread has failed. The pointer is
 * valid until the next wccl call on this thread. */
WCCL_API const char *wccl_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Version.
 */

/* The library's version, "MAJOR.MINOR.PATCH". Static string. Compare with WCCL_VERSION_STRING to
 * detect a header/library mismatch; the soname changes with MAJOR. */
WCCL_API const char *wccl_version(void);

/* ---------------------------------------------------------------------------------------------
 * Configuration.
 *
 * A configuration is a set of string keys with string values. Each key starts from its built-in
 * default, overridden by the environment variable WCCL_<KEY> (the key in upper case) read when
 * the configuration is created. wccl_config_keys() lists every key. A configuration is not
 * thread-safe: do not set it from two threads at once; objects created from it take a copy.
 */
typedef struct wccl_config wccl_config_t;

/* Creates a configuration holding the defaults and the WCCL_<KEY> environment variables.
 * Returns INVALID_ARGUMENT (naming the variable and the expected form) if an environment variable
 * holds a value the key does not accept, NO_MEMORY if allocation fails. On error *config is set
 * to NULL. */
WCCL_API wccl_result_t wccl_config_create(wccl_config_t **config);

/* Destroys a configuration. NULL is accepted and ignored. */
WCCL_API void wccl_config_destroy(wccl_config_t *config);

/* Sets key to value after checking it. Returns INVALID_ARGUMENT, naming the key and the form it
 * expects, for an unknown key or a value the key does not accept; the configuration is then
 * unchanged. */
WCCL_API wccl_result_t wccl_config_set(wccl_config_t *config, const char *key, const char *value);

/* Copies the current value of key, NUL-terminated, into buf of buf_size bytes. If needed is not
 * NULL it receives the value's length plus one (the size buf must have), also on INVALID_ARGUMENT
 * for a buffer too small; buf may then be NULL with buf_size 0 to query the size. Returns
 * INVALID_ARGUMENT for an unknown key or a buffer too small (buf is then left unchanged). */
WCCL_API wccl_result_t wccl_config_get(const wccl_config_t *config, const char *key, char *buf,
                                       size_t buf_size, size_t *needed);

/* Every key, one line each, as "key<TAB>default<TAB>accepted form<TAB>description<LF>", in a static
 * NUL-terminated string. The defaults shown are the built-in ones, before the environment. */
WCCL_API const char *wccl_config_keys(void);

/* ---------------------------------------------------------------------------------------------
 * Coordinator.
 *
 * The membership authority of a job: peers join it, it decides epochs (who is in, in which ring
 * order), detects lost peers and revokes their epoch. It carries no bulk data. One coordinator
 * serves any number of groups. It runs on its own I/O thread; the daemon `wccl-coord` wraps it.
 * docs/fault-tolerance.md describes its rules and timeouts.
 */
typedef struct wccl_coord wccl_coord_t;

/* Starts a coordinator listening on the config key `listen` (default 0.0.0.0:0, a free port;
 * wccl-coord defaults to 0.0.0.0:48148), with TLS unless tls=off, and returns once it accepts
 * connections. Also reads min_peers, settle_ms, heartbeat_ms, peer_timeout_ms,
 * straggler_timeout_ms, events_log, http, http_token_file and the transport keys. Returns
 * INVALID_ARGUMENT for a bad address or missing TLS files (naming them), IO if the address cannot
 * be bound. The configuration is copied. On error *coord is set to NULL. */
WCCL_API wccl_result_t wccl_coord_start(wccl_coord_t **coord, const wccl_config_t *config);

/* The TCP port the coordinator listens on, or 0 for NULL. Thread-safe. */
WCCL_API int wccl_coord_port(const wccl_coord_t *coord);

/* The TCP port of its HTTP endpoints (/metrics, /status, /status.json: config key `http`,
 * docs/operations.md), or 0 without them or for NULL. Thread-safe. */
WCCL_API int wccl_coord_http_port(const wccl_coord_t *coord);

/* Stops the coordinator: closes every peer's connection and frees it. Blocks until its thread has
 * ended; must not be called from a wccl callback. NULL is accepted and ignored. */
WCCL_API void wccl_coord_stop(wccl_coord_t *coord);

/* ---------------------------------------------------------------------------------------------
 * Communicator: this process's membership in one group of a job.
 *
 * Membership changes only at wccl_comm_update, a collective over the current members. A peer
 * lost mid-epoch revokes the epoch (its operations fail with PEER_LOST); the survivors call
 * wccl_comm_update and continue. docs/fault-tolerance.md describes states, results and timeouts.
 * The calls below may be made from any thread; join, update and leave block their caller.
 */
typedef struct wccl_comm wccl_comm_t;

/* Joins the group `group` through the coordinator at `coordinator` and blocks until admitted into
 * an epoch (join_timeout_ms). Listens on `listen` for its ring neighbours, reachable at
 * `advertise` (default: the address it reaches the coordinator from). INVALID_ARGUMENT without a
 * coordinator address; COORDINATOR_UNREACHABLE if it cannot be reached or drops this peer (its
 * log says why); AUTH with OpenSSL's reason; TIMEOUT after join_timeout_ms. With `node` and
 * `node_groups` set, it returns once the node's communicators in all node_groups groups are
 * admitted, together (docs/fault-tolerance.md, "The node is admitted and leaves whole");
 * INVALID_ARGUMENT for node_groups without node; INVALID_USAGE, with the coordinator's reason, for
 * a communicator that does not fit its node (another node_groups, a second one in a group, more
 * groups than declared). On error *comm is set to NULL. */
WCCL_API wccl_result_t wccl_comm_join(wccl_comm_t **comm, const wccl_config_t *config);

/* Waits until the coordinator decides the next epoch: survivors plus admitted joiners, minus
 * leavers and lost peers. A peer that was declared lost (frozen, cut off) is admitted again
 * through this call. COORDINATOR_UNREACHABLE while the coordinator is away (the communicator
 * reconnects by itself), TIMEOUT after op_timeout_ms, ABORTED after wccl_comm_abort, or the
 * coordinator's refusal (its code and reason, e.g. PROTOCOL for a stale epoch). INVALID_USAGE while
 * operations of this peer are undecided; while it runs, starting an operation (from another
 * thread) is INVALID_USAGE too. */
WCCL_API wccl_result_t wccl_comm_update(wccl_comm_t *comm);

/* Leaves gracefully, in place of an update: the others' update completes without this peer and
 * no operation fails. Afterwards only wccl_comm_destroy may be called. */
WCCL_API wccl_result_t wccl_comm_leave(wccl_comm_t *comm);

/* Any thread: every current and later wait of this communicator returns ABORTED. */
WCCL_API void wccl_comm_abort(wccl_comm_t *comm);

/* This peer's position in the current epoch's ring, the epoch's size and number; -1, 0 and 0
 * for NULL. */
WCCL_API int wccl_comm_rank(const wccl_comm_t *comm);
WCCL_API int wccl_comm_size(const wccl_comm_t *comm);
WCCL_API uint64_t wccl_comm_epoch(const wccl_comm_t *comm);

/* How the current epoch came to be, as the coordinator formed it. A job's epochs normally descend
 * from one another: each is formed from the members of the one before (at an update barrier, a
 * state sync's re-forming, or adopted by a restarted coordinator). When every member of the group
 * is gone, the peers waiting to join form an epoch of their own: its members then hold nothing of
 * what the earlier ones held, and a trainer must not take their state for the job's (a node whose
 * state was lost with the others would train the job from its first step again). */
typedef enum {
  WCCL_EPOCH_CONTINUES = 0, /* formed from the members of the one before */
  WCCL_EPOCH_FIRST = 1, /* the group's first epoch: joiners alone, the group never had a member */
  WCCL_EPOCH_AFTER_LOSS =
      2, /* formed by joiners alone after the last member of the group was lost */
  WCCL_EPOCH_AFTER_LEAVE =
      3, /* formed by joiners alone after the last member of the group left (its job ended?) */
} wccl_epoch_origin_t;

/* The current epoch's origin as the EPOCH that made this peer a member of it said (CONTINUES for
 * NULL); right after wccl_comm_join, that of the epoch that admitted it. A coordinator that
 * restarted knows of earlier epochs only from members that come back to it: if none does, the
 * joiners' epoch it forms is FIRST. */
WCCL_API wccl_epoch_origin_t wccl_comm_epoch_origin(const wccl_comm_t *comm);

/* How many peers wait to be admitted at the next wccl_comm_update, as last reported by the
 * coordinator (0 for NULL). A training loop can call update only when this is non-zero or its
 * epoch was revoked. */
WCCL_API int wccl_comm_pending(const wccl_comm_t *comm);

/* 1 when the group waits for this peer's wccl_comm_update: its epoch was revoked (a peer lost, an
 * operation failed, this peer declared lost), or another member waits at the epoch's update
 * barrier (an update, a leave, or a state sync re-forming the epoch: an update there makes the
 * re-form give way, and the state sync returns PEER_LOST); then its operations past the ones the
 * others ran fail until it updates. 0 otherwise,
 * and for NULL. For a caller that holds a member idle between calls (waiting for its other
 * communicators, as a node of several groups does while it is admitted): an idle member that the
 * group waits for should update, so nobody waits on it. */
WCCL_API int wccl_comm_update_due(const wccl_comm_t *comm);

/* What a communicator counted since wccl_comm_join, for a member's metrics (the trainer exports
 * them). Operations are collectives and state syncs, each counted once at its outcome. A field is
 * added only with a new major version; `size` lets the library refuse a caller built against
 * another one. (The struct's tag is not wccl_comm_stats, which would hide the function in C++.) */
typedef struct wccl_comm_stats_s {
  size_t size;             /* set by the caller to sizeof(wccl_comm_stats_t) */
  uint64_t ops_committed;  /* operations whose outcome was WCCL_OK */
  uint64_t ops_failed;     /* operations with any other outcome */
  uint64_t ops_peer_lost;  /* of those, WCCL_ERR_PEER_LOST: the ones a training loop retries after
                              wccl_comm_update */
  uint64_t bytes_sent;     /* payload bytes every operation sent on the wire, failed ones too */
  uint64_t bytes_received; /* payload bytes they received */
  uint64_t epochs;         /* epochs this member entered, the one that admitted it included */
  uint64_t updates;        /* wccl_comm_update calls that returned WCCL_OK */
} wccl_comm_stats_t;

/* Copies the counters into *stats. INVALID_ARGUMENT for NULL or a stats->size other than
 * sizeof(wccl_comm_stats_t). Thread-safe. */
WCCL_API wccl_result_t wccl_comm_stats(const wccl_comm_t *comm, wccl_comm_stats_t *stats);

/* One of the current epoch's links of a member, as its TCP connections measured it (TCP_INFO).
 * These are what the member reports to the coordinator, which orders the ring by them. */
typedef struct wccl_link_stats {
  int32_t rank;         /* the peer at its other end, by rank in the current epoch */
  uint32_t rtt_us;      /* the smallest round trip seen on it; 0: not measured yet */
  uint64_t bytes_per_s; /* the highest rate it delivered while busy; 0: never busy yet */
} wccl_link_stats_t;

/* The current epoch's links of this member (its schedule's neighbours, at most 8, and a state
 * sync's links while it runs), in rank order: *count receives how many there are, and the first
 * min(*count, capacity) are written to links (which may be NULL for capacity 0). INVALID_ARGUMENT
 * for a NULL comm or count. Thread-safe. */
WCCL_API wccl_result_t wccl_comm_links(const wccl_comm_t *comm, wccl_link_stats_t *links,
                                       size_t capacity, size_t *count);

/* Closes the communicator (the coordinator sees its link close; call wccl_comm_leave first for a
 * graceful exit) and frees it. What it already sent the coordinator (an operation's failure) goes
 * out first: it waits up to 1 s for that. Must not be called from a wccl callback. NULL is ignored.
 */
WCCL_API void wccl_comm_destroy(wccl_comm_t *comm);

/* ---------------------------------------------------------------------------------------------
 * Collective operations.
 *
 * Every member of the epoch must call the same collectives in the same order, with matching
 * count, dtype, op and root (as in MPI and NCCL), and the same wire (TOPK's keep included), algo
 * and compress. Unlike MPI and NCCL, wccl checks it: each member's call is compared with its ring
 * neighbours' as soon as both have made it (one message delay after the later of the two calls),
 * and no message of a call that differs is ever read into another's buffers. Each operation ends
 * with a commit decided by the coordinator (docs/fault-tolerance.md), so its outcome is the same
 * on every member:
 * - WCCL_OK: the result is final, and bit-identical on every member;
 * - WCCL_ERR_PEER_LOST: a member was lost or failed during the operation (or the epoch was already
 *   revoked). The caller's buffers hold exactly what they held before the call, in-place
 *   operations included. Call wccl_comm_update, then retry the same call.
 * - WCCL_ERR_MISMATCH: the members' calls differ (another collective, dtype, count, op, root, wire,
 *   algo, compress or chunk_bytes); wccl_last_error() names two members' calls and what differs.
 *   Every member gets it, within a message delay to the coordinator of the check, its buffers as
 *   they were; nobody is lost, but the epoch is revoked: call wccl_comm_update before the next
 *   call. An extra call on one member is compared with the others' next one; if they make none
 *   but reach wccl_comm_update, it fails with PEER_LOST there (docs/fault-tolerance.md, "Members
 *   in different operations"), else at its timeout.
 * Other results: INVALID_ARGUMENT (names the argument), INVALID_USAGE (after leave; more than 256
 * operations in flight), UNSUPPORTED (an option this build does not have: compression without zstd,
 * a CUDA stream without CUDA), CUDA (a CUDA call failed on this member, device buffers only; the
 * others get PEER_LOST), ABORTED, TIMEOUT (no outcome
 * within the timeout: this peer gave up, which revokes the epoch; buffers are untouched, but the
 * others may have committed: state sync heals that, see docs/fault-tolerance.md). On any error
 * the buffers are untouched.
 *
 * Buffers are host memory, or device memory of one CUDA device (found from the pointers; both
 * buffers in the same place, INVALID_ARGUMENT otherwise). With device buffers the GPU reduces,
 * encodes and decodes, and only message bytes cross PCIe (docs/algorithms.md, "Device buffers").
 * In place is allowed: allreduce and broadcast with sendbuf == recvbuf; allgather with sendbuf ==
 * recvbuf + rank * count elements; reduce_scatter with recvbuf == sendbuf + rank * recvcount
 * elements (rank: this member's rank in the epoch). Any other overlap is INVALID_ARGUMENT. The
 * input must not change and the output must not be read until the operation has completed. The
 * library writes the output during the operation; just before it first writes a range of it, it
 * saves that range's old bytes to a buffer of the output's size in the same memory (kept for reuse,
 * up to two per communicator), and copies them back before an operation that was not committed
 * returns.
 */
typedef enum wccl_dtype {
  WCCL_F32 = 0,
  WCCL_F64 = 1,
  WCCL_F16 = 2,  /* IEEE binary16; reductions compute in F32 and round once per step */
  WCCL_BF16 = 3, /* bfloat16; likewise */
  WCCL_I8 = 4,
  WCCL_U8 = 5,
  WCCL_I32 = 6,
  WCCL_I64 = 7
} wccl_dtype_t;

/* Integer SUM and PROD wrap around; integer AVG divides the sum with truncation. MIN and MAX of
 * floats with NaN inputs are unspecified (but identical on every member). */
typedef enum wccl_redop {
  WCCL_SUM = 0,
  WCCL_AVG = 1,
  WCCL_MIN = 2,
  WCCL_MAX = 3,
  WCCL_PROD = 4
} wccl_redop_t;

/* How elements travel between members. Codecs other than NATIVE carry WCCL_F32, WCCL_F16 and
 * WCCL_BF16 data (INVALID_ARGUMENT for other dtypes) and are lossy. F16 and BF16 data travel as F32
 * would: each member widens its input to F32 (exactly, into scratch of 4 bytes per input and per
 * output element), and the committed F32 result is rounded once into its output (F16: beyond
 * +-65504, +-Inf), which is not written before the commit. Every hop decodes, combines in F32
 * and encodes again, and each final value is encoded once by the member that produced it, which
 * keeps what decodes from its own bytes: results are still bit-identical on every member. Error
 * bounds and formats: docs/algorithms.md. With INT8, INT4, INT2, FP8 and TOPK, a NaN or Inf (in the
 * input, or a partial result that overflows) cannot be sent: the member that finds it returns
 * INVALID_ARGUMENT naming the element, and the others PEER_LOST (the epoch is revoked; buffers are
 * untouched everywhere). A world of one member copies without encoding. Barrier ignores the wire.
 */
typedef enum wccl_wire {
  WCCL_WIRE_NATIVE = 0, /* the dtype's own bytes */
  WCCL_WIRE_FP16 = 1,   /* IEEE binary16, rounded to nearest-even: half the bytes */
  WCCL_WIRE_BF16 = 2,   /* bfloat16, rounded to nearest-even: half the bytes */
  WCCL_WIRE_INT8 = 3,   /* blocks of 1024 elements as a float scale and offset plus one byte each:
                           about a quarter of the bytes (1032 per 4096) */
  WCCL_WIRE_INT4 = 4,   /* blocks of 128 elements as a float scale and offset plus 4 bits each:
                           72 bytes per 128 elements, 7.1 times fewer than F32 */
  WCCL_WIRE_FP8 = 5,    /* blocks of 1024 elements as a power-of-two scale plus one E4M3 byte
                           each (relative precision, 1/16): 1028 bytes per 4096 */
  WCCL_WIRE_INT2 = 6,   /* blocks of 128 elements as a float scale and offset plus 2 bits each:
                           40 bytes per 128 elements, 12.8 times fewer than F32; all-reduce's
                           AUTO sends it by the ALLGATHER schedule */
  WCCL_WIRE_TOPK = 7    /* sparse: of each block of 256 elements the opts.topk_keep (1..64,
                           default 8) largest in magnitude, each as an index byte and a 4-bit
                           sign and magnitude under a float scale, the rest 0: 4 + 1.5 keep
                           bytes (rounded up) per 256 elements (at 8: 16, 64 times fewer than
                           F32; at 2: 7, 146 times fewer). Never re-encoded: all-reduce only
                           by ALLGATHER (AUTO picks it), broadcast and all-gather;
                           reduce-scatter refuses it */
} wccl_wire_t;

typedef enum wccl_algo {
  WCCL_ALGO_AUTO = 0, /* all-reduce: ALLGATHER on the INT2 and TOPK wires; else TREE up to the
                         measured crossover (config key tree_max_bytes), RING above */
  WCCL_ALGO_RING = 1, /* pipelined ring (bandwidth-optimal) */
  WCCL_ALGO_TREE = 2, /* two binary trees (latency-optimal); all-reduce only, ignored elsewhere */
  WCCL_ALGO_ALLGATHER = 3 /* all-reduce as an all-gather of every member's contribution, each
                             encoded once, summed by every member in rank order: the result is
                             the sum of the contributions' wccl_wire_roundtrip; n/2 times the
                             ring's bytes. All-reduce only, ignored elsewhere */
} wccl_algo_t;

/* zstd on the wire, lossless: results are the same bits as without. Each member decides for its own
 * sends (members may differ); every member accepts both forms. UNSUPPORTED in a library built
 * without zstd. */
typedef enum wccl_compress {
  WCCL_COMPRESS_OFF = 0,
  WCCL_COMPRESS_ZSTD = 1, /* every message of 4 KiB or more that shrinks goes as a zstd frame of its
                             bytes shuffled by element byte */
  WCCL_COMPRESS_AUTO = 2  /* where it pays: this member measures its link on its first 12 MiB of the
                             operation, then compresses if a trial message shrinks to 7/8 or less and
                             zstd outpaces the link (docs/algorithms.md) */
} wccl_compress_t;

/* The lowest nonzero wccl_opts_t.max_link_rate, in bytes per second (1 Mbit/s): below it a paced
 * stream's packets (64 KiB bursts on loopback) could come further apart than a link's silence
 * timeout (io_timeout_ms) allows. */
#define WCCL_MIN_LINK_RATE 125000

/* The elements of each block of 256 that the TOPK wire keeps where wccl_opts_t.topk_keep is 0. */
#define WCCL_TOPK_DEFAULT_KEEP 8

/* Per-operation options. Get them from wccl_opts_default() and change fields. A field is added
 * only with a new major version (the soname's): `size` lets the library refuse, with
 * INVALID_ARGUMENT, options of a caller built against another one (max_link_rate came with 2). */
typedef struct wccl_opts {
  size_t size;           /* sizeof(wccl_opts_t), set by wccl_opts_default */
  int32_t wire;          /* wccl_wire_t */
  int32_t algo;          /* wccl_algo_t */
  int32_t compress;      /* wccl_compress_t */
  int32_t topk_keep;     /* TOPK wire: elements kept of each block of 256, 1..64 (0:
                            WCCL_TOPK_DEFAULT_KEEP); 0 on the other wires */
  void *cuda_stream;     /* device buffers: a cudaStream_t whose work enqueued before the call the
                            operation waits for before reading sendbuf (NULL: the legacy default
                            stream); the result is in recvbuf when wccl_wait returns. Must be NULL
                            with host buffers */
  int64_t timeout_ms;    /* the whole operation, call to outcome; 0: config key op_timeout_ms */
  int64_t max_link_rate; /* bytes per second at which each of this member's links sends this
                            operation's messages, at most: the kernel paces the link's streams,
                            each at its share (SO_MAX_PACING_RATE), so a transfer that need not
                            finish soon (an overlapped all-reduce) leaves the link to other
                            traffic. 0: as fast as TCP goes; else at least WCCL_MIN_LINK_RATE.
                            Set per operation; the state sync and the control channel are not
                            paced. wccl-sim does not model it */
} wccl_opts_t;

/* NATIVE wire, AUTO algorithm, no compression, the default CUDA stream, op_timeout_ms. */
WCCL_API wccl_opts_t wccl_opts_default(void);

/* The collectives, as wccl_opts_check and wccl_opts_for name them. */
typedef enum wccl_collective {
  WCCL_COLL_ALLREDUCE = 0,
  WCCL_COLL_BROADCAST = 1,
  WCCL_COLL_ALLGATHER = 2,
  WCCL_COLL_REDUCE_SCATTER = 3,
  WCCL_COLL_BARRIER = 4
} wccl_collective_t;

/* Whether collective `coll` on dtype elements, reducing by op, takes opts (NULL: the defaults):
 * WCCL_OK, or the error that collective returns for them, with the same wccl_last_error() but for
 * the function named at its start: INVALID_ARGUMENT naming the field or the rule (a field out of
 * range, a max_link_rate below WCCL_MIN_LINK_RATE, a topk_keep on another wire than TOPK, a codec
 * wire on a dtype it does not carry, TOPK on a reduce-scatter or by the ring or the tree);
 * UNSUPPORTED for compression in a library built without zstd. The collectives make this same
 * check before they look at their buffers and the communicator, which this call has not:
 * opts->cuda_stream, whose rule depends on the buffers, is not checked. op is read for all-reduce
 * and reduce-scatter only, dtype for every collective but barrier. Thread-safe. */
WCCL_API wccl_result_t wccl_opts_check(wccl_collective_t coll, wccl_dtype_t dtype, wccl_redop_t op,
                                       const wccl_opts_t *opts);

/* The options one operation takes from options meant for all of a group's operations (as the
 * torch backend's are): *out = *group (NULL: the defaults) with the NATIVE wire (and topk_keep 0)
 * where the group's wire does not apply. It applies to the SUM and AVG all-reduces and
 * reduce-scatters of the dtypes it carries (F32, F16, BF16; TOPK: all-reduces only), the
 * reductions a lossy wire is for, whose error a trainer's error feedback corrects; every other
 * operation travels exact: a broadcast or an all-gather (of parameters, say), a MIN, MAX or PROD,
 * other dtypes. (An operation given a wire itself takes it wherever the wire can carry it: MIN,
 * MAX and PROD on a codec stay within its bound, docs/algorithms.md.) *out is then checked as
 * wccl_opts_check checks it; on an error, which names the cause (a field out of range, or an
 * option the reductions cannot take with the group's wire: TOPK by the ring), *out is left as it
 * was. Thread-safe. */
WCCL_API wccl_result_t wccl_opts_for(wccl_collective_t coll, wccl_dtype_t dtype, wccl_redop_t op,
                                     const wccl_opts_t *group, wccl_opts_t *out);

/* WCCL_MIN_LINK_RATE and WCCL_TOPK_DEFAULT_KEEP, for callers that cannot read a macro (ctypes). */
WCCL_API int64_t wccl_min_link_rate(void);
WCCL_API int32_t wccl_topk_default_keep(void);

/* What an operation with these options (their wire and topk_keep) keeps of count F32 elements:
 * each encoded as one member's contribution is on its first hop and decoded again, written to out
 * (which may equal in); NATIVE copies. For error feedback in a trainer (the residual in - out is
 * added to the next contribution). opts may be NULL (NATIVE); algo, compress and timeout_ms are
 * not used. in and out are both host memory, or both memory of one GPU: the GPU then encodes and
 * decodes, bit for bit as the CPU would, on opts->cuda_stream (NULL: the legacy default stream)
 * after the work queued there, and the call returns once out is written. INVALID_ARGUMENT for a
 * NaN or Inf on INT8, INT4, INT2, FP8 and TOPK, naming the element, with out left as it was. */
WCCL_API wccl_result_t wccl_wire_roundtrip(const float *in, float *out, size_t count,
                                           const wccl_opts_t *opts);

/* What an operation cost, filled by wccl_wait. */
typedef struct wccl_op_stats {
  size_t size;             /* set by the caller to sizeof(wccl_op_stats_t) */
  uint64_t bytes_sent;     /* payload bytes this peer sent on the wire for the operation */
  uint64_t bytes_received; /* payload bytes it received */
  double time_us;          /* from the call to the outcome */
  uint64_t epoch;
  int32_t world_size;
  int32_t algo; /* the wccl_algo_t that ran (AUTO resolved) */
} wccl_op_stats_t;

/* A non-blocking operation in flight. */
typedef struct wccl_request wccl_request_t;

/* recvbuf[i] = op over all members of sendbuf[i], i < count. opts may be NULL (defaults). */
WCCL_API wccl_result_t wccl_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                      wccl_dtype_t dtype, wccl_redop_t op, wccl_comm_t *comm,
                                      const wccl_opts_t *opts);
/* recvbuf on every member = sendbuf of member `root` (sendbuf is read on the root only). */
WCCL_API wccl_result_t wccl_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                      wccl_dtype_t dtype, int root, wccl_comm_t *comm,
                                      const wccl_opts_t *opts);
/* recvbuf (size * sendcount elements) = every member's sendbuf, in rank order. */
WCCL_API wccl_result_t wccl_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      wccl_dtype_t dtype, wccl_comm_t *comm,
                                      const wccl_opts_t *opts);
/* sendbuf holds size * recvcount elements; member r receives block r of their reduction. */
WCCL_API wccl_result_t wccl_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                           wccl_dtype_t dtype, wccl_redop_t op, wccl_comm_t *comm,
                                           const wccl_opts_t *opts);
/* Returns on a member once every member has called it (one round trip to the coordinator). */
WCCL_API wccl_result_t wccl_barrier(wccl_comm_t *comm, const wccl_opts_t *opts);

/* Non-blocking forms: queue the operation and return at once with *req set (NULL on error, when
 * nothing was queued). Several may be in flight on one communicator and may be waited for in any
 * order; they run in the order they were called. */
WCCL_API wccl_result_t wccl_iallreduce(wccl_request_t **req, const void *sendbuf, void *recvbuf,
                                       size_t count, wccl_dtype_t dtype, wccl_redop_t op,
                                       wccl_comm_t *comm, const wccl_opts_t *opts);
WCCL_API wccl_result_t wccl_ibroadcast(wccl_request_t **req, const void *sendbuf, void *recvbuf,
                                       size_t count, wccl_dtype_t dtype, int root,
                                       wccl_comm_t *comm, const wccl_opts_t *opts);
WCCL_API wccl_result_t wccl_iallgather(wccl_request_t **req, const void *sendbuf, void *recvbuf,
                                       size_t sendcount, wccl_dtype_t dtype, wccl_comm_t *comm,
                                       const wccl_opts_t *opts);
WCCL_API wccl_result_t wccl_ireduce_scatter(wccl_request_t **req, const void *sendbuf,
                                            void *recvbuf, size_t recvcount, wccl_dtype_t dtype,
                                            wccl_redop_t op, wccl_comm_t *comm,
                                            const wccl_opts_t *opts);
WCCL_API wccl_result_t wccl_ibarrier(wccl_request_t **req, wccl_comm_t *comm,
                                     const wccl_opts_t *opts);

/* Blocks until the operation's outcome (at most its timeout) and returns it, as the blocking form
 * would; on OK the output buffer holds the result. stats may be NULL. Calling it again returns the
 * same outcome. One thread at a time per request. */
WCCL_API wccl_result_t wccl_wait(wccl_request_t *req, wccl_op_stats_t *stats);
/* Does not block: *done = 0 and WCCL_OK while in flight; otherwise *done = 1 and the outcome, as
 * wccl_wait returns it. */
WCCL_API wccl_result_t wccl_test(wccl_request_t *req, int *done);
/* Frees the request; one still in flight is waited for first (its outcome is discarded, but a
 * committed result is still written to the output buffer). Free every request of a communicator
 * before destroying it. NULL is ignored. */
WCCL_API void wccl_request_free(wccl_request_t *req);

/* ---------------------------------------------------------------------------------------------
 * Hierarchical all-reduce: several ranks per node (docs/algorithms.md, "Hierarchical all-reduce")
 *
 * A node runs L ranks (one per GPU) that reach each other fast (NVLink, PCIe, shared memory) and
 * the other nodes over the WAN. Each local rank r has a wccl communicator of its own whose members
 * are the local ranks r of every node (each in a group of its own, all naming the same `node` in
 * their configuration, so the coordinator loses a node's communicators together; with
 * `node_groups` set to L as well, it admits the node, and lets it leave, in all L groups at one
 * update barrier, so no epoch ever holds part of a node: each rank's wccl_comm_join returns as the
 * whole node is admitted. The L ranks must then call join, update and leave concurrently, each
 * from its own thread or process), and a local group: the node's ranks. wccl_hier_allreduce
 * reduce-scatters inside the node, all-reduces each rank's block across nodes over its communicator
 * (any wire), and all-gathers inside the node, so the WAN carries each element once per node
 * instead of once per GPU.
 *
 * Its outcome is the node's: if any local rank's all-reduce across nodes fails, every local rank
 * of every node returns an error (that rank its own, the others PEER_LOST naming it), recvbuf is as
 * it was on every rank, and each rank calls wccl_comm_update on its communicator and retries (a
 * rank's own error other than PEER_LOST, e.g. INVALID_ARGUMENT for a NaN on the INT8 wire, is that
 * rank's to handle as for wccl_allreduce; its siblings' retry waits for it, up to its timeout). AVG
 * averages over every rank of every node (every node must have the same local size). Every rank
 * of the local group calls the same hierarchical all-reduces in the same order; nothing else may
 * run on the local group meanwhile (an NCCL communicator passed in included). A local group that
 * fails itself (a CUDA or NCCL error, a rank that stops coming: TIMEOUT) is broken: every later
 * call fails, and the node should be restarted.
 * ------------------------------------------------------------------------------------------- */

/* One rank of a node's local group. */
typedef struct wccl_local_group wccl_local_group_t;

/* A local group of `size` threads of this process: groups (an array of size handles) receives one
 * handle per thread, handles[i] having rank i. Host buffers or device buffers. */
WCCL_API wccl_result_t wccl_local_group_threads(int size, wccl_local_group_t **groups);
/* The caller's NCCL communicator (an ncclComm_t) as this rank's local group: device buffers on
 * its GPU. The caller keeps it (it must outlive the handle). UNSUPPORTED in a library built
 * without NCCL (meson option nccl). */
WCCL_API wccl_result_t wccl_local_group_nccl(wccl_local_group_t **group, void *nccl_comm);
WCCL_API int wccl_local_group_rank(const wccl_local_group_t *group);
WCCL_API int wccl_local_group_size(const wccl_local_group_t *group);
/* Waits for the rank's operations in flight first; free their requests before. NULL is ignored. */
WCCL_API void wccl_local_group_destroy(wccl_local_group_t *group);

/* recvbuf[i] = op over every rank of every node of sendbuf[i], i < count; in place allowed.
 * opts as for wccl_allreduce: wire, algo and compress apply to the all-reduce across nodes;
 * cuda_stream orders device buffers; timeout_ms bounds the whole operation (0: the
 * communicator's op_timeout_ms). */
WCCL_API wccl_result_t wccl_hier_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                           wccl_dtype_t dtype, wccl_redop_t op,
                                           wccl_local_group_t *local, wccl_comm_t *comm,
                                           const wccl_opts_t *opts);
/* The non-blocking form: a request for wccl_wait, wccl_test and wccl_request_free; a rank's
 * hierarchical all-reduces run in the order they were called. wccl_wait's stats are those of the
 * rank's all-reduce across nodes (its WAN bytes, epoch; world_size: the nodes), its time from the
 * call to the outcome. */
WCCL_API wccl_result_t wccl_ihier_allreduce(wccl_request_t **req, const void *sendbuf,
                                            void *recvbuf, size_t count, wccl_dtype_t dtype,
                                            wccl_redop_t op, wccl_local_group_t *local,
                                            wccl_comm_t *comm, const wccl_opts_t *opts);

/* ---------------------------------------------------------------------------------------------
 * Shared state sync (live checkpoint recovery, docs/algorithms.md "State sync")
 * ------------------------------------------------------------------------------------------- */

typedef enum wccl_sync_mode {
  WCCL_SYNC_POPULAR = 0,     /* offer this member's state to the election; receive what differs */
  WCCL_SYNC_SEND_ONLY = 1,   /* this member's state is the reference; it never receives (every
                                send-only member must hold the same state) */
  WCCL_SYNC_RECEIVE_ONLY = 2 /* take the elected state; never a candidate or a donor */
} wccl_sync_mode_t;

typedef enum wccl_device {
  WCCL_DEVICE_HOST = 0,
  WCCL_DEVICE_CUDA =
      1 /* CUDA device memory, hashed and sent by its GPU (UNSUPPORTED without CUDA) */
} wccl_device_t;

/* One named tensor of the shared state. */
typedef struct wccl_tensor {
  const char *name; /* unique within the call, 1 to 1024 bytes */
  void *data;       /* count elements of dtype, host or device memory (`device`); written only
                       when this member receives the tensor */
  size_t count;
  int32_t dtype;  /* wccl_dtype_t */
  int32_t device; /* wccl_device_t */
} wccl_tensor_t;

/* What a state sync cost, filled on success. */
typedef struct wccl_sync_stats {
  size_t size;               /* set by the caller to sizeof(wccl_sync_stats_t) */
  uint64_t bytes_sent;       /* tensor bytes this member sent as a donor */
  uint64_t bytes_received;   /* tensor bytes it received */
  uint32_t sources;          /* donors it received from at once */
  uint32_t tensors_received; /* tensors it received (those that differed from the elected state) */
  double time_us;            /* the whole call */
  uint64_t epoch;
  int32_t world_size;
  int32_t reserved;
} wccl_sync_stats_t;

/* Collective over the epoch's members: afterwards every member holds the same tensors and the same
 * *revision. Each member hashes its tensors; every member then elects the same state: that of the
 * send-only members if any, else the (revision, tensor hashes) held by the most popular members
 * (ties: the higher revision, then the lowest rank). A member receives only the tensors whose hash
 * differs from the elected one, striped in chunk_bytes pieces over every member that holds them
 * (receive-only members excepted), and its tensors are written only once every member has
 * finished. *revision is this member's revision on entry and the elected one on return.
 * Errors: INVALID_ARGUMENT for a bad argument (naming it); INVALID_USAGE, on every member alike
 * and before any tensor data moves, when the members' tensor lists differ (naming the first
 * difference: count, name, dtype or element count) or send-only members disagree or every member
 * is receive-only; INVALID_ARGUMENT when `device` disagrees with where `data` is; UNSUPPORTED for
 * a CUDA tensor without CUDA; the collectives' other errors. Device tensors must be ready (the
 * caller's streams synchronized) when the call is made. A member lost
 * during the call does not end it: the survivors re-form the epoch without it (admitting no
 * joiner; pending joiners wait for the next wccl_comm_update), and finish towards the state
 * elected before the loss from the remaining donors, so rank, size and epoch may change inside
 * the call. PEER_LOST (tensors and *revision as they were: update and call again) only if no
 * remaining member holds a tensor that some member lacks. stats may be NULL. */
WCCL_API wccl_result_t wccl_state_sync(wccl_comm_t *comm, const wccl_tensor_t *tensors, size_t n,
                                       uint64_t *revision, wccl_sync_mode_t mode,
                                       wccl_sync_stats_t *stats);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WCCL_WCCL_H_ */
