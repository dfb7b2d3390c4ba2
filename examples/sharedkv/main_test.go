package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(workerEnv); path != "" {
		if err := runWorker(path); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The example runs: a worker killed half-way, the store intact, the memory back.
func TestSharedKV(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 6<<20, 4096, 300, 24, 3); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	t.Log(s)
	for _, want := range []string{"killed (SIGKILL)", "all intact", "the owner holds 0 KiB of 6144 KiB, 0 live buffers"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !regexp.MustCompile(`[1-9]\d* values lost with the killed worker`).MatchString(s) {
		t.Errorf("no value was lost with the killed worker: the kill tested nothing")
	}
}
