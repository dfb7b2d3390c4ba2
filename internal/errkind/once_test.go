package errkind

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// result is a driver's result for the tests, as internal/cuda's Result (which imports this
// package) says it: its code, and the device fault for a sticky one.
type result int

func (r result) Error() string     { return fmt.Sprintf("cuda: CUDA_ERROR_%d", int(r)) }
func (r result) DriverResult() int { return int(r) }
func (r result) Is(err error) bool { return err == pinmalloc.ErrDeviceFault && r >= 700 }

// Driver results of the tests: two sticky ones (a device fault), and one that is not.
const (
	illegalAddress = result(700) // CUDA_ERROR_ILLEGAL_ADDRESS
	launchFailed   = result(719) // CUDA_ERROR_LAUNCH_FAILED
	invalidHandle  = result(400) // CUDA_ERROR_INVALID_HANDLE
)

// TestOnce checks the rule that says a failure once, on the cases each caller meets: nil
// errors, joins of joins taken apart, a device fault said by several waits (with other results
// or texts) kept once beside the failures that are not the fault, a fault said again with more
// words taking the first's place, the same driver result wrapped in different texts, the same
// text, and an error of several with a text of its own.
func TestOnce(t *testing.T) {
	other := errors.New("heap: double free")
	wait := fmt.Errorf("device: wait for deferred frees: %w", illegalAddress)
	again := fmt.Errorf("device: deferred frees: %w", launchFailed) // the fault, said another way
	sentinel := fmt.Errorf("uvm: transfers: %w", pinmalloc.ErrDeviceFault)
	both := fmt.Errorf("device: %w and %w", illegalAddress, other)
	kept := fmt.Errorf("uvm: streams kept: %w; a later Close tries again", illegalAddress)
	handle1 := fmt.Errorf("uvm: queue waits: %w", invalidHandle)
	handle2 := fmt.Errorf("uvm: synchronize: %w", invalidHandle)
	for _, c := range []struct {
		name string
		errs []error
		want []error // the errors kept, in order
	}{
		{"none", nil, nil},
		{"nil ones", []error{nil, nil}, nil},
		{"one", []error{nil, other, nil}, []error{other}},
		{"fault said again", []error{wait, again, sentinel}, []error{wait}},
		{"fault and others kept", []error{other, wait, errors.New("x"), again},
			[]error{other, wait, errors.New("x")}},
		{"nested joins", []error{errors.Join(wait, errors.Join(errors.Join(again, other), both))},
			[]error{wait, other}},
		{"joins each side", []error{errors.Join(nil, other), errors.Join(wait, other), sentinel},
			[]error{other, wait}},
		{"said with more words", []error{illegalAddress, other, kept, wait},
			[]error{kept, other}},
		{"said with fewer words", []error{kept, illegalAddress}, []error{kept}},
		{"same result", []error{handle1, handle2}, []error{handle1}},
		{"other result", []error{handle1, launchFailed}, []error{handle1, launchFailed}},
		{"same text", []error{errors.New("cuda: x"), nil, errors.New("cuda: x")},
			[]error{errors.New("cuda: x")}},
		{"a wrap of two is one", []error{both, other}, []error{both, other}},
	} {
		got := Once(c.errs...)
		if len(c.want) == 0 {
			if got != nil {
				t.Errorf("%s: Once = %q, want nil", c.name, got)
			}
			continue
		}
		if len(c.want) == 1 && got != c.errs[indexOf(c.errs, c.want[0])] {
			t.Errorf("%s: Once = %q, want %q as it is", c.name, got, c.want[0])
			continue
		}
		if want := errors.Join(c.want...).Error(); got == nil || got.Error() != want {
			t.Errorf("%s: Once = %q, want %q", c.name, got, want)
		}
	}
	if Same(nil, other) || Same(other, nil) || !Same(wait, sentinel) || Same(wait, other) {
		t.Error("Same: wrong for nil, the fault or another failure")
	}
	if err := Once(wait, other); !errors.Is(err, pinmalloc.ErrDeviceFault) ||
		!errors.Is(err, illegalAddress) || !errors.Is(err, other) {
		t.Errorf("Once = %q: lost a kept error's chain", err)
	}
}

// indexOf returns the index of the error of errs whose text is want's.
func indexOf(errs []error, want error) int {
	for i, e := range errs {
		if e != nil && e.Error() == want.Error() {
			return i
		}
	}
	return -1
}
