package rpc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/weftfs/weft/internal/errs"
)

// Ports for servers that restart on their address.
//
// A port the kernel hands out for "127.0.0.1:0" comes from its ephemeral
// range, the same range every outgoing connection's local port comes from.
// A server that stops and starts again on such a port (weft up run again, a
// kill -9 test, a cluster restarted by fsck's tests) can find it held by
// some other program's connection for as long as that connection lives:
// "address already in use". The ports picked here lie below the ephemeral
// range, where only a program that names a port listens.

// portFloor is the lowest port picked: above the well-known and most
// registered service ports.
const portFloor = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, or the
// Linux default when the range cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil {
				return lo
			}
		}
	}
	return 32768
}

// PickAddrs returns n distinct loopback addresses ("127.0.0.1:port") that
// were free a moment ago, with ports below the ephemeral range when it
// leaves room for them. The listeners that proved each free are held until
// all are picked, so no two are the same. Another program may still take
// one before its server listens; the server's start reports that.
func PickAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	hi := ephemeralLow()
	addrs := make([]string, 0, n)
	for range n {
		ln, err := listenBelow(hi)
		if err != nil {
			return nil, errs.Wrap(errs.Unavailable, "pick a free port", "127.0.0.1", err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// PickAddr is PickAddrs(1)[0].
func PickAddr() (string, error) {
	a, err := PickAddrs(1)
	if err != nil {
		return "", err
	}
	return a[0], nil
}

// listenBelow listens on a random free loopback port in [portFloor, hi),
// or on one the kernel picks when that range is too small or full.
func listenBelow(hi int) (net.Listener, error) {
	if hi-portFloor >= 1000 {
		for range 200 {
			p := portFloor + rand.IntN(hi-portFloor)
			if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
				return ln, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ListenPicked listens on a free loopback port below the ephemeral range,
// for a server that will stop and start again on its address.
func ListenPicked() (net.Listener, error) {
	return listenBelow(ephemeralLow())
}
