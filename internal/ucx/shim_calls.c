//go:build cgo && linux

// The shims of shim.h: each builds UCX's parameter struct (ucxtypes.h) from scalars and calls
// the entry point it is given; statuses come back as ints (a ucs_status_t, or
// PM_UCS_INPROGRESS for an operation whose completion will be queued). The callbacks and the
// state they write are shim.c's.

#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static int ptr_status(void *r);

static void pm_recv_cb(void *request, pm_status_t status, size_t length, void *user_data) {
	pm_slot *s = user_data;
	(void)length;
	pm_cq_push(s->st, s->id, status);
	((void (*)(void *))s->st->request_free)(request);
}

int pm_data_recv(uintptr_t fn, uintptr_t worker, pm_event *e, uintptr_t dst, size_t len, uintptr_t memh,
                 int memtype, pm_state *st, uint32_t slot) {
	pm_ucp_request_param_t p;
	memset(&p, 0, sizeof(p));
	p.op_attr_mask = PM_UCP_OP_ATTR_FIELD_CALLBACK | PM_UCP_OP_ATTR_FIELD_USER_DATA | PM_UCP_OP_ATTR_FIELD_MEMORY_TYPE;
	p.cb.other = (void *)pm_recv_cb;
	p.user_data = &st->slots[slot];
	p.memory_type = memtype;
	if (memh != 0) {
		p.op_attr_mask |= PM_UCP_OP_ATTR_FIELD_MEMH;
		p.memh = (pm_handle)memh;
	}
	void *r = ((void *(*)(void *, void *, void *, size_t, const pm_ucp_request_param_t *))fn)(
	    (void *)worker, e->desc, (void *)dst, len, &p);
	free(e); // the descriptor is UCX's again, whatever the outcome
	return ptr_status(r);
}

const char *pm_status_string(uintptr_t fn, int status) {
	return ((const char *(*)(pm_status_t))fn)((pm_status_t)status);
}

void pm_get_version(uintptr_t fn, unsigned *major, unsigned *minor, unsigned *release) {
	((void (*)(unsigned *, unsigned *, unsigned *))fn)(major, minor, release);
}

int pm_config_read(uintptr_t fn, uintptr_t *config) {
	void *c = NULL;
	pm_status_t s = ((pm_status_t(*)(const char *, const char *, void **))fn)(NULL, NULL, &c);
	*config = (uintptr_t)c;
	return s;
}

void pm_call_ptr(uintptr_t fn, uintptr_t a) { ((void (*)(void *))fn)((void *)a); }

void pm_call_ptr2(uintptr_t fn, uintptr_t a, uintptr_t b) {
	((void (*)(void *, void *))fn)((void *)a, (void *)b);
}

int pm_status_ptr(uintptr_t fn, uintptr_t a) { return ((pm_status_t(*)(void *))fn)((void *)a); }

int pm_status_ptr2(uintptr_t fn, uintptr_t a, uintptr_t b) {
	return ((pm_status_t(*)(void *, void *))fn)((void *)a, (void *)b);
}

void pm_call_vptr(uintptr_t fn, void *a) { ((void (*)(void *))fn)(a); }

int pm_init(uintptr_t fn, unsigned major, unsigned minor, uint64_t features, const char *name,
            uintptr_t config, uintptr_t *ctx) {
	pm_ucp_params_t p;
	memset(&p, 0, sizeof(p));
	p.field_mask = PM_UCP_PARAM_FIELD_FEATURES | PM_UCP_PARAM_FIELD_MT_WORKERS_SHARED | PM_UCP_PARAM_FIELD_NAME;
	p.features = features;
	p.mt_workers_shared = 1;
	p.name = name;
	void *c = NULL;
	pm_status_t s = ((pm_status_t(*)(unsigned, unsigned, const pm_ucp_params_t *, void *, void **))fn)(
	    major, minor, &p, (void *)config, &c);
	*ctx = (uintptr_t)c;
	return s;
}

int pm_context_memtypes(uintptr_t fn, uintptr_t ctx, uint64_t *types) {
	pm_ucp_context_attr_t a;
	memset(&a, 0, sizeof(a));
	a.field_mask = PM_UCP_ATTR_FIELD_MEMORY_TYPES;
	pm_status_t s = ((pm_status_t(*)(void *, pm_ucp_context_attr_t *))fn)((void *)ctx, &a);
	*types = a.memory_types;
	return s;
}

