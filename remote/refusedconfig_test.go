package remote

import (
	"errors"
	"strings"
	"testing"
)

// A configuration UCX refuses with no more than a status is an error of ErrNoUCX that names the
// variables: tcp's receive segments smaller than its send segments ("Invalid parameter" from
// ucp_worker_create), and transports no device of this host has ("No such device" from
// ucp_init).
func TestRefusedConfigurationNamed(t *testing.T) {
	needUCX(t)
	for _, c := range []struct {
		name string
		env  [][2]string
		want string
	}{
		{"segments", [][2]string{{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"},
			{"UCX_TCP_TX_SEG_SIZE", "64k"}, {"UCX_TCP_RX_SEG_SIZE", "8k"}},
			"UCX_TCP_RX_SEG_SIZE 8k is smaller than UCX_TCP_TX_SEG_SIZE 64k"},
		{"transports", [][2]string{{"UCX_TLS", "no_such_transport"}},
			`no transport or device that UCX_TLS="no_such_transport" names is available`},
	} {
		t.Run(c.name, func(t *testing.T) {
			transport{c.name, c.env, false, false}.set(t)
			w, err := New(Options{})
			if err == nil {
				w.Close()
				t.Fatalf("New made a worker with %v", c.env)
			}
			if !errors.Is(err, ErrNoUCX) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v; want ErrNoUCX saying %q", err, c.want)
			}
			t.Log(err)
		})
	}
}
