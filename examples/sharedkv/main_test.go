package main

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if code := runRole(); code >= 0 {
		os.Exit(code)
	}
	if args, ok := os.LookupEnv(commandEnv); ok {
		os.Args = append([]string{"sharedkv"}, strings.Fields(args)...)
		flag.CommandLine = flag.NewFlagSet("sharedkv", flag.ExitOnError) // without the test flags
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The example runs: a worker and the owner killed, the owner restarted, memory flowing back,
// a stale handle refused, the pool empty at the end.
func TestSharedKV(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 4096, 300, 24, 3); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	t.Log(s)
	for _, want := range []string{"worker 3: killed (SIGKILL)", "the prefix it wrote still reads", "a new owner adopted pool",
		"the workers rejoined", "went back in", "old version's handle is refused", "all 4 grants free"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !regexp.MustCompile(`holding [1-9]\d* values: [1-9]\d* now refused`).MatchString(s) {
		t.Errorf("no value went with the killed worker: the kill tested nothing")
	}
}