int pm_worker_create(uintptr_t fn, uintptr_t ctx, uintptr_t *worker) {
	pm_ucp_worker_params_t p;
	memset(&p, 0, sizeof(p));
	p.field_mask = PM_UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	p.thread_mode = PM_UCS_THREAD_MODE_SERIALIZED;
	void *w = NULL;
	pm_status_t s = ((pm_status_t(*)(void *, const pm_ucp_worker_params_t *, void **))fn)((void *)ctx, &p, &w);
	*worker = (uintptr_t)w;
	return s;
}

int pm_worker_address(uintptr_t fn, uintptr_t worker, void **addr, size_t *len) {
	*addr = NULL;
	return ((pm_status_t(*)(void *, void **, size_t *))fn)((void *)worker, addr, len);
}

void pm_worker_release_address(uintptr_t fn, uintptr_t worker, void *addr) {
	((void (*)(void *, void *))fn)((void *)worker, addr);
}

unsigned char *pm_event_data(pm_event *e) { return e->data; }

void *pm_copy(const void *p, size_t n) {
	void *c = malloc(n > 0 ? n : 1);
	if (c != NULL && n > 0) memcpy(c, p, n);
	return c;
}

int pm_worker_efd(uintptr_t fn, uintptr_t worker, int *fd) {
	return ((pm_status_t(*)(void *, int *))fn)((void *)worker, fd);
}

static int set_handler(uintptr_t fn, uintptr_t worker, unsigned id, pm_am_recv_cb_t cb, pm_state *st) {
	pm_ucp_am_handler_param_t p;
	memset(&p, 0, sizeof(p));
	p.field_mask = PM_UCP_AM_HANDLER_PARAM_FIELD_ID | PM_UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
	               PM_UCP_AM_HANDLER_PARAM_FIELD_CB | PM_UCP_AM_HANDLER_PARAM_FIELD_ARG;
	p.id = id;
	p.flags = PM_UCP_AM_FLAG_WHOLE_MSG;
	p.cb = cb;
	p.arg = st;
	return ((pm_status_t(*)(void *, const pm_ucp_am_handler_param_t *))fn)((void *)worker, &p);
}

int pm_set_am_handler(uintptr_t fn, uintptr_t worker, unsigned id, pm_state *st) {
	return set_handler(fn, worker, id, pm_am_cb, st);
}

int pm_set_data_handler(uintptr_t fn, uintptr_t worker, unsigned id, pm_state *st) {
	return set_handler(fn, worker, id, pm_data_cb, st);
}

int pm_listener_create(uintptr_t fn, uintptr_t worker, const void *sa, int salen, pm_state *st,
                       uint64_t tag, uintptr_t *listener, void **arg) {
	pm_listen_arg *la = malloc(sizeof(*la));
	if (la == NULL) return -4; // UCS_ERR_NO_MEMORY
	la->st = st;
	la->tag = tag;
	pm_ucp_listener_params_t p;
	memset(&p, 0, sizeof(p));
	p.field_mask = PM_UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | PM_UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
	p.sockaddr.addr = sa;
	p.sockaddr.addrlen = (socklen_t)salen;
	p.conn_handler.cb = pm_conn_cb;
	p.conn_handler.arg = la;
	void *l = NULL;
	pm_status_t s = ((pm_status_t(*)(void *, const pm_ucp_listener_params_t *, void **))fn)((void *)worker, &p, &l);
	if (s != PM_UCS_OK) {
		free(la);
		la = NULL;
	}
	*listener = (uintptr_t)l;
	*arg = la;
	return s;
}

int pm_listener_port(uintptr_t fn, uintptr_t listener, int *port) {
	pm_ucp_listener_attr_t a;
	memset(&a, 0, sizeof(a));
	a.field_mask = PM_UCP_LISTENER_ATTR_FIELD_SOCKADDR;
	pm_status_t s = ((pm_status_t(*)(void *, pm_ucp_listener_attr_t *))fn)((void *)listener, &a);
	const unsigned char *p = (const unsigned char *)&a.sockaddr;
	// sin_port and sin6_port sit at the same offset, in network order.
	*port = (int)p[2] << 8 | p[3];
	return s;
}

int pm_conn_request_addr(uintptr_t fn, uintptr_t req, void *out, int outlen) {
	pm_ucp_conn_request_attr_t a;
	memset(&a, 0, sizeof(a));
	a.field_mask = PM_UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
	pm_status_t s = ((pm_status_t(*)(void *, pm_ucp_conn_request_attr_t *))fn)((void *)req, &a);
	size_t n = sizeof(a.client_address) < (size_t)outlen ? sizeof(a.client_address) : (size_t)outlen;
	memcpy(out, &a.client_address, n);
	return s;
}

