// The UCX types and constants the shims use, written out with the layout of UCX's headers
// (ucp/api/ucp.h, ucp_def.h, ucs/type/status.h of UCX 1.11 to 1.13 and later: UCX only appends
// fields to its parameter structs, and each struct says which fields it carries in its
// field_mask). No UCX header is included, so the build needs none; layout_test.go compiles
// these declarations beside the real headers, where they are installed, and asserts that every
// offset, size and constant agrees.

#ifndef PINMALLOC_UCXTYPES_H
#define PINMALLOC_UCXTYPES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

// ucs_status_t is a packed enum: one signed byte, as an argument and as a result.
typedef int8_t pm_status_t;

enum {
	PM_UCS_OK = 0,
	PM_UCS_INPROGRESS = 1,
	PM_UCS_ERR_NO_MESSAGE = -1,
	PM_UCS_ERR_BUSY = -15,
	PM_UCS_ERR_CANCELED = -16,
	PM_UCS_ERR_UNSUPPORTED = -22,
	PM_UCS_ERR_LAST = -100,
};

// ucs_status_ptr_t: NULL (done), an error code cast to a pointer, or a request.
#define PM_PTR_IS_ERR(p) (((uintptr_t)(p)) >= ((uintptr_t)PM_UCS_ERR_LAST))
#define PM_PTR_IS_PTR(p) (((uintptr_t)(p) - 1) < ((uintptr_t)PM_UCS_ERR_LAST - 1))
#define PM_PTR_STATUS(p) ((pm_status_t)(intptr_t)(p))

enum {
	// enum ucp_params_field
	PM_UCP_PARAM_FIELD_FEATURES = 1 << 0,
	PM_UCP_PARAM_FIELD_MT_WORKERS_SHARED = 1 << 5,
	PM_UCP_PARAM_FIELD_NAME = 1 << 8,
	// enum ucp_feature
	PM_UCP_FEATURE_RMA = 1 << 1,
	PM_UCP_FEATURE_WAKEUP = 1 << 4,
	PM_UCP_FEATURE_AM = 1 << 6,
	// enum ucp_worker_params_field
	PM_UCP_WORKER_PARAM_FIELD_THREAD_MODE = 1 << 0,
	// ucs_thread_mode_t
	PM_UCS_THREAD_MODE_SERIALIZED = 1,
	// enum ucp_context_attr_field
	PM_UCP_ATTR_FIELD_MEMORY_TYPES = 1 << 2,
	// enum ucp_ep_params_field
	PM_UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = 1 << 0,
	PM_UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1 << 1,
	PM_UCP_EP_PARAM_FIELD_ERR_HANDLER = 1 << 2,
	PM_UCP_EP_PARAM_FIELD_SOCK_ADDR = 1 << 4,
	PM_UCP_EP_PARAM_FIELD_FLAGS = 1 << 5,
	PM_UCP_EP_PARAM_FIELD_CONN_REQUEST = 1 << 6,
	// enum ucp_ep_params_flags_field
	PM_UCP_EP_PARAMS_FLAGS_CLIENT_SERVER = 1 << 0,
	// ucp_err_handling_mode_t
	PM_UCP_ERR_HANDLING_MODE_PEER = 1,
	// ucp_ep_close_flags_t
	PM_UCP_EP_CLOSE_FLAG_FORCE = 1 << 0,
	// enum ucp_listener_params_field
	PM_UCP_LISTENER_PARAM_FIELD_SOCK_ADDR = 1 << 0,
	PM_UCP_LISTENER_PARAM_FIELD_CONN_HANDLER = 1 << 2,
	// enum ucp_listener_attr_field
	PM_UCP_LISTENER_ATTR_FIELD_SOCKADDR = 1 << 0,
	// enum ucp_mem_map_params_field
	PM_UCP_MEM_MAP_PARAM_FIELD_ADDRESS = 1 << 0,
	PM_UCP_MEM_MAP_PARAM_FIELD_LENGTH = 1 << 1,
	PM_UCP_MEM_MAP_PARAM_FIELD_FLAGS = 1 << 2,
	PM_UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE = 1 << 4,
	// ucp_mem_map flags
	PM_UCP_MEM_MAP_NONBLOCK = 1 << 0,
	PM_UCP_MEM_MAP_ALLOCATE = 1 << 1,
	// enum ucp_mem_attr_field
	PM_UCP_MEM_ATTR_FIELD_ADDRESS = 1 << 0,
	PM_UCP_MEM_ATTR_FIELD_LENGTH = 1 << 1,
	// ucp_op_attr_t
	PM_UCP_OP_ATTR_FIELD_CALLBACK = 1 << 1,
	PM_UCP_OP_ATTR_FIELD_USER_DATA = 1 << 2,
	PM_UCP_OP_ATTR_FIELD_DATATYPE = 1 << 3,
	PM_UCP_OP_ATTR_FIELD_FLAGS = 1 << 4,
	PM_UCP_OP_ATTR_FIELD_MEMORY_TYPE = 1 << 6,
	PM_UCP_OP_ATTR_FIELD_MEMH = 1 << 8,
	// enum ucp_send_am_flags
	PM_UCP_AM_SEND_FLAG_REPLY = 1 << 0,
	PM_UCP_AM_SEND_FLAG_EAGER = 1 << 1,
	// ucp_am_recv_attr_t
	PM_UCP_AM_RECV_ATTR_FIELD_REPLY_EP = 1 << 0,
	PM_UCP_AM_RECV_ATTR_FLAG_DATA = 1 << 16,
	PM_UCP_AM_RECV_ATTR_FLAG_RNDV = 1 << 17,
	// enum ucp_am_handler_param_field
	PM_UCP_AM_HANDLER_PARAM_FIELD_ID = 1 << 0,
	PM_UCP_AM_HANDLER_PARAM_FIELD_FLAGS = 1 << 1,
	PM_UCP_AM_HANDLER_PARAM_FIELD_CB = 1 << 2,
	PM_UCP_AM_HANDLER_PARAM_FIELD_ARG = 1 << 3,
	// enum ucp_am_cb_flags
	PM_UCP_AM_FLAG_WHOLE_MSG = 1 << 0,
	// enum ucp_conn_request_attr_field
	PM_UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR = 1 << 0,
};

