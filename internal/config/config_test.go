package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/weftfs/weft/internal/errs"
)

const minimal = `
[[meta]]
addr = "127.0.0.1:7000"
dir = "/data/meta0"

[[store]]
addr = "127.0.0.1:7100"
dir = "/data/store0"
`

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	want := &Cluster{
		Name:           "weft",
		ChunkSize:      4 << 20,
		Replication:    1,
		Durability:     "sync",
		InlineLimit:    64 << 10,
		SplitThreshold: 4000,
		SplitBits:      3,
		Meta:           []MetaServer{{Addr: "127.0.0.1:7000", Dir: "/data/meta0"}},
		Store:          []StoreServer{{Addr: "127.0.0.1:7100", Dir: "/data/store0", Backend: "disk"}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Parse(minimal) =\n%+v\nwant\n%+v", c, want)
	}
}

func TestParseAllSettings(t *testing.T) {
	c, err := Parse([]byte(`
name = "prod"
chunk_size = "1MiB"
replication = 2
durability = "async"
inline_limit = 0
split_threshold = 2

[[meta]]
addr = "m0:7000"
metrics_addr = "m0:9000"

[[store]]
addr = "s0:7100"
backend = "mem"
mem_limit = "2GiB"

[[store]]
addr = "s1:7100"
backend = "mem"
mem_limit = 1048576
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "prod" || c.ChunkSize != 1<<20 || c.Replication != 2 || c.Durability != "async" ||
		c.InlineLimit != 0 || c.SplitThreshold != 2 {
		t.Errorf("settings not decoded: %+v", c)
	}
	if c.Store[0].MemLimit != 2<<30 || c.Store[1].MemLimit != 1<<20 {
		t.Errorf("mem limits = %d, %d; want 2GiB, 1MiB", c.Store[0].MemLimit, c.Store[1].MemLimit)
	}
	if c.Meta[0].MetricsAddr != "m0:9000" {
		t.Errorf("metrics_addr = %q", c.Meta[0].MetricsAddr)
	}
}

// valid returns a cluster that passes validation; tests break one thing.
func valid() *Cluster {
	c := Default()
	c.Meta = []MetaServer{DefaultMetaServer("127.0.0.1:7000", "/d/m0"), DefaultMetaServer("127.0.0.1:7001", "/d/m1")}
	c.Store = []StoreServer{DefaultStoreServer("127.0.0.1:7100", "/d/s0"), DefaultStoreServer("127.0.0.1:7101", "/d/s1")}
	return c
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(c *Cluster)
		want    string
	}{
		{"empty name", func(c *Cluster) { c.Name = " " }, "name: is empty"},
		{"chunk too small", func(c *Cluster) { c.ChunkSize = 32 << 10 }, "chunk_size: 32768 is not a power of two between 64KiB and 64MiB"},
		{"chunk too big", func(c *Cluster) { c.ChunkSize = 128 << 20 }, "chunk_size: 134217728 is not a power of two"},
		{"chunk not power of two", func(c *Cluster) { c.ChunkSize = 3 << 20 }, "chunk_size: 3145728 is not a power of two"},
		{"replication zero", func(c *Cluster) { c.Replication = 0 }, "replication: 0 is less than 1"},
		{"replication above stores", func(c *Cluster) { c.Replication = 3 }, "replication: 3 is more than the 2 store servers"},
		{"durability", func(c *Cluster) { c.Durability = "fast" }, `durability: "fast" is not one of sync, async`},
		{"mount durability", func(c *Cluster) { c.MountDurability = "async" }, `mount_durability: "async" is not one of sync, writeback`},
		{"inline negative", func(c *Cluster) { c.InlineLimit = -1 }, "inline_limit: -1 is not between 0 and 65536"},
		{"inline too big", func(c *Cluster) { c.InlineLimit = 65537 }, "inline_limit: 65537 is not between 0 and 65536"},
		{"split threshold", func(c *Cluster) { c.SplitThreshold = 1 }, "split_threshold: 1 is less than 2"},
		{"split bits", func(c *Cluster) { c.SplitBits = 7 }, "split_bits: 7 is not between 1 and 6"},
		{"no meta", func(c *Cluster) { c.Meta = nil }, "meta: no meta servers"},
		{"no store", func(c *Cluster) { c.Store = nil; c.Replication = 1 }, "store: no store servers"},
		{"meta addr empty", func(c *Cluster) { c.Meta[1].Addr = "" }, "meta[1].addr: is empty; want host:port"},
		{"meta addr no port", func(c *Cluster) { c.Meta[0].Addr = "localhost" }, `meta[0].addr: "localhost": not host:port`},
		{"store addr no host", func(c *Cluster) { c.Store[1].Addr = ":7100" }, `store[1].addr: ":7100": host is empty`},
		{"store addr bad port", func(c *Cluster) { c.Store[0].Addr = "h:http" }, `store[0].addr: "h:http": port "http" is not between 1 and 65535`},
		{"port zero", func(c *Cluster) { c.Store[0].Addr = "h:0" }, `port "0" is not between 1 and 65535`},
		{"metrics addr bad", func(c *Cluster) { c.Meta[0].MetricsAddr = "x" }, `meta[0].metrics_addr: "x": not host:port`},
		{"duplicate meta", func(c *Cluster) { c.Meta[1].Addr = c.Meta[0].Addr }, `meta[1].addr: "127.0.0.1:7000" is also meta[0].addr`},
		{"duplicate across roles", func(c *Cluster) { c.Store[1].Addr = c.Meta[0].Addr }, `store[1].addr: "127.0.0.1:7000" is also meta[0].addr`},
		{"metrics duplicates server", func(c *Cluster) { c.Store[0].MetricsAddr = c.Store[1].Addr }, `store[0].metrics_addr: "127.0.0.1:7101" is also`},
		{"backend", func(c *Cluster) { c.Store[1].Backend = "ram" }, `store[1].backend: "ram" is not one of disk, mem`},
		{"mem without limit", func(c *Cluster) { c.Store[0].Backend = "mem" }, "store[0].mem_limit: must be set above 0 for the mem backend"},
		{"negative mem limit", func(c *Cluster) { c.Store[0].MemLimit = -5 }, "store[0].mem_limit: -5 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.breakIt(c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %q, want it to contain %q", err, tt.want)
			}
			if !errs.Is(err, errs.Invalid) {
				t.Errorf("kind = %v, want Invalid", errs.KindOf(err))
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) != 1 {
				t.Errorf("want exactly one problem, got %v", err)
			}
		})
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid cluster: %v", err)
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	c := valid()
	c.Durability = "x"
	c.Store[0].Backend = "tape"
	var ve *ValidationError
	if err := c.Validate(); !errors.As(err, &ve) || len(ve.Problems) != 2 {
		t.Fatalf("Validate() = %v, want 2 problems", err)
	}
}

func TestParseUnknownKey(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"top level", "name = \"x\"\nchunksize = 1\n" + minimal, "cluster file:2: unknown key chunksize"},
		{"in second store", minimal + "\n[[store]]\naddr = \"h:1\"\nbackend = \"disk\"\nmemlimit = 5\n", "cluster file:13: unknown key store[1].memlimit"},
		{"in meta", "[[meta]]\naddr = \"h:2\"\n  \"dri\" = \"/x\"\n[[store]]\naddr = \"h:1\"\n", "cluster file:3: unknown key meta[0].dri"},
		{"unknown table", minimal + "\n[tls]\nmode = \"none\"\n", "cluster file:10: unknown key tls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse() = %v, want error containing %q", err, tt.want)
			}
			if !errs.Is(err, errs.Invalid) {
				t.Errorf("kind = %v, want Invalid", errs.KindOf(err))
			}
		})
	}
}

func TestParseBadInput(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"syntax", "name = \n", "cluster file:1:"},
		{"wrong type", "replication = \"two\"\n" + minimal, "replication"},
		{"bad size", "chunk_size = \"lots\"\n" + minimal, `"lots" is not a size`},
		{"negative size", "chunk_size = -1\n" + minimal, "negative"},
		{"validation", minimal + "\n[[store]]\naddr = \"127.0.0.1:7100\"\n", `store[1].addr: "127.0.0.1:7100" is also store[0].addr`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestWriteLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "weft.toml")
	c := valid()
	c.Name = "round"
	c.ChunkSize = 1 << 20
	c.Replication = 2
	c.Durability = DurabilityAsync
	c.InlineLimit = 0
	c.SplitThreshold = 7
	c.Meta[0].MetricsAddr = "127.0.0.1:9000"
	c.Store[1].Backend = BackendMem
	c.Store[1].MemLimit = 3<<30 + 1 // not a round size: written as an integer
	c.Store[0].MemLimit = 512 << 20
	if err := c.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
	}
	// Writing again replaces the file and leaves no temporary files.
	c.Name = "again"
	if err := c.Write(path); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after two writes, want 1", len(entries))
	}
	if got, err := Load(path); err != nil || got.Name != "again" {
		t.Errorf("after rewrite: %v, %v", got, err)
	}
}

func TestWriteRefusesInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "weft.toml")
	c := valid()
	c.Durability = "never"
	if err := c.Write(path); err == nil {
		t.Fatal("Write of an invalid cluster succeeded")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("invalid cluster was written: %v", err)
	}
}

func TestLoadRelativeDirs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "weft.toml")
	text := "[[meta]]\naddr = \"h:1\"\ndir = \"m0\"\n[[store]]\naddr = \"h:2\"\ndir = \"/abs/s0\"\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Meta[0].Dir != filepath.Join(dir, "m0") || c.Store[0].Dir != "/abs/s0" {
		t.Errorf("dirs = %q, %q", c.Meta[0].Dir, c.Store[0].Dir)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errs.Is(err, errs.NotExist) {
		t.Errorf("Load(missing) = %v, want NotExist", err)
	}
}

func TestParseByteSize(t *testing.T) {
	good := map[string]ByteSize{
		"0": 0, "4096": 4096, "64KiB": 64 << 10, "64kib": 64 << 10, "4M": 4 << 20, "2 GiB": 2 << 30,
		"1.5GiB": 3 << 29, "500MB": 500e6, "1TiB": 1 << 40, "7B": 7,
	}
	for in, want := range good {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1", "-1KiB", "lots", "1XB", "99999999999TiB", "NaN"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want error", in, got)
		}
	}
	for b, want := range map[ByteSize]string{0: "0", 4096: "4KiB", 4 << 20: "4MiB", 1000: "1000", 3 << 30: "3GiB"} {
		if got := b.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
}

func TestClone(t *testing.T) {
	c := valid()
	d := c.Clone()
	d.Meta[0].Dir = "/elsewhere"
	d.Store[0].Backend = BackendMem
	if c.Meta[0].Dir == "/elsewhere" || c.Store[0].Backend == BackendMem {
		t.Error("Clone shares server lists with the original")
	}
}
