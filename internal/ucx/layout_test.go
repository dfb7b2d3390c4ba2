package ucx

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The structs and constants of ucxtypes.h, written out by hand so that the build needs no UCX
// header, checked against UCX's own headers where they are installed (Debian's libucx-dev):
// every field's offset and size, every struct's size, every constant, asserted by the C
// compiler.

// layoutStructs maps each of ucxtypes.h's structs to UCX's, with the fields both have.
var layoutStructs = []struct {
	ours, theirs string
	fields       []string
}{
	{"pm_ucp_params_t", "ucp_params_t", []string{"field_mask", "features", "request_size", "request_init", "request_cleanup", "tag_sender_mask", "mt_workers_shared", "estimated_num_eps", "estimated_num_ppn", "name"}},
	{"pm_ucp_context_attr_t", "ucp_context_attr_t", []string{"field_mask", "request_size", "thread_mode", "memory_types", "name"}},
	{"pm_ucs_cpu_set_t", "ucs_cpu_set_t", nil},
	{"pm_ucp_worker_params_t", "ucp_worker_params_t", []string{"field_mask", "thread_mode", "cpu_mask", "events", "user_data", "event_fd", "flags", "name", "am_alignment", "client_id"}},
	{"pm_ucs_sock_addr_t", "ucs_sock_addr_t", []string{"addr", "addrlen"}},
	{"pm_ucp_err_handler_t", "ucp_err_handler_t", []string{"cb", "arg"}},
	{"pm_ucp_ep_params_t", "ucp_ep_params_t", []string{"field_mask", "address", "err_mode", "err_handler", "user_data", "flags", "sockaddr", "conn_request", "name", "local_sockaddr"}},
	{"pm_ucp_listener_conn_handler_t", "ucp_listener_conn_handler_t", []string{"cb", "arg"}},
	{"pm_ucp_listener_params_t", "ucp_listener_params_t", []string{"field_mask", "sockaddr", "accept_handler", "conn_handler"}},
	{"pm_ucp_listener_attr_t", "ucp_listener_attr_t", []string{"field_mask", "sockaddr"}},
	{"pm_ucp_conn_request_attr_t", "ucp_conn_request_attr_t", []string{"field_mask", "client_address", "client_id"}},
	{"pm_ucp_mem_map_params_t", "ucp_mem_map_params_t", []string{"field_mask", "address", "length", "flags", "prot", "memory_type"}},
	{"pm_ucp_mem_attr_t", "ucp_mem_attr_t", []string{"field_mask", "address", "length", "mem_type"}},
	{"pm_ucp_request_param_t", "ucp_request_param_t", []string{"op_attr_mask", "flags", "request", "cb", "datatype", "user_data", "reply_buffer", "memory_type", "recv_info", "memh"}},
	{"pm_ucp_am_recv_param_t", "ucp_am_recv_param_t", []string{"recv_attr", "reply_ep"}},
	{"pm_ucp_am_handler_param_t", "ucp_am_handler_param_t", []string{"field_mask", "id", "flags", "cb", "arg"}},
	{"pm_ucp_generic_dt_ops_t", "ucp_generic_dt_ops_t", []string{"start_pack", "start_unpack", "packed_size", "pack", "unpack", "finish"}},
	{"pm_status_t", "ucs_status_t", nil},
}