int pm_ep_create(uintptr_t fn, uintptr_t worker, pm_state *st, const void *addr, const void *sa,
                 int salen, uintptr_t conn_request, int peer_failure, uintptr_t *ep) {
	pm_ucp_ep_params_t p;
	memset(&p, 0, sizeof(p));
	if (peer_failure) {
		p.field_mask = PM_UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | PM_UCP_EP_PARAM_FIELD_ERR_HANDLER;
		p.err_mode = PM_UCP_ERR_HANDLING_MODE_PEER;
		p.err_handler.cb = pm_ep_err_cb;
		p.err_handler.arg = st;
	}
	if (addr != NULL) {
		p.field_mask |= PM_UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
		p.address = addr;
	} else if (sa != NULL) {
		p.field_mask |= PM_UCP_EP_PARAM_FIELD_SOCK_ADDR | PM_UCP_EP_PARAM_FIELD_FLAGS;
		p.flags = PM_UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
		p.sockaddr.addr = sa;
		p.sockaddr.addrlen = (socklen_t)salen;
	} else {
		p.field_mask |= PM_UCP_EP_PARAM_FIELD_CONN_REQUEST;
		p.conn_request = (pm_handle)conn_request;
	}
	void *e = NULL;
	pm_status_t s = ((pm_status_t(*)(void *, const pm_ucp_ep_params_t *, void **))fn)((void *)worker, &p, &e);
	*ep = (uintptr_t)e;
	return s;
}

// status of a ucs_status_ptr_t: done (0), an error, or in flight (PM_UCS_INPROGRESS).
static int ptr_status(void *r) {
	if (r == NULL) return PM_UCS_OK;
	if (PM_PTR_IS_ERR(r)) return PM_PTR_STATUS(r);
	return PM_UCS_INPROGRESS;
}

static void send_param(pm_ucp_request_param_t *p, pm_state *st, uint32_t id) {
	memset(p, 0, sizeof(*p));
	p->op_attr_mask = PM_UCP_OP_ATTR_FIELD_CALLBACK | PM_UCP_OP_ATTR_FIELD_USER_DATA;
	p->cb.send = pm_send_cb;
	p->user_data = &st->slots[id];
}

int pm_ep_close(uintptr_t fn, uintptr_t ep, int force, pm_state *st, uint32_t id) {
	pm_ucp_request_param_t p;
	send_param(&p, st, id);
	if (force) {
		p.op_attr_mask |= PM_UCP_OP_ATTR_FIELD_FLAGS;
		p.flags = PM_UCP_EP_CLOSE_FLAG_FORCE;
	}
	return ptr_status(((void *(*)(void *, const pm_ucp_request_param_t *))fn)((void *)ep, &p));
}

int pm_mem_map(uintptr_t fn, uintptr_t ctx, uintptr_t addr, size_t len, int memtype, int nonblock,
               uintptr_t *memh) {
	pm_ucp_mem_map_params_t p;
	memset(&p, 0, sizeof(p));
	p.field_mask = PM_UCP_MEM_MAP_PARAM_FIELD_ADDRESS | PM_UCP_MEM_MAP_PARAM_FIELD_LENGTH |
	               PM_UCP_MEM_MAP_PARAM_FIELD_FLAGS | PM_UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
	p.address = (void *)addr;
	p.length = len;
	p.flags = nonblock ? PM_UCP_MEM_MAP_NONBLOCK : 0;
	p.memory_type = memtype;
	void *m = NULL;
	pm_status_t s = ((pm_status_t(*)(void *, const pm_ucp_mem_map_params_t *, void **))fn)((void *)ctx, &p, &m);
	*memh = (uintptr_t)m;
	return s;
}

