package capsule

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestListeningSocketsDiagMatchesProc checks the netlink listing against
// /proc/net/tcp{,6} with real listeners of both families open: the same
// addresses in the same text and the same socket inodes.
func TestListeningSocketsDiagMatchesProc(t *testing.T) {
	var addrs []string
	for _, nw := range []struct{ net, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		l, err := net.Listen(nw.net, nw.addr)
		if err != nil {
			if nw.net == "tcp6" {
				t.Log("no IPv6 loopback:", err)
				continue
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		addrs = append(addrs, nw.net)
	}
	diag, err := listeningSocketsDiag()
	if err != nil {
		t.Skip("NETLINK_SOCK_DIAG unavailable here:", err)
	}
	proc, err := listeningSocketsProc()
	if err != nil {
		t.Fatal(err)
	}
	key := func(ls []listeningSocket) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.addr+" "+strconv.FormatUint(l.inode, 10))
		}
		slices.Sort(out)
		return out
	}
	d, p := key(diag), key(proc)
	if !slices.Equal(d, p) {
		t.Fatalf("sock_diag:\n%s\n/proc:\n%s", strings.Join(d, "\n"), strings.Join(p, "\n"))
	}
	for _, fam := range addrs {
		found := false
		for _, s := range d {
			found = found || strings.HasPrefix(s, fam+" ")
		}
		if !found {
			t.Errorf("no %s listener in %v", fam, d)
		}
	}
}
