package bench

// weft through its client library: an in-process cluster (one meta and one
// store server on loopback) and clients that reach it directly or through an
// injected-latency link.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/edge"
	"github.com/weftfs/weft/internal/linksim"
)

// libOptions configure an in-process cluster; zero values are weft up's
// defaults.
type libOptions struct {
	Durability string
	Backend    string
	ChunkSize  int64
	// Mirrors is how many store servers run (0: one), every one holding
	// every chunk (replication = Mirrors): with the mem backend, the
	// Network RamDisk's mirrored RAM.
	Mirrors int
	// Redundancy, if set ("ec:K+M"), erasure-codes the data over K+M
	// store servers (Mirrors is then ignored).
	Redundancy string
	// CreateAtClose: the clients hold a new file's create until its close,
	// which sends it with the file's content (client.Config.CreateAtClose).
	CreateAtClose bool
}

type libCluster struct {
	cfg           *config.Cluster
	createAtClose bool // the clients' Config.CreateAtClose
	meta          *cluster.Server
	stores        []*cluster.Server
}

func startLib(ctx context.Context, dir string, o libOptions) (*libCluster, error) {
	cfg := config.Default()
	if o.Durability != "" {
		cfg.Durability = o.Durability
	}
	if o.ChunkSize != 0 {
		cfg.ChunkSize = config.ByteSize(o.ChunkSize)
	}
	backend := o.Backend
	if backend == "" {
		backend = config.BackendDisk
	}
	stores := max(o.Mirrors, 1)
	cfg.Replication = stores
	if o.Redundancy != "" {
		if err := cfg.SetRedundancy(o.Redundancy); err != nil {
			return nil, err
		}
		stores = cfg.Erasure().Width()
	}
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	for range 1 + stores {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll()
			return nil, err
		}
		lns = append(lns, ln)
	}
	cfg.Meta = []config.MetaServer{config.DefaultMetaServer(lns[0].Addr().String(), filepath.Join(dir, "meta"))}
	for i, ln := range lns[1:] {
		st := config.DefaultStoreServer(ln.Addr().String(), filepath.Join(dir, fmt.Sprintf("store%d", i)))
		st.Backend = backend
		if backend == config.BackendMem {
			st.MemLimit = 6 << 30
		}
		cfg.Store = append(cfg.Store, st)
	}
	if err := cfg.Validate(); err != nil {
		closeAll()
		return nil, err
	}
	lc := &libCluster{cfg: cfg, createAtClose: o.CreateAtClose}
	for i := range stores {
		st, err := cluster.StartStore(ctx, cfg, i, cluster.Options{Listener: lns[1+i]})
		if err != nil {
			for _, ln := range lns[1+i:] {
				ln.Close()
			}
			lns[0].Close()
			return nil, errors.Join(err, lc.Close())
		}
		lc.stores = append(lc.stores, st)
	}
	meta, err := cluster.StartMeta(ctx, cfg, 0, cluster.Options{Listener: lns[0]})
	if err != nil {
		return nil, errors.Join(err, lc.Close())
	}
	lc.meta = meta
	return lc, nil
}

func (lc *libCluster) Close() error {
	var all []error
	if lc.meta != nil {
		all = append(all, lc.meta.Close())
	}
	for _, st := range lc.stores {
		all = append(all, st.Close())
	}
	return errors.Join(all...)
}

// libVariants are the in-process clusters latfs and seqio also measure
// through the library, where no FUSE mount stands in between: each backend,
// and RAM mirrored on two store servers (the Network RamDisk's mirroring).
// libVariant is a weft cluster the library benchmarks measure.
type libVariant struct {
	name string
	opts libOptions
}

var libVariants = []libVariant{
	{"weft library (disk)", libOptions{Durability: "sync", Backend: config.BackendDisk}},
	{"weft library (mem)", libOptions{Durability: "sync", Backend: config.BackendMem}},
	{"weft library (mem, mirrored ×2)", libOptions{Durability: "sync", Backend: config.BackendMem, Mirrors: 2}},
	{weftParity, libOptions{Durability: "sync", Backend: config.BackendMem, Redundancy: "ec:4+1"}},
}

