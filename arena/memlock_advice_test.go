package arena

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMemlockAdviceAtTheHardLimit: ErrMemlock's advice fits the limits in force. An ordinary
// user whose soft memlock limit is the hard one (8 MiB both, the usual login) was told to
// "raise the limit with `ulimit -l unlimited`", which fails for that user; now the advice says
// only root raises it and how, and where the soft limit lies below the hard one it names the
// hard one as what ulimit -l may raise it to.
func TestMemlockAdviceAtTheHardLimit(t *testing.T) {
	at := memlockAdvice(&unix.Rlimit{Cur: 8 << 20, Max: 8 << 20})
	if strings.Contains(at, "ulimit -l unlimited") || !strings.Contains(at, "only root raises") ||
		!strings.Contains(at, "CAP_IPC_LOCK") || !strings.Contains(at, "LimitMEMLOCK") {
		t.Errorf("soft = hard = 8 MiB: %q: want it to say only root raises the hard limit, and how", at)
	}
	below := memlockAdvice(&unix.Rlimit{Cur: 8 << 20, Max: 64 << 20})
	if !strings.Contains(below, "`ulimit -l 65536`") {
		t.Errorf("soft 8 MiB, hard 64 MiB: %q: want `ulimit -l 65536`, the hard limit in KiB", below)
	}
	unlimited := memlockAdvice(&unix.Rlimit{Cur: 8 << 20, Max: unix.RLIM_INFINITY})
	if !strings.Contains(unlimited, "`ulimit -l unlimited`") {
		t.Errorf("soft 8 MiB, hard unlimited: %q: want `ulimit -l unlimited`", unlimited)
	}
}
