package cudamem_test

import (
	"reflect"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
)

// TestProvidersPointerMethods: every method of a provider is on the pointer the constructor
// returns; a value of a provider type has none (they were mixed: Close, Name, Commit... on the
// value, promoted from the machinery it held by pointer, Zero and DevicePointer on the pointer).
func TestProvidersPointerMethods(t *testing.T) {
	for _, p := range []any{(*cudamem.DeviceMalloc)(nil), (*cudamem.DeviceVMM)(nil), (*cudamem.HostAlloc)(nil),
		(*cudamem.HostRegister)(nil), (*cudamem.HostVMM)(nil), (*cudamem.Managed)(nil)} {
		pt := reflect.TypeOf(p)
		if n := pt.Elem().NumMethod(); n != 0 {
			var names []string
			for i := range n {
				names = append(names, pt.Elem().Method(i).Name)
			}
			t.Errorf("%s has %d methods on the value (%v): want every one on the pointer", pt.Elem(), n, names)
		}
		if _, ok := p.(arena.Provider); !ok {
			t.Errorf("%s is not an arena.Provider", pt)
		}
	}
}