// layoutConstants maps each of ucxtypes.h's constants to UCX's.
var layoutConstants = [][2]string{
	{"PM_UCS_OK", "UCS_OK"}, {"PM_UCS_INPROGRESS", "UCS_INPROGRESS"}, {"PM_UCS_ERR_NO_MESSAGE", "UCS_ERR_NO_MESSAGE"},
	{"PM_UCS_ERR_BUSY", "UCS_ERR_BUSY"}, {"PM_UCS_ERR_CANCELED", "UCS_ERR_CANCELED"}, {"PM_UCS_ERR_UNSUPPORTED", "UCS_ERR_UNSUPPORTED"}, {"PM_UCS_ERR_LAST", "UCS_ERR_LAST"},
	{"PM_UCP_PARAM_FIELD_FEATURES", "UCP_PARAM_FIELD_FEATURES"}, {"PM_UCP_PARAM_FIELD_MT_WORKERS_SHARED", "UCP_PARAM_FIELD_MT_WORKERS_SHARED"},
	{"PM_UCP_PARAM_FIELD_NAME", "UCP_PARAM_FIELD_NAME"}, {"PM_UCP_FEATURE_RMA", "UCP_FEATURE_RMA"}, {"PM_UCP_FEATURE_WAKEUP", "UCP_FEATURE_WAKEUP"},
	{"PM_UCP_FEATURE_AM", "UCP_FEATURE_AM"}, {"PM_UCP_WORKER_PARAM_FIELD_THREAD_MODE", "UCP_WORKER_PARAM_FIELD_THREAD_MODE"},
	{"PM_UCS_THREAD_MODE_SERIALIZED", "UCS_THREAD_MODE_SERIALIZED"}, {"PM_UCP_ATTR_FIELD_MEMORY_TYPES", "UCP_ATTR_FIELD_MEMORY_TYPES"},
	{"PM_UCP_EP_PARAM_FIELD_REMOTE_ADDRESS", "UCP_EP_PARAM_FIELD_REMOTE_ADDRESS"}, {"PM_UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE", "UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE"},
	{"PM_UCP_EP_PARAM_FIELD_ERR_HANDLER", "UCP_EP_PARAM_FIELD_ERR_HANDLER"}, {"PM_UCP_EP_PARAM_FIELD_SOCK_ADDR", "UCP_EP_PARAM_FIELD_SOCK_ADDR"},
	{"PM_UCP_EP_PARAM_FIELD_FLAGS", "UCP_EP_PARAM_FIELD_FLAGS"}, {"PM_UCP_EP_PARAM_FIELD_CONN_REQUEST", "UCP_EP_PARAM_FIELD_CONN_REQUEST"},
	{"PM_UCP_EP_PARAMS_FLAGS_CLIENT_SERVER", "UCP_EP_PARAMS_FLAGS_CLIENT_SERVER"}, {"PM_UCP_ERR_HANDLING_MODE_PEER", "UCP_ERR_HANDLING_MODE_PEER"},
	{"PM_UCP_EP_CLOSE_FLAG_FORCE", "UCP_EP_CLOSE_FLAG_FORCE"}, {"PM_UCP_LISTENER_PARAM_FIELD_SOCK_ADDR", "UCP_LISTENER_PARAM_FIELD_SOCK_ADDR"},
	{"PM_UCP_LISTENER_PARAM_FIELD_CONN_HANDLER", "UCP_LISTENER_PARAM_FIELD_CONN_HANDLER"}, {"PM_UCP_LISTENER_ATTR_FIELD_SOCKADDR", "UCP_LISTENER_ATTR_FIELD_SOCKADDR"},
	{"PM_UCP_MEM_MAP_PARAM_FIELD_ADDRESS", "UCP_MEM_MAP_PARAM_FIELD_ADDRESS"}, {"PM_UCP_MEM_MAP_PARAM_FIELD_LENGTH", "UCP_MEM_MAP_PARAM_FIELD_LENGTH"},
	{"PM_UCP_MEM_MAP_PARAM_FIELD_FLAGS", "UCP_MEM_MAP_PARAM_FIELD_FLAGS"}, {"PM_UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE", "UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE"},
	{"PM_UCP_MEM_MAP_NONBLOCK", "UCP_MEM_MAP_NONBLOCK"}, {"PM_UCP_MEM_MAP_ALLOCATE", "UCP_MEM_MAP_ALLOCATE"},
	{"PM_UCP_MEM_ATTR_FIELD_ADDRESS", "UCP_MEM_ATTR_FIELD_ADDRESS"}, {"PM_UCP_MEM_ATTR_FIELD_LENGTH", "UCP_MEM_ATTR_FIELD_LENGTH"}, {"PM_UCP_OP_ATTR_FIELD_CALLBACK", "UCP_OP_ATTR_FIELD_CALLBACK"},
	{"PM_UCP_OP_ATTR_FIELD_USER_DATA", "UCP_OP_ATTR_FIELD_USER_DATA"}, {"PM_UCP_OP_ATTR_FIELD_FLAGS", "UCP_OP_ATTR_FIELD_FLAGS"}, {"PM_UCP_OP_ATTR_FIELD_DATATYPE", "UCP_OP_ATTR_FIELD_DATATYPE"},
	{"PM_UCP_OP_ATTR_FIELD_MEMORY_TYPE", "UCP_OP_ATTR_FIELD_MEMORY_TYPE"}, {"PM_UCP_OP_ATTR_FIELD_MEMH", "UCP_OP_ATTR_FIELD_MEMH"},
	{"PM_UCP_AM_SEND_FLAG_REPLY", "UCP_AM_SEND_FLAG_REPLY"}, {"PM_UCP_AM_SEND_FLAG_EAGER", "UCP_AM_SEND_FLAG_EAGER"},
	{"PM_UCP_AM_RECV_ATTR_FIELD_REPLY_EP", "UCP_AM_RECV_ATTR_FIELD_REPLY_EP"}, {"PM_UCP_AM_RECV_ATTR_FLAG_DATA", "UCP_AM_RECV_ATTR_FLAG_DATA"},
	{"PM_UCP_AM_RECV_ATTR_FLAG_RNDV", "UCP_AM_RECV_ATTR_FLAG_RNDV"}, {"PM_UCP_AM_HANDLER_PARAM_FIELD_ID", "UCP_AM_HANDLER_PARAM_FIELD_ID"},
	{"PM_UCP_AM_HANDLER_PARAM_FIELD_FLAGS", "UCP_AM_HANDLER_PARAM_FIELD_FLAGS"}, {"PM_UCP_AM_HANDLER_PARAM_FIELD_CB", "UCP_AM_HANDLER_PARAM_FIELD_CB"},
	{"PM_UCP_AM_HANDLER_PARAM_FIELD_ARG", "UCP_AM_HANDLER_PARAM_FIELD_ARG"}, {"PM_UCP_AM_FLAG_WHOLE_MSG", "UCP_AM_FLAG_WHOLE_MSG"},
	{"PM_UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR", "UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR"},
	{"MemoryHost", "UCS_MEMORY_TYPE_HOST"}, {"MemoryCUDA", "UCS_MEMORY_TYPE_CUDA"},
}