int pm_mem_alloc(uintptr_t map, uintptr_t query, uintptr_t ctx, size_t len, uintptr_t *memh, uintptr_t *addr,
                 size_t *got) {
	pm_ucp_mem_map_params_t p;
	memset(&p, 0, sizeof(p));
	p.field_mask = PM_UCP_MEM_MAP_PARAM_FIELD_LENGTH | PM_UCP_MEM_MAP_PARAM_FIELD_FLAGS;
	p.length = len;
	p.flags = PM_UCP_MEM_MAP_ALLOCATE;
	void *m = NULL;
	pm_status_t s = ((pm_status_t(*)(void *, const pm_ucp_mem_map_params_t *, void **))map)((void *)ctx, &p, &m);
	*memh = (uintptr_t)m;
	*addr = 0;
	*got = 0;
	if (s != PM_UCS_OK) {
		return s;
	}
	pm_ucp_mem_attr_t a;
	memset(&a, 0, sizeof(a));
	a.field_mask = PM_UCP_MEM_ATTR_FIELD_ADDRESS | PM_UCP_MEM_ATTR_FIELD_LENGTH;
	s = ((pm_status_t(*)(void *, pm_ucp_mem_attr_t *))query)(m, &a);
	*addr = (uintptr_t)a.address;
	*got = a.length;
	return s;
}

int pm_rkey_ptr(uintptr_t fn, uintptr_t rkey, uint64_t raddr, uintptr_t *addr) {
	void *p = NULL;
	pm_status_t s = ((pm_status_t(*)(void *, uint64_t, void **))fn)((void *)rkey, raddr, &p);
	*addr = (uintptr_t)p;
	return s;
}

int pm_rkey_pack(uintptr_t fn, uintptr_t ctx, uintptr_t memh, void **buf, size_t *len) {
	*buf = NULL;
	return ((pm_status_t(*)(void *, void *, void **, size_t *))fn)((void *)ctx, (void *)memh, buf, len);
}

int pm_rkey_unpack(uintptr_t fn, uintptr_t ep, const void *buf, uintptr_t *rkey) {
	void *r = NULL;
	pm_status_t s = ((pm_status_t(*)(void *, const void *, void **))fn)((void *)ep, buf, &r);
	*rkey = (uintptr_t)r;
	return s;
}

// The datatype of a send by copy (pm_copy_dt_create): UCX packs the bytes into its transport's
// send buffers through pack, so it never sends them by zero copy. UCX's tcp transport calls a
// zero-copy send's completion twice when its socket fails under a part still to go, and a UCX
// built with assertions aborts the process there (ucx.go, "Sends by copy"), where the packed bytes are counted too.
static void *copy_start_pack(void *context, const void *buffer, size_t count) {
	(void)context;
	(void)count;
	return (void *)buffer; // the slot's pm_packed
}

static void *copy_start_unpack(void *context, void *buffer, size_t count) {
	(void)context;
	(void)buffer;
	(void)count;
	return NULL; // never received with: data messages land by pm_data_recv
}

static size_t copy_packed_size(void *state) { return ((pm_packed *)state)->len; }

static size_t copy_pack(void *state, size_t offset, void *dest, size_t max) {
	pm_packed *p = state;
	size_t n = offset < p->len ? p->len - offset : 0;
	if (n > max) n = max;
	memcpy(dest, p->src + offset, n);
	*p->bytes += n;
	return n;
}

static pm_status_t copy_unpack(void *state, size_t offset, const void *src, size_t length) {
	(void)state;
	(void)offset;
	(void)src;
	(void)length;
	return PM_UCS_ERR_UNSUPPORTED;
}

static void copy_finish(void *state) { (void)state; }

static const pm_ucp_generic_dt_ops_t copy_ops = {copy_start_pack, copy_start_unpack, copy_packed_size,
                                                 copy_pack,       copy_unpack,       copy_finish};

int pm_copy_dt_create(uintptr_t fn, uint64_t *dt) {
	return ((pm_status_t(*)(const pm_ucp_generic_dt_ops_t *, void *, uint64_t *))fn)(&copy_ops, NULL, dt);
}

// by_copy sets p to send len bytes at data by copy, from slot's pm_packed: the buffer UCX is
// given (count 1) is that descriptor, which the slot keeps until the send completes.
static const void *by_copy(pm_ucp_request_param_t *p, uint64_t dt, pm_slot *slot, const void *data, size_t len) {
	slot->packed.src = data;
	slot->packed.len = len;
	slot->packed.bytes = &slot->st->packed;
	p->op_attr_mask |= PM_UCP_OP_ATTR_FIELD_DATATYPE;
	p->datatype = dt;
	return &slot->packed;
}

