package cuda_test

import (
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// TestManagedStrings: every Advice and LocationType prints as its name, and a value the
// driver's headers do not define prints as its type and number.
func TestManagedStrings(t *testing.T) {
	for _, c := range []struct {
		v    fmt.Stringer
		want string
	}{
		{cuda.AdviseSetReadMostly, "set-read-mostly"},
		{cuda.AdviseUnsetReadMostly, "unset-read-mostly"},
		{cuda.AdviseSetPreferredLocation, "set-preferred-location"},
		{cuda.AdviseUnsetPreferredLocation, "unset-preferred-location"},
		{cuda.AdviseSetAccessedBy, "set-accessed-by"},
		{cuda.AdviseUnsetAccessedBy, "unset-accessed-by"},
		{cuda.Advice(0), "Advice(0)"},
		{cuda.Advice(7), "Advice(7)"},
		{cuda.Advice(-1), "Advice(-1)"},
		{cuda.LocationInvalid, "invalid"},
		{cuda.LocationDevice, "device"},
		{cuda.LocationHost, "host"},
		{cuda.LocationHostNUMA, "host-numa"},
		{cuda.LocationHostNUMACurrent, "host-numa-current"},
		{cuda.LocationType(9), "LocationType(9)"},
	} {
		if got := fmt.Sprint(c.v); got != c.want {
			t.Errorf("%T %d prints %q, want %q", c.v, c.v, got, c.want)
		}
	}
}

// Advice and location types print as their names, in logs and in errors.
func ExampleAdvice_String() {
	fmt.Println(cuda.AdviseSetPreferredLocation, cuda.LocationDevice)
	fmt.Printf("advise %v for %v %d\n", cuda.AdviseSetAccessedBy, cuda.HostLocation().Type, 0)
	fmt.Println(cuda.Advice(7))
	// Output:
	// set-preferred-location device
	// advise set-accessed-by for host 0
	// Advice(7)
}
