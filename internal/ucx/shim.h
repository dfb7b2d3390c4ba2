// The C half of the UCX binding: the state a worker's callbacks write (completions, messages,
// connection requests, endpoint failures) and the shims that call UCX's entry points, each
// given as a function pointer resolved by the Go half (lib_cgo.go). Every callback is plain C:
// UCX calls them inside ucp_worker_progress (or inside the call that completes an operation),
// and they only queue what they were told, so no completion costs a call into Go.

#ifndef PINMALLOC_UCX_SHIM_H
#define PINMALLOC_UCX_SHIM_H

#include <stdint.h>
#include <stddef.h>

#include "ucxtypes.h"

// A completion: the operation's slot and its status (0, or a negative ucs_status_t).
typedef struct {
	uint32_t id;
	int32_t status;
} pm_cqe;

enum {
	PM_EV_CONN = 1,  // a connection request on a listener: h the request, tag the listener's
	PM_EV_MSG = 2,   // an active message: h the reply endpoint (or NULL), data its bytes
	PM_EV_EPERR = 3, // an endpoint failed: h the endpoint, status why
	PM_EV_DATA = 4,  // a data message: hdr its header, its bytes in desc (UCX's, kept) or data
};

// A message event's status: PM_MSG_OVERSIZE says it was longer than the worker's limit
// (msg_max, msg_kind_max), PM_MSG_DROPPED that it came when the queue was full (ev_limit): its
// bytes were dropped, uncopied, save its first PM_MSG_PEEK (the protocol's header, which names
// the connection), and tag is its length. The events reporting drops take PM_DROP_SLACK bytes
// beyond ev_limit at most; a message dropped past them is only counted (ev_dropped).
enum { PM_MSG_OVERSIZE = 1, PM_MSG_DROPPED = 2 };
#define PM_MSG_PEEK 16
#define PM_DROP_SLACK (1 << 20)

// A data event's status: its bytes are in desc or data (0), still at the sender (a rendezvous:
// pm_data_recv fetches them), landed already at the armed slot's reply_dst (len 0), or
// dropped, uncopied, as longer than data_max (len 0, tag its length).
enum { PM_DATA_HERE = 0, PM_DATA_RNDV = 1, PM_DATA_LANDED = 2, PM_DATA_OVERSIZE = 3 };

// PM_HDR is the size of a data message's header (pm_op.hdr, pm_event.hdr).
#define PM_HDR 64

// PM_EVENTS_OUT is the most events one call of pm_events hands out (in pm_state.out).
#define PM_EVENTS_OUT 32

// PM_SPARE_BYTES bounds the bytes of a worker's spare data events (pm_state.spares).
#define PM_SPARE_BYTES (8u << 20)

typedef struct pm_event {
	struct pm_event *next;
	int32_t kind;
	int32_t status;
	uintptr_t h;
	uint64_t tag;
	size_t len;
	void *desc;  // a data message's bytes, kept in UCX's buffer until pm_data_release
	size_t room; // a spare's (pm_state.spares): the bytes data has room for; else 0
	unsigned char hdr[PM_HDR];
	unsigned char data[];
} pm_event;

struct pm_state;

// pm_packed is what a send by copy (pm_copy_dt_create) packs: len bytes at src; bytes counts
// what UCX packed (pm_state.packed).
typedef struct {
	const unsigned char *src;
	size_t len;
	uint64_t *bytes;
} pm_packed;

// A slot names one operation in flight; UCX's callback gets a pointer to it as user data.
// A get by message arms its slot (reply_op not 0): the answer that names that operation and
// connection, of reply_len bytes, is copied by pm_data_cb straight to reply_dst, once.
typedef struct {
	struct pm_state *st;
	uint32_t id;
	unsigned char hdr[PM_HDR]; // a data message's header, valid until its send completes
	pm_packed packed;          // a data message by copy: its bytes, valid until its send completes
	uint64_t reply_op, reply_conn;
	uintptr_t reply_dst;
	size_t reply_len;
} pm_slot;

