//go:build cgo && linux

// See shim.h: dlopen and dlsym, a worker's state, and the callbacks that write it (the shims
// that call UCX are shim_calls.c's).

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

// dlmsg copies the thread's dlerror text (or, with none, fallback) into msg, n bytes with the
// NUL. It copies in the C call that failed: glibc frees that text at the thread's next dl call,
// which any goroutine running on the thread afterwards may make (another library's too).
static void dlmsg(char *msg, size_t n, const char *fallback) {
	const char *e = dlerror();
	if (msg != NULL && n > 0) snprintf(msg, n, "%s", e ? e : fallback);
}

uintptr_t pm_dlopen(const char *path, char *msg, size_t n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) dlmsg(msg, n, "dlopen failed");
	return (uintptr_t)h;
}

uintptr_t pm_dlsym(uintptr_t h, const char *name, char *msg, size_t n) {
	dlerror();
	void *p = dlsym((void *)h, name);
	if (p == NULL) dlmsg(msg, n, "symbol is NULL");
	return (uintptr_t)p;
}

pm_state *pm_state_new(uint32_t nslots, size_t ev_limit, uintptr_t request_free) {
	pm_state *st = calloc(1, sizeof(*st));
	if (st == NULL) return NULL;
	st->slots = calloc(nslots, sizeof(pm_slot));
	st->cq = calloc((size_t)nslots + 1, sizeof(pm_cqe));
	if (st->slots == NULL || st->cq == NULL) {
		free(st->slots);
		free(st->cq);
		free(st);
		return NULL;
	}
	for (uint32_t i = 0; i < nslots; i++) {
		st->slots[i].st = st;
		st->slots[i].id = i;
	}
	st->nslots = nslots;
	st->ev_limit = ev_limit;
	st->request_free = request_free;
	return st;
}

void pm_event_free(pm_event *e) { free(e); }

void pm_state_free(pm_state *st) {
	pm_event *e = st->ev_head;
	while (e != NULL) {
		pm_event *next = e->next;
		free(e);
		e = next;
	}
	pm_spares_free(st);
	free(st->slots);
	free(st->cq);
	free(st);
}

void pm_cq_push(pm_state *st, uint32_t id, int status) {
	st->cq[st->tail].id = id;
	st->cq[st->tail].status = status;
	st->tail = (st->tail + 1) % (st->nslots + 1);
}

static void ev_push(pm_state *st, pm_event *e) {
	e->next = NULL;
	if (st->ev_tail != NULL) st->ev_tail->next = e;
	else st->ev_head = e;
	st->ev_tail = e;
	st->ev_bytes += sizeof(*e) + e->len;
	if (++st->ev_queued > st->ev_high) st->ev_high = st->ev_queued;
}

// pm_events moves up to cap events (PM_EVENTS_OUT at most) from the queue to st->out, and
// returns their number.
int pm_events(pm_state *st, int cap) {
	pm_event **out = st->out;
	int n = 0;
	if (cap > PM_EVENTS_OUT) cap = PM_EVENTS_OUT;
	while (n < cap && st->ev_head != NULL) {
		pm_event *e = st->ev_head;
		st->ev_head = e->next;
		if (st->ev_head == NULL) st->ev_tail = NULL;
		st->ev_bytes -= sizeof(*e) + (e->kind == PM_EV_DATA ? 0 : e->len);
		st->ev_queued--;
		out[n++] = e;
	}
	return n;
}

// The callbacks.

void pm_send_cb(void *request, pm_status_t status, void *user_data) {
	pm_slot *s = user_data;
	pm_cq_push(s->st, s->id, status);
	((void (*)(void *))s->st->request_free)(request);
}

// msg_oversize reports whether a message of len bytes at m is beyond the worker's limits
// (msg_max; msg_kind_max for one whose byte 4, the protocol's type, is msg_kind).
static int msg_oversize(const pm_state *st, const unsigned char *m, size_t len) {
	if (st->msg_max != 0 && len > st->msg_max) return 1;
	return st->msg_kind_max != 0 && len > st->msg_kind_max && len > 4 && m[4] == st->msg_kind;
}