// weftParity is the column of RAM made reliable by parity across store
// servers: ec:4+1 over five mem store servers, through the library.
const weftParity = "weft library (mem, ec:4+1)"

// withLib starts an in-process cluster with o in a scratch directory under
// e.Dir, runs fn with a root client of it (its meta traffic through link,
// if not nil), and stops and removes everything afterwards.
func (e *Env) withLib(ctx context.Context, link *linksim.Profile, o libOptions, fn func(*linkedClient) error) error {
	return e.withLibCluster(ctx, o, func(lc *libCluster) error {
		c, err := lc.client(link, true)
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(c)
	})
}

// withLibCluster starts an in-process cluster with o in a scratch directory
// under e.Dir, runs fn with it, and stops and removes it afterwards.
func (e *Env) withLibCluster(ctx context.Context, o libOptions, fn func(*libCluster) error) error {
	dir, err := os.MkdirTemp(e.Dir, "lib-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lc, err := startLib(ctx, dir, o)
	if err != nil {
		return err
	}
	defer lc.Close()
	return fn(lc)
}

// linkedClient is a root client of lc whose traffic to the meta server (and
// to the store too, with data set) crosses a link of profile p; nil p is a
// direct client. A client at a remote site may reach its meta servers
// through an edge of its own (edgeClient).
type linkedClient struct {
	*client.Client
	edge  *edge.Server
	links []*linksim.Link
}

func (lc *libCluster) client(p *linksim.Profile, data bool) (*linkedClient, error) {
	out := &linkedClient{}
	cc := cluster.ClientConfig(lc.cfg, core.Root, nil)
	cc.CreateAtClose = lc.createAtClose
	if p != nil {
		err := out.via(*p, cc.MetaAddrs)
		if err == nil && data {
			err = out.via(*p, cc.StoreAddrs)
		}
		if err != nil {
			out.Close()
			return nil, err
		}
	}
	return out, out.connect(cc)
}

// edgeClient is a root client at a remote site: an edge meta server next
// to it (internal/edge) whose upstream traffic crosses a link of profile p,
// and, with data, its own traffic to the stores across such a link too.
// tune, if set, changes the client's configuration.
func (lc *libCluster) edgeClient(ctx context.Context, p linksim.Profile, writeBack, data bool, tune func(*client.Config)) (*linkedClient, error) {
	out := &linkedClient{}
	up := lc.cfg.Clone()
	var metas []string
	for _, m := range up.Meta {
		metas = append(metas, m.Addr)
	}
	if err := out.via(p, metas); err != nil {
		out.Close()
		return nil, err
	}
	for i, a := range metas {
		up.Meta[i] = config.MetaServer{Addr: a}
	}
	e, err := edge.Start(ctx, edge.Config{Upstream: up, Listen: "127.0.0.1:0", WriteBack: writeBack})
	if err != nil {
		out.Close()
		return nil, err
	}
	out.edge = e
	cc := cluster.ClientConfig(e.Cluster(), core.Root, nil)
	if data {
		if err := out.via(p, cc.StoreAddrs); err != nil {
			out.Close()
			return nil, err
		}
	}
	if tune != nil {
		tune(&cc)
	}
	return out, out.connect(cc)
}

// via puts each of addrs behind a link of profile p, in place.
func (c *linkedClient) via(p linksim.Profile, addrs []string) error {
	for i, a := range addrs {
		l, err := linksim.Listen(a, p, nil)
		if err != nil {
			return err
		}
		c.links = append(c.links, l)
		addrs[i] = l.Addr()
	}
	return nil
}

// connect makes the client of cc, or closes what c started.
func (c *linkedClient) connect(cc client.Config) error {
	cl, err := client.New(cc)
	if err != nil {
		c.Close()
		return err
	}
	c.Client = cl
	return nil
}

func (c *linkedClient) Close() error {
	var all []error
	if c.Client != nil {
		all = append(all, c.Client.Close())
	}
	if c.edge != nil {
		all = append(all, c.edge.Close())
	}
	for _, l := range c.links {
		all = append(all, l.Close())
	}
	return errors.Join(all...)
}
