package debugpage_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/pinmalloc/pinmalloc/debugpage"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Mount the debug page on your own mux, next to net/http/pprof, and register the pools to show.
func Example() {
	pool, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	buf, _ := pool.Alloc(4096)
	defer pool.Free(buf)

	dp := debugpage.New()
	if err := dp.AddPool("staging", pool); err != nil { // ErrInvalidName for a name that is not UTF-8
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/pinmalloc/", dp) // then: http.ListenAndServe("127.0.0.1:6060", mux)

	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/pinmalloc/stats.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Header.Get("Content-Type"), strings.Contains(string(body), `"name": "staging"`))
	// Output: application/json true
}