int pm_post(uintptr_t put, uintptr_t get, uintptr_t flush, uintptr_t am, unsigned amid, uint64_t copy_dt,
            pm_state *st, pm_op *ops, int n) {
	typedef void *(*rma_fn)(void *, void *, size_t, uint64_t, void *, const pm_ucp_request_param_t *);
	typedef void *(*flush_fn)(void *, const pm_ucp_request_param_t *);
	typedef void *(*am_fn)(void *, unsigned, const void *, size_t, const void *, size_t, const pm_ucp_request_param_t *);
	int inflight = 0;
	for (int i = 0; i < n; i++) {
		pm_op *o = &ops[i];
		pm_ucp_request_param_t p;
		send_param(&p, st, o->id);
		void *r;
		if (o->kind == PM_OP_FLUSH) {
			r = ((flush_fn)flush)((void *)o->ep, &p);
		} else if (o->kind == PM_OP_DATA || o->kind == PM_OP_DATA_ANY) {
			unsigned char *hdr = st->slots[o->id].hdr;
			memcpy(hdr, o->hdr, PM_HDR);
			p.op_attr_mask |= PM_UCP_OP_ATTR_FIELD_FLAGS | PM_UCP_OP_ATTR_FIELD_MEMORY_TYPE;
			p.flags = o->kind == PM_OP_DATA ? PM_UCP_AM_SEND_FLAG_EAGER : 0;
			p.memory_type = o->memtype;
			const void *buf = (const void *)o->local;
			size_t count = o->length;
			if (o->copy && o->length > 0) {
				buf = by_copy(&p, copy_dt, &st->slots[o->id], buf, count);
				count = 1;
			} else if (o->memh != 0) {
				p.op_attr_mask |= PM_UCP_OP_ATTR_FIELD_MEMH;
				p.memh = (pm_handle)o->memh;
			}
			r = ((am_fn)am)((void *)o->ep, amid, hdr, PM_HDR, buf, count, &p);
		} else {
			p.op_attr_mask |= PM_UCP_OP_ATTR_FIELD_MEMORY_TYPE;
			p.memory_type = o->memtype;
			if (o->memh != 0) {
				p.op_attr_mask |= PM_UCP_OP_ATTR_FIELD_MEMH;
				p.memh = (pm_handle)o->memh;
			}
			rma_fn f = (rma_fn)(o->kind == PM_OP_PUT ? put : get);
			r = f((void *)o->ep, (void *)o->local, o->length, o->remote, (void *)o->rkey, &p);
		}
		o->status = ptr_status(r);
		inflight += o->status == PM_UCS_INPROGRESS;
	}
	return inflight;
}

int pm_am_send(uintptr_t fn, uintptr_t ep, unsigned id, const void *hdr, size_t hlen,
               const void *data, size_t len, int reply, uint64_t copy_dt, pm_state *st, uint32_t slot) {
	pm_ucp_request_param_t p;
	send_param(&p, st, slot);
	p.op_attr_mask |= PM_UCP_OP_ATTR_FIELD_FLAGS;
	p.flags = PM_UCP_AM_SEND_FLAG_EAGER | (reply ? PM_UCP_AM_SEND_FLAG_REPLY : 0);
	if (copy_dt != 0 && len > 0) {
		data = by_copy(&p, copy_dt, &st->slots[slot], data, len);
		len = 1;
	}
	typedef void *(*am_fn)(void *, unsigned, const void *, size_t, const void *, size_t, const pm_ucp_request_param_t *);
	return ptr_status(((am_fn)fn)((void *)ep, id, hdr, hlen, data, len, &p));
}

int pm_progress(uintptr_t fn, uintptr_t worker, pm_state *st, int rounds, uint64_t ev_cap, pm_cqe *out,
                int cap, unsigned *progressed) {
	unsigned total = 0;
	for (int i = 0; i < rounds; i++) {
		unsigned k = ((unsigned (*)(void *))fn)((void *)worker);
		total += k;
		if (k == 0 || st->ev_queued >= ev_cap) break; // idle, or events enough for the caller
		if (st->ev_limit != 0 && st->ev_bytes >= st->ev_limit / 2) break; // messages: half the queue (pm_am_cb)
	}
	*progressed = total;
	int n = 0;
	while (n < cap && st->head != st->tail) {
		out[n++] = st->cq[st->head];
		st->head = (st->head + 1) % (st->nslots + 1);
	}
	return n;
}

char *pm_ep_info(uintptr_t fn, uintptr_t ep, size_t *len) {
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (f == NULL) return NULL;
	((void (*)(void *, FILE *))fn)((void *)ep, f);
	fclose(f);
	return buf;
}
