package bench

// weft through its client library: an in-process cluster (one meta and one
// store server on loopback) and clients that reach it directly or through an
// injected-latency link.

import (
	"context"
	"errors"
	"net"
	"path/filepath"

	"github.com/weftfs/weft/internal/client"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/linksim"
)

// libOptions configure an in-process cluster; zero values are weft up's
// defaults.
type libOptions struct {
	Durability string
	Backend    string
	ChunkSize  int64
}

type libCluster struct {
	cfg   *config.Cluster
	meta  *cluster.Server
	store *cluster.Server
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
	metaLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	storeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		metaLn.Close()
		return nil, err
	}
	cfg.Meta = []config.MetaServer{config.DefaultMetaServer(metaLn.Addr().String(), filepath.Join(dir, "meta"))}
	st := config.DefaultStoreServer(storeLn.Addr().String(), filepath.Join(dir, "store"))
	st.Backend = backend
	if backend == config.BackendMem {
		st.MemLimit = 6 << 30
	}
	cfg.Store = []config.StoreServer{st}
	if err := cfg.Validate(); err != nil {
		metaLn.Close()
		storeLn.Close()
		return nil, err
	}
	lc := &libCluster{cfg: cfg}
	if lc.store, err = cluster.StartStore(ctx, cfg, 0, cluster.Options{Listener: storeLn}); err != nil {
		metaLn.Close()
		return nil, err
	}
	if lc.meta, err = cluster.StartMeta(ctx, cfg, 0, cluster.Options{Listener: metaLn}); err != nil {
		return nil, errors.Join(err, lc.store.Close())
	}
	return lc, nil
}

func (lc *libCluster) Close() error {
	return errors.Join(lc.meta.Close(), lc.store.Close())
}

// linkedClient is a root client of lc whose traffic to the meta server (and
// to the store too, with data set) crosses a link of profile p; nil p is a
// direct client.
type linkedClient struct {
	*client.Client
	links []*linksim.Link
}

func (lc *libCluster) client(p *linksim.Profile, data bool) (*linkedClient, error) {
	cc := cluster.ClientConfig(lc.cfg, core.Root, nil)
	out := &linkedClient{}
	if p != nil {
		via := func(addrs []string) error {
			for i, a := range addrs {
				l, err := linksim.Listen(a, *p, nil)
				if err != nil {
					return err
				}
				out.links = append(out.links, l)
				addrs[i] = l.Addr()
			}
			return nil
		}
		err := via(cc.MetaAddrs)
		if err == nil && data {
			err = via(cc.StoreAddrs)
		}
		if err != nil {
			out.Close()
			return nil, err
		}
	}
	c, err := client.New(cc)
	if err != nil {
		out.Close()
		return nil, err
	}
	out.Client = c
	return out, nil
}

func (c *linkedClient) Close() error {
	var all []error
	if c.Client != nil {
		all = append(all, c.Client.Close())
	}
	for _, l := range c.links {
		all = append(all, l.Close())
	}
	return errors.Join(all...)
}
