// Package config owns weft's cluster file: the typed description of a cluster
// (its meta and store servers, chunk size, replication, durability), its
// defaults, its validation, and reading and writing it as TOML.
//
// One file describes the whole cluster and every process reads the same file:
// a server finds its own entry by index (the position in the [[meta]] or
// [[store]] list is the server id, which GIGA+ placement and inode numbers
// depend on, so entries may be appended but never reordered), and clients find
// every server's address in it. Decoding is strict: a key weft does not know is
// an error naming the key and its line, because a misspelt setting that is
// silently ignored is worse than one that stops the start.
package config

import "time"

// Defaults and limits of the cluster settings.
const (
	DefaultName           = "weft"
	DefaultChunkSize      = 4 << 20
	MinChunkSize          = 64 << 10
	MaxChunkSize          = 64 << 20
	DefaultReplication    = 1
	DefaultInlineLimit    = 64 << 10
	MaxInlineLimit        = 64 << 10
	DefaultSplitThreshold = 4000
	MinSplitThreshold     = 2
	DefaultSplitBits      = 3
	MaxSplitBits          = 6

	// DefaultLeaseTerm is how long a client's lease lasts unless the file
	// says lease_term (internal/lease.DefaultTerm). The term bounds how
	// long a change waits for a holder that died or stopped answering;
	// the client stops trusting a lease a tenth of the term (at least 50
	// ms) before it ends, so a term much shorter than MinLeaseTerm leaves
	// nothing to cache.
	DefaultLeaseTerm = 2 * time.Second
	MinLeaseTerm     = 200 * time.Millisecond
	MaxLeaseTerm     = time.Minute
	// MaxLeaseGrace bounds lease_grace: a restarted meta server refuses
	// every change for that long.
	MaxLeaseGrace = 10 * time.Minute

	DurabilitySync  = "sync"  // acknowledged after the WAL record is on disk
	DurabilityAsync = "async" // acknowledged when applied; WAL synced in the background
	// DurabilityWriteback is a mount's mode (MountDurability, weft mount
	// --durability): metadata changes in directories the mount holds a
	// write lease on complete in the client and reach the meta servers in
	// batches, durable at fsync, recall, unmount or within a second.
	DurabilityWriteback = "writeback"
	// DurabilityCreateAtClose is a mount's mode too (weft mount --durability
	// create-at-close): a new file's create waits in the mount, under the
	// directory's write lease, until the file's close, which sends it with
	// the file's inline content in one request and returns once the
	// servers applied it; every other change is sent at once, as with
	// sync (client.Config.CreateAtClose).
	DurabilityCreateAtClose = "create-at-close"

	BackendDisk = "disk" // chunk files under the server's data directory
	BackendMem  = "mem"  // chunks in RAM, bounded by mem_limit
)

// Cluster is the content of a cluster file.
type Cluster struct {
	// Name identifies the cluster in logs and metrics.
	Name string `toml:"name"`
	// ChunkSize is the size of a file data chunk, a power of two in
	// [MinChunkSize, MaxChunkSize]. Changing it on a cluster that holds files
	// makes their data unreadable.
	ChunkSize ByteSize `toml:"chunk_size"`
	// Replication is how many store servers hold each chunk.
	Replication int `toml:"replication"`
	// Redundancy, if set, is "replicas:N" (the same as replication = N)
	// or "ec:K+M" (erasure coding; replication is then 1). See
	// redundancy.go.
	Redundancy string `toml:"redundancy,omitempty"`
	// Durability is when a meta server acknowledges a change: DurabilitySync
	// or DurabilityAsync.
	Durability string `toml:"durability"`
	// MountDurability is the default of weft mount --durability:
	// DurabilitySync (or empty), DurabilityWriteback or
	// DurabilityCreateAtClose.
	MountDurability string `toml:"mount_durability,omitempty"`
	// InlineLimit is the largest file whose content lives in its metadata
	// record; 0 turns inlining off.
	InlineLimit int `toml:"inline_limit"`
	// SplitThreshold is how many entries a directory partition holds before
	// its server splits it (GIGA+).
	SplitThreshold int `toml:"split_threshold"`
	// SplitBits is how many binary splits one split does at once: a
	// partition over the threshold splits into up to 2^SplitBits.
	SplitBits int `toml:"split_bits"`
	// LeaseTerm is how long a client's lease lasts from its grant; 0 means
	// DefaultLeaseTerm. Meta servers grant leases with it; clients bound
	// their lease requests by it.
	LeaseTerm Duration `toml:"lease_term,omitzero"`
	// LeaseGrace is how long a restarted meta server lets no change
	// through and grants no write lease, because clients may still trust
	// leases it granted before; 0 means the lease term. It may not be
	// shorter than the term: a client trusts a lease for up to a term.
	LeaseGrace Duration `toml:"lease_grace,omitzero"`
	// CapabilitySecret is the path of the cluster's capability secret
	// (32 random bytes, mode 0600; relative to the file's directory): meta
	// servers mint capabilities with keys derived from it and stores check
	// them on every chunk request. Empty: no capabilities. weft up and
	// weft cluster start create it for a new cluster.
	CapabilitySecret string `toml:"capability_secret,omitempty"`

	// Security is how connections are protected: SecurityNone,
	// SecuritySecure or SecurityPrivate (security.go). Empty, in a file
	// written before weft had security, means SecurityNone.
	Security string `toml:"security,omitempty"`
	// RecordsOnLoopback, in secure mode, keeps the integrity record
	// layer on connections between two loopback addresses, which
	// otherwise carry their frames bare after the TLS handshake (the
	// kernel keeps other local users off them; docs/design.md, "Threat
	// model"). For measuring what the record layer costs.
	RecordsOnLoopback bool `toml:"records_on_loopback,omitempty"`
	// CA is the directory of the cluster CA (weft ca), which issues
	// identities; servers and clients need only their identities.
	CA string `toml:"ca,omitempty"`
	// AdminIdentity is the identity directory the CLI and mounts use
	// unless --identity names another.
	AdminIdentity string `toml:"admin_identity,omitempty"`

	// Meta lists the metadata servers; the index is the server id.
	Meta []MetaServer `toml:"meta"`
	// Store lists the storage servers; the index is the server id.
	Store []StoreServer `toml:"store"`
}

