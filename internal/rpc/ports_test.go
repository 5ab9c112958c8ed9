package rpc

import (
	"net"
	"strconv"
	"testing"
)

func TestPickAddrsAreDistinctAndBelowTheEphemeralRange(t *testing.T) {
	addrs, err := PickAddrs(20)
	if err != nil {
		t.Fatal(err)
	}
	lo := ephemeralLow()
	seen := map[string]bool{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || p < portFloor || (lo-portFloor >= 1000 && p >= lo) {
			t.Errorf("%s: want 127.0.0.1 with a port in [%d, %d)", a, portFloor, lo)
		}
		if seen[a] {
			t.Errorf("%s picked twice", a)
		}
		seen[a] = true
		// Free again once PickAddrs returns.
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s not free after the pick: %v", a, err)
		}
		ln.Close()
	}
}