// TestLayoutAgainstHeaders compiles every assertion with gcc where UCX's headers are installed;
// elsewhere it skips, saying so.
func TestLayoutAgainstHeaders(t *testing.T) {
	const header = "/usr/include/ucp/api/ucp.h"
	if _, err := os.Stat(header); err != nil {
		if os.Getenv("PINMALLOC_REQUIRE_UCX_HEADERS") != "" {
			t.Fatalf("UCX headers required (PINMALLOC_REQUIRE_UCX_HEADERS): %v", err)
		}
		t.Skipf("no UCX headers to check the layouts against (%v): apt-get install libucx-dev", err)
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc: %v", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include <ucp/api/ucp.h>\n#include \"shim.h\"\n#define SAME(a, b) _Static_assert((long long)(a) == (long long)(b), #a \" != \" #b)\n")
	for _, s := range layoutStructs {
		fmt.Fprintf(&b, "SAME(sizeof(%s), sizeof(%s));\n", s.ours, s.theirs)
		for _, f := range s.fields {
			fmt.Fprintf(&b, "SAME(offsetof(%s, %s), offsetof(%s, %s));\n", s.ours, f, s.theirs, f)
			fmt.Fprintf(&b, "SAME(sizeof(((%s *)0)->%s), sizeof(((%s *)0)->%s));\n", s.ours, f, s.theirs, f)
		}
	}
	b.WriteString("enum { MemoryHost = " + fmt.Sprint(MemoryHost) + ", MemoryCUDA = " + fmt.Sprint(MemoryCUDA) + " };\n")
	for _, c := range layoutConstants {
		fmt.Fprintf(&b, "SAME(%s, %s);\n", c[0], c[1])
	}
	fmt.Fprintf(&b, "SAME(%d, PM_HDR);\n", HeaderLen)
	compile := func(prog string) ([]byte, error) {
		src := filepath.Join(t.TempDir(), "layout.c")
		if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
			t.Fatal(err)
		}
		return exec.Command(gcc, "-fsyntax-only", "-Wall", "-Werror", "-I", wd, src).CombinedOutput()
	}
	if out, err := compile(b.String()); err != nil {
		t.Fatalf("ucxtypes.h disagrees with UCX's headers:\n%s", out)
	}
	// The check catches a layout that is wrong: a field one word off, a constant changed.
	for _, planted := range []string{
		"SAME(offsetof(pm_ucp_ep_params_t, user_data), offsetof(ucp_ep_params_t, flags));\n",
		"SAME(PM_UCP_MEM_MAP_NONBLOCK, UCP_MEM_MAP_ALLOCATE);\n",
	} {
		if _, err := compile(b.String() + planted); err == nil {
			t.Fatalf("a planted mismatch passed the check: %s", planted)
		}
	}
	t.Logf("%d structs, %d constants agree with %s", len(layoutStructs), len(layoutConstants), header)
}
