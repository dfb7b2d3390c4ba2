package cuda

import "testing"

// TestLackedCapability: the capability a test's skip names is read back from its log line, the
// file and line prefix included; a message of another kind names none.
func TestLackedCapability(t *testing.T) {
	for msg, want := range map[string]string{
		Lacks(CapBatchAPI, "driver 12.4"):                                CapBatchAPI,
		"    cuda_gpu_test.go:266: " + Lacks(CapNVML, "no libnvidia-ml"): CapNVML,
		"no CUDA driver: dlopen failed":                                  "",
		"lacks GPU capability : nothing":                                 "",
	} {
		got, ok := LackedCapability(msg)
		if got != want || ok != (want != "") {
			t.Errorf("LackedCapability(%q) = %q, %v; want %q", msg, got, ok, want)
		}
	}
}