// MetaServer is one metadata server's entry.
type MetaServer struct {
	// Addr is host:port, both where the server listens and where clients
	// and other servers reach it.
	Addr string `toml:"addr"`
	// Dir is the server's data directory. A relative path in a file read by
	// Load is relative to the file's directory. It may be left empty in a
	// shared file and given on the command line instead.
	Dir string `toml:"dir,omitempty"`
	// MetricsAddr, if set, is where the server serves Prometheus metrics.
	MetricsAddr string `toml:"metrics_addr,omitempty"`
	// Identity is the server's identity directory (security.go).
	Identity string `toml:"identity,omitempty"`
}

// StoreServer is one storage server's entry.
type StoreServer struct {
	Addr        string `toml:"addr"`
	Dir         string `toml:"dir,omitempty"`
	MetricsAddr string `toml:"metrics_addr,omitempty"`
	// Backend is BackendDisk or BackendMem.
	Backend string `toml:"backend"`
	// MemLimit bounds the bytes of chunk data a mem backend holds. In the
	// file it is an integer or a string such as "2GiB".
	MemLimit ByteSize `toml:"mem_limit,omitzero"`
	Identity string   `toml:"identity,omitempty"`
}

// Default returns a cluster with every setting at its default and no
// servers.
func Default() *Cluster {
	return &Cluster{
		Name:           DefaultName,
		ChunkSize:      DefaultChunkSize,
		Replication:    DefaultReplication,
		Durability:     DurabilitySync,
		InlineLimit:    DefaultInlineLimit,
		SplitThreshold: DefaultSplitThreshold,
		SplitBits:      DefaultSplitBits,
	}
}

// Lease returns the lease term and the grace of a restarted meta server,
// with their defaults applied.
func (c *Cluster) Lease() (term, grace time.Duration) {
	term, grace = time.Duration(c.LeaseTerm), time.Duration(c.LeaseGrace)
	if term == 0 {
		term = DefaultLeaseTerm
	}
	if grace == 0 {
		grace = term
	}
	return term, grace
}

// DefaultMetaServer returns a meta server entry for addr and dir.
func DefaultMetaServer(addr, dir string) MetaServer {
	return MetaServer{Addr: addr, Dir: dir}
}

// DefaultStoreServer returns a store server entry with the disk backend.
func DefaultStoreServer(addr, dir string) StoreServer {
	return StoreServer{Addr: addr, Dir: dir, Backend: BackendDisk}
}

// Clone returns a deep copy of c, so callers can apply command-line overrides
// without changing a shared configuration.
func (c *Cluster) Clone() *Cluster {
	d := *c
	d.Meta = append([]MetaServer(nil), c.Meta...)
	d.Store = append([]StoreServer(nil), c.Store...)
	return &d
}

// applyElementDefaults fills settings of list entries that TOML decoding
// leaves at their zero value because entries are created empty.
func (c *Cluster) applyElementDefaults() {
	for i := range c.Store {
		if c.Store[i].Backend == "" {
			c.Store[i].Backend = BackendDisk
		}
	}
}