typedef void *pm_handle; // ucp_context_h, ucp_worker_h, ucp_ep_h, ucp_mem_h, ucp_rkey_h, ...

typedef struct { // ucp_params_t
	uint64_t field_mask;
	uint64_t features;
	size_t request_size;
	void (*request_init)(void *);
	void (*request_cleanup)(void *);
	uint64_t tag_sender_mask;
	int mt_workers_shared;
	size_t estimated_num_eps;
	size_t estimated_num_ppn;
	const char *name;
} pm_ucp_params_t;

typedef struct { // ucp_context_attr_t
	uint64_t field_mask;
	size_t request_size;
	int thread_mode;
	uint64_t memory_types;
	char name[32];
} pm_ucp_context_attr_t;

typedef struct { // ucs_cpu_set_t
	unsigned long bits[1024 / (8 * sizeof(unsigned long))];
} pm_ucs_cpu_set_t;

typedef struct { // ucp_worker_params_t
	uint64_t field_mask;
	int thread_mode;
	pm_ucs_cpu_set_t cpu_mask;
	unsigned events;
	void *user_data;
	int event_fd;
	uint64_t flags;
	const char *name;
	size_t am_alignment;
	uint64_t client_id;
} pm_ucp_worker_params_t;

typedef struct { // ucs_sock_addr_t
	const struct sockaddr *addr;
	socklen_t addrlen;
} pm_ucs_sock_addr_t;

typedef struct { // ucp_err_handler_t
	void (*cb)(void *arg, pm_handle ep, pm_status_t status);
	void *arg;
} pm_ucp_err_handler_t;

typedef struct { // ucp_ep_params_t
	uint64_t field_mask;
	const void *address;
	int err_mode;
	pm_ucp_err_handler_t err_handler;
	void *user_data;
	unsigned flags;
	pm_ucs_sock_addr_t sockaddr;
	pm_handle conn_request;
	const char *name;
	pm_ucs_sock_addr_t local_sockaddr;
} pm_ucp_ep_params_t;

typedef struct { // ucp_listener_conn_handler_t
	void (*cb)(pm_handle conn_request, void *arg);
	void *arg;
} pm_ucp_listener_conn_handler_t;

typedef struct { // ucp_listener_params_t
	uint64_t field_mask;
	pm_ucs_sock_addr_t sockaddr;
	struct {
		void (*cb)(pm_handle ep, void *arg);
		void *arg;
	} accept_handler;
	pm_ucp_listener_conn_handler_t conn_handler;
} pm_ucp_listener_params_t;

typedef struct { // ucp_listener_attr_t
	uint64_t field_mask;
	struct sockaddr_storage sockaddr;
} pm_ucp_listener_attr_t;

typedef struct { // ucp_conn_request_attr_t
	uint64_t field_mask;
	struct sockaddr_storage client_address;
	uint64_t client_id;
} pm_ucp_conn_request_attr_t;

typedef struct { // ucp_mem_map_params_t
	uint64_t field_mask;
	void *address;
	size_t length;
	unsigned flags;
	unsigned prot;
	int memory_type;
} pm_ucp_mem_map_params_t;

typedef struct { // ucp_mem_attr_t
	uint64_t field_mask;
	void *address;
	size_t length;
	int mem_type;
} pm_ucp_mem_attr_t;

typedef struct { // ucp_request_param_t
	uint32_t op_attr_mask;
	uint32_t flags;
	void *request;
	union {
		void (*send)(void *request, pm_status_t status, void *user_data);
		void *other;
	} cb;
	uint64_t datatype;
	void *user_data;
	void *reply_buffer;
	int memory_type;
	union {
		size_t *length;
		void *tag_info;
	} recv_info;
	pm_handle memh;
} pm_ucp_request_param_t;

typedef struct { // ucp_generic_dt_ops_t
	void *(*start_pack)(void *context, const void *buffer, size_t count);
	void *(*start_unpack)(void *context, void *buffer, size_t count);
	size_t (*packed_size)(void *state);
	size_t (*pack)(void *state, size_t offset, void *dest, size_t max_length);
	pm_status_t (*unpack)(void *state, size_t offset, const void *src, size_t length);
	void (*finish)(void *state);
} pm_ucp_generic_dt_ops_t;

typedef struct { // ucp_am_recv_param_t
	uint64_t recv_attr;
	pm_handle reply_ep;
} pm_ucp_am_recv_param_t;

typedef pm_status_t (*pm_am_recv_cb_t)(void *arg, const void *header, size_t header_length,
                                       void *data, size_t length, const pm_ucp_am_recv_param_t *param);

typedef struct { // ucp_am_handler_param_t
	uint64_t field_mask;
	unsigned id;
	uint32_t flags;
	pm_am_recv_cb_t cb;
	void *arg;
} pm_ucp_am_handler_param_t;

#endif