pm_status_t pm_am_cb(void *arg, const void *header, size_t hlen, void *data, size_t len,
                            const pm_ucp_am_recv_param_t *param) {
	pm_state *st = arg;
	(void)header;
	if (hlen != 0 || (param->recv_attr & PM_UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		st->ev_dropped++; // a message this binding never sends (rendezvous, a header)
		return PM_UCS_OK;
	}
	// Here is the first sight of its length: UCX assembled an eager message of several
	// fragments in a buffer of its own before calling, and gives no earlier word of it.
	int over = msg_oversize(st, data, len);
	size_t copy = over && len > PM_MSG_PEEK ? PM_MSG_PEEK : len;
	int status = over ? PM_MSG_OVERSIZE : 0;
	if (st->ev_bytes + sizeof(pm_event) + copy > st->ev_limit) {
		// A flood: more than the queue holds came in one progress round (pm_progress stops
		// once it is half full). Dropped, it is reported by its header and length, so that its
		// receiver fails the connection it names rather than lose it unseen; past PM_DROP_SLACK
		// bytes of such reports, only counted.
		st->ev_dropped++;
		copy = len > PM_MSG_PEEK ? PM_MSG_PEEK : len;
		if (st->ev_bytes + sizeof(pm_event) + copy > st->ev_limit + PM_DROP_SLACK) return PM_UCS_OK;
		over = 0; // counted once
		status = PM_MSG_DROPPED;
	}
	pm_event *e = malloc(sizeof(pm_event) + copy);
	if (e == NULL) {
		if (status != PM_MSG_DROPPED) st->ev_dropped++; // (else counted above)
		return PM_UCS_OK;
	}
	e->kind = PM_EV_MSG;
	e->status = status;
	e->h = (param->recv_attr & PM_UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? (uintptr_t)param->reply_ep : 0;
	e->tag = status != 0 ? (uint64_t)len : 0;
	e->len = copy;
	if (over) st->ev_dropped++; // its bytes, dropped: the receiver fails its connection
	if (copy > 0) memcpy(e->data, data, copy);
	ev_push(st, e);
	return PM_UCS_OK;
}

// land_reply copies the bytes of an answer to a get straight to where the get wants them, when
// the header names an armed slot's operation and connection with status OK and the length is
// the slot's: one copy from UCX's receive buffer, as UCX's own emulated get makes. Anything
// else is left to the Go side, which checks it again and says why it refuses it. The header's
// fields are little-endian (remote/messages.go), as the hosts UCX runs on are.
static int land_reply(pm_state *st, const unsigned char *h, const void *data, size_t len) {
	static const int zero[] = {1, 2, 3, 4, 5, 6, 7, 44, 45, 46, 47};
	if (h[0] != 3 /* dataReply */) return 0;
	for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
		if (h[zero[i]] != 0) return 0; // a status, or a malformed header
	}
	uint64_t op, conn;
	memcpy(&conn, h + 8, 8);
	memcpy(&op, h + 16, 8);
	uint32_t i = (uint32_t)op;
	if (op == 0 || i >= st->nslots) return 0;
	pm_slot *s = &st->slots[i];
	if (s->reply_op != op || s->reply_conn != conn || s->reply_len != len) return 0;
	if (len > 0) memcpy((void *)s->reply_dst, data, len);
	s->reply_op = 0;
	st->landed++;
	return 1;
}

// ev_new returns a data event with room for copy bytes: a spare when copy fits data_max
// (which every data event's bytes do once LimitData has set it), else malloc's. NULL when
// out of memory.
static pm_event *ev_new(pm_state *st, size_t copy) {
	if (copy == 0 || st->data_max == 0 || copy > st->data_max) {
		pm_event *e = malloc(sizeof(pm_event) + copy);
		if (e != NULL) e->room = 0;
		return e;
	}
	if (st->spare_room != st->data_max) { // data_max changed: the spares are too small, or big
		pm_spares_free(st);
		st->spare_room = st->data_max;
	}
	pm_event *e = st->spares;
	if (e != NULL) {
		st->spares = e->next;
		st->nspares--;
		return e;
	}
	e = malloc(sizeof(pm_event) + st->data_max);
	if (e != NULL) e->room = st->data_max;
	return e;
}

// ev_free frees a data event, or keeps it as a spare (ev_new).
static void ev_free(pm_state *st, pm_event *e) {
	if (e->room == 0 || e->room != st->spare_room ||
	    (size_t)(st->nspares + 1) * (sizeof(pm_event) + e->room) > PM_SPARE_BYTES) {
		free(e);
		return;
	}
	e->next = st->spares;
	st->spares = e;
	st->nspares++;
}

// pm_spares_free frees the spare data events.
void pm_spares_free(pm_state *st) {
	while (st->spares != NULL) {
		pm_event *e = st->spares;
		st->spares = e->next;
		free(e);
	}
	st->nspares = 0;
}

// pm_data_cb receives a data message: its header is copied; its bytes land at once where an
// armed get wants them (land_reply), or are kept in UCX's buffer when UCX lets them be
// (UCP_AM_RECV_ATTR_FLAG_DATA: the callback returns UCS_INPROGRESS and pm_data_release gives
// them back), or copied. Data messages are never dropped: the peer waits for the answer to
// each. A hostile peer may send them faster than they are answered; their number queued is
// bounded by the caller, which calls pm_progress only once pm_events has left none queued,
// and pm_progress stops at ev_cap of them (remote/progress.go's round): the rest waits in
// UCX's transports.
pm_status_t pm_data_cb(void *arg, const void *header, size_t hlen, void *data, size_t len,
                              const pm_ucp_am_recv_param_t *param) {
	pm_state *st = arg;
	if (hlen != PM_HDR) {
		st->ev_dropped++; // not this binding's
		return PM_UCS_OK;
	}
	int rndv = (param->recv_attr & PM_UCP_AM_RECV_ATTR_FLAG_RNDV) != 0; // the bytes are still the sender's
	// Here is the first sight of an eager one's length, as for pm_am_cb's messages: one beyond
	// data_max is given back to UCX at once, its header reported with its length.
	int over = !rndv && st->data_max != 0 && len > st->data_max;
	int landed = !rndv && !over && land_reply(st, header, data, len);
	int kept = (param->recv_attr & PM_UCP_AM_RECV_ATTR_FLAG_DATA) != 0 && len > 0;
	int keep = !landed && !over && (rndv || kept);
	size_t copy = landed || keep || over ? 0 : len;
	pm_event *e = ev_new(st, copy);
	if (e == NULL) {
		st->ev_dropped++;
		return PM_UCS_OK;
	}
	e->kind = PM_EV_DATA;
	e->status = over ? PM_DATA_OVERSIZE : landed ? PM_DATA_LANDED : rndv ? PM_DATA_RNDV : PM_DATA_HERE;
	e->h = 0;
	e->tag = over ? (uint64_t)len : 0;
	e->len = landed || over ? 0 : len;
	e->desc = keep ? data : NULL;
	memcpy(e->hdr, header, PM_HDR);
	if (copy > 0) memcpy(e->data, data, copy);
	ev_push(st, e);
	st->ev_bytes -= e->len; // not bounded by ev_limit: by the caller's progress (above)
	return keep ? PM_UCS_INPROGRESS : PM_UCS_OK;
}

void pm_data_copy(pm_event *e, uintptr_t dst) {
	if (e->len > 0) memcpy((void *)dst, e->desc != NULL ? e->desc : (void *)e->data, e->len);
}

void pm_data_release(uintptr_t fn, uintptr_t worker, pm_state *st, pm_event *e) {
	if (e->desc != NULL) ((void (*)(void *, void *))fn)((void *)worker, e->desc);
	ev_free(st, e);
}

void pm_ep_err_cb(void *arg, pm_handle ep, pm_status_t status) {
	pm_state *st = arg;
	pm_event *e = malloc(sizeof(pm_event));
	if (e == NULL) {
		st->ev_dropped++;
		return;
	}
	e->kind = PM_EV_EPERR;
	e->status = status;
	e->h = (uintptr_t)ep;
	e->tag = 0;
	e->len = 0;
	ev_push(st, e);
}

void pm_conn_cb(pm_handle req, void *arg) {
	pm_listen_arg *la = arg;
	pm_event *e = malloc(sizeof(pm_event));
	if (e == NULL) {
		la->st->ev_dropped++;
		return;
	}
	e->kind = PM_EV_CONN;
	e->status = 0;
	e->h = (uintptr_t)req;
	e->tag = la->tag;
	e->len = 0;
	ev_push(la->st, e);
}

// pm_test_land runs land_reply once, on a state of nslots slots whose slot `slot` is armed (as
// ucx.Worker.ArmReply arms it) for operation op of connection conn and dlen bytes at dst, and
// reports whether the answer landed; *disarmed says whether the slot was disarmed. For the fuzz
// test of what a peer's answer can make the callback do (FuzzLandReply).
int pm_test_land(const unsigned char *hdr, const void *data, size_t len, uint32_t nslots, uint32_t slot,
                 uint64_t op, uint64_t conn, uintptr_t dst, size_t dlen, int *disarmed) {
	pm_state *st = pm_state_new(nslots, 0, 0);
	if (st == NULL) return -1;
	pm_slot *s = &st->slots[slot];
	s->reply_op = op;
	s->reply_conn = conn;
	s->reply_dst = dst;
	s->reply_len = dlen;
	int landed = land_reply(st, hdr, data, len);
	*disarmed = s->reply_op == 0 && op != 0;
	if ((uint64_t)landed != st->landed) landed = -1; // counted once per landing
	pm_state_free(st);
	return landed;
}

// floodArg is pm_test_flood's worker: each progress call (flood_progress) delivers per_call
// messages of len bytes to the state's message callback, as ucp_worker_progress would.
typedef struct {
	pm_state *st;
	const unsigned char *msg;
	size_t len;
	int per_call;
} flood_arg;

static unsigned flood_progress(void *worker) {
	flood_arg *a = worker;
	pm_ucp_am_recv_param_t param = {0};
	for (int i = 0; i < a->per_call; i++) pm_am_cb(a->st, NULL, 0, (void *)a->msg, a->len, &param);
	return (unsigned)a->per_call;
}

// pm_test_flood runs pm_progress once, up to rounds calls of a progress that each delivers
// per_call messages msg of len bytes, on a state whose queue holds limit bytes, and reports
// the messages queued whole, those dropped (ev_dropped) and, of those, the ones reported as
// dropped by an event of their own that carries their first PM_MSG_PEEK bytes and their length
// (-2: such an event with other bytes). For the tests of a flood (flood_test.go).
int pm_test_flood(const unsigned char *msg, size_t len, int per_call, int rounds, size_t limit,
                  uint64_t *queued, uint64_t *dropped, uint64_t *reported) {
	pm_state *st = pm_state_new(1, limit, 0);
	if (st == NULL) return -1;
	flood_arg a = {st, msg, len, per_call};
	unsigned progressed;
	pm_progress((uintptr_t)flood_progress, (uintptr_t)&a, st, rounds, UINT64_MAX, NULL, 0, &progressed);
	*queued = *reported = 0;
	*dropped = st->ev_dropped;
	int rc = 0;
	size_t peek = len < PM_MSG_PEEK ? len : PM_MSG_PEEK;
	for (pm_event *e = st->ev_head; e != NULL; e = e->next) {
		if (e->status == 0) {
			++*queued;
		} else if (e->len == peek && e->tag == len && memcmp(e->data, msg, peek) == 0) {
			++*reported;
		} else {
			rc = -2;
		}
	}
	pm_state_free(st);
	return rc;
}

// pm_test_spares checks the spare data events (ev_new, ev_free) through the callback and
// pm_data_release, on a state whose data messages are data_max bytes at most: n messages of
// len bytes come, each with bytes of its own, are taken and released; then n more. It returns
// 0, or the check that failed: 1 an event's bytes are not its message's, 2 the second n did
// not take the spares the first left, 3 more spares kept than PM_SPARE_BYTES allows, 4 a
// change of data_max kept spares of the old room, 5 pm_spares_free left some, -1 no memory.
// For the tests (spares_test.go).
int pm_test_spares(size_t data_max, size_t len, int n) {
	pm_state *st = pm_state_new(1, 0, 0);
	unsigned char *data = malloc(len);
	pm_event **evs = calloc((size_t)n, sizeof(*evs));
	if (st == NULL || data == NULL || evs == NULL) {
		if (st != NULL) pm_state_free(st);
		free(data);
		free(evs);
		return -1;
	}
	st->data_max = data_max;
	unsigned char hdr[PM_HDR] = {1}; // a put's: never an answer that lands
	pm_ucp_am_recv_param_t param = {0};
	size_t most = PM_SPARE_BYTES / (sizeof(pm_event) + data_max);
	int rc = 0;
	for (int round = 0; round < 2 && rc == 0; round++) {
		uint32_t before = st->nspares;
		for (int i = 0; i < n; i++) {
			memset(data, (unsigned char)(i + round), len);
			pm_data_cb(st, hdr, PM_HDR, data, len, &param);
		}
		int got = 0;
		for (int k; got < n && (k = pm_events(st, n - got)) > 0; got += k) {
			memcpy(&evs[got], st->out, (size_t)k * sizeof(*evs));
		}
		if (got != n) rc = -1;
		for (int i = 0; i < got && rc == 0; i++) {
			for (size_t j = 0; j < len; j++) {
				if (evs[i]->data[j] != (unsigned char)(i + round)) rc = 1;
			}
		}
		if (rc == 0 && round == 1 && st->nspares != (before > (uint32_t)n ? before - (uint32_t)n : 0)) rc = 2;
		for (int i = 0; i < got; i++) pm_data_release(0, 0, st, evs[i]);
		if (rc == 0 && (st->nspares > most || st->nspares != ((size_t)n < most ? (size_t)n : most))) rc = 3;
	}
	if (rc == 0) {
		st->data_max = data_max + 64;
		pm_data_cb(st, hdr, PM_HDR, data, len, &param);
		if (pm_events(st, 1) != 1) rc = -1;
		else {
			if (st->nspares != 0 || st->out[0]->room != data_max + 64) rc = 4;
			pm_data_release(0, 0, st, st->out[0]);
		}
	}
	if (rc == 0) {
		pm_spares_free(st);
		if (st->nspares != 0 || st->spares != NULL) rc = 5;
	}
	pm_state_free(st);
	free(data);
	free(evs);
	return rc;
}