// pm_state is a worker's: written by callbacks and read by pm_progress and pm_events, all under
// the Go worker's lock (UCX calls back only inside calls made under it).
typedef struct pm_state {
	uintptr_t request_free; // ucp_request_free
	pm_slot *slots;
	uint32_t nslots;
	pm_cqe *cq; // a ring of nslots+1 completions: each slot completes once per use
	uint32_t head, tail;
	pm_event *ev_head, *ev_tail;
	size_t ev_bytes, ev_limit;
	uint64_t ev_dropped;
	uint64_t ev_queued, ev_high; // events queued now (every kind), and the most ever queued at once
	uint64_t landed; // answers copied straight into place (land_reply)
	// The most bytes a message (PM_EV_MSG) may have, and the most one whose byte 4 is msg_kind
	// may have (0: no limit): a longer one is dropped uncopied (PM_MSG_OVERSIZE).
	size_t msg_max, msg_kind_max;
	unsigned char msg_kind;
	// The most bytes an eager data message (PM_EV_DATA) may have (0: no limit): a longer one is
	// neither kept nor copied (PM_DATA_OVERSIZE).
	size_t data_max;
	// The bytes UCX packed for sends by copy (copy_pack), for the tests.
	uint64_t packed;
	// Spare data events (ev_new, ev_free): the events whose bytes are copied, as over tcp,
	// whose receive buffer UCX lends the callback only, each with room for data_max bytes
	// (spare_room), nspares of them, at most PM_SPARE_BYTES in all. A malloc and free of each
	// had glibc give the memory back to the kernel, and fault it in again, at every batch: a
	// stream of puts over tcp ran at 500 MB/s, where 1.2 to 1.9 GB/s with glibc's trimming off.
	// pm_spares_free drops them when the worker goes idle.
	pm_event *spares;
	uint32_t nspares;
	size_t spare_room;
	// pm_events' out-parameter, here in C memory: an array of Go's passed to C is checked
	// pointer by pointer at every call (cgocheck), a tenth of a profile's samples in a stream
	// of puts over TCP.
	pm_event *out[PM_EVENTS_OUT];
} pm_state;

// An operation for pm_post. kind: PM_OP_PUT, PM_OP_GET, PM_OP_FLUSH (of ep), PM_OP_DATA (a
// data message: hdr, then length bytes at local, eagerly), PM_OP_DATA_ANY (the same, by
// whatever protocol UCX picks: rendezvous for a large one).
enum { PM_OP_PUT = 0, PM_OP_GET = 1, PM_OP_FLUSH = 2, PM_OP_DATA = 3, PM_OP_DATA_ANY = 4 };
typedef struct {
	uintptr_t ep, rkey, memh;
	uint64_t local, remote, length;
	uint32_t id;
	int32_t kind;
	int32_t status; // out: 0 done at once, 1 in flight (its completion comes), < 0 refused
	int32_t memtype;
	int32_t copy; // a data message by copy (pm_copy_dt), never by a zero-copy send
	unsigned char hdr[PM_HDR];
} pm_op;

// The callbacks (shim.c), which the shims (shim_calls.c) hand to UCX.
typedef struct {
	pm_state *st;
	uint64_t tag;
} pm_listen_arg;
void pm_cq_push(pm_state *st, uint32_t id, int status);
void pm_send_cb(void *request, pm_status_t status, void *user_data);
pm_status_t pm_am_cb(void *arg, const void *header, size_t hlen, void *data, size_t len,
                     const pm_ucp_am_recv_param_t *param);
pm_status_t pm_data_cb(void *arg, const void *header, size_t hlen, void *data, size_t len,
                       const pm_ucp_am_recv_param_t *param);
void pm_ep_err_cb(void *arg, pm_handle ep, pm_status_t status);
void pm_conn_cb(pm_handle req, void *arg);

pm_state *pm_state_new(uint32_t nslots, size_t ev_limit, uintptr_t request_free);
void pm_state_free(pm_state *st);
int pm_events(pm_state *st, int cap);
void pm_event_free(pm_event *e);

uintptr_t pm_dlopen(const char *path, char *msg, size_t n);
uintptr_t pm_dlsym(uintptr_t h, const char *name, char *msg, size_t n);

