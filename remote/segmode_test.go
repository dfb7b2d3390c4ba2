package remote

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCopyNotGroupShared: a peer's segment that this process's group may not read and write
// (mode 0600), or whose group is not this process's, is not reached by copy, whatever made it
// (a peer that lies about its pid names such a segment of another process of this user): puts
// and gets go by message, to the buffer named, and land.
func TestCopyNotGroupShared(t *testing.T) {
	needUCX(t)
	env := segTransport.set(t)
	l := newLocalFor(t, segTransport)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src := l.alloc(t, 64<<10, 5)
	other := uint32(os.Getegid()) + 1
	for _, c := range []struct {
		name string
		set  func(p *unix.SysvIpcPerm)
	}{
		{"mode 0600", func(p *unix.SysvIpcPerm) { p.Mode = 0o600 }},
		{"another group", func(p *unix.SysvIpcPerm) { p.Gid = other }},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch := startChild(t, l.w, env, true)
			ds := ch.alloc(64<<10, 1, 1)
			if n := setChildSegments(t, ch.cmd.Process.Pid, c.set); n == 0 {
				t.Fatal("no SysV segment of the child's")
			}
			before := l.w.Stats().Copied
			if err := ch.c.Put(ctx, src[:100], ds[0]); err != nil {
				t.Fatal(err)
			}
			exp := make([]byte, 64<<10)
			fill(exp, 1)
			copy(exp, src[:100])
			if ch.crc(0) != crcOf(exp) {
				t.Fatal("the put did not land in the buffer named")
			}
			if err := ch.c.Get(ctx, src[100:200], ds[0]); err != nil {
				t.Fatal(err)
			}
			if string(src[100:200]) != string(src[:100]) {
				t.Fatal("the get did not bring the bytes put")
			}
			if got := l.w.Stats().Copied; got != before {
				t.Errorf("%d operations by copy into a segment the group may not attach", got-before)
			}
			ch.quit()
		})
	}
	if err := l.pool.Free(src); err != nil {
		t.Fatal(err)
	}
}

// setChildSegments applies set to the permissions of every SysV segment that process pid made
// (shmctl IPC_SET: this process is of their owner) and returns how many there were.
func setChildSegments(t *testing.T, pid int, set func(p *unix.SysvIpcPerm)) int {
	t.Helper()
	f, err := os.Open("/proc/sysvipc/shm")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var col map[string]int
	n := 0
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if col == nil {
			col = map[string]int{}
			for i, name := range fs {
				col[name] = i
			}
			continue
		}
		id, err1 := strconv.Atoi(fs[col["shmid"]])
		cpid, err2 := strconv.Atoi(fs[col["cpid"]])
		if err1 != nil || err2 != nil {
			t.Fatalf("/proc/sysvipc/shm: %q", sc.Text())
		}
		if cpid != pid {
			continue
		}
		var ds unix.SysvShmDesc
		if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &ds); err != nil {
			t.Fatal(err)
		}
		set(&ds.Perm)
		if _, err := unix.SysvShmCtl(id, unix.IPC_SET, &ds); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
