package metrics_test

import (
	"expvar"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinmalloc/pinmalloc/metrics"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Register a pool with a collector, then the collector with Prometheus (serve it with
// promhttp.HandlerFor) and with expvar.
func Example() {
	pool, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	buf, _ := pool.Alloc(1 << 20)
	defer pool.Free(buf)

	c := metrics.New()
	if err := c.AddPool("staging", pool); err != nil { // ErrInvalidName: not UTF-8
		fmt.Println(err)
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	expvar.Publish("pinmalloc_example", c.Var())

	families, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		switch f.GetName() {
		case "pinmalloc_host_in_use_bytes", "pinmalloc_host_live_blocks", "pinmalloc_host_allocs_total":
			m := f.GetMetric()[0]
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			fmt.Printf("%s{name=%q} %v\n", f.GetName(), m.GetLabel()[0].GetValue(), v)
		}
	}
	// Output:
	// pinmalloc_host_allocs_total{name="staging"} 1
	// pinmalloc_host_in_use_bytes{name="staging"} 1.048576e+06
	// pinmalloc_host_live_blocks{name="staging"} 1
}
