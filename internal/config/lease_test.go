package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLeaseSettings(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if term, grace := c.Lease(); term != DefaultLeaseTerm || grace != DefaultLeaseTerm {
		t.Errorf("defaults: term %v grace %v, want %v for both", term, grace, DefaultLeaseTerm)
	}
	c, err = Parse([]byte("lease_term = \"500ms\"\n" + minimal))
	if err != nil {
		t.Fatal(err)
	}
	if term, grace := c.Lease(); term != 500*time.Millisecond || grace != term {
		t.Errorf("lease_term 500ms: term %v grace %v; want the grace to follow the term", term, grace)
	}
	c, err = Parse([]byte("lease_term = 1500\nlease_grace = \"1m\"\n" + minimal))
	if err != nil {
		t.Fatal(err)
	}
	if term, grace := c.Lease(); term != 1500*time.Millisecond || grace != time.Minute {
		t.Errorf("term %v grace %v, want 1.5s and 1m", term, grace)
	}
	// Round trip through Write and Load.
	path := filepath.Join(t.TempDir(), "weft.toml")
	if err := c.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.LeaseTerm != c.LeaseTerm || back.LeaseGrace != c.LeaseGrace {
		t.Errorf("after a round trip: %v %v, want %v %v", back.LeaseTerm, back.LeaseGrace, c.LeaseTerm, c.LeaseGrace)
	}
}

func TestLeaseSettingsInvalid(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"lease_term = \"-1s\"", "lease_term: -1s is not between 200ms and 1m0s"},
		{"lease_term = \"10ms\"", "lease_term: 10ms is not between"},
		{"lease_term = \"2h\"", "lease_term: 2h0m0s is not between"},
		{"lease_grace = \"1s\"", "lease_grace: 1s is shorter than the lease term 2s"},
		{"lease_term = \"5s\"\nlease_grace = \"3s\"", "lease_grace: 3s is shorter than the lease term 5s"},
		{"lease_grace = \"1h\"", "lease_grace: 1h0m0s is longer than 10m0s"},
		{"lease_term = \"soon\"", "want a number with a unit"},
		{"lease_term = true", "duration must be a string"},
	} {
		_, err := Parse([]byte(tc.file + "\n" + minimal))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.file, err, tc.want)
		}
	}
}