const char *pm_status_string(uintptr_t fn, int status);
void pm_get_version(uintptr_t fn, unsigned *major, unsigned *minor, unsigned *release);
int pm_config_read(uintptr_t fn, uintptr_t *config);
void pm_call_ptr(uintptr_t fn, uintptr_t a);
void pm_call_ptr2(uintptr_t fn, uintptr_t a, uintptr_t b);
int pm_status_ptr(uintptr_t fn, uintptr_t a);
int pm_status_ptr2(uintptr_t fn, uintptr_t a, uintptr_t b);
void pm_call_vptr(uintptr_t fn, void *a);
int pm_init(uintptr_t fn, unsigned major, unsigned minor, uint64_t features, const char *name,
            uintptr_t config, uintptr_t *ctx);
int pm_context_memtypes(uintptr_t fn, uintptr_t ctx, uint64_t *types);
int pm_worker_create(uintptr_t fn, uintptr_t ctx, uintptr_t *worker);
int pm_worker_address(uintptr_t fn, uintptr_t worker, void **addr, size_t *len);
void pm_worker_release_address(uintptr_t fn, uintptr_t worker, void *addr);
unsigned char *pm_event_data(pm_event *e);
void *pm_copy(const void *p, size_t n);
int pm_worker_efd(uintptr_t fn, uintptr_t worker, int *fd);
int pm_set_am_handler(uintptr_t fn, uintptr_t worker, unsigned id, pm_state *st);
int pm_set_data_handler(uintptr_t fn, uintptr_t worker, unsigned id, pm_state *st);
void pm_data_copy(pm_event *e, uintptr_t dst);
void pm_data_release(uintptr_t fn, uintptr_t worker, pm_state *st, pm_event *e);
void pm_spares_free(pm_state *st);
int pm_test_spares(size_t data_max, size_t len, int n);
int pm_data_recv(uintptr_t fn, uintptr_t worker, pm_event *e, uintptr_t dst, size_t len, uintptr_t memh,
                 int memtype, pm_state *st, uint32_t slot);
int pm_listener_create(uintptr_t fn, uintptr_t worker, const void *sa, int salen, pm_state *st,
                       uint64_t tag, uintptr_t *listener, void **arg);
int pm_listener_port(uintptr_t fn, uintptr_t listener, int *port);
int pm_conn_request_addr(uintptr_t fn, uintptr_t req, void *out, int outlen);
int pm_ep_create(uintptr_t fn, uintptr_t worker, pm_state *st, const void *addr, const void *sa,
                 int salen, uintptr_t conn_request, int peer_failure, uintptr_t *ep);
int pm_ep_close(uintptr_t fn, uintptr_t ep, int force, pm_state *st, uint32_t id);
int pm_mem_map(uintptr_t fn, uintptr_t ctx, uintptr_t addr, size_t len, int memtype, int nonblock,
               uintptr_t *memh);
int pm_mem_alloc(uintptr_t map, uintptr_t query, uintptr_t ctx, size_t len, uintptr_t *memh, uintptr_t *addr,
                 size_t *got);
int pm_rkey_ptr(uintptr_t fn, uintptr_t rkey, uint64_t raddr, uintptr_t *addr);
int pm_rkey_pack(uintptr_t fn, uintptr_t ctx, uintptr_t memh, void **buf, size_t *len);
int pm_rkey_unpack(uintptr_t fn, uintptr_t ep, const void *buf, uintptr_t *rkey);
int pm_post(uintptr_t put, uintptr_t get, uintptr_t flush, uintptr_t am, unsigned amid, uint64_t copy_dt,
            pm_state *st, pm_op *ops, int n);
int pm_am_send(uintptr_t fn, uintptr_t ep, unsigned id, const void *hdr, size_t hlen,
               const void *data, size_t len, int reply, uint64_t copy_dt, pm_state *st, uint32_t slot);
int pm_copy_dt_create(uintptr_t fn, uint64_t *dt);
int pm_progress(uintptr_t fn, uintptr_t worker, pm_state *st, int rounds, uint64_t ev_cap, pm_cqe *out,
                int cap, unsigned *progressed);

char *pm_ep_info(uintptr_t fn, uintptr_t ep, size_t *len);

int pm_test_land(const unsigned char *hdr, const void *data, size_t len, uint32_t nslots, uint32_t slot,
                 uint64_t op, uint64_t conn, uintptr_t dst, size_t dlen, int *disarmed);
int pm_test_flood(const unsigned char *msg, size_t len, int per_call, int rounds, size_t limit,
                  uint64_t *queued, uint64_t *dropped, uint64_t *reported);

#endif
